"""The measured dense bf16 and fp8 (e4m3) tensor-core rates (fp32 accumulate) of this GPU,
beside the clock peak, measured like the fp32 one: what a bf16 or fp8 GEMM's TFLOP/s can be
read against.

    python3 benchmarks/tensor_ceiling.py

One table line per probe, then a SUMMARY line. Each probe is a kernel compiled with
warpsmith's own compile_kernel and timed with the runner's loop, as
agent/worker/ceilings_probe.py times the fp32 FMA ceiling (10 warm-up launches, median of 20
launches, no L2 flush: nothing here reads global memory), best of a few shapes:

- wgmma: every SM runs one or two CTAs of 1-4 warpgroups; each warpgroup issues
  ``wgmma.mma_async m64nNk16.f32.bf16.bf16`` (N = 256 or 128) in a loop on operand
  tiles that sit in shared memory for the whole kernel, four per commit group, one
  group left in flight by ``wait_group 1``. The tiles and descriptors are laid out
  exactly as examples/bf16_gemm/wgmma_tma.cu's, whose results are checked on the
  H200 (128-byte swizzle, K-major A, N-major B; for fp8, ``m64nNk32.f32.e4m3.e4m3``
  with both operands K-major, the only layout 8-bit wgmma takes, as
  examples/fp8_gemm/wgmma_ws.cu), and every descriptor stays inside
  the CTA's shared memory, so the probe cannot fault; the values are small random
  bf16 (they only need to be legal; random rather than zero so the tensor cores
  draw the power a real GEMM draws).
- mma.sync m16n8k16 bf16 (the sm_80 path): independent accumulator chains per warp,
  fragments in registers.
- cuBLAS bf16 GEMM (cublasGemmEx, fp32 compute, the `cublas_gemm_bf16` baseline) at
  8192^3, for scale.

Why the floor stays the clock peak: agent/spec/speed_of_light.py judges a result
against the FLOPs over TENSOR_FMA_PER_SM_CLOCK x SMs x top SM clock, a physics bound
no kernel can beat, so a median under its floor is a timing or validation hole,
never a win. A measured figure is lower (the clock sags under tensor-core power,
issue overheads), and a gate built on it would call a kernel that edges past the
probe "faster than physics". So the gate keeps the clock peak, and this measured
figure is the practical ceiling quoted beside results ("x% of what wgmma reaches
here").

Exit 0; 2 with one line when there is no usable GPU; 1 when a probe does not compile.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass

from warpsmith.agent.runtime.compile_policy import define_options
from warpsmith.agent.runtime.compiler import CompiledKernel, compile_kernel

KSTEPS = 4  # wgmmas per commit group: the four 16-deep K slices of one 64-wide swizzled tile
TILE_K = 64  # bf16 along K of the A and B tiles: one 128-byte swizzle row
A_TILE_BYTES = 64 * TILE_K * 2  # one warpgroup's 64 x 64 A tile
B_BOX_BYTES = TILE_K * 64 * 2  # one 64 x 64 box of N-major B (the swizzle atom repeats every 64 columns)
MMA_SYNC_THREADS = 256
TARGET_FLOP = 4e12  # per launch: about 4 ms at the clock peak, long against launch overhead
GEMM_SIZE = 8192


def wgmma_k(dtype: str) -> int:
    """K of one wgmma: 16 bf16 or 32 fp8 elements, 32 bytes of a 128-byte swizzle row either way."""
    return 32 if dtype == "fp8" else 16


def wgmma_flops_per_instruction(n: int, dtype: str = "bf16") -> int:
    """One m64nNkK wgmma of one warpgroup: 64 x N x K multiply-adds."""
    return 2 * 64 * n * wgmma_k(dtype)


def wgmma_flops(n: int, blocks: int, warpgroups: int, iters: int, dtype: str = "bf16") -> int:
    """Every warpgroup of every block issues KSTEPS wgmmas per iteration."""
    return blocks * warpgroups * iters * KSTEPS * wgmma_flops_per_instruction(n, dtype)


def mma_sync_flops(blocks: int, threads: int, iters: int, chains: int) -> int:
    """Every warp issues `chains` m16n8k16 mma.syncs per iteration: 16 x 8 x 16 multiply-adds each."""
    return blocks * (threads // 32) * iters * chains * 2 * 16 * 8 * 16


def gemm_flops(m: int, n: int, k: int) -> int:
    return 2 * m * n * k


def _wgmma_asm(n: int, dtype: str) -> str:
    regs = n // 2  # fp32 accumulators per thread of an m64nN tile
    outs = ", ".join(f"%{i}" for i in range(regs))
    binds = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    # bf16: B N-major (the transpose-B bit); fp8 has no transpose bits, both operands K-major.
    shape, tail = (f"m64n{n}k32.f32.e4m3.e4m3", "p, 1, 1") if dtype == "fp8" else (f"m64n{n}k16.f32.bf16.bf16",
                                                                                 "p, 1, 1, 0, 1")
    return (f'asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"\n'
            f'    "wgmma.mma_async.sync.aligned.{shape} {{{outs}}}, %{regs}, %{regs + 1}, {tail};\\n}}\\n"\n'
            f'    : {binds}\n    : "l"(da), "l"(db));')


def wgmma_source(n: int, dtype: str = "bf16") -> str:
    """The wgmma probe for tile width N (128 or 256) and operand type (bf16 or fp8); WGS
    (warpgroups per CTA), MINB (CTAs per SM, for __launch_bounds__) and DEPTH (commit groups
    left in flight) are -D knobs. The tiles take the same bytes either way: a 128-byte
    swizzle row holds 64 bf16 or 128 fp8 of K."""
    fp8 = dtype == "fp8"
    return r"""
#ifndef WGS
#define WGS 2
#endif
#ifndef MINB
#define MINB 1
#endif
#ifndef DEPTH
#define DEPTH 1
#endif
#define N_TILE """ + str(n) + r"""
#define A_TILE """ + str(A_TILE_BYTES) + r"""
#define B_BOX """ + str(B_BOX_BYTES) + r"""
#define B_TILE (B_BOX * (N_TILE / 64))
#define SMEM_USED (WGS * A_TILE + B_TILE)
#define FP8 """ + str(int(fp8)) + r"""

__device__ __forceinline__ unsigned smem_addr(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// As examples/bf16_gemm/wgmma_tma.cu: 128-byte swizzle, offsets in 16-byte units.
__device__ __forceinline__ unsigned long long descriptor(unsigned addr, unsigned leading, unsigned stride)
{
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(leading >> 4) << 16) |
           ((unsigned long long)(stride >> 4) << 32) | (1ull << 62);
}

// Dynamic shared memory: SMEM_USED + 1024 bytes (the slack that aligns the tiles to 1 KiB).
extern "C" __global__ void __launch_bounds__(WGS * 128, MINB) ws_wgmma(float* out, int iters)
{
    extern __shared__ unsigned char smem_raw[];
    const unsigned raw = smem_addr(smem_raw);
    const unsigned base = (raw + 1023) & ~1023u;  // 128-byte swizzled tiles start on 1 KiB
#if FP8
    unsigned char* tiles = smem_raw + (base - raw);
    // Random e4m3 of magnitude 1/2 .. 15/16: exponent 6, random sign and mantissa.
    for (int i = threadIdx.x; i < SMEM_USED; i += blockDim.x) {
        const unsigned h = (unsigned)(i + 1) * 2654435761u;
        tiles[i] = (unsigned char)(0x30u | ((h >> 9) & 0x87u));
    }
#else
    unsigned short* tiles = reinterpret_cast<unsigned short*>(smem_raw + (base - raw));
    // Small random bf16: exponent 123 (magnitude 1/16 .. 1/8), random sign and mantissa.
    for (int i = threadIdx.x; i < SMEM_USED / 2; i += blockDim.x) {
        const unsigned h = (unsigned)(i + 1) * 2654435761u;
        tiles[i] = (unsigned short)(0x3D80u | ((h >> 9) & 0x807Fu));
    }
#endif
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic writes -> wgmma's reads
    __syncthreads();

    const int wg = threadIdx.x / 128;
    const unsigned a_tile = base + wg * A_TILE, b_tile = base + WGS * A_TILE;
    unsigned long long das[4], dbs[4];
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        das[kk] = descriptor(a_tile + kk * 32, 16, 1024);     // K-major A: one K step = 32 bytes on
#if FP8
        dbs[kk] = descriptor(b_tile + kk * 32, 16, 1024);     // K-major B (N rows of 128 bytes), as A
#else
        dbs[kk] = descriptor(b_tile + kk * 2048, B_BOX, 1024);  // N-major B: 16 rows = two 8-row groups down
#endif
    }
    float d[N_TILE / 2];
#pragma unroll
    for (int i = 0; i < N_TILE / 2; ++i) d[i] = 0.0f;

    for (int it = 0; it < iters; ++it) {
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            const unsigned long long da = das[kk], db = dbs[kk];
            """ + _wgmma_asm(n, dtype) + r"""
        }
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(DEPTH) : "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < N_TILE / 2; ++i) s += d[i];
    if (s == 1234.5f) out[0] = s;  // keeps the accumulators alive; (almost) never true
}
"""


MMA_SYNC_SOURCE = r"""
#ifndef CHAINS
#define CHAINS 8
#endif
extern "C" __global__ void __launch_bounds__(256) ws_mma_sync(float* out, int iters)
{
    unsigned a[4], b[2];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = 0x3D803D80u | (((threadIdx.x + 1) * 2654435761u * (i + 3)) & 0x807F807Fu);
#pragma unroll
    for (int i = 0; i < 2; ++i) b[i] = 0x3D803D80u | (((threadIdx.x + 7) * 2246822519u * (i + 5)) & 0x807F807Fu);
    float c[CHAINS][4];
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int j = 0; j < CHAINS; ++j)
            asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                         "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                         : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
    if (s == 1234.5f) out[0] = s;  // keeps the chains alive; (almost) never true
}
"""


@dataclass(frozen=True)
class Probe:
    kind: str  # wgmma | mma.sync
    n: int  # wgmma tile width (0 for mma.sync)
    warpgroups: int  # per CTA (wgmma)
    per_sm: int  # CTAs per SM (the grid is SMs x per_sm)
    chains: int = 0  # mma.sync accumulator chains per warp
    depth: int = 1  # wgmma commit groups left in flight
    dtype: str = "bf16"  # wgmma operands: bf16 or fp8 (e4m3)

    @property
    def entry(self) -> str:
        return "ws_wgmma" if self.kind == "wgmma" else "ws_mma_sync"

    @property
    def source(self) -> str:
        return wgmma_source(self.n, self.dtype) if self.kind == "wgmma" else MMA_SYNC_SOURCE

    @property
    def defines(self) -> dict[str, int]:
        if self.kind == "wgmma":
            return {"WGS": self.warpgroups, "MINB": self.per_sm, "DEPTH": self.depth}
        return {"CHAINS": self.chains}

    @property
    def threads(self) -> int:
        return self.warpgroups * 128 if self.kind == "wgmma" else MMA_SYNC_THREADS

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory of one CTA (1 KiB of it alignment slack)."""
        return self.warpgroups * A_TILE_BYTES + B_BOX_BYTES * (self.n // 64) + 1024 if self.kind == "wgmma" else 0

    def flops(self, blocks: int, iters: int) -> int:
        if self.kind == "wgmma":
            return wgmma_flops(self.n, blocks, self.warpgroups, iters, self.dtype)
        return mma_sync_flops(blocks, self.threads, iters, self.chains)

    def iters_for(self, blocks: int) -> int:
        """Loop trips that make one launch about TARGET_FLOP."""
        return max(1, round(TARGET_FLOP / self.flops(blocks, 1)))

    def label(self) -> str:
        if self.kind == "wgmma":
            shape = f"m64n{self.n}k{wgmma_k(self.dtype)}{' e4m3' if self.dtype == 'fp8' else ''}"
            return f"{shape}, {self.warpgroups} WG/CTA, {self.per_sm} CTA/SM, wait_group {self.depth}"
        return f"m16n8k16, {self.chains} chains/warp, {self.threads} threads, {self.per_sm} CTA/SM"


# Register budgets: n256 holds 128 fp32 accumulators a thread, so 384 threads an SM at
# most (168 registers); n128 holds 64, so 512 threads (128 registers).
PROBES = [
    Probe("wgmma", 256, 1, 1), Probe("wgmma", 256, 2, 1), Probe("wgmma", 256, 3, 1), Probe("wgmma", 256, 1, 2),
    Probe("wgmma", 256, 2, 1, depth=0),
    Probe("wgmma", 128, 2, 1), Probe("wgmma", 128, 4, 1), Probe("wgmma", 128, 2, 2),
    Probe("mma.sync", 0, 0, 2, chains=8), Probe("mma.sync", 0, 0, 4, chains=8), Probe("mma.sync", 0, 0, 2, chains=16),
    Probe("wgmma", 256, 1, 1, dtype="fp8"), Probe("wgmma", 256, 2, 1, dtype="fp8"), Probe("wgmma", 256, 3, 1, dtype="fp8"),
    Probe("wgmma", 128, 2, 1, dtype="fp8"), Probe("wgmma", 128, 2, 2, dtype="fp8"),
]


def compile_probe(probe: Probe, arch: str, use_cache: bool = True) -> CompiledKernel:
    """The probe's CUBIN; wgmma makes compile_kernel target sm_90a (agent/runtime/arch_target.py)."""
    return compile_kernel(probe.source, probe.entry, arch, define_options(probe.defines), use_cache=use_cache)


def _median_ms(device, fn, grid: int, block: int, shared: int, args) -> float:
    from warpsmith.agent.runtime import native
    settings = native.TimingSettings(warmup=10, repetitions=20, flush_l2=False, max_total_ms=2000.0)
    return statistics.median(device.time(fn, (grid, 1, 1), (block, 1, 1), shared, args, settings).samples_ms)


def _clock_text(before, after) -> str:
    return f"{before[0]}-{after[0]}" if before and after else "-"


def _row(name: str, config: str, ms: float, tflops: float, peak, mhz: str) -> str:
    pct = f"{100 * tflops / peak:.1f}%" if peak else "-"
    return f"{name:<9} {config:<60} {ms:>9.4f} {tflops:>9.1f} {pct:>7} {mhz:>11}"


def _cublas_line(device, native, peak, clocks) -> tuple[str, float]:
    import numpy as np
    try:
        blas = native.open_cublas(device)
    except (native.CudaError, RuntimeError) as e:
        return f"cublas    skipped: {getattr(e, 'text', e)}", 0.0
    size = GEMM_SIZE
    rng = np.random.default_rng(17)
    buffers = []
    for _ in range(2):  # small random bf16, as in the wgmma probe
        bits = (0x3D80 | (rng.integers(0, 1 << 16, size * size, dtype=np.uint32) & 0x807F)).astype(np.uint16)
        buf = device.alloc(bits.nbytes)
        buf.upload(bits)
        buffers.append(buf)
    c = device.alloc(size * size * 2)
    settings = native.TimingSettings(warmup=10, repetitions=20, flush_l2=False, max_total_ms=2000.0)
    before = clocks.read()
    samples = blas.time_gemm_bf16(device, buffers[0].ptr, buffers[1].ptr, c.ptr, size, size, size, settings).samples_ms
    after = clocks.read()
    ms = statistics.median(samples)
    tflops = gemm_flops(size, size, size) / (ms * 1e-3) / 1e12
    return _row("cublas", f"cublasGemmEx bf16 -> fp32 compute, {size}^3", ms, tflops, peak,
                _clock_text(before, after)), tflops


def main() -> int:
    from warpsmith.agent.runtime import native
    from warpsmith.agent.spec.speed_of_light import FP8_OVER_16_BIT, tensor_peak_tflops
    from warpsmith.agent.worker.clocks import Clocks
    try:
        device = native.open_device(0)
        facts = native.device_facts(device)
    except (native.CudaError, RuntimeError, OSError) as e:
        print(f"tensor_ceiling: no usable GPU: {getattr(e, 'name', '') or type(e).__name__}: "
              f"{getattr(e, 'text', '') or e}".replace("\n", " "))
        return 2
    peak = tensor_peak_tflops(facts)

    def peak_of(dtype: str) -> float | None:
        """The clock peak for the probe's operands: fp8 runs at twice the 16-bit rate."""
        return peak * FP8_OVER_16_BIT if peak and dtype == "fp8" else peak
    sms = facts.sm_count
    print(f"GPU: {facts.name} ({facts.arch}), {sms} SMs, SM clock {facts.sm_clock_khz / 1000:.0f} MHz (top, device "
          f"facts); clock peak {peak if peak is not None else 'unknown'} TFLOP/s dense bf16, twice that for fp8, "
          f"fp32 accumulate "
          f"(warpsmith.agent.spec.speed_of_light.tensor_peak_tflops)", flush=True)
    print(f"{'probe':<9} {'config':<60} {'median ms':>9} {'TFLOP/s':>9} {'% peak':>7} {'SM MHz':>11}")
    clocks = Clocks(facts.uuid)
    out = device.alloc(4)
    best: dict[str, float] = {}
    for probe in PROBES:
        if probe.kind == "wgmma" and facts.cc_major < 9:
            continue
        compiled = compile_probe(probe, facts.arch)
        if not compiled.ok:
            print(f"{probe.kind} {probe.label()}: did not compile ({compiled.error}):\n{compiled.log}")
            return 1
        fn = device.load_module(compiled.cubin).function(compiled.symbol)
        blocks = sms * probe.per_sm
        iters = probe.iters_for(blocks)
        before = clocks.read()
        ms = _median_ms(device, fn, blocks, probe.threads, probe.shared_bytes, [("ptr", out.ptr), ("i32", iters)])
        after = clocks.read()
        tflops = probe.flops(blocks, iters) / (ms * 1e-3) / 1e12
        key = f"{probe.kind} {probe.dtype}" if probe.kind == "wgmma" else "mma.sync bf16"
        best[key] = max(best.get(key, 0.0), tflops)
        print(_row(probe.kind, probe.label() + f" ({compiled.resources.registers} regs)", ms, tflops,
                   peak_of(probe.dtype),
                   _clock_text(before, after)), flush=True)
    line, cublas = _cublas_line(device, native, peak, clocks)
    print(line, flush=True)

    def pct(rate: float, dtype: str = "bf16") -> str:
        top = peak_of(dtype)
        return f"{100 * rate / top:.0f}% of the clock peak {top:g}" if top else "clock peak unknown"
    parts = [f"{key} {best[key]:.1f} TFLOP/s ({pct(best[key], key.split()[-1])})"
             for key in ("wgmma bf16", "mma.sync bf16", "wgmma fp8") if key in best]
    if cublas:
        parts.append(f"cuBLAS {GEMM_SIZE}^3 {cublas:.1f} TFLOP/s ({pct(cublas)})")
    print("SUMMARY tensor ceiling: " + "; ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
