"""The attention's trials in native run records (jsonl): the step, the lease's bandwidth, the attention and o kept,
the attention round's trials (one after another) and the final round's pairs (in turns)."""
import json
import sys

for f in sys.argv[1:]:
    for line in open(f):
        r = json.loads(line)
        print(r["model"], r["ctx"], r.get("quant"), "step", round(r["step_ms_median"], 4), "GB/s",
              round(r.get("measured_gbps") or 0), "prepare_s", round(r.get("prepare_s") or 0, 1), "|", r.get("native_attn"),
              "| o_merge", r.get("native_o_merge_used"), "| early", r.get("native_pdl_early_used"))
        print("  attn  ", json.dumps(r.get("native_attn_step_tuning")))
        print("  finals", json.dumps(r.get("native_finals_step_tuning")))
