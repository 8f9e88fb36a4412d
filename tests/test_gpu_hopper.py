"""On a Hopper GPU (an H200): the runner's Hopper features. A TMA descriptor the
runner encodes copies a tile (and zero-fills past the array's edge); a cluster launch
runs with its rank visible to each block; dynamic shared memory above 48 KiB works;
the bf16 cuBLAS baseline matches exact arithmetic and is timed; the bf16_gemm
example's kernels (naive, mma.sync, wgmma fed by TMA) match a float64 product. The worker cannot judge bf16 workloads
yet (Workload.check_evaluable), so these drive the runner directly."""

from __future__ import annotations

import math

import numpy as np
import pytest
from workload_factory import ROOT

from warpsmith.agent.runtime import native
from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.spec.candidate import Candidate
from warpsmith.agent.spec.half_float import round_to, to_float64, to_storage
from warpsmith.agent.spec.workload import load_workload

pytestmark = pytest.mark.gpu
NAN_WORD = 0x7FC00000
HOPPER_ONLY = "needs compute capability 9.0 (Hopper)"

TMA_COPY = r'''
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };
#define BR 32
#define BC 16

// One box of the array through TMA into shared memory, then out to `out` at the
// same coordinates (out is the array padded to whole boxes).
extern "C" __global__ void tma_copy(const __grid_constant__ CUtensorMap map, float* out, int out_cols)
{
    __shared__ alignas(128) float tile[BR * BC];
    __shared__ alignas(8) unsigned long long bar;
    const unsigned bar_addr = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
    const unsigned tile_addr = static_cast<unsigned>(__cvta_generic_to_shared(tile));
    const int x = blockIdx.x * BC, y = blockIdx.y * BR;  // TMA coordinates: innermost first
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar_addr));
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar_addr), "r"(BR * BC * 4)
                     : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
                     " [%0], [%1, {%2, %3}], [%4];\n"
                     ::"r"(tile_addr), "l"(reinterpret_cast<unsigned long long>(&map)), "r"(x), "r"(y),
                     "r"(bar_addr) : "memory");
    }
    unsigned done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar_addr) : "memory");
    for (int i = threadIdx.x; i < BR * BC; i += blockDim.x)
        out[(long long)(y + i / BC) * out_cols + x + i % BC] = tile[i];
}
'''

CLUSTER_RANK = r'''
extern "C" __global__ void cluster_rank(int* out)
{
    unsigned rank, size;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(size));
    if (threadIdx.x == 0) out[blockIdx.x] = rank * 100 + size;
}
'''

BIG_SMEM = r'''
// Every word of a large dynamic shared buffer written, then read back reversed.
extern "C" __global__ void big_smem(int* out, int words)
{
    extern __shared__ int buf[];
    for (int i = threadIdx.x; i < words; i += blockDim.x) buf[i] = i * 3 + 1;
    __syncthreads();
    for (int i = threadIdx.x; i < words; i += blockDim.x) out[i] = buf[words - 1 - i];
}
'''


@pytest.fixture(scope="module")
def device():
    return native.open_device(0)


def _function(device, source: str, entry: str):
    compiled = compile_kernel(source, entry, device.facts.arch, use_cache=False)
    assert compiled.ok, compiled.log
    return device.load_module(compiled.cubin).function(compiled.symbol), compiled


def _upload(device, host: np.ndarray):
    buf = device.alloc(host.nbytes)
    buf.upload(np.ascontiguousarray(host))
    return buf


def _hopper(device):
    if device.facts.cc_major < 9:
        pytest.skip(HOPPER_ONLY)


def test_a_tma_descriptor_copies_a_tile_and_zero_fills_past_the_edge(device):
    """cuTensorMapEncodeTiled through the runner: every box lands where it belongs, out-of-bounds reads as 0."""
    _hopper(device)
    fn, _ = _function(device, TMA_COPY, "tma_copy")
    rows, cols, br, bc = 100, 40, 32, 16
    src = (np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) + 1.0)
    a = _upload(device, src)
    out_rows, out_cols = math.ceil(rows / br) * br, math.ceil(cols / bc) * bc
    out = device.alloc(out_rows * out_cols * 4)
    out.fill_u32(NAN_WORD, 0, out.nbytes)
    tma = ("tma", (a.ptr, "float32", rows, cols, br, bc, 0))
    device.launch(fn, (out_cols // bc, out_rows // br, 1), (128, 1, 1), 0, [tma, ("ptr", out.ptr), ("i32", out_cols)])
    device.synchronize()
    got = np.empty((out_rows, out_cols), np.float32)
    out.download(got)
    np.testing.assert_array_equal(got[:rows, :cols], src)
    assert not got[rows:, :].any() and not got[:, cols:].any()


def test_a_descriptor_the_driver_refuses_is_a_named_cuda_error(device):
    """A box the driver rejects (inner span of 8 bytes) raises CudaError with the driver's error name."""
    _hopper(device)
    fn, _ = _function(device, TMA_COPY, "tma_copy")
    a = device.alloc(100 * 40 * 4)
    with pytest.raises(native.CudaError) as e:
        device.launch(fn, (1, 1, 1), (32, 1, 1), 0, [("tma", (a.ptr, "float32", 100, 40, 32, 2, 0)), ("ptr", a.ptr),
                                                     ("i32", 40)])
    assert e.value.name == "CUDA_ERROR_INVALID_VALUE" and "cuTensorMapEncodeTiled" in e.value.call


def test_a_cluster_launch_shows_each_block_its_rank(device):
    """grid 8 in clusters of 2 (cuLaunchKernelEx): block b reads rank b % 2 of a 2-block cluster; also as a program step."""
    _hopper(device)
    fn, _ = _function(device, CLUSTER_RANK, "cluster_rank")
    out = device.alloc(8 * 4)
    out.fill_u32(0xFFFFFFFF, 0, 32)
    device.launch(fn, (8, 1, 1), (32, 1, 1), 0, [("ptr", out.ptr)], (2, 1, 1))
    got = np.empty(8, np.int32)
    out.download(got)
    assert got.tolist() == [(b % 2) * 100 + 2 for b in range(8)]

    program = native.Program()
    program.add_launch(fn, (8, 1, 1), (32, 1, 1), 0, [("ptr", out.ptr)], (4, 1, 1))
    device.run(program)
    out.download(got)
    assert got.tolist() == [(b % 4) * 100 + 4 for b in range(8)]
    # Without a cluster, every block is its own cluster of one.
    device.launch(fn, (8, 1, 1), (32, 1, 1), 0, [("ptr", out.ptr)])
    out.download(got)
    assert got.tolist() == [1] * 8


def test_a_grid_that_is_not_a_multiple_of_its_cluster_is_a_named_cuda_error(device):
    """The driver's refusal comes back as CudaError with its CUDA error name, not a crash."""
    _hopper(device)
    fn, _ = _function(device, CLUSTER_RANK, "cluster_rank")
    out = device.alloc(7 * 4)
    with pytest.raises(native.CudaError) as e:
        device.launch(fn, (7, 1, 1), (32, 1, 1), 0, [("ptr", out.ptr)], (2, 1, 1))
        device.synchronize()
    assert e.value.name.startswith("CUDA_ERROR_")


def test_dynamic_shared_memory_above_48_kib(device):
    """200 KiB of dynamic shared memory (the runner opts the function in) is written and read back."""
    fn, _ = _function(device, BIG_SMEM, "big_smem")
    nbytes = min(200 << 10, device.facts.smem_per_block_optin)
    assert nbytes > 48 << 10
    words = nbytes // 4
    out = device.alloc(nbytes)
    for run in ("launch", "program"):
        out.fill_u32(0, 0, nbytes)
        args = [("ptr", out.ptr), ("i32", words)]
        if run == "launch":
            device.launch(fn, (1, 1, 1), (512, 1, 1), nbytes, args)
        else:
            program = native.Program()
            program.add_launch(fn, (1, 1, 1), (512, 1, 1), nbytes, args)
            device.run(program)
        got = np.empty(words, np.int32)
        out.download(got)
        np.testing.assert_array_equal(got, (np.arange(words)[::-1] * 3 + 1).astype(np.int32))


def _bf16_inputs(m: int, n: int, k: int, seed: int = 7, integers: bool = False):
    rng = np.random.default_rng(seed)
    if integers:  # small integers: every product and partial sum exact in fp32
        a, b = rng.integers(-4, 5, (m, k)).astype(np.float64), rng.integers(-4, 5, (k, n)).astype(np.float64)
    else:
        a, b = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))
    return to_storage(a, "bfloat16"), to_storage(b, "bfloat16")


def test_cublas_bf16_gemm_is_exact_on_integers_and_timed(device):
    """cublasGemmEx (bf16, fp32 compute) equals the exact product rounded once to bf16, and its loop times it."""
    m, n, k = 256, 264, 136
    a_bits, b_bits = _bf16_inputs(m, n, k, integers=True)
    a, b = _upload(device, a_bits), _upload(device, b_bits)
    c = device.alloc(m * n * 2)
    c.fill_u32(NAN_WORD, 0, c.nbytes)
    blas = native.open_cublas(device)
    blas.gemm_bf16(device, a.ptr, b.ptr, c.ptr, m, n, k)
    got = np.empty((m, n), np.uint16)
    c.download(got)
    exact = to_float64(a_bits, "bfloat16") @ to_float64(b_bits, "bfloat16")
    np.testing.assert_array_equal(to_float64(got, "bfloat16"), round_to(exact, "bfloat16"))
    timing = blas.time_gemm_bf16(device, a.ptr, b.ptr, c.ptr, m, n, k, native.TimingSettings(warmup=3, repetitions=20))
    assert len(timing.samples_ms) >= 10 and min(timing.samples_ms) > 0


@pytest.mark.parametrize("kernel,defines", [
    ("naive", {}), ("mma_sync", {}), ("mma_sync", {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 2}),
    ("mma_sync", {"BM": 128, "BN": 256, "BK": 64, "WM": 64, "WN": 64, "STAGES": 3}),
    # BN = 64 is one swizzle atom of B: it isolates the A side and the pipeline from B's atom stride.
    ("wgmma_tma", {"BM": 64, "BN": 64, "STAGES": 2}), ("wgmma_tma", {}),
    ("wgmma_tma", {"BM": 128, "BN": 256, "STAGES": 3}),
    # Warp-specialised: SMS=2 (4 with clusters) makes each CTA walk several tiles, so the
    # ring's phases carry across tiles; CLUSTER=2 multicasts B, an odd tile row count
    # leaves one CTA of a cluster on zero-filled rows.
    ("wgmma_ws", {}), ("wgmma_ws", {"SMS": 2}), ("wgmma_ws", {"CLUSTER": 2}), ("wgmma_ws", {"CLUSTER": 2, "SMS": 4}),
    ("wgmma_ws", {"BM": 256, "BN": 128, "STAGES": 3, "SMS": 2}), ("wgmma_ws", {"BN": 128, "PERSISTENT": 0}),
    # Its second version: the TMA-store epilogue's staging ring carries across tiles (SMS=2,
    # CBUF=1), split-K slices (some empty at K=8) meet on the tile counters.
    ("wgmma_ws2", {}), ("wgmma_ws2", {"SMS": 2, "CBUF": 1}), ("wgmma_ws2", {"SPLITK": 4}),
    ("wgmma_ws2", {"SPLITK": 3, "BN": 128, "SMS": 3}),
    ("wgmma_ws2", {"BM": 256, "BN": 128, "CBUF": 4, "STAGES": 3, "SMS": 2}), ("wgmma_ws2", {"PERSISTENT": 0}),
    # One consumer warpgroup (BM = 64): several tiles a CTA, and split-K slices meeting on the counters.
    ("wgmma_ws2", {"BM": 64, "SMS": 2}), ("wgmma_ws2", {"BM": 64, "SPLITK": 4, "STAGES": 5, "CBUF": 1, "SMS": 3}),
])
def test_bf16_gemm_example_kernels_match_float64(device, kernel, defines):
    """The example's kernels (wgmma + TMA through the program path), on ragged shapes, stay within
    fp32-accumulation error of the float64 product."""
    w = load_workload(ROOT / "examples" / "bf16_gemm")
    cand = Candidate.from_spec(w.kernels[kernel], defines)
    if cand.program is not None:
        _hopper(device)
    compiled = compile_kernel(cand.source, cand.entry, device.facts.arch, cand.compile_options(), use_cache=False)
    assert compiled.ok, compiled.log
    module = device.load_module(compiled.cubin)
    for m, n, k in ((97, 88, 72), (1, 8, 8), (513, 264, 1000), (256, 512, 4096)):
        sizes = {"M": m, "N": n, "K": k}
        a_bits, b_bits = _bf16_inputs(m, n, k, seed=m + n + k)
        buffers = {"A": _upload(device, a_bits), "B": _upload(device, b_bits), "C": device.alloc(m * n * 2)}
        buffers["C"].fill_u32(NAN_WORD, 0, buffers["C"].nbytes)
        env = {**sizes, **cand.knob_values()}
        program = native.Program()
        if cand.program is None:
            launch = cand.launch.resolve(env)
            steps = [(compiled.symbol, launch, [("ptr", buffers[x].ptr) for x in "ABC"]
                      + [("i32", v) for v in (m, n, k)])]
        else:
            layouts = {"A": ("bfloat16", (m, k)), "B": ("bfloat16", (k, n)), "C": ("bfloat16", (m, n))}
            job = cand.program.resolve(env, {x: ("i32", v) for x, v in sizes.items()}, layouts)
            for ws in job.workspace:  # zeroed, or poisoned with NaN words
                buffers[ws.name] = device.alloc(ws.nbytes)
                buffers[ws.name].fill_u32(0 if ws.init == "zero" else NAN_WORD, 0, ws.nbytes)
            steps = [(s.entry, s.launch, [a.native(lambda name: buffers[name].ptr) for a in s.args]) for s in job.steps]
        for entry, launch, args in steps:
            if launch.shared > device.facts.smem_per_block_optin:
                pytest.skip("tile does not fit this GPU's shared memory")
            program.add_launch(module.function(entry), launch.grid, launch.block, launch.shared, args, launch.cluster)
        device.run(program)
        got = np.empty((m, n), np.uint16)
        buffers["C"].download(got)
        aa, bb = to_float64(a_bits, "bfloat16"), to_float64(b_bits, "bfloat16")
        exact = aa @ bb
        # One bf16 rounding of the result plus fp32 accumulation over K terms.
        bound = 2.0 ** -8 * np.abs(exact) + k * 2.0 ** -23 * (np.abs(aa) @ np.abs(bb)) + 1e-30
        err = np.abs(to_float64(got, "bfloat16") - exact)
        assert np.isfinite(err).all() and (err <= bound).all(), (kernel, defines, (m, n, k), float((err / bound).max()))
