#!/usr/bin/env bash
# Nsight Compute of one launch of the chain (FMA consumers, cw 4, nslot 8): where the warps stall (the stall reasons,
# the hottest SASS lines), modes 0 (the chain) and 1 (no dependency waits)
set -uo pipefail
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
O=$OUT/call9
mkdir -p $O
for m in 0 1; do
  timeout 200 ncu --clock-control none -k regex:ws_chain -c 1 --section WarpStateStats --section SourceCounters \
    --section SchedulerStats --section MemoryWorkloadAnalysis_Tables \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
    python3 -m floorline.native.ws_chain --layers 16 --mma 0 --nslot 8 --cw 4 --mode $m --samples 3 > $O/ncu_mode$m.log 2>&1 || echo "ncu $m: exit $?"
  grep -E "issue_stalled|Issued Warp|No Eligible" $O/ncu_mode$m.log | awk '$NF+0 > 0.05 || /Issued|Eligible/' | cut -c1-150 | head -40
  sed -n '/Warp Stall Sampling/,/^ *$/p' $O/ncu_mode$m.log | cut -c1-200 | head -30
done
