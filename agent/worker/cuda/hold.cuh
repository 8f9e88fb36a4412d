// What the scrubs whose blocks must all be resident at once share (checks.cu and
// local_scrub.cu are each compiled after it).

// Stay resident until every block of the grid has started (bounded, about a millisecond:
// never a hang), so each slot a block can take on an SM holds one of this grid's blocks: a
// block that left early would hand its slot to a later block, and some slots would keep
// what they had. `arrived` (two words, zeroed before the launch): the blocks that started,
// and those that gave up waiting (GpuChecks reads it once at start: all must be resident).
__device__ void ws_hold_until_all_arrived(unsigned* arrived) {
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(arrived, 1u);
    long long t0 = clock64();
    while (atomicAdd(arrived, 0u) < gridDim.x && clock64() - t0 < 2000000) {}
    if (atomicAdd(arrived, 0u) < gridDim.x)
      atomicAdd(arrived + 1, 1u);
  }
  __syncthreads();
}
