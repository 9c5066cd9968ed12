# the device call that made call6/ (one H200, the lease of call 5): llama-3.2-1b ctx 128 with mlp.fitting's previous
# order ("old": CANDIDATES first, the sources of call 4 but for that line: a copy of src/ with it reverted) and with
# the small-hidden candidates first ("new", call 5's sources), one process each, in one lease
export PYTHONUNBUFFERED=1; cp -r src /tmp/src_old && python3 - <<'PY'
p='/tmp/src_old/floorline/native/mlp.py'; s=open(p).read()
s=s.replace("return [c for c in small + CANDIDATES if inter % c[0] == 0]","return [c for c in CANDIDATES + small if inter % c[0] == 0]"); open(p,'w').write(s)
PY
grep -c "CANDIDATES + small" /tmp/src_old/floorline/native/mlp.py; mkdir -p $OUT/call6
for side in old new; do P=$PWD/src; [ $side = old ] && P=/tmp/src_old
PYTHONPATH=$P timeout 80 python3 -m floorline run --model llama-3.2-1b --ctx 128 --mode native --output $OUT/call6/runs_$side.jsonl >> $OUT/call6/runs.log 2>&1
python3 -c "import json,sys; r=json.loads(open('$OUT/call6/runs_$side.jsonl').readline()); print('$side', r['step_ms_median'], round(r['measured_gbps']), r['native_o_merge_used'], r['source_sha256'])"; done
