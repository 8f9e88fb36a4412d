// A thread's registers are not cleared between kernels: a kernel that reads a register it
// never wrote (ptxas accepts that) finds what the last warp to hold that part of the register
// file left there: the checker kernels' keys, or the kernel's own last launch's results.
// Before each validated and timed launch this overwrites the register file of every SM
// (GpuChecks.scrub_registers), compiled once per layout with WS_REGISTER_THREADS threads a
// block and WS_REGISTER_WORDS values a thread: one block per SM whose warps take the whole
// file, each thread holding WS_REGISTER_WORDS values at once, so ptxas must give them every
// register it allocates (R0 up to the allocation less three; tests/test_register_scrub.py
// reads the SASS). Three layouts (agent/worker/register_scrub.py), so the registers at the
// top of one layout's allocation are written by another's. Compiled after hold.cuh.

// The values come from shared memory zeroed by this block (volatile: every load happens, all
// before any store); `keep` is 0 at every launch, but ptxas cannot know it, so the values
// stay live until the last load.
extern "C" __global__ void __launch_bounds__(WS_REGISTER_THREADS, 1)
ws_scrub_registers(unsigned* arrived, int keep) {
  __shared__ unsigned zeros[WS_REGISTER_WORDS];
  volatile unsigned* s = zeros;
  for (int i = threadIdx.x; i < WS_REGISTER_WORDS; i += blockDim.x)
    s[i] = 0u;
  __syncthreads();
  unsigned v[WS_REGISTER_WORDS];
#pragma unroll
  for (int i = 0; i < WS_REGISTER_WORDS; ++i)
    v[i] = s[i];
  if (keep) {
#pragma unroll
    for (int i = 0; i < WS_REGISTER_WORDS; ++i)
      s[i] = v[i];
  }
  ws_hold_until_all_arrived(arrived);
}
