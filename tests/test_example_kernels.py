"""The example kernels (online softmax, warp-tiled and split-K SGEMM, fused gemm+bias+ReLU,
the bf16 and fp8 tensor-core GEMMs, 3xTF32, FA3-class attention) compile with the real NVRTC for sm_90 at their defaults and at the
knob points the tuner is steered to, with no spills; their programs resolve on
every case. Correctness needs a GPU (tests/test_gpu_*.py, `warpsmith eval`)."""

from __future__ import annotations

import pytest
from workload_factory import ROOT

from warpsmith.agent.runtime.compile_policy import define_options
from warpsmith.agent.runtime.compiler import compile_kernel
from warpsmith.agent.spec.workload import load_workload

EXAMPLES = ROOT / "examples"
# Warp tiles named in warptile.cu's header: the default, the 16x8-per-thread tile
# that reached 0.92x cuBLAS at 4096^3, and the small tile that skinny M prefers.
TILES = [{}, {"BM": 128, "BN": 128, "BK": 8, "WM": 128, "WN": 32, "GROUP": 16},
         {"BM": 64, "BN": 128, "BK": 16, "WM": 64, "WN": 16}, {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32}]
POINTS = [
    ("softmax", "online", {}), ("softmax", "online", {"BLOCK": 256, "UNROLL": 1, "ONLINE": 1}),
    ("softmax", "online", {"BLOCK": 512, "UNROLL": 2, "CACHE": 0}),
    *[("gemm_bias_relu", "warptile", t) for t in TILES],
    *[("sgemm", "splitk_warptile", {**t, "SPLITK": 16}) for t in TILES],
    # very few rows on the CUDA cores: the defaults, and 4 rows with 8 rows of B in flight
    ("sgemm", "colstream", {}), ("gemm_bias_relu", "colstream", {}), ("sgemm", "colstream", {"MT": 4, "U": 8}),
    ("gemm_bias_relu", "splitk_warptile", {}), ("gemm_bias_relu", "splitk_warptile", {**TILES[2], "SPLITK": 4}),
    # bf16 tensor-core GEMM: the default 128x128 tile, a small one, a wide one.
    ("bf16_gemm", "naive", {}), ("bf16_gemm", "mma_sync", {}),
    ("bf16_gemm", "mma_sync", {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 2}),
    ("bf16_gemm", "mma_sync", {"BM": 128, "BN": 256, "BK": 32, "WM": 64, "WN": 64, "STAGES": 3}),
    ("bf16_gemm", "wgmma_tma", {}), ("bf16_gemm", "wgmma_tma", {"BM": 64, "BN": 256, "STAGES": 3}),
    # decode with the operands swapped: 16 rows, 32 rows over two consumers, 64 rows split four ways
    ("bf16_gemm", "wgmma_swap", {}), ("bf16_gemm", "wgmma_swap", {"MN": 32, "NC": 2}),
    ("bf16_gemm", "wgmma_swap", {"MN": 64, "SPLITK": 4, "STAGES": 6}),
    # Warp-specialised: 128x256 and 256x128 (128 accumulators a consumer thread), multicast clusters, 5 stages.
    ("bf16_gemm", "wgmma_ws", {}), ("bf16_gemm", "wgmma_ws", {"CLUSTER": 2}),
    ("bf16_gemm", "wgmma_ws", {"BM": 256, "BN": 128, "CLUSTER": 2}),
    ("bf16_gemm", "wgmma_ws", {"BM": 128, "BN": 128, "STAGES": 5, "PERSISTENT": 0}),
    # wgmma_ws2: a TMA-store epilogue (default 2 staging boxes, 4 stages), split-K for few tiles.
    ("bf16_gemm", "wgmma_ws2", {}), ("bf16_gemm", "wgmma_ws2", {"SPLITK": 4}),
    ("bf16_gemm", "wgmma_ws2", {"BN": 128, "SPLITK": 2}),
    ("bf16_gemm", "wgmma_ws2", {"BM": 256, "BN": 128, "CBUF": 4, "STAGES": 3, "SPLITK": 3}),
    ("bf16_gemm", "wgmma_ws2", {"CBUF": 1, "PERSISTENT": 0}), ("bf16_gemm", "wgmma_ws2", {"BN": 128, "STAGES": 5}),
    # one consumer warpgroup (BM = 64) for few rows, with split-K and a deeper ring
    ("bf16_gemm", "wgmma_ws2", {"BM": 64}), ("bf16_gemm", "wgmma_ws2", {"BM": 64, "SPLITK": 8, "STAGES": 5, "CBUF": 1}),
    # fp32 on tensor cores, 3xTF32: the defaults, a small tile, FLUSH=0's 64x64 warps.
    ("sgemm", "tf32x3", {}), ("sgemm", "tf32x3", {"BM": 64, "BN": 64, "BK": 16, "WM": 32, "WN": 32, "STAGES": 2}),
    ("sgemm", "tf32x3", {"BM": 128, "BN": 256, "WM": 64, "WN": 64, "FLUSH": 0}),
    ("sgemm", "tf32x3_splitk", {}), ("sgemm", "tf32x3_splitk", {"BM": 64, "BN": 64, "WM": 32, "WN": 32, "SPLITK": 16}),
    ("gemm_bias_relu", "tf32x3", {}),
    ("gemm_bias_relu", "tf32x3_splitk", {}), ("gemm_bias_relu", "tf32x3_splitk", {"SPLITK": 8, "STAGES": 3}),
    ("gemm_bias_relu", "tf32x3_splitk", {"BM": 64, "BN": 128, "WM": 32, "WN": 32, "SPLITK": 3}),
    # fp8 GEMM: mma.sync e4m3 at its default 128x128x64 tile, a small one, a deep K step;
    ("fp8_gemm", "naive", {}), ("fp8_gemm", "mma_sync", {}),
    ("fp8_gemm", "mma_sync", {"BM": 64, "BN": 64, "BK": 32, "WM": 32, "WN": 32, "STAGES": 2}),
    ("fp8_gemm", "mma_sync", {"BK": 128, "STAGES": 4}),
    # wgmma_ws: promoted every k-block (default), every 4, never (with the 128x256 tile only that allows),
    # 256-row tiles, multicast clusters, one CTA per tile.
    ("fp8_gemm", "wgmma_ws", {}), ("fp8_gemm", "wgmma_ws", {"PROMOTE": 4, "CLUSTER": 2}),
    ("fp8_gemm", "wgmma_ws", {"PROMOTE": 0, "BN": 256, "STAGES": 4}),
    ("fp8_gemm", "wgmma_ws", {"BM": 256, "BN": 64, "STAGES": 5, "CLUSTER": 2}),
    ("fp8_gemm", "wgmma_ws", {"BN": 64, "STAGES": 7, "PERSISTENT": 0}),
    # FA3-class attention: the defaults (intra-warpgroup overlap and ping-pong), each schedule off, 64-key blocks,
    # a third stage.
    ("attention_bf16", "fa3", {}), ("attention_bf16", "fa3", {"OVERLAP": 0}), ("attention_bf16", "fa3", {"PINGPONG": 0}),
    ("attention_bf16", "fa3", {"OVERLAP": 0, "PINGPONG": 0}), ("attention_bf16", "fa3", {"BN": 64, "STAGES": 3}),
    ("attention_bf16", "fa3", {"STAGES": 3}),
]


@pytest.mark.parametrize("workload,kernel,defines", POINTS, ids=lambda v: str(v) if not isinstance(v, dict) else
                         ",".join(f"{k}={n}" for k, n in v.items()) or "defaults")
def test_kernel_compiles_without_spills(workload, kernel, defines):
    """Every entry of the kernel compiles to an sm_90 CUBIN at these knobs; ptxas reports no spill."""
    spec = load_workload(EXAMPLES / workload).kernels[kernel]
    entries = spec.program.entries if spec.program else (spec.entry,)
    for entry in entries:
        r = compile_kernel(spec.source(), entry, "sm_90", define_options(defines), use_cache=False)
        assert r.ok, r.log
        assert r.resources.spill_stores == 0 and r.resources.spill_loads == 0, (entry, r.resources.text())


LISTED = [(d.name, name, config) for d in sorted(EXAMPLES.iterdir()) if (d / "workload.toml").exists()
          for name, spec in load_workload(d).kernels.items() for config in spec.configs]


@pytest.mark.parametrize("workload,kernel,config", LISTED, ids=lambda v: str(v) if not isinstance(v, dict) else
                         ",".join(f"{k}={n}" for k, n in v.items()))
def test_every_listed_config_compiles_and_the_tuner_proposes_it(workload, kernel, config):
    """A shipped kernel's `configs` (measured starting points) compile for sm_90 without spills at the
    setting the tuner makes of them (the knobs left out at their defaults) and pass its launch check on every
    case: the tuner proposes the first one right after the defaults (one written for some sizes, first for a
    case of them)."""
    from warpsmith.agent.evaluate.records import Attempt
    from warpsmith.agent.proposers.base import ProposalContext
    from warpsmith.agent.proposers.tune import TuneProposer
    from warpsmith.agent.runtime.device_facts import DeviceFacts
    w = load_workload(EXAMPLES / workload)
    spec = w.kernels[kernel]
    point = {**{n: k.default for n, k in spec.knobs().items()}, **config}
    for entry in (spec.program.entries if spec.program else (spec.entry,)):
        r = compile_kernel(spec.source(), entry, "sm_90", define_options(point), use_cache=False)
        assert r.ok, r.log
        assert r.resources.spill_stores == 0 and r.resources.spill_loads == 0, (entry, r.resources.text())
    if config not in spec.listed_for(None):
        return  # written for some sizes (`when`): proposed first for a case of them (tests/test_regime_turns.py)
    tuner = TuneProposer(0, kernel=kernel, ahead=0)
    first = tuner.propose(ProposalContext(w, DeviceFacts(), 1, "optimise", [], None, None)).spec
    history = [Attempt(iteration=1, name=first.name, proposer="tune", status="ok", score_ms=1.0, defines=first.defines)]
    unconditional = spec.listed_for(None)
    earlier = unconditional[:unconditional.index(config)]
    for i, c in enumerate(earlier, 2):  # the configs before this one, tried already
        history.append(Attempt(iteration=i, name=first.name, proposer="tune", status="ok", score_ms=1.0 + i,
                               defines={**first.defines, **c}))
    nxt = tuner.propose(ProposalContext(w, DeviceFacts(), len(history) + 1, "optimise", history, None, history[-1]))
    assert nxt.spec.defines == {**first.defines, **config}, nxt.spec.rationale


@pytest.mark.parametrize("workload,kernel", [("softmax", "online"), ("sgemm", "splitk_warptile"), ("sgemm", "colstream"), ("gemm_bias_relu", "colstream"),
                                             ("gemm_bias_relu", "warptile"), ("gemm_bias_relu", "splitk_warptile"),
                                             ("bf16_gemm", "mma_sync"), ("bf16_gemm", "wgmma_tma"),
                                             ("bf16_gemm", "wgmma_ws"), ("bf16_gemm", "wgmma_ws2"), ("bf16_gemm", "wgmma_swap"),
                                             ("sgemm", "tf32x3"), ("sgemm", "tf32x3_splitk"),
                                             ("gemm_bias_relu", "tf32x3"), ("gemm_bias_relu", "tf32x3_splitk"),
                                             ("fp8_gemm", "mma_sync"), ("fp8_gemm", "wgmma_ws"),
                                             ("attention_bf16", "fa3")])
def test_kernel_resolves_on_every_case(workload, kernel):
    """The launch rule or program resolves on every case at the defaults: positive grids, at most 1024 threads."""
    w = load_workload(EXAMPLES / workload)
    spec = w.kernels[kernel]
    knobs = {n: k.default for n, k in spec.knobs().items()}
    for case in w.cases:
        env = {**case.sizes, **knobs}
        launches = ([s.launch for s in spec.program.launches] if spec.program else [spec.launch])
        for rule in launches:
            assert rule.resolve(env).problems() is None, case.name


@pytest.mark.parametrize("splitk", [2, 4, 16])
def test_wgmma_ws2_splitk_resolves_on_every_case(splitk):
    """wgmma_ws2's split-K program resolves on every case, its workspace one fp32 tile per (tile, slice)."""
    w = load_workload(EXAMPLES / "bf16_gemm")
    spec = w.kernels["wgmma_ws2"]
    knobs = {**{n: k.default for n, k in spec.knobs().items()}, "SPLITK": splitk}
    for case in w.cases:
        env = {**case.sizes, **knobs}
        for rule in (s.launch for s in spec.program.launches):
            assert rule.resolve(env).problems() is None, case.name
        tiles = -(-env["M"] // env["BM"]) * -(-env["N"] // env["BN"])
        sizes = {ws.name: ws.size.evaluate_int(env) for ws in spec.program.workspace}
        assert sizes == {"partial": tiles * splitk * env["BM"] * env["BN"] + 4, "counters": tiles}, case.name


def test_tf32x3_copies_share_one_body():
    """The six 3xTF32 sources (plain, split-K and padded, each for sgemm and bias+ReLU) carry the same knobs and body text."""
    def shared(path):
        text = path.read_text()
        return text[text.index("// knob BM:"):text.index("// ---- end of the tf32x3 body ----")]
    plain = shared(EXAMPLES / "sgemm" / "tf32x3.cu")
    assert shared(EXAMPLES / "sgemm" / "tf32x3_splitk.cu") == plain
    assert shared(EXAMPLES / "gemm_bias_relu" / "tf32x3.cu") == plain
    assert shared(EXAMPLES / "gemm_bias_relu" / "tf32x3_splitk.cu") == plain
    assert shared(EXAMPLES / "sgemm" / "tf32x3_padded.cu") == plain
    assert shared(EXAMPLES / "gemm_bias_relu" / "tf32x3_padded.cu") == plain


def test_split_row_copies_share_one_skeleton():
    """The three split-row kernels carry the same knobs, barriers and block reduction: a fix to one is a fix to all."""
    def skeleton(workload):
        text = (EXAMPLES / workload / "split.cu").read_text()
        return text[text.index("// ---- the split-row skeleton"):text.index("// ---- end of the split-row skeleton ----")]
    softmax = skeleton("softmax")
    assert "knob NBUF" in softmax and "block_reduce" in softmax
    assert skeleton("layernorm") == softmax
    assert skeleton("rmsnorm_bf16") == softmax
