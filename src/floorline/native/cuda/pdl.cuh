// Programmatic dependent launch (PDL, a compile-time switch: 0 off, 1 on, 2 early) for every kernel source here
// (native/pdl.py says what it buys): pdl_wait waits for the previous kernel, then lets the next one launch (2: lets it
// launch first, then waits). pdl_wait_after waits once
// the loads that produced `dep` have landed. Loads written before griddepcontrol.wait are not kept there: ptxas hoists
// the wait (ACQBULK in SASS) above them (legal: a load made later), and in every int4_gemv config it did, so the first
// weights were only requested once the previous kernel had finished. Guarding the wait with a predicate computed from
// the loaded words (always true: a popcount is at most 32 < k, which ptxas cannot know) makes it wait for their data:
// they are in flight, and usually landed, while the previous kernel runs.
typedef unsigned int u32;

__device__ __forceinline__ void pdl_wait() {
#if PDL == 2
  asm volatile("griddepcontrol.launch_dependents;");
#endif
#if PDL
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
#if PDL == 1
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
__device__ __forceinline__ void pdl_wait_after(u32 dep, int k) {
#if PDL == 2
  asm volatile("griddepcontrol.launch_dependents;");
#endif
#if PDL
  asm volatile("{\n\t.reg .pred p;\n\t.reg .b32 t;\n\tpopc.b32 t, %0;\n\tsetp.lt.u32 p, t, %1;\n\t"
               "@p griddepcontrol.wait;\n\t}" :: "r"(dep), "r"(k) : "memory");
#endif
#if PDL == 1
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
