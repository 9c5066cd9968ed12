# the device call that made call7/ (one H200, the lease of calls 5-6): call 6's A/B for qwen2.5-0.5b ctx 128 and
# qwen2.5-1.5b ctx 2048
export PYTHONUNBUFFERED=1; cp -r src /tmp/src_old 2>/dev/null; python3 - <<'PY'
p='/tmp/src_old/floorline/native/mlp.py'; s=open(p).read()
s=s.replace("return [c for c in small + CANDIDATES if inter % c[0] == 0]","return [c for c in CANDIDATES + small if inter % c[0] == 0]"); open(p,'w').write(s)
PY
mkdir -p $OUT/call7
for m in "qwen2.5-0.5b 128" "qwen2.5-1.5b 2048"; do set -- $m; for side in old new; do P=$PWD/src; [ $side = old ] && P=/tmp/src_old
PYTHONPATH=$P timeout 60 python3 -m floorline run --model $1 --ctx $2 --mode native --output $OUT/call7/runs_$side.jsonl >> $OUT/call7/runs.log 2>&1
python3 -c "import json,sys; r=[json.loads(l) for l in open('$OUT/call7/runs_$side.jsonl')][-1]; print('$1 $side', r['step_ms_median'], round(r['measured_gbps']), r['native_o_merge_used'], r['source_sha256'])"; done; done
