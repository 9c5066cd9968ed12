# the device call that made call3/ (one H200; $OUT is the call's output folder): the fused int4 MLP with parts cut
# out (MLP_EXP, a switch of this experiment only: 1 no phase 2, 2 phase 2's atomics from block 0 only, 3 no gate/up
# loads, 4 the atomics as one 4-float red a thread through shared memory, 5 the first gate/up loads before down's
# copies, 6 both 4 and 5), kernel by kernel in the step, llama-3.2-1b int4 ctx 2048, the first two candidates
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
d=results/lab/2026-12-04-int4-fused-mlp
for e in 0 1 2 3 4 5 6; do
  timeout 120 python3 $d/profile_mlp.py llama-3.2-1b 2048 2 $e 2>&1 | grep -v -i warn | tee -a $OUT/profile_exp.txt \
    | grep -E "step|int4_mlp|int4_gemv"
done
