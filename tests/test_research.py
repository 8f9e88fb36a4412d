"""The built-in knowledge base and its retrieval."""

from workload_factory import SGEMM

from warpsmith.agent.proposers.research import guidance, load_notes, retrieve, workload_kind
from warpsmith.agent.spec.workload import load_workload


def test_every_note_is_tagged():
    """Each note has a title, architecture and kind tags, keywords and a body."""
    notes = load_notes()
    assert len(notes) >= 10
    for n in notes:
        assert n.title and n.arch and n.kinds and n.keywords and len(n.body) > 100, n.id


def test_gemm_on_hopper_gets_tiling_and_hopper_notes():
    """The sgemm example on sm_90: tiling first, Hopper's TMA/wgmma note included."""
    w = load_workload(SGEMM)
    kind = workload_kind(w.description, w.baseline.kind)
    ids = [n.id for n in retrieve(kind, "sm_90", w.description)]
    assert kind == "gemm" and ids[0] == "tiling"
    assert "hopper_tma_wgmma" in ids and "warp_shuffles" not in ids


def test_softmax_gets_reduction_notes_not_gemm_ones():
    """A softmax description retrieves warp shuffles, reductions and numerics; no tiling, no wgmma."""
    text = "Row-wise softmax over a 32768 x 4096 fp32 matrix"
    kind = workload_kind(text)
    ids = [n.id for n in retrieve(kind, "sm_90", text)]
    assert kind == "softmax"
    assert {"warp_shuffles", "reductions", "numerics"} <= set(ids)
    assert "tiling" not in ids and "hopper_tma_wgmma" not in ids


def test_architecture_filter_and_profile_findings():
    """sm_90-only notes never reach an sm_75 GPU; a bank-conflict finding pulls its note up."""
    assert "hopper_tma_wgmma" not in [n.id for n in retrieve("gemm", "sm_75", k=20)]
    ids = [n.id for n in retrieve("gemm", "sm_90", findings=["shared memory bank conflicts"], k=3)]
    assert "bank_conflicts" in ids


def test_guidance_cites_its_sources():
    """The prompt section names every note it uses."""
    text = guidance(retrieve("softmax", "sm_90", k=2))
    assert text.count("[") >= 2 and "]" in text


def test_bf16_attention_gets_flash_mma_and_16_bit_notes_and_fp32_gemm_does_not():
    """The attention example retrieves flash attention, the mma.sync fragments and the
    16-bit note; the fp32 sgemm never sees notes tagged for 16-bit dtypes."""
    from workload_factory import ROOT
    w = load_workload(ROOT / "examples" / "attention_bf16")
    kind = workload_kind(w.description, w.baseline.kind)
    ids = [n.id for n in retrieve(kind, "sm_90", w.description, dtypes={p.dtype for p in w.arrays}, k=6)]
    assert kind == "attention"
    assert {"flash_attention", "mma_sync_fragments", "half_precision"} <= set(ids)
    g = load_workload(SGEMM)
    fp32 = [n.id for n in retrieve("gemm", "sm_90", g.description, dtypes={p.dtype for p in g.arrays}, k=20)]
    assert "mma_sync_fragments" not in fp32 and "half_precision" not in fp32 and "tiling" in fp32


def test_attention_on_hopper_gets_the_fa3_note_among_its_top_notes():
    """attention_bf16 on sm_90 retrieves FlashAttention-3's note in its top 5; on sm_80 it never sees it, nor does a
    bf16 GEMM among its top 5 on sm_90."""
    from workload_factory import ROOT
    w = load_workload(ROOT / "examples" / "attention_bf16")
    kind, dtypes = workload_kind(w.description, w.baseline.kind), {p.dtype for p in w.arrays}
    assert "flash_attention_hopper" in [n.id for n in retrieve(kind, "sm_90", w.description, dtypes=dtypes, k=5)]
    assert "flash_attention_hopper" not in [n.id for n in retrieve(kind, "sm_80", w.description, dtypes=dtypes, k=20)]
    g = load_workload(ROOT / "examples" / "bf16_gemm")
    assert "flash_attention_hopper" not in [n.id for n in retrieve(workload_kind(g.description, g.baseline.kind), "sm_90",
                                                                   g.description, dtypes={p.dtype for p in g.arrays}, k=5)]


def test_fp8_gemm_gets_the_fp8_note_and_no_other_workload_does():
    """The fp8 example retrieves its Hopper fp8 note among its top notes; bf16 and fp32 GEMMs never see it."""
    from workload_factory import ROOT
    w = load_workload(ROOT / "examples" / "fp8_gemm")
    kind = workload_kind(w.description, w.baseline.kind)
    ids = [n.id for n in retrieve(kind, "sm_90", w.description, dtypes={p.dtype for p in w.arrays}, k=5)]
    assert kind == "gemm" and "fp8_gemm_hopper" in ids and "hopper_tma_wgmma" in ids
    assert "fp8_gemm_hopper" not in [n.id for n in retrieve("gemm", "sm_75", w.description, k=20,
                                                            dtypes={p.dtype for p in w.arrays})]
    for other in ("bf16_gemm", "sgemm"):
        o = load_workload(ROOT / "examples" / other)
        assert "fp8_gemm_hopper" not in [n.id for n in retrieve("gemm", "sm_90", o.description, k=20,
                                                                dtypes={p.dtype for p in o.arrays})]
