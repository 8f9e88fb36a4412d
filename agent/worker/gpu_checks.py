"""The checks that run on the GPU after every launch: output against the float64
reference (kept masked on the GPU, see SOURCE), guard bands against their sentinel,
inputs and references against the keyed checksums taken when they were uploaded.

They run on the GPU because a 4096 x 4096 comparison in NumPy costs ~200 ms and
the evaluation of a whole candidate has a budget of one second. Only when a check
fails is the output downloaded and the detailed report built on the CPU
(:mod:`agent.worker.mismatch`). The comparison is the one :mod:`agent.spec.tolerance`
defines; a GPU test checks both agree.
"""

from __future__ import annotations

import secrets
import struct
from dataclasses import dataclass

import numpy as np

from ..runtime import compiler
from ..spec.workload import ARRAY_ITEMSIZE
from .pages import alloc_pages

# The keyed PRF, on its own: the worker's host side computes it too (prf below), and a
# CPU test compiles this text as C++ to check that both agree.
PRF_SOURCE = r"""
typedef unsigned long long u64;

// A keyed pseudo-random function of a word's device address: SipHash-1-3 of one
// 8-byte message under a 128-bit key. Unlike ws_mix (a bijection anyone can invert),
// seeing some of its outputs tells nothing of the key or of the others, so a kernel
// that learns a few words of a stream below (by computing a few outputs honestly)
// cannot extend it; and since the message is the address, no two buffers share a
// stream (one could otherwise be copied from another, or XORed away).
__device__ __forceinline__ u64 ws_rotl(u64 x, int b) { return (x << b) | (x >> (64 - b)); }
#define WS_SIPROUND                                                               \
  v0 += v1; v1 = ws_rotl(v1, 13); v1 ^= v0; v0 = ws_rotl(v0, 32);                 \
  v2 += v3; v3 = ws_rotl(v3, 16); v3 ^= v2;                                       \
  v0 += v3; v3 = ws_rotl(v3, 21); v3 ^= v0;                                       \
  v2 += v1; v1 = ws_rotl(v1, 17); v1 ^= v2; v2 = ws_rotl(v2, 32);
__device__ u64 ws_prf(u64 k0, u64 k1, u64 m) {
  u64 v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
  u64 v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
  const u64 b = 8ull << 56;  // the final block: the message's length
  v3 ^= m; WS_SIPROUND; v0 ^= m;
  v3 ^= b; WS_SIPROUND; v0 ^= b;
  v2 ^= 0xff; WS_SIPROUND; WS_SIPROUND; WS_SIPROUND;
  return v0 ^ v1 ^ v2 ^ v3;
}
"""

# What the scrubs whose blocks must all be resident at once share (in both sources below).
HOLD_SOURCE = r"""
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
"""

STATS_WORDS = 8  # a check's stats words; the per-block counts follow them (ws_block_count)

RESERVED_SMEM = 1024  # shared memory the system keeps per block (sm_80 and up)
SOURCE = PRF_SOURCE + HOLD_SOURCE + f"#define WS_STATS_WORDS {STATS_WORDS}\n#define WS_RESERVED_SMEM {RESERVED_SMEM}u\n" + r"""

__device__ u64 ws_mix(u64 x) {
  x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27; x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The references live on the GPU masked: each 64-bit word (32-bit for integer
// references) XORed with the PRF of this worker's secret key (never a kernel's
// argument), unmasked only inside these checks. A kernel that finds a reference by
// pointer arithmetic reads noise; one that writes into it cannot write what unmasks
// to its own output (and the keyed checksum catches the write anyway).
extern "C" __global__ void ws_mask64(u64* a, u64 n, u64 k0, u64 k1) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    a[i] ^= ws_prf(k0, k1, (u64)(a + i));
}

extern "C" __global__ void ws_mask32(unsigned* a, u64 n, u64 k0, u64 k1) {
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
#define WS_CHECK_CLOSE(NAME, T, LOAD)                                                 \
extern "C" __global__ void NAME(const T* out, const u64* ref, u64 n, double scale,    \
                                double rtol, u64 k0, u64 k1, u64* stats) {            \
  double max_rel = 0.0, max_abs = 0.0;                                                \
  u64 mine = 0, nans = 0, first = ~0ull;                                              \
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;                     \
       i += (u64)gridDim.x * blockDim.x) {                                            \
    double o = LOAD(out[i]), r = __longlong_as_double((long long)(ref[i] ^ ws_prf(k0, k1, (u64)(ref + i)))); \
    if ((isnan(o) && isnan(r)) || (isinf(r) && o == r)) continue;                     \
    double diff = fabs(o - r);                                                        \
    double rel = diff / (fabs(r) + scale + 1e-300);                                   \
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
extern "C" __global__ void ws_count_differ_ref(const unsigned* a, const unsigned* ref, u64 n, u64 k0, u64 k1,
                                                u64* stats) {
  u64 local = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    local += a[i] != (ref[i] ^ (unsigned)ws_prf(k0, k1, (u64)(ref + i)));
  if (local) atomicAdd(&stats[0], local);
  ws_block_count(local, stats);
}

// A timed launch's check, sealed: launched after the check, it sums the blocks' counts
// (each written by the check itself, so whatever the kernel under test left in the slot
// before the check is overwritten) into stats[6] and tags the sum with the PRF of the
// slot's address under a secret key into stats[7]. The slots are read only after the
// timing loop, so a later launch of the kernel could rewrite an earlier launch's count:
// it cannot forge the tag of the count it would write. Then every other word of the slot
// gets the fence's keystream (f0, f1: the fence key and the run's salt), checked after the
// loop: a sealed slot is no place to keep data from one launch to the next either.
extern "C" __global__ void ws_seal(u64* stats, u64 nblocks, u64 k0, u64 k1, u64 f0, u64 f1) {
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

// A keyed checksum: a secret key (never a kernel's argument) makes a change that
// keeps the sum unchanged unfindable. The sum of mixed words is order-free, so the
// blocks add into one slot.

extern "C" __global__ void ws_checksum(const unsigned* a, u64 n, u64 key, u64* sum) {
  u64 local = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    local += ws_mix(key ^ (i * 0x9E3779B97F4A7C15ull) ^ a[i]);
  atomicAdd(sum, local);
}

extern "C" __global__ void ws_checksum16(const unsigned short* a, u64 n, u64 key, u64* sum) {
  u64 local = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    local += ws_mix(key ^ (i * 0x9E3779B97F4A7C15ull) ^ a[i]);
  atomicAdd(sum, local);
}

// Fences: memory a run must leave alone (other cases' buffers and workspace, the moats)
// filled with the PRF of the secret key and a fresh salt, so that a kernel that stashes
// data there between launches cannot put back what it overwrote.
extern "C" __global__ void ws_fence(unsigned* a, u64 n, u64 k0, u64 k1) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n; i += (u64)gridDim.x * blockDim.x)
    a[i] = (unsigned)ws_prf(k0, k1, (u64)(a + i));
}

extern "C" __global__ void ws_fence_count(const unsigned* a, u64 n, u64 k0, u64 k1, u64* count) {
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
"""

# Local memory (a thread's stack: spills, local arrays) lives in device memory per hardware
# thread slot and is not cleared between kernels: a kernel that reads its local array before
# writing it could find what its last launch left there. Before each validated and timed
# launch, this runs at full occupancy with a frame as large as a thread's local window
# (WS_LOCAL_WORDS words, compiled per size: GpuChecks.local_scrub) and overwrites it
# (volatile: stores nothing reads must still happen).
LOCAL_SCRUB_SOURCE = HOLD_SOURCE + r"""
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
"""


NO_INDEX = 0xFFFFFFFFFFFFFFFF
# The scrub launches whose blocks hold for each other (GpuChecks._arrival_counter)
HOLDS = ("local scrub", "shared scrub, a block per SM", "shared scrub, a block per slot")
CLOSE_KERNELS = {"float32": "ws_check_close_f32", "float64": "ws_check_close_f64",
                 "float16": "ws_check_close_f16", "bfloat16": "ws_check_close_bf16"}
KERNELS = (*CLOSE_KERNELS.values(), "ws_count_differ_ref", "ws_mask64", "ws_mask32", "ws_fence", "ws_fence_count",
           "ws_seal", "ws_count_not", "ws_count_not16", "ws_checksum",
           "ws_checksum16", "ws_fill16", "ws_scrub_shared")


MASK64 = (1 << 64) - 1


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & MASK64


def prf(k0: int, k1: int, m: int) -> int:
    """ws_prf on the host (PRF_SOURCE): SipHash-1-3 of the 8-byte word m under (k0, k1)."""
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573

    def rounds(n: int) -> None:
        nonlocal v0, v1, v2, v3
        for _ in range(n):
            v0 = (v0 + v1) & MASK64; v1 = _rotl(v1, 13) ^ v0; v0 = _rotl(v0, 32)  # noqa: E702
            v2 = (v2 + v3) & MASK64; v3 = _rotl(v3, 16) ^ v2  # noqa: E702
            v0 = (v0 + v3) & MASK64; v3 = _rotl(v3, 21) ^ v0  # noqa: E702
            v2 = (v2 + v1) & MASK64; v1 = _rotl(v1, 17) ^ v2; v2 = _rotl(v2, 32)  # noqa: E702

    for block in (m, 8 << 56):
        v3 ^= block
        rounds(1)
        v0 ^= block
    v2 ^= 0xFF
    rounds(3)
    return v0 ^ v1 ^ v2 ^ v3


def _signed(value: int) -> int:
    """A u64 as the i64 launch argument with the same bits."""
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass(frozen=True)
class CloseStats:
    mismatches: int
    max_rel_error: float
    max_abs_error: float
    first_bad: int  # flat index, or -1
    unwritten: int


class GpuChecks:
    """The checker kernels, compiled once per worker, and a small stats buffer."""

    def __init__(self, device, arch: str):
        self.device, self.arch = device, arch
        self._local_scrubs: dict[int, object] = {}  # frame words -> ws_scrub_local of that frame
        self._arrived = None  # the holding scrubs' arrival counters (HOLDS, _arrival_counter)
        self._window = 0  # the largest local window scrubbed so far, in bytes
        compiled = compiler.compile_kernel(SOURCE, "", arch, filename="warpsmith_checks.cu")
        if not compiled.ok:
            raise RuntimeError(f"warpsmith's own checker kernels failed to compile:\n{compiled.log}")
        module = device.load_module(compiled.cubin)
        self._module = module
        self._fn = {name: module.function(name) for name in KERNELS}
        self._grid = max(1, device.facts.sm_count) * 4
        self._sms, self._shared_max = max(1, device.facts.sm_count), device.facts.smem_per_block_optin
        # A check's stats: STATS_WORDS, then one mismatch count per block of the check (ws_seal)
        self.slot_words = STATS_WORDS + self._grid
        self._stats = alloc_pages(device, self.slot_words * 8)
        self._key = secrets.randbits(64)  # this worker's checksum key: in no kernel's reach
        # The PRF keys of the reference mask and of the fences (a fence's salt goes into the
        # second word), in no kernel's reach either.
        self._ref_key = (secrets.randbits(64), secrets.randbits(64))
        self._fence_key = (secrets.randbits(64), secrets.randbits(64))
        self._seal_key = (secrets.randbits(64), secrets.randbits(64))
        # fences_broken's counters and a Tally's results: a page each now, grown on demand.
        # Allocated before any case's buffers, as _stats is: a page the driver placed right
        # after a case's buffers would take a kernel's far overrun (4 MiB past its output,
        # tests/test_gpu_adversarial.py) into memory the worker zeroes before reading, where
        # no check sees it, instead of into another case's buffers or unmapped memory.
        self._counts = alloc_pages(device, 8)
        self._slots = alloc_pages(device, 8)
        self._fn["ws_scrub_shared"].prefer_all_shared()
        # The scrubs' writes (the reserved shared kilobyte included) tried once now: a GPU or
        # driver that refused them would fail here, said once, not in every evaluation. And
        # whether every block of each holding scrub was resident at once (another context on
        # the GPU, or a carveout smaller than asked, would leave slots unscrubbed): the names
        # of those that were not, in `holds_short` (tests/test_gpu_adversarial.py expects none).
        self.scrub(0)
        device.synchronize()
        counts = np.empty(2 * len(HOLDS), dtype=np.uint32)
        self._arrived.download(counts)
        self.holds_short = [f"{name}: {int(counts[2 * k + 1])} of {int(counts[2 * k])} blocks gave up waiting"
                            for k, name in enumerate(HOLDS) if counts[2 * k + 1]]

    def _reset(self) -> None:
        init = np.zeros(STATS_WORDS, dtype=np.uint64)
        init[3] = NO_INDEX
        self._stats.upload(init)

    def _read(self) -> np.ndarray:
        out = np.empty(STATS_WORDS, dtype=np.uint64)
        self._stats.download(out)
        return out

    def _run(self, name: str, kernel_args: list) -> np.ndarray:
        self._reset()
        self.device.launch(self._fn[name], (self._grid, 1, 1), (256, 1, 1), 0, kernel_args)
        self.device.synchronize()
        return self._read()

    def enqueue_output_check(self, dtype: str, out_ptr: int, ref_ptr: int, nbytes: int, scale: float,
                             rtol: float, stats_ptr: int) -> None:
        """Enqueue the output check without waiting: its mismatch count lands in
        stats_ptr[0] (zeroed by the caller). Floats by tolerance, integers exactly."""
        if dtype in CLOSE_KERNELS:
            args = [("ptr", out_ptr), ("ptr", ref_ptr), ("i64", nbytes // ARRAY_ITEMSIZE[dtype]),
                    ("f64", scale), ("f64", rtol), *self._ref_args(), ("ptr", stats_ptr)]
            name = CLOSE_KERNELS[dtype]
        else:
            args = [("ptr", out_ptr), ("ptr", ref_ptr), ("i64", nbytes // 4), *self._ref_args(), ("ptr", stats_ptr)]
            name = "ws_count_differ_ref"
        self.device.launch(self._fn[name], (self._grid, 1, 1), (256, 1, 1), 0, args)

    def enqueue_seal(self, stats_ptr: int, salt: int) -> None:
        """Behind an enqueued output check: its count, summed from the blocks' own, and the
        count's tag (ws_seal) into words 6 and 7 of its stats, and the fence's keystream of
        `salt` into every other word (sealed_rest says where, to check after the loop). The
        salt is the timing run's: a tag from another run (the same address reused) does not
        pass in this one."""
        self.device.launch(self._fn["ws_seal"], (1, 1, 1), (128, 1, 1), 0,
                           [("ptr", stats_ptr), ("i64", self._grid), *self._key_args(self._seal_key, tweak0=salt),
                            *self._fence_args(salt)])

    def sealed_rest(self, stats_ptr: int) -> list[tuple[int, int]]:
        """The (ptr, nbytes) of a sealed slot that hold the fence's keystream: all but the
        count and its tag (words 6 and 7)."""
        return [(stats_ptr, 6 * 8), (stats_ptr + STATS_WORDS * 8, self._grid * 8)]

    def sealed(self, stats_ptr: int, salt: int, count: int, tag: int) -> bool:
        """Whether (count, tag), read back from the stats at stats_ptr, are what ws_seal wrote there."""
        return prf(self._seal_key[0] ^ salt, self._seal_key[1] ^ count, stats_ptr) == tag

    def upload_reference(self, buffer, values: np.ndarray) -> None:
        """Upload a reference (float64, or an output's integer dtype) into buffer and mask it
        there: float64 words, or 32-bit words of an integer reference. Synchronous: no
        kernel runs before the mask is on."""
        buffer.upload(values)
        name, width = ("ws_mask64", 8) if values.dtype.kind == "f" else ("ws_mask32", 4)
        self.device.launch(self._fn[name], (self._grid, 1, 1), (256, 1, 1), 0,
                           [("ptr", buffer.ptr), ("i64", values.nbytes // width), *self._ref_args()])
        self.device.synchronize()

    def close(self, dtype: str, out_ptr: int, ref_ptr: int, n: int, scale: float, rtol: float) -> CloseStats:
        """An output against its masked float64 reference (agent.spec.tolerance's comparison)."""
        s = self._run(CLOSE_KERNELS[dtype], [("ptr", out_ptr), ("ptr", ref_ptr), ("i64", n), ("f64", scale),
                                             ("f64", rtol), *self._ref_args(), ("ptr", self._stats.ptr)])
        as_double = lambda bits: struct.unpack("<d", struct.pack("<Q", int(bits)))[0]
        return CloseStats(int(s[0]), as_double(s[1]), as_double(s[2]),
                          -1 if int(s[3]) == NO_INDEX else int(s[3]), int(s[4]))

    def count_differ_ref(self, a_ptr: int, ref_ptr: int, nbytes: int) -> int:
        """32-bit words of an integer output that differ from its masked reference."""
        return int(self._run("ws_count_differ_ref", [("ptr", a_ptr), ("ptr", ref_ptr), ("i64", nbytes // 4),
                                                     *self._ref_args(), ("ptr", self._stats.ptr)])[0])

    def checksum(self, ptr: int, nbytes: int, width: int = 4) -> int:
        """Keyed sum of the `width`-byte words (4, or 2 for 16-bit arrays) at ptr; equal sums
        mean unchanged contents."""
        tally = self.tally()
        k = tally.checksum(ptr, nbytes, width)
        return tally.read()[k]

    @staticmethod
    def _key_args(key: tuple[int, int], tweak0: int = 0, tweak1: int = 0) -> list[tuple[str, int]]:
        """A PRF key (with a salt XORed into a word) as the kernel's two u64 arguments."""
        return [("i64", _signed(key[0] ^ tweak0)), ("i64", _signed(key[1] ^ tweak1))]

    def _ref_args(self) -> list[tuple[str, int]]:
        return self._key_args(self._ref_key)

    def _fence_args(self, salt: int) -> list[tuple[str, int]]:
        return self._key_args(self._fence_key, tweak1=salt)

    def fence(self, ptr: int, nbytes: int, salt: int) -> None:
        """Fill the 4-byte words at ptr with the keystream of (key, salt); enqueued only."""
        self.device.launch(self._fn["ws_fence"], (self._grid, 1, 1), (256, 1, 1), 0,
                           [("ptr", ptr), ("i64", nbytes // 4), *self._fence_args(salt)])

    def fences_broken(self, regions: list[tuple[int, int]], salt: int) -> list[int]:
        """For each (ptr, nbytes): how many words no longer hold the stream fence() wrote
        there. One wait for all of them (a run fences dozens of regions)."""
        if not regions:
            return []
        if self._counts is None or self._counts.nbytes < 8 * len(regions):
            self._counts = alloc_pages(self.device, 8 * len(regions))
        self._counts.fill_u32(0, 0, 8 * len(regions))
        for k, (ptr, nbytes) in enumerate(regions):
            self.device.launch(self._fn["ws_fence_count"], (self._grid, 1, 1), (256, 1, 1), 0,
                               [("ptr", ptr), ("i64", nbytes // 4), *self._fence_args(salt),
                                ("ptr", self._counts.ptr + 8 * k)])
        self.device.synchronize()
        out = np.empty(len(regions), dtype=np.uint64)
        self._counts.download(out)
        return [int(v) for v in out]

    def count_not(self, ptr: int, value: int, nbytes: int, width: int = 4) -> int:
        """How many `width`-byte words at ptr differ from `value`."""
        tally = self.tally()
        k = tally.count_not(ptr, value, nbytes, width)
        return tally.read()[k]

    def tally(self) -> "Tally":
        """Counts and checksums to enqueue together and read with one wait."""
        return Tally(self)

    def tally_slots(self, n: int):
        """n zeroed u64 slots for a Tally (the page zeroed whole: no slack to keep data in); enqueued."""
        if self._slots is None or self._slots.nbytes < 8 * n:
            self._slots = alloc_pages(self.device, 8 * n)
        self._slots.fill_u32_async(0, 0, self._slots.nbytes)
        return self._slots

    def local_scrub(self, local_bytes: int):
        """The ws_scrub_local whose frame covers a thread's whole local window: the larger of
        the kernel's frame (`local_bytes`) and the context's stack (a kernel can index past
        its own frame; a frameless kernel's access faulted on the H200, but that is the
        hardware's bound, not ours), in whole 256-byte steps. Compiled and loaded on first
        use, before a run starts, so no compile lands inside a timing loop."""
        # The stack as it is now (the driver raises it for a kernel that needs more and never
        # lowers it: a window read at start would go stale), and never less than before.
        self._window = max(self._window, local_bytes, self.device.stack_limit(), 1)
        words = (self._window + 255) // 256 * 64
        if words not in self._local_scrubs:
            compiled = compiler.compile_kernel(LOCAL_SCRUB_SOURCE, "ws_scrub_local", self.arch,
                                               [f"-DWS_LOCAL_WORDS={words}"], filename="warpsmith_scrub_local.cu")
            if not compiled.ok:
                raise RuntimeError(f"warpsmith's local-memory scrub failed to compile:\n{compiled.log}")
            fn = self.device.load_module(compiled.cubin).function(compiled.symbol)
            if fn.info.local_bytes < 4 * words:
                raise RuntimeError(f"warpsmith's local-memory scrub has a {fn.info.local_bytes}-byte frame where "
                                   f"{4 * words} bytes must be overwritten: this ptxas kept it out of local memory")
            self._local_scrubs[words] = fn
        return self._local_scrubs[words]

    def scrub(self, local_bytes: int) -> None:
        """Before a judged or timed launch of a kernel whose frame is `local_bytes`: every
        SM's shared memory and every thread slot's local window overwritten (enqueued only),
        so nothing a launch left on chip or in its stack reaches this one."""
        self._zero_arrivals()
        self.scrub_shared()
        self.scrub_local(local_bytes)

    def scrub_local(self, local_bytes: int) -> None:
        """Overwrite every thread slot's local window (enqueued only) before a launch of a
        kernel whose frame is `local_bytes`: two resident blocks of 1024 threads per SM."""
        fn = self.local_scrub(local_bytes)
        per_sm = max(1, self.device.facts.max_threads_per_sm // 1024)
        self.device.launch(fn, (self._sms * per_sm, 1, 1), (1024, 1, 1), 0,
                           [("ptr", self._arrival_counter("local scrub")), ("i32", 0)])

    def _zero_arrivals(self) -> None:
        """The holding scrubs' arrival counters zeroed (the page whole, so its slack holds
        nothing either); enqueued, before the scrubs that count into them."""
        if self._arrived is None:
            self._arrived = alloc_pages(self.device, 8 * len(HOLDS))
        self._arrived.fill_u32_async(0, 0, self._arrived.nbytes)

    def _arrival_counter(self, scrub: str) -> int:
        """The two words (arrived, gave up) of a holding scrub (HOLDS), zeroed now (enqueued):
        a scrub launched on its own (benchmarks/worker_costs.py) must hold too, not find
        its count already full. scrub() zeroes the whole page besides."""
        if self._arrived is None:
            self._zero_arrivals()
        offset = 8 * HOLDS.index(scrub)
        self._arrived.fill_u32_async(0, offset, 8)
        return self._arrived.ptr + offset

    def clear_scratch(self) -> None:
        """Zero this object's own small buffers whole, pages and all (the stats of the
        synchronous checks, the fences' counters, the tallies' results); enqueued only.
        Nothing reads them inside a timing loop, so a launch could otherwise keep data
        there for the next."""
        self._stats.fill_u32_async(0, 0, self._stats.nbytes)
        for scratch in (self._counts, self._slots):
            if scratch is not None:
                scratch.fill_u32_async(0, 0, scratch.nbytes)

    def scrub_shared(self) -> None:
        """Overwrite the shared memory of every SM and the reserved kilobyte of every resident
        block slot (ws_scrub_shared, launched twice); enqueued only. Nothing a launch leaves
        there reaches the next one: not the last candidate's, not its own."""
        fn = self._fn["ws_scrub_shared"]
        if self._shared_max:
            self.device.launch(fn, (self._sms, 1, 1), (1024, 1, 1), self._shared_max,
                               [("i64", self._shared_max // 4), ("ptr", self._arrival_counter(HOLDS[1]))])
        per_sm = max(1, self.device.facts.max_blocks_per_sm)
        share = max(0, self.device.facts.smem_per_sm // per_sm - RESERVED_SMEM) // 1024 * 1024
        self.device.launch(fn, (self._sms * per_sm, 1, 1), (32, 1, 1), share,
                           [("i64", share // 4), ("ptr", self._arrival_counter(HOLDS[2]))])

    def fill16(self, ptr: int, value: int, nbytes: int, synchronous: bool = False) -> None:
        """Fill 2-byte words at a 2-byte aligned ptr; enqueued only, unless `synchronous`."""
        self.device.launch(self._fn["ws_fill16"], (self._grid, 1, 1), (256, 1, 1), 0,
                           [("ptr", ptr), ("i32", value), ("i64", nbytes // 2)])
        if synchronous:
            self.device.synchronize()


class Tally:
    """Counts (words not holding a value) and keyed checksums, enqueued one after another
    and read with one wait. The sweep after every request checks each resident case's
    moats, inputs and references: about 36 buffers for sgemm, 23.6 ms on the H200
    when each check waited for its own result."""

    def __init__(self, checks: GpuChecks):
        self._checks = checks
        self._ops: list[tuple[str, list]] = []  # (kernel, its arguments but the result slot)

    def count_not(self, ptr: int, value: int, nbytes: int, width: int = 4) -> int:
        """How many `width`-byte words at ptr differ from `value`: the index of its result."""
        self._ops.append(("ws_count_not" if width == 4 else "ws_count_not16",
                          [("ptr", ptr), ("i32", value - (1 << 32) if value >= 1 << 31 else value),
                           ("i64", nbytes // width)]))
        return len(self._ops) - 1

    def checksum(self, ptr: int, nbytes: int, width: int = 4) -> int:
        """Keyed sum of the `width`-byte words at ptr: the index of its result."""
        self._ops.append(("ws_checksum" if width == 4 else "ws_checksum16",
                          [("ptr", ptr), ("i64", nbytes // width), ("i64", _signed(self._checks._key))]))
        return len(self._ops) - 1

    def read(self) -> list[int]:
        """Every result, in the order enqueued, after one wait (a wait even with none: what
        ran before surfaces its error here, as the checks' callers expect)."""
        c = self._checks
        if not self._ops:
            c.device.synchronize()
            return []
        slots = c.tally_slots(len(self._ops))
        for k, (name, args) in enumerate(self._ops):
            c.device.launch(c._fn[name], (c._grid, 1, 1), (256, 1, 1), 0, [*args, ("ptr", slots.ptr + 8 * k)])
        c.device.synchronize()
        out = np.empty(len(self._ops), dtype=np.uint64)
        slots.download(out)
        return [int(v) for v in out]

