"""Is the fused MLP's spread of program ends (docs/lab/2026-12-03-step-timeline.md) a property of the SMs? From
the timeline records of 2026-12-03 (results/lab/2026-12-03-step-timeline/call2/timeline/*.json): per layer, each
program's end relative to the layer's median end, keyed by its SM (every program; two an SM where the launch has
twice the SMs' count); then how much of the spread a per-SM mean over all layers explains (std before and after
removing it), how alike the SMs' means rank between even and odd layers and between consecutive layers (Spearman),
and how the ends rank by program id."""
import json
import sys

import numpy as np
from scipy.stats import spearmanr

for f in sys.argv[1:]:
    d = json.load(open(f))
    mlps = [x for x in d["steps_ns"][0] if x["kind"].startswith("mlp")]
    sms = 1 + max(max(L["sm"]) for L in mlps)
    rel, by_layer, by_id = [], [], []
    for li, L in enumerate(mlps):
        e, sm = np.array(L["end"], float), np.array(L["sm"])
        r = (e - np.median(e)) / 1e3  # us
        rel += [(li, s, x) for s, x in zip(sm, r)]
        per = np.full(sms, np.nan)
        for s in set(sm):
            per[s] = r[sm == s].mean()
        by_layer.append(per)
        by_id.append(spearmanr(np.arange(len(e)), e)[0])
    rel = np.array(rel)
    sm_mean = {s: rel[rel[:, 1] == s, 2].mean() for s in set(rel[:, 1])}
    resid = rel[:, 2] - np.array([sm_mean[s] for s in rel[:, 1]])
    by_layer = np.array(by_layer)
    even, odd = np.nanmean(by_layer[::2], 0), np.nanmean(by_layer[1::2], 0)
    ok = ~(np.isnan(even) | np.isnan(odd))
    print(f"{f.split('/')[-1]}: {len(mlps)} layers, {len(mlps[0]['sm'])} programs on {len(set(mlps[0]['sm']))} SMs")
    print(f"  std of the ends {rel[:, 2].std():.2f} us, after removing each SM's mean {resid.std():.2f} us")
    print(f"  SMs' means, even vs odd layers: Spearman {spearmanr(even[ok], odd[ok])[0]:.2f}; consecutive layers: "
          f"{np.nanmean([spearmanr(a, b, nan_policy='omit')[0] for a, b in zip(by_layer, by_layer[1:])]):.2f}")
    print(f"  ends by program id: Spearman {np.mean(by_id):.2f}; spread (first to last) "
          f"{np.median([np.ptp(L['end']) for L in mlps]) / 1e3:.2f} us, last after the median "
          f"{np.median([max(L['end']) - np.median(L['end']) for L in mlps]) / 1e3:.2f} us (medians over layers)")
