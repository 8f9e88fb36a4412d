// warpsmith's checker kernels (agent/worker/gpu_checks.py, GpuChecks). Compiled after
// prf.cuh and hold.cuh, the #defines gpu_checks.py writes from its constants
// (WS_STATS_WORDS, WS_RESERVED_SMEM) and the element comparison of agent/spec/tolerance.py
// (WS_SAME_NONFINITE, WS_RELATIVE_ERROR: its CUDA rendering, beside the NumPy one).

// The checks' keys are never a kernel's argument (agent/worker/check_keys.py says why):
// each thread loads them from the key page at an address ptxas cannot prove uniform (the
// lane id AND a word that is always 0: no device address has bit 63 set), so they and
// everything computed from them stay in vector registers, which the register scrub
// overwrites. tests/test_check_keys.py reads the SASS: no R2UR in these kernels.
__device__ __forceinline__ u64 ws_key_word(const u64* key, unsigned word) {
  unsigned lane;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
  const u64* at = key + word + (lane & (unsigned)((u64)key >> 63));
  u64 v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(at));
  return v;
}
// A PRF key (k0, k1) from a key page's two words, with tweaks (a run's salt) XORed in.
#define WS_KEY(key, t0, t1) const u64 k0 = ws_key_word(key, 0) ^ (t0), k1 = ws_key_word(key, 1) ^ (t1)

__device__ u64 ws_mix(u64 x) {
  x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27; x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The references live on the GPU masked: each 64-bit word (32-bit for integer
// references) XORed with the PRF of this worker's secret key, unmasked only inside these
// checks. A kernel that finds a reference by
// pointer arithmetic reads noise; one that writes into it cannot write what unmasks
// to its own output (and the keyed checksum catches the write anyway).
extern "C" __global__ void ws_mask64(u64* a, u64 n, const u64* key) {
  WS_KEY(key, 0, 0);
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    a[i] ^= ws_prf(k0, k1, (u64)(a + i));
}

extern "C" __global__ void ws_mask32(unsigned* a, u64 n, const u64* key) {
  WS_KEY(key, 0, 0);
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    a[i] ^= (unsigned)ws_prf(k0, k1, (u64)(a + i));
}

__device__ void ws_max_double(u64* slot, double v) {
  // Non-negative doubles order like their bit patterns.
  atomicMax(slot, (u64)__double_as_longlong(v));
}

// 16-bit floats arrive as their bits (no header needed) and widen exactly to double.
__device__ double ws_bf16(unsigned short h) { return (double)__int_as_float((int)h << 16); }
__device__ double ws_f16(unsigned short h) {
  int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  double v = e == 31 ? __longlong_as_double(m ? 0x7FF8000000000000ll : 0x7FF0000000000000ll)
           : e == 0 ? ldexp((double)m, -24) : ldexp((double)(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

// Each block also stores its own mismatch count in stats[STATS_WORDS + block], a plain
// store over whatever was there: ws_seal sums those (see it).
__device__ void ws_block_count(u64 mine, u64* stats) {
  __shared__ u64 block_bad;
  if (threadIdx.x == 0) block_bad = 0;
  __syncthreads();
  if (mine) atomicAdd(&block_bad, mine);
  __syncthreads();
  if (threadIdx.x == 0) stats[WS_STATS_WORDS + blockIdx.x] = block_bad;
}

// Counted per thread, reduced per warp, then one atomic per warp and statistic: with an
// atomic per element, an output wrong everywhere (a poisoned one) hits the same few words,
// 13 ms for 16M elements on the H200, where a right one takes none.
// The reference holds n values and then one scale per `row` elements (the case's when
// row >= n: agent/spec/tolerance.py, scales), masked alike.
#define WS_MASKED_DOUBLE(p, j) __longlong_as_double((long long)((p)[j] ^ ws_prf(k0, k1, (u64)((p) + (j)))))
#define WS_CHECK_CLOSE(NAME, T, LOAD)                                                 \
extern "C" __global__ void NAME(const T* out, const u64* ref, u64 n, u64 row,         \
                                double rtol, const u64* key, u64* stats) {            \
  WS_KEY(key, 0, 0);                                                                  \
  double max_rel = 0.0, max_abs = 0.0;                                                \
  u64 mine = 0, nans = 0, first = ~0ull;                                              \
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;                     \
       i += (u64)gridDim.x * blockDim.x) {                                            \
    double o = LOAD(out[i]), r = WS_MASKED_DOUBLE(ref, i);                            \
    if (WS_SAME_NONFINITE(o, r)) continue;                                            \
    double scale = WS_MASKED_DOUBLE(ref + n, row >= n ? 0 : i / row);                 \
    double diff = fabs(o - r);                                                        \
    double rel = WS_RELATIVE_ERROR(o, r, scale);                                      \
    if (!(rel <= rtol)) {                                                             \
      ++mine;                                                                         \
      if (i < first) first = i;                                                       \
      if (isnan(o)) ++nans;                                                           \
    }                                                                                 \
    if (isfinite(rel) && rel > max_rel) max_rel = rel;                                \
    if (isfinite(diff) && diff > max_abs) max_abs = diff;                             \
  }                                                                                   \
  for (int lane = 16; lane > 0; lane >>= 1) {                                         \
    mine += __shfl_xor_sync(0xffffffffu, mine, lane);                                 \
    nans += __shfl_xor_sync(0xffffffffu, nans, lane);                                 \
    first = min(first, (u64)__shfl_xor_sync(0xffffffffu, first, lane));               \
    max_rel = fmax(max_rel, __shfl_xor_sync(0xffffffffu, max_rel, lane));             \
    max_abs = fmax(max_abs, __shfl_xor_sync(0xffffffffu, max_abs, lane));             \
  }                                                                                   \
  const bool leader = (threadIdx.x & 31) == 0;                                        \
  if (leader) {                                                                       \
    if (mine) { atomicAdd(&stats[0], mine); atomicMin(&stats[3], first); }            \
    if (nans) atomicAdd(&stats[4], nans);                                             \
    ws_max_double(&stats[1], max_rel);                                                \
    ws_max_double(&stats[2], max_abs);                                                \
  }                                                                                   \
  ws_block_count(leader ? mine : 0, stats);                                           \
}

WS_CHECK_CLOSE(ws_check_close_f32, float, (double))
WS_CHECK_CLOSE(ws_check_close_f64, double, (double))
WS_CHECK_CLOSE(ws_check_close_f16, unsigned short, ws_f16)
WS_CHECK_CLOSE(ws_check_close_bf16, unsigned short, ws_bf16)

// An integer output against its (masked) reference, word for word.
extern "C" __global__ void ws_count_differ_ref(const unsigned* a, const unsigned* ref, u64 n, const u64* key,
                                                u64* stats) {
  WS_KEY(key, 0, 0);
  u64 local = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    local += a[i] != (ref[i] ^ (unsigned)ws_prf(k0, k1, (u64)(ref + i)));
  if (local) atomicAdd(&stats[0], local);
  ws_block_count(local, stats);
}

// A timed launch's check, sealed: launched after the check, it sums the blocks' counts
// (each written by the check itself, so whatever the kernel under test left in the slot
// before the check is overwritten) into stats[6] and tags the sum with the PRF of the
// slot's address under a secret key (the seal key, the run's salt XORed into its first word)
// into stats[7]. The slots are read only after the
// timing loop, so a later launch of the kernel could rewrite an earlier launch's count:
// it cannot forge the tag of the count it would write. Then every other word of the slot
// gets the fence's keystream (the fence key, the run's salt XORed into its second word),
// checked after the loop: a sealed slot is no place to keep data from one launch to the
// next either.
extern "C" __global__ void ws_seal(u64* stats, u64 nblocks, const u64* seal, const u64* fence, u64 salt) {
  WS_KEY(seal, salt, 0);
  const u64 f0 = ws_key_word(fence, 0), f1 = ws_key_word(fence, 1) ^ salt;
  if (threadIdx.x == 0) {
    u64 sum = 0;
    for (u64 b = 0; b < nblocks; ++b) sum += stats[WS_STATS_WORDS + b];
    stats[6] = sum;
    stats[7] = ws_prf(k0, k1 ^ sum, (u64)stats);
  }
  __syncthreads();
  for (u64 w = threadIdx.x; w < WS_STATS_WORDS + nblocks; w += blockDim.x)
    if (w != 6 && w != 7) {
      unsigned* half = (unsigned*)(stats + w);
      half[0] = (unsigned)ws_prf(f0, f1, (u64)half);
      half[1] = (unsigned)ws_prf(f0, f1, (u64)(half + 1));
    }
}

// A keyed checksum: a secret key makes a change that
// keeps the sum unchanged unfindable. The sum of mixed words is order-free, so the
// blocks add into one slot.

extern "C" __global__ void ws_checksum(const unsigned* a, u64 n, const u64* keys, u64* sum) {
  const u64 key = ws_key_word(keys, 0);
  u64 local = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    local += ws_mix(key ^ (i * 0x9E3779B97F4A7C15ull) ^ a[i]);
  atomicAdd(sum, local);
}

extern "C" __global__ void ws_checksum16(const unsigned short* a, u64 n, const u64* keys, u64* sum) {
  const u64 key = ws_key_word(keys, 0);
  u64 local = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    local += ws_mix(key ^ (i * 0x9E3779B97F4A7C15ull) ^ a[i]);
  atomicAdd(sum, local);
}

// fp8 arrays may end on any byte: they are summed a byte at a time.
extern "C" __global__ void ws_checksum8(const unsigned char* a, u64 n, const u64* keys, u64* sum) {
  const u64 key = ws_key_word(keys, 0);
  u64 local = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    local += ws_mix(key ^ (i * 0x9E3779B97F4A7C15ull) ^ a[i]);
  atomicAdd(sum, local);
}

// Fences: memory a run must leave alone (other cases' buffers and workspace, the moats)
// filled with the PRF of the secret key and a fresh salt, so that a kernel that stashes
// data there between launches cannot put back what it overwrote.
extern "C" __global__ void ws_fence(unsigned* a, u64 n, const u64* key, u64 salt) {
  WS_KEY(key, 0, salt);
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    a[i] = (unsigned)ws_prf(k0, k1, (u64)(a + i));
}

extern "C" __global__ void ws_fence_count(const unsigned* a, u64 n, const u64* key, u64 salt, u64* count) {
  WS_KEY(key, 0, salt);
  u64 local = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    local += a[i] != (unsigned)ws_prf(k0, k1, (u64)(a + i));
  if (local) atomicAdd(count, local);
}

#define WS_COUNT_NOT(NAME, T)                                                                       \
extern "C" __global__ void NAME(const T* a, unsigned value, u64 n, u64* count) {                    \
  u64 local = 0;                                                                                    \
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x) \
    local += a[i] != (T)value;                                                                      \
  if (local) atomicAdd(count, local);                                                               \
}
WS_COUNT_NOT(ws_count_not, unsigned)
WS_COUNT_NOT(ws_count_not16, unsigned short)
WS_COUNT_NOT(ws_count_not8, unsigned char)

// A block's reserved shared memory (the 1 KB per block the system keeps, which a kernel
// reaches by address through %reserved_smem_offset_begin), overwritten: the whole kilobyte
// from its start, not up to %reserved_smem_offset_end, which is where this kernel's own
// use of it ends (a stash at its 800th byte outlived the scrub on the H100 and the H200).
__device__ void ws_zero_reserved() {
#if __CUDA_ARCH__ >= 800  // the reserved window's registers exist from sm_80 on
  unsigned begin, end;
  asm volatile("mov.u32 %0, %%reserved_smem_offset_begin;" : "=r"(begin));
  asm volatile("mov.u32 %0, %%reserved_smem_offset_end;" : "=r"(end));
  const unsigned stop = end > begin + WS_RESERVED_SMEM ? end : begin + WS_RESERVED_SMEM;
  for (unsigned at = begin + 4 * threadIdx.x; at + 4 <= stop; at += 4 * blockDim.x)
    asm volatile("st.volatile.shared.u32 [%0], %1;" :: "r"(at), "r"(0u) : "memory");
#endif
}

// Shared memory keeps its contents from one kernel to the next on the same SM: a kernel
// could leave its outputs there and copy them back at its next launch instead of computing.
// Launched twice before every validated and timed launch (GpuChecks.scrub_shared): one
// block per SM holding the opt-in maximum, then a block in every resident block slot of
// every SM, each with its share of the SM's shared memory (the SM's shared memory over its
// slots, less the reserved kilobyte, so the blocks tile it and the driver must give them the
// largest carveout). Each block overwrites its shared memory (`words`; volatile: stores
// nothing reads must still happen) and its reserved kilobyte, and holds until all blocks
// arrived. The second launch is there because the reserved kilobyte belongs to a block
// slot, not to the SM: a stash that a kernel of 8 blocks per SM left in its blocks'
// reserved memory survives the first launch alone (seen on the H200).
extern "C" __global__ void ws_scrub_shared(u64 words, unsigned* arrived) {
  extern __shared__ unsigned ws_scrub[];
  volatile unsigned* s = ws_scrub;
  for (u64 i = threadIdx.x; i < words; i += blockDim.x)
    s[i] = 0u;
  ws_zero_reserved();
  ws_hold_until_all_arrived(arrived);
}

// A 16-bit array's data (and the guard after it) need not start on a 4-byte boundary,
// which cuMemsetD32 requires: the 16-bit guard and poison fills go through this.
extern "C" __global__ void ws_fill16(unsigned short* a, unsigned value, u64 n) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    a[i] = (unsigned short)value;
}

// An fp8 array's guard after its data may start on any byte: its fills go through this.
extern "C" __global__ void ws_fill8(unsigned char* a, unsigned value, u64 n) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    a[i] = (unsigned char)value;
}
