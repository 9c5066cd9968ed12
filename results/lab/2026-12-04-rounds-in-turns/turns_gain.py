"""What each step-tuner round's final round in turns changed, from native run records (jsonl): for each round and
shape, the sequential pick (the fastest one after another), the pick in turns, and both as the round in turns timed
them (ms a step, the same process, interleaved): their difference is what the round in turns bought."""
import json
import sys

for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        if r.get("mode") != "native":
            continue
        print(r["model"], r["ctx"], r.get("quant"), "step", round(r["step_ms_median"], 4), "GB/s",
              round(r.get("measured_gbps") or 0), "prepare_s", round(r.get("prepare_s") or 0, 1),
              "attn", r.get("native_attn"), "o_merge", r.get("native_o_merge_used"),
              "early", r.get("native_pdl_early_used"))
        turns = r.get("native_turns_step_tuning") or {}
        seq_all = {"gemv": r.get("native_triton_step_tuning") or {}, "int4": r.get("native_int4_step_tuning") or {},
                   "mlp": r.get("native_mlp_step_tuning") or {}}
        for label, t in turns.items():
            kind, _, shape = label.partition(" ")
            if kind in ("gemv", "int4"):
                seq = seq_all[kind].get(shape, {})
            elif label.endswith(" mlp"):
                seq = seq_all["mlp"].get(label, {})
            elif kind == "kv_prefetch":
                seq = r.get("native_kv_prefetch_step_tuning") or {}
            elif kind == "pdl_early":
                seq = {k.removeprefix("again "): v for k, v in (r.get("native_pdl_early_step_tuning") or {}).items()
                       if k.startswith("again ") == (shape == "again")}
            else:
                seq = r.get(f"native_{kind}_step_tuning") or {}
            first = min((k for k in t if k in seq), key=seq.get, default=None)
            best = min(t, key=t.get)
            gain = (t[first] - t[best]) / t[first] * 100 if first else float("nan")
            print(f"  {label:32s} sequential {first} -> in turns {best}: {t.get(first)} -> {t[best]} ms "
                  f"({gain:+.2f}% of the step)  {json.dumps(t)}")
        print("  finals", json.dumps(r.get("native_finals_step_tuning")))
