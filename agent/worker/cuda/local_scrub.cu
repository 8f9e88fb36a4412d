// Local memory (a thread's stack: spills, local arrays) lives in device memory per hardware
// thread slot and is not cleared between kernels: a kernel that reads its local array before
// writing it could find what its last launch left there. Before each validated and timed
// launch, this runs at full occupancy with a frame as large as a thread's local window
// (WS_LOCAL_WORDS words, compiled per size: GpuChecks.local_scrub) and overwrites it
// (volatile: stores nothing reads must still happen). Compiled after hold.cuh.

// `zero` is 0 at every launch, but the compiler cannot know it: the frame is indexed at run
// time, so no ptxas can keep it in registers (one did with a constant-indexed volatile
// array: no stack frame, nothing scrubbed). The worker checks the loaded frame's size too.
// Held until all blocks arrived: each warp slot of each SM then has had one of its warps.
extern "C" __global__ void __launch_bounds__(1024, 2) ws_scrub_local(unsigned* arrived, int zero) {
  volatile unsigned frame[WS_LOCAL_WORDS];
  for (int i = 0; i < WS_LOCAL_WORDS; ++i)
    frame[i + zero] = 0u;
  ws_hold_until_all_arrived(arrived);
}
