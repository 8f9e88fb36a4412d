"""The tune proposer's search: seeded, never repeating, launchable only, resumable from history."""

from __future__ import annotations

import contextlib
import dataclasses
import math

import pytest
from workload_factory import SGEMM

from warpsmith.agent.evaluate.records import Attempt
from warpsmith.agent.proposers import compile_pool
from warpsmith.agent.proposers.base import ProposalContext, SearchExhausted
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.runtime.device_facts import DeviceFacts
from warpsmith.agent.spec.workload import load_workload


def run_search(seed: int, steps: int, score) -> list[Attempt]:
    w = load_workload(SGEMM)
    tuner, history = TuneProposer(seed, kernel="tiled"), []
    for i in range(1, steps + 1):
        p = tuner.propose(ProposalContext(w, DeviceFacts(), i, "optimise", list(history), None, history[-1] if history else None))
        history.append(Attempt(iteration=i, name=p.spec.name, proposer="tune", status="ok",
                               score_ms=score(p.spec.defines), defines=p.spec.defines))
    return history


def threads(d):
    return (d["BM"] // d["TM"]) * (d["BN"] // d["TN"])


def test_first_proposal_is_the_declared_defaults():
    """The search starts from the kernel's #define defaults."""
    first = run_search(0, 1, lambda d: 1.0)[0]
    assert first.defines == {"BM": 64, "BN": 64, "BK": 8, "TM": 8, "TN": 8}


def test_search_is_seeded_and_never_repeats():
    """Same seed, same sequence; another seed, another; no configuration twice."""
    score = lambda d: 1 + abs(d["BM"] - 128) / 64 + abs(d["BK"] - 16) / 32
    a, b, c = run_search(1, 25, score), run_search(1, 25, score), run_search(2, 25, score)
    assert [x.defines for x in a] == [x.defines for x in b]
    assert [x.defines for x in a] != [x.defines for x in c]
    assert len({tuple(sorted(x.defines.items())) for x in a}) == 25


def test_only_launchable_configurations_are_proposed():
    """Every proposal has 32..1024 threads per block (BM/TM * BN/TN)."""
    assert all(32 <= threads(a.defines) <= 1024 for a in run_search(3, 60, lambda d: 1.0))


def test_local_search_finds_the_optimum_of_a_smooth_landscape():
    """On a landscape with one optimum the search reaches it well within the space's size."""
    target = {"BM": 128, "BN": 128, "BK": 16, "TM": 8, "TN": 8}
    score = lambda d: 1 + sum(abs(d[k] - v) / v for k, v in target.items())
    history = run_search(0, 40, score)
    assert min(history, key=lambda a: a.score_ms).defines == target


def test_exhausted_space_is_a_search_exhausted_error():
    """When every configuration is tried the tuner says so instead of repeating one."""
    with pytest.raises(SearchExhausted, match="has been tried"):
        run_search(0, 400, lambda d: 1.0)


def test_combinations_that_do_not_compile_are_skipped_without_spending_budget():
    """A kernel's #error guard rules a knob value out: the tuner never proposes it."""
    from warpsmith.agent.evaluate.records import Best, CandidateSpec
    source = ('// knob X: 1 2 3\n#ifndef X\n#define X 1\n#endif\n#if X == 2\n#error X = 2 spills\n#endif\n'
              'extern "C" __global__ void k(float* y) { y[threadIdx.x] = X; }\n')
    spec = CandidateSpec(name="guarded", source=source, entry="k", grid=["1"], block=["32"], proposer="tune")
    w = load_workload(SGEMM)
    best = Best(spec=spec, score_ms=1.0, cases=[], iteration=1)
    tuner, history = TuneProposer(0), []
    for i in range(1, 3):
        p = tuner.propose(ProposalContext(w, DeviceFacts(arch="sm_90"), i, "optimise", list(history), best,
                                          history[-1] if history else None))
        history.append(Attempt(iteration=i, name=p.spec.name, proposer="tune", status="ok", score_ms=1.0 + i,
                               defines=p.spec.defines))
    assert [a.defines["X"] for a in history] == [1, 3]
    with pytest.raises(SearchExhausted, match="every configuration"):
        tuner.propose(ProposalContext(w, DeviceFacts(arch="sm_90"), 3, "optimise", history, best, history[-1]))


def test_search_comes_back_for_the_neighbours_of_earlier_points():
    """Best-first: a slightly better neighbour whose own neighbours are all worse
    does not strand the search; the defaults' other neighbours (here the optimum)
    come next, before any random restart. Seen on the H200: the greedy walk never
    returned for the best sgemm tile of 4096^3."""
    def score(d):
        if d == {"BM": 64, "BN": 64, "BK": 8, "TM": 8, "TN": 8}:
            return 1.0
        if d == {"BM": 64, "BN": 128, "BK": 8, "TM": 8, "TN": 8}:
            return 0.9  # the decoy: every neighbour of it scores 2
        if d == {"BM": 128, "BN": 64, "BK": 8, "TM": 8, "TN": 8}:
            return 0.5
        return 2.0
    w = load_workload(SGEMM)
    for seed in range(10):
        tuner, history, why = TuneProposer(seed, kernel="tiled"), [], []
        for i in range(1, 16):  # the defaults + their 7 neighbours + the decoy's 7
            p = tuner.propose(ProposalContext(w, DeviceFacts(), i, "optimise", list(history), None, None))
            history.append(Attempt(iteration=i, name=p.spec.name, proposer="tune", status="ok",
                                   score_ms=score(p.spec.defines), defines=p.spec.defines))
            why.append(p.spec.rationale)
            if history[-1].score_ms == 0.5:
                break
        assert history[-1].score_ms == 0.5, f"seed {seed}: {why}"
        assert all(w.startswith("neighbour of the") for w in why[1:]), f"seed {seed}: {why}"


def _tiled_and_splitk(tmp_path):
    """The small sgemm workload with tiled and split-K, tiled the best (10x behind the baseline on long-K)."""
    from test_dispatch import CASES
    from workload_factory import make_sgemm_workload

    from warpsmith.agent.evaluate.records import Best, CandidateSpec, CaseOutcome
    from warpsmith.agent.spec.candidate import Candidate
    w = load_workload(make_sgemm_workload(tmp_path / "w", CASES, kernels=("naive", "tiled", "splitk")))
    tiled = CandidateSpec.from_candidate(Candidate.from_spec(w.kernels["tiled"]), "tune")
    best = Best(spec=tiled, score_ms=0.45, iteration=1, cases=[
        CaseOutcome(case="square-1024", role="performance", status="ok", median_ms=0.1),
        CaseOutcome(case="long-k", role="performance", status="ok", median_ms=2.0)])
    baseline = {"square-1024": 0.09, "long-k": 0.2}
    return w, best, baseline


def test_other_tunable_kernels_get_turns_judged_on_the_case_that_needs_them(tmp_path):
    """tiled is the best and still improving; after every three of its proposals one tunes split-K instead,
    scored on the case furthest behind the baseline (long-K), and its own turns rank by that case only."""
    from warpsmith.agent.evaluate.records import CaseOutcome
    w, best, baseline = _tiled_and_splitk(tmp_path)
    tuner, history, kernels = TuneProposer(0), [], []
    for i in range(1, 13):
        ctx = ProposalContext(w, DeviceFacts(), i, "optimise", list(history), best, history[-1] if history else None,
                              baseline)
        spec = tuner.propose(ctx).spec
        kernels.append(spec.kernel)
        split = spec.name.startswith("splitk")
        long_k = 0.3 if split and spec.defines.get("SPLITK") == 64 else 1.0  # split-K pays on long-K only
        history.append(Attempt(iteration=i, name=spec.name, proposer="tune", status="ok", score_ms=1.0,
                               defines=spec.defines, new_best=not split,  # tiled improves every time: not stalled
                               cases=[CaseOutcome(case="square-1024", role="performance", status="ok", median_ms=1.0),
                                      CaseOutcome(case="long-k", role="performance", status="ok", median_ms=long_k)]))
        if split:
            assert "(searched for case long-k)" in spec.rationale
    assert kernels == ["tiled", "tiled", "tiled", "splitk", "tiled", "tiled", "tiled", "splitk", "tiled", "tiled",
                       "tiled", "splitk"]


def test_a_kernels_listed_configs_come_right_after_its_defaults(tmp_path):
    """`configs` in a kernel's table: the tuner proposes the defaults, then each listed setting in order (the
    knobs it leaves out at their defaults), naming it in the rationale, and only then neighbours."""
    from workload_factory import make_sgemm_workload
    d = make_sgemm_workload(tmp_path / "w")
    text = (d / "workload.toml").read_text().replace(
        'entry = "sgemm_tiled"', 'entry = "sgemm_tiled"\nconfigs = [{ BM = 128, BN = 128 }, { BK = 32, TM = 4 }]', 1)
    (d / "workload.toml").write_text(text)
    w = load_workload(d)
    assert w.kernels["tiled"].configs == ({"BM": 128, "BN": 128}, {"BK": 32, "TM": 4})
    defaults = {k: kn.default for k, kn in w.kernels["tiled"].knobs().items()}
    tuner, history, proposed = TuneProposer(0, kernel="tiled", ahead=0), [], []
    for i in range(1, 5):
        spec = tuner.propose(ProposalContext(w, DeviceFacts(), i, "optimise", list(history), None,
                                             history[-1] if history else None)).spec
        proposed.append(spec)
        history.append(Attempt(iteration=i, name=spec.name, proposer="tune", status="ok", score_ms=1.0 + i / 10,
                               defines=spec.defines))
    assert proposed[0].defines == defaults
    assert proposed[1].defines == {**defaults, "BM": 128, "BN": 128} and "BM=128,BN=128" in proposed[1].rationale
    assert proposed[2].defines == {**defaults, "BK": 32, "TM": 4} and "lists for this kernel" in proposed[2].rationale
    assert proposed[3].rationale.startswith("neighbour of the best so far")


def test_a_stalled_kernel_alternates_with_the_others(tmp_path):
    """tiled's last STALL attempts brought no new best: from then on split-K gets every other turn instead
    of one in four; a new best from tiled brings the three-in-four rule back."""
    from warpsmith.agent.evaluate.records import CaseOutcome
    from warpsmith.agent.proposers.kernel_turns import STALL
    w, best, baseline = _tiled_and_splitk(tmp_path)
    tuner, history, kernels = TuneProposer(0, ahead=0), [], []
    for i in range(1, 15):
        ctx = ProposalContext(w, DeviceFacts(), i, "optimise", list(history), best, history[-1] if history else None,
                              baseline)
        spec = tuner.propose(ctx).spec
        kernels.append(spec.kernel)
        history.append(Attempt(iteration=i, name=spec.name, proposer="tune", status="ok", score_ms=1.0,
                               defines=spec.defines, new_best=(i == 1 or i == 10),
                               cases=[CaseOutcome(case="square-1024", role="performance", status="ok", median_ms=1.0),
                                      CaseOutcome(case="long-k", role="performance", status="ok", median_ms=1.0)]))
    assert STALL == 4
    # 1-3 tiled (1 a new best), 4 split-K (one in four); tiled's 2, 3, 5, 6 without a new best: stalled after 6,
    # so 7 split-K, 8 tiled, 9 split-K, 10 tiled (a new best: the cumulative three-in-four rule again, which owes
    # tiled its turns up to 12 of 15), 11-14 tiled.
    assert kernels == ["tiled", "tiled", "tiled", "splitk", "tiled", "tiled", "splitk", "tiled", "splitk", "tiled",
                       "tiled", "tiled", "tiled", "tiled"]


def test_a_stalled_main_kernel_searches_every_other_turn_for_thefocus_case(tmp_path):
    """tiled alone (named), stalled on the geomean after its first attempts: its turns alternate between the
    geomean and the case furthest behind the baseline (long-K), and a turn for long-K branches from the point
    fastest there, which is not the geomean's best (a knob that pays on one shape only)."""
    from warpsmith.agent.evaluate.records import CaseOutcome
    w, best, baseline = _tiled_and_splitk(tmp_path)
    tuner, history, specs = TuneProposer(0, kernel="tiled", ahead=0), [], []
    for i in range(1, 11):
        ctx = ProposalContext(w, DeviceFacts(), i, "optimise", list(history), best, history[-1] if history else None,
                              baseline)
        spec = tuner.propose(ctx).spec
        specs.append(spec)
        long_k = 0.5 if i == 3 else 1.0  # attempt 3 is the fastest on long-K, and the slowest on the geomean
        history.append(Attempt(iteration=i, name=spec.name, proposer="tune", status="ok", score_ms=1.0 + (i == 3),
                               defines=spec.defines, new_best=(i == 1),
                               cases=[CaseOutcome(case="square-1024", role="performance", status="ok", median_ms=1.0),
                                      CaseOutcome(case="long-k", role="performance", status="ok", median_ms=long_k)]))
    # Stalled once attempts 2-5 brought no new best: from the sixth on, every other turn is long-K's.
    assert [s.focus for s in specs] == [None] * 5 + ["long-k", None, "long-k", None, "long-k"]
    assert all("(searched for case long-k)" in s.rationale for s in specs if s.focus)
    assert all(s.parent == 3 for s in specs if s.focus), [(s.parent, s.rationale) for s in specs]


def _sgemm_best(w, medians):
    from warpsmith.agent.evaluate.records import Best, CandidateSpec, CaseOutcome
    from warpsmith.agent.spec.candidate import Candidate
    spec = CandidateSpec.from_candidate(Candidate.from_spec(w.kernels["tf32x3"]), "tune")
    return Best(spec=spec, score_ms=1.0, iteration=1, cases=[
        CaseOutcome(case=c, role="performance", status="ok", median_ms=m) for c, m in medians.items()])


def test_batches_give_every_tunable_kernel_a_turn():
    """Steps of four (one propose, three batch neighbours), the main kernel still improving: each of sgemm's
    other tunable kernels gets its defaults within the first steps. On the H200 the turn was the step's
    iteration modulo a cycle that a batch of four strides through, and one kernel
    (splitk_warptile) got every turn while tf32x3_splitk, the one the long-K case needed, got none."""
    from warpsmith.agent.evaluate.records import CaseOutcome
    w = load_workload(SGEMM)
    perf = [c.name for c in w.cases if c.role == "performance"]
    best = _sgemm_best(w, {c: 1.0 for c in perf})
    baseline = {c: (0.05 if c == "256x256x131072" else 1.0) for c in perf}
    tuner, history = TuneProposer(0, ahead=0), []
    tunable = {n for n, k in w.kernels.items() if k.knobs()}
    for step in range(len(tunable) + 1):  # a turn a step for each other kernel, and one to spare
        ctx = ProposalContext(w, DeviceFacts(), len(history) + 1, "optimise", list(history), best, None, baseline)
        for p in tuner.propose_batch(ctx, 4):
            history.append(Attempt(iteration=len(history) + 1, name=p.spec.name, proposer="tune", status="ok",
                                   score_ms=1.0, defines=p.spec.defines, new_best=p.spec.name.startswith("tf32x3@"),
                                   cases=[CaseOutcome(case=c, role="performance", status="ok", median_ms=1.0)
                                          for c in perf]))
    tried = {a.kernel for a in history}
    assert tried >= tunable, tried


def test_once_stalled_another_kernels_turn_fills_the_whole_step(tmp_path):
    """Steps of four with tiled (the main kernel) stalled: the steps alternate between tiled and split-K, and
    a split-K step is split-K's throughout (its defaults, then its listed configs, then its neighbours, each
    searched for the focus case). With one turn per step it had a quarter of the attempts at most."""
    from warpsmith.agent.evaluate.records import CaseOutcome
    w, best, baseline = _tiled_and_splitk(tmp_path)
    toml = w.directory / "workload.toml"
    toml.write_text(toml.read_text().replace('size = "SPLITK * M * N", init = "poison" }]',
                                             'size = "SPLITK * M * N", init = "poison" }]\n'
                                             'configs = [{ SPLITK = 64, BM = 32 }, { SPLITK = 64 }]', 1))
    w = load_workload(w.directory)
    tuner, history, steps = TuneProposer(0, ahead=0), [], []
    for step in range(8):
        ctx = ProposalContext(w, DeviceFacts(), len(history) + 1, "optimise", list(history), best, None, baseline)
        batch = tuner.propose_batch(ctx, 4)
        steps.append([p.spec.kernel for p in batch])
        for p in batch:
            history.append(Attempt(iteration=len(history) + 1, name=p.spec.name, proposer="tune", status="ok",
                                   score_ms=1.0, defines=p.spec.defines,
                                   cases=[CaseOutcome(case=c, role="performance", status="ok", median_ms=1.0)
                                          for c in ("square-1024", "long-k")]))
    assert all(len(set(s)) == 1 for s in steps), steps  # one kernel a step
    kinds = [s[0] for s in steps]
    stalled_from = next(i for i in range(len(steps)) if sum(len(s) for s in steps[:i]) >= 4)
    assert all(kinds[i] != kinds[i + 1] for i in range(stalled_from, len(kinds) - 1)), kinds
    splitk_steps = [s for s in steps if s[0] == "splitk"]
    assert max(len(s) for s in splitk_steps) > 1  # whole steps, not one turn and three of tiled's
    splitk = [a.defines for a in history if a.name.startswith("splitk@")]
    assert [d["SPLITK"] for d in splitk[1:3]] == [64, 64] and splitk[1]["BM"] == 32  # the listed configs next


def test_an_exhausted_other_kernel_gives_its_turns_to_the_rest(tmp_path):
    """An other kernel whose space is used up (every point tried) is left out of the turns from then on;
    the next other kernel gets them instead of the main kernel taking them all."""
    w, best, baseline = _tiled_and_splitk(tmp_path)
    tuner = TuneProposer(0, ahead=0)
    ctx = ProposalContext(w, DeviceFacts(), 5, "optimise", [], best, None, baseline)
    from warpsmith.agent.proposers.base import SearchExhausted
    calls = []
    real = tuner._propose
    def propose(ctx, kernel=None, focus=None):
        calls.append(kernel)
        if kernel == "splitk":
            raise SearchExhausted("used up")
        return real(ctx, kernel, focus)
    tuner._propose = propose
    tuner._other_turn = lambda ctx: ("splitk", "long-k") if "splitk" not in tuner.turns.exhausted else None
    assert tuner.propose(ctx).spec.name.startswith("tiled@") and calls == ["splitk", None]
    assert tuner.turns.exhausted == {"splitk"}


def test_known_verdicts_take_no_compile_ahead_slot():
    """Neighbours NVRTC has already judged (accepted or refused) are not counted against `ahead`: the slots go
    to neighbours whose compile is still unknown."""
    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    from warpsmith.agent.proposers.knob_search import neighbours_of
    w = load_workload(SGEMM)
    tuner = TuneProposer(0, kernel="tiled", ahead=2)
    ctx = ProposalContext(w, DeviceFacts(arch="sm_90"), 1, "optimise", [], None, None)
    base, knobs = tuner.base(ctx)
    defaults = {k: kn.default for k, kn in knobs.items()}
    submitted = []
    tuner.pool.submit = lambda b, d, arch, fm: submitted.append(d)
    neighbours = list(neighbours_of(defaults, knobs))
    for n in neighbours[:-2]:  # all but two already judged, some refused
        tuner.pool.compiles[(source_tag(base.source), "sm_90", _key({**base.defines, **n}))] = len(submitted) % 2 == 0
    tuner.compile_ahead.queue(ctx, base, knobs, [defaults], {}, set(), "sm_90")
    assert sorted(map(_key, submitted)) == sorted(map(_key, neighbours[-2:]))


def test_a_compile_that_raises_after_its_queued_future_is_cancelled_leaves_no_cancelled_future(monkeypatch):
    """_compiles_ok cancels a queued compile and runs it itself; if that raises, the table holds no
    cancelled future for _compiled_already to trip on."""
    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    with _held_pool() as (tuner, base, defaults, busy):
        tuner.pool.submit(base, defaults, "sm_90", False)
        def broken(*a):
            raise RuntimeError("compile process died")
        monkeypatch.setattr(compile_pool, "compile_config", broken)
        with pytest.raises(RuntimeError):
            tuner.pool.compiles_ok(base, defaults, "sm_90", False)
        assert (source_tag(base.source), "sm_90", _key({**base.defines, **defaults})) not in tuner.pool.compiles
        assert tuner.pool.compiled_already(base, defaults, "sm_90", False) is False


def test_the_focus_moves_on_once_another_kernel_wins_the_worst_case():
    """The focus is the case furthest behind over every attempt's medians (what the dispatch
    gives it), not the single best's: once split-K wins long-K, 128x4096x4096 is next."""
    from warpsmith.agent.evaluate.records import CaseOutcome
    from warpsmith.agent.proposers.kernel_turns import focus_case
    w = load_workload(SGEMM)
    perf = [c.name for c in w.cases if c.role == "performance"]
    single = {c: 1.0 for c in perf} | {"256x256x131072": 20.0, "128x4096x4096": 2.0}
    best = _sgemm_best(w, single)
    base = {c: 1.0 for c in perf}
    ctx = lambda history: ProposalContext(w, DeviceFacts(), 9, "optimise", history, best, None, base)
    assert focus_case(ctx([])) == "256x256x131072"
    won = Attempt(iteration=5, name="tf32x3_splitk@x[SPLITK=32]", proposer="tune", status="ok", score_ms=3.0,
                  cases=[CaseOutcome(case="256x256x131072", role="performance", status="ok", median_ms=1.0)])
    assert focus_case(ctx([won])) == "128x4096x4096"
    refused = won.model_copy(update={"status": "wrong_answer"})
    assert focus_case(ctx([refused])) == "256x256x131072"


def test_the_next_candidates_are_compiled_ahead():
    """After a proposal the tuner compiles the points its next proposals look at (real NVRTC, in
    the compile pool's processes); the next proposal is one of them."""
    from concurrent.futures import Future

    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    w = load_workload(SGEMM)
    tuner, facts = TuneProposer(0, kernel="tiled", ahead=2), DeviceFacts(arch="sm_90")
    first = tuner.propose(ProposalContext(w, facts, 1, "optimise", [], None, None)).spec
    ahead = {k: f for k, f in tuner.pool.compiles.items() if isinstance(f, Future) and k[2] != _key(first.defines)}
    assert len(ahead) == tuner.compile_ahead.depth and all(f.result(timeout=300) for f in ahead.values())
    history = [Attempt(iteration=1, name=first.name, proposer="tune", status="ok", score_ms=1.0, defines=first.defines)]
    second = tuner.propose(ProposalContext(w, facts, 2, "optimise", history, None, history[-1])).spec
    assert (source_tag(first.source), "sm_90", _key(second.defines)) in ahead


def test_each_proposal_records_the_attempt_it_came_from():
    """The defaults come from the best so far; a neighbour's parent is the attempt it neighbours."""
    w = load_workload(SGEMM)
    tuner, history = TuneProposer(0, kernel="tiled"), []
    parents = []
    for i in range(1, 6):
        spec = tuner.propose(ProposalContext(w, DeviceFacts(), i, "optimise", list(history), None,
                                             history[-1] if history else None)).spec
        parents.append(spec.parent)
        history.append(Attempt(iteration=i, name=spec.name, proposer="tune", status="ok",
                               score_ms=1.0 + i / 10, defines=spec.defines))  # each slower: the first stays best
    assert parents == [None, 1, 1, 1, 1]


def test_a_batch_branches_from_the_top_k_points():
    """With three scored points, a batch of six takes untried neighbours of each of them in turn (not only the
    best's), no configuration twice, each recording the attempt it neighbours as its parent."""
    w = load_workload(SGEMM)
    tuner = TuneProposer(0, kernel="tiled")
    history = run_search(0, 3, lambda d: 1.0 + d["BM"] / 1000 + d["BN"] / 500 + d["BK"] / 300 + d["TM"] / 100)
    batch = tuner.propose_batch(ProposalContext(w, DeviceFacts(), 4, "optimise", history, None, history[-1]), 6)
    specs = [p.spec for p in batch]
    assert len(specs) == 6 and len({tuple(sorted(s.defines.items())) for s in specs}) == 6
    assert not {tuple(sorted(s.defines.items())) for s in specs} & {tuple(sorted(a.defines.items())) for a in history}
    assert len({s.parent for s in specs}) >= 2  # not only the best's neighbours
    for s in specs:
        parent = next(a for a in history if a.iteration == s.parent)
        assert sum(parent.defines[k] != v for k, v in s.defines.items()) == 1  # one knob moved from its parent


def test_a_batch_is_compiled_in_parallel_and_keeps_only_what_compiles():
    """Given the GPU's arch, a batch's members are compiled in the pool (real NVRTC), and every one
    proposed compiles. (Two or three: once a neighbour compiled ahead is ready, the step takes only
    ready ones, and whether the first proposal's guesses finish before the rest of the batch is
    chosen is the pool's race.)"""
    w = load_workload(SGEMM)
    tuner, facts = TuneProposer(0, kernel="tiled", ahead=2), DeviceFacts(arch="sm_90")
    history = run_search(0, 2, lambda d: 1.0 + d["BM"] / 1000)
    batch = tuner.propose_batch(ProposalContext(w, facts, 3, "optimise", history, None, history[-1]), 3)
    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    assert 2 <= len(batch) <= 3
    for p in batch:
        known = tuner.pool.compiles[(source_tag(p.spec.source), "sm_90", _key(p.spec.defines))]
        assert known is True or known.result(timeout=300) is True


def _clean_record(tuner: TuneProposer, source: str) -> None:
    """As after CLEAN_RECORD compiles of the kernel, none refused (the tuner's _verdict counts them)."""
    from collections import Counter

    from warpsmith.agent.proposers.compile_pool import CLEAN_RECORD, source_tag
    tuner.pool.record[source_tag(source)] = Counter({True: CLEAN_RECORD})


def test_a_kernel_nvrtc_has_refused_a_point_of_is_proposed_only_after_nvrtcs_verdict():
    """A `static_assert` on the knobs (which the #error reader does not see) refuses X = 3: once
    NVRTC has refused a point of the kernel, no proposal, in a step or alone, is made before its
    verdict, so none is ever compile_failed (real NVRTC, compiles ahead on)."""
    from warpsmith.agent.evaluate.records import Best, CandidateSpec
    source = ('// knob X: 1 2 3 4\n// knob Y: 1 2\n#ifndef X\n#define X 1\n#endif\n#ifndef Y\n#define Y 1\n#endif\n'
              'static_assert(X != 3, "X = 3 is refused");\n'
              'extern "C" __global__ void k(float* y) { y[threadIdx.x] = X * Y; }\n')
    spec = CandidateSpec(name="asserted", source=source, entry="k", grid=["1"], block=["32"], proposer="tune")
    w = load_workload(SGEMM)
    best = Best(spec=spec, score_ms=1.0, cases=[], iteration=1)
    tuner, facts, history = TuneProposer(0, ahead=2), DeviceFacts(arch="sm_90"), []
    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    assert tuner.pool.verdict(spec, {"X": 3}, "sm_90", False) is False  # seen refused: the record is not clean
    for step in range(4):
        try:
            batch = tuner.propose_batch(ProposalContext(w, facts, len(history) + 1, "optimise", list(history), best,
                                                        history[-1] if history else None), 3)
        except SearchExhausted:
            break
        for p in batch:
            assert tuner.pool.compiles[(source_tag(source), "sm_90", _key(p.spec.defines))] is True
            history.append(Attempt(iteration=len(history) + 1, name=p.spec.name, proposer="tune", status="ok",
                                   score_ms=2.0 + len(history), defines=p.spec.defines))
    assert history and all(a.defines["X"] != 3 for a in history)


def test_a_step_does_not_wait_for_nvrtc(monkeypatch):
    """With the compile pool, a step is proposed while its members' compiles are still under way
    (the evaluator joins them): on the H100 the graph waited 171 ms per attempt for steps held
    by their slowest compile. Here NVRTC is held back until the step is out; a tuner that
    waited would block until the hold's own limit and fail below."""
    import threading

    release = threading.Event()
    started, expired = [], []

    def held(base, defines, *args):  # test double for NVRTC: accepts every point, once released
        started.append(defines)
        if not release.wait(30):
            expired.append(defines)  # someone waited for this compile until the hold gave up
        return True
    monkeypatch.setattr(compile_pool, "compile_config", held)
    w = load_workload(SGEMM)
    tuner, facts = TuneProposer(0, kernel="tiled", ahead=2), DeviceFacts(arch="sm_90")
    _clean_record(tuner, w.kernels["tiled"].source())
    history = run_search(0, 2, lambda d: 1.0 + d["BM"] / 1000)
    try:
        batch = tuner.propose_batch(ProposalContext(w, facts, 3, "optimise", history, None, history[-1]), 3)
        assert len(batch) == 3 and started and not expired
    finally:
        release.set()


def test_a_batch_of_one_is_a_plain_proposal():
    """n=1 proposes exactly what propose() would."""
    w = load_workload(SGEMM)
    ctx = ProposalContext(w, DeviceFacts(), 1, "optimise", [], None, None)
    assert [p.spec for p in TuneProposer(0, kernel="tiled").propose_batch(ctx, 1)] == \
        [TuneProposer(0, kernel="tiled").propose(ctx).spec]


def test_error_guards_are_read_without_compiling(monkeypatch):
    """A point an `#if ... #error` pair refuses is skipped before NVRTC sees it
    (agent/spec/knob_space.py); what the reader cannot judge still goes to the compiler."""
    from warpsmith.agent.evaluate.records import Best, CandidateSpec
    compiled = []
    real = compile_pool.compile_config
    monkeypatch.setattr(compile_pool, "compile_config",
                        lambda base, defines, *a: compiled.append(defines["X"]) or real(base, defines, *a))
    source = ('// knob X: 1 2 3\n#ifndef X\n#define X 1\n#endif\n#define TWICE_X (X * 2)\n'
              '#if TWICE_X == 4\n#error X = 2 spills\n#endif\n'
              'extern "C" __global__ void k(float* y) { y[threadIdx.x] = X; }\n')
    spec = CandidateSpec(name="guarded", source=source, entry="k", grid=["1"], block=["32"], proposer="tune")
    best = Best(spec=spec, score_ms=1.0, cases=[], iteration=1)
    tuner, history = TuneProposer(0, ahead=0), []
    for i in range(1, 3):
        p = tuner.propose(ProposalContext(load_workload(SGEMM), DeviceFacts(arch="sm_90"), i, "optimise", list(history),
                                          best, history[-1] if history else None))
        history.append(Attempt(iteration=i, name=p.spec.name, proposer="tune", status="ok", score_ms=1.0 + i,
                               defines=p.spec.defines))
    assert [a.defines["X"] for a in history] == [1, 3]
    assert 2 not in compiled and set(compiled) == {1, 3}


def test_a_neighbour_compiled_ahead_is_taken_before_one_that_must_compile():
    """The GPU should not wait on NVRTC: among the best point's neighbours, one whose compile
    already finished is proposed without compiling (or waiting for) the others."""
    import random

    from warpsmith.agent.proposers.knob_search import next_point
    from warpsmith.agent.spec.kernel_source import parse_knobs
    knobs = parse_knobs("// knob X: 1 2 3 4 5\n#define X 3\n")
    asked = []
    feasible = lambda d: asked.append(d["X"]) or True
    for seed in range(5):  # whatever the shuffle, the ready neighbour wins
        found = next_point(knobs, {}, {(("X", 3),): 1.0}, feasible, random.Random(seed),
                           ready=lambda d: d["X"] == 4, prefetch=lambda points: None)
        assert found == {"X": 4}
    assert asked == []
    # Nothing ready: the neighbours are prefetched together, then judged in the shuffled order.
    prefetched = []
    found = next_point(knobs, {}, {(("X", 3),): 1.0}, feasible, random.Random(0),
                       ready=lambda d: False, prefetch=prefetched.extend)
    assert sorted(d["X"] for d in prefetched) == [2, 4] and found == prefetched[0]


def test_a_ready_neighbour_of_the_runner_up_is_taken_before_the_best_must_compile():
    """Nothing around the best has compiled yet, a neighbour of the second best has: it is proposed at once,
    without blocking on a compile of one of the best's neighbours (a tree from the frontier)."""
    import random

    from warpsmith.agent.proposers.knob_search import next_point
    from warpsmith.agent.spec.kernel_source import parse_knobs
    knobs = parse_knobs("// knob X: 1 2 3 4 5\n// knob Y: 1 2 3\n#define X 3\n#define Y 1\n")
    scores = {(("X", 3), ("Y", 1)): 1.0, (("X", 1), ("Y", 3)): 1.5}
    asked = []
    for seed in range(5):
        found = next_point(knobs, {}, scores, lambda d: asked.append(d) or True, random.Random(seed),
                           ready=lambda d: d == {"X": 1, "Y": 2}, prefetch=lambda points: None)
        assert found == {"X": 1, "Y": 2}
    assert asked == []


@contextlib.contextmanager
def _held_pool():
    """A tuner of sgemm's tiled kernel (ahead=1) whose one compile-pool worker is held busy until the block ends:
    (tuner, its base spec, the knobs' defaults, the busy future)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    tuner = TuneProposer(0, kernel="tiled", ahead=1)
    base, knobs = tuner.base(ProposalContext(load_workload(SGEMM), DeviceFacts(), 1, "optimise", [], None, None))
    tuner.pool.executor, release = ThreadPoolExecutor(max_workers=1), threading.Event()
    try:
        busy = tuner.pool.executor.submit(release.wait, 600)  # held far longer than any compile; a bound all the same
        yield tuner, base, {k: kn.default for k, kn in knobs.items()}, busy
    finally:
        release.set()
        tuner.pool.executor.shutdown()


def test_a_needed_compile_queued_behind_guesses_is_compiled_at_once():
    """The compile pool busy with speculative work: a configuration the proposal needs now, still queued, is
    compiled in the proposing thread (real NVRTC) instead of waiting for the pool to reach it."""
    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    with _held_pool() as (tuner, base, defaults, busy):
        tuner.pool.submit(base, defaults, "sm_90", False)
        key = (source_tag(base.source), "sm_90", _key({**base.defines, **defaults}))
        queued = tuner.pool.compiles[key]
        assert tuner.pool.compiles_ok(base, defaults, "sm_90", False) is True
        assert queued.cancelled() and not busy.done() and tuner.pool.compiles[key] is True


def test_a_step_takes_only_compiled_neighbours_while_some_are_ready(monkeypatch):
    """Three neighbours of the best compiled already, the pool busy with guesses: a batch of four is the three
    ready ones (the first proposal among them) and nothing waits on NVRTC; the step's members then each get
    their neighbours queued for the next step, up to `depth`."""
    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    from warpsmith.agent.proposers.knob_search import neighbours_of

    def no_compile(*a):
        raise AssertionError("the step waited on NVRTC while compiled neighbours were ready")
    monkeypatch.setattr(compile_pool, "compile_config", no_compile)
    w = load_workload(SGEMM)
    history = run_search(0, 1, lambda d: 1.0)
    with _held_pool() as (tuner, base, defaults, busy):
        ctx = ProposalContext(w, DeviceFacts(arch="sm_90"), 2, "optimise", history, None, history[-1])
        ready = [n for n in neighbours_of(defaults, tuner.base(ctx)[1]) if tuner.launchable.allows(w, base, n)][:3]
        for n in ready:
            tuner.pool.compiles[(source_tag(base.source), "sm_90", _key({**base.defines, **n}))] = True
        batch = tuner.propose_batch(ctx, 4)
        assert sorted(_key(p.spec.defines) for p in batch) == sorted(_key({**base.defines, **n}) for n in ready)
        queued = [f for f in tuner.pool.compiles.values() if not isinstance(f, bool)]
        assert 0 < len(queued) <= tuner.compile_ahead.depth and not busy.done()


def test_the_first_step_is_compiled_while_the_plan_runs():
    """prepare() (called by the plan node before the baselines) queues the tuned kernel's defaults first, then
    the defaults' neighbours, up to `depth`; the first proposal is the defaults, taken from that compile."""
    from concurrent.futures import Future

    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    from warpsmith.agent.proposers.knob_search import neighbours_of
    w = load_workload(SGEMM)
    with _held_pool() as (tuner, base, defaults, busy):
        ctx = ProposalContext(w, DeviceFacts(arch="sm_90"), 1, "optimise", [], None, None)
        tuner.prepare(ctx)
        queued = [k for k, f in tuner.pool.compiles.items() if isinstance(f, Future)]
        key = lambda d: (source_tag(base.source), "sm_90", _key({**base.defines, **d}))
        assert queued[0] == key(defaults) and len(queued) == tuner.compile_ahead.depth
        assert set(queued[1:]) <= {key(n) for n in neighbours_of(defaults, tuner.base(ctx)[1])}
    tuner = TuneProposer(0, kernel="tiled", ahead=0)
    tuner.prepare(ProposalContext(w, DeviceFacts(arch="sm_90"), 1, "optimise", [], None, None))
    assert not tuner.pool.compiles  # compiling nothing ahead: nothing before the first proposal either


def test_last_rounds_guesses_not_wanted_any_more_are_dropped_from_the_queue():
    """Compile-ahead guesses still queued when the next proposal guesses again are cancelled unless wanted
    again, so the queue does not grow with every step; what is kept is what the next proposals look at."""
    import threading
    from concurrent.futures import Future, ThreadPoolExecutor

    from warpsmith.agent.proposers.compile_pool import COMPILE_NOW
    w = load_workload(SGEMM)
    tuner, facts = TuneProposer(0, kernel="tiled", ahead=3), DeviceFacts(arch="sm_90")
    tuner.pool.executor, release = ThreadPoolExecutor(max_workers=1), threading.Event()
    try:
        tuner.pool.executor.submit(release.wait, 600)
        history = []
        for i in range(1, 5):
            spec = tuner.propose(ProposalContext(w, facts, i, "optimise", list(history), None,
                                                 history[-1] if history else None)).spec
            history.append(Attempt(iteration=i, name=spec.name, proposer="tune", status="ok",
                                   score_ms=1.0 - i / 10, defines=spec.defines))  # each a new best
            queued = [f for f in tuner.pool.compiles.values() if isinstance(f, Future) and not f.done()]
            # the guesses, the proposal's own compile (the evaluator joins it), and the compile-now
            # threads still running an earlier proposal's (running: no longer cancellable)
            assert len(queued) <= tuner.compile_ahead.depth + 1 + COMPILE_NOW and not any(f.cancelled() for f in queued)
    finally:
        release.set()
        tuner.pool.executor.shutdown(cancel_futures=True)


def test_a_proposed_point_queued_behind_the_guesses_is_compiled_at_once(monkeypatch):
    """The compile-ahead threads are all busy (held here); the point the tuner proposes, queued
    among its guesses, leaves that queue for a compile-now thread, so the GPU does not wait
    for the guesses ahead of it. (NVRTC is a test double that names the thread it ran on.)"""
    import threading
    from concurrent.futures import Future, ThreadPoolExecutor

    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    ran_on = {}

    def named(base, defines, *args):
        ran_on[_key({**base.defines, **defines})] = threading.current_thread().name
        return True
    monkeypatch.setattr(compile_pool, "compile_config", named)
    w = load_workload(SGEMM)
    tuner, facts = TuneProposer(0, kernel="tiled", ahead=1), DeviceFacts(arch="sm_90")
    _clean_record(tuner, w.kernels["tiled"].source())
    tuner.pool.executor, release = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compile-ahead"), threading.Event()
    try:
        tuner.pool.executor.submit(release.wait, 600)  # every compile-ahead thread busy
        first = tuner.propose(ProposalContext(w, facts, 1, "optimise", [], None, None)).spec
        guesses = {k[2] for k, f in tuner.pool.compiles.items() if isinstance(f, Future) and k[2] != _key(first.defines)}
        history = [Attempt(iteration=1, name=first.name, proposer="tune", status="ok", score_ms=1.0,
                           defines=first.defines)]
        second = tuner.propose(ProposalContext(w, facts, 2, "optimise", history, None, history[-1])).spec
        assert _key(second.defines) in guesses  # it was queued behind the held thread
        for spec in (first, second):
            key = (source_tag(spec.source), "sm_90", _key(spec.defines))
            assert tuner.pool.compiles[key].result(timeout=60) is True
            assert ran_on[_key(spec.defines)].startswith("compile-now")
        assert not release.is_set()  # the compile-ahead thread is still held
    finally:
        release.set()
        tuner.pool.executor.shutdown(cancel_futures=True)


EXAMPLES = sorted(p for p in (SGEMM.parent).iterdir() if (p / "workload.toml").exists())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_shipped_kernel_is_proposed_at_its_defaults(example):
    """The tuner's first proposal for each kernel with knobs is that kernel's defaults: its
    static launch check resolves programs as the evaluator does (TMA arguments need the
    arrays' layouts; on the H200 bf16 wgmma_ws was once refused at all 384 points), and
    the best-kernel files (launch.json) are written for it."""
    from warpsmith.agent.evaluate.records import Best
    from warpsmith.agent.tracking.best_kernel import launch_json
    w = load_workload(example)
    for name, kernel in w.kernels.items():
        if not kernel.knobs():
            continue
        ctx = ProposalContext(w, DeviceFacts(), 1, "optimise", [], None, None)
        tuner = TuneProposer(0, kernel=name, ahead=0)
        base, knobs = tuner.base(ctx)
        p = tuner.propose(ctx)
        assert p.spec.defines == {**base.defines, **{k: kn.default for k, kn in knobs.items()}}, \
            f"{example.name}:{name}: its defaults were refused"
        launch_json(w, Best(spec=p.spec, score_ms=1.0, cases=[], iteration=1))


def test_a_batch_takes_neighbours_compiled_already_first():
    """Neighbours of the top-k points whose compile has finished (and passed) fill a batch before any that would
    have to compile now, whichever point's neighbourhood they are in."""
    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    from warpsmith.agent.proposers.knob_search import neighbours_of
    w = load_workload(SGEMM)
    tuner = TuneProposer(0, kernel="tiled", ahead=0)
    tuner.pool.submit = lambda *a: None  # nothing compiled speculatively: only what the test marks
    history = run_search(0, 3, lambda d: 1.0 + d["BM"] / 1000 + d["BN"] / 500 + d["BK"] / 300 + d["TM"] / 100)
    facts = DeviceFacts(arch="sm_90")
    base, knobs = tuner.base(ProposalContext(w, facts, 4, "optimise", history, None, history[-1]))
    worst = max(history, key=lambda a: a.score_ms)  # the third of the top three: its neighbours come last in turn
    tried = {_key(a.defines) for a in history}
    free = {k: kn for k, kn in knobs.items() if k not in base.defines}
    ready = [n for n in neighbours_of({k: worst.defines[k] for k in free}, free)
             if _key({**base.defines, **n}) not in tried and tuner.launchable.allows(w, base, n)][:3]
    assert len(ready) == 3
    for n in ready:
        tuner.pool.compiles[(source_tag(base.source), "sm_90", _key({**base.defines, **n}))] = True
    batch = tuner.propose_batch(ProposalContext(w, facts, 4, "optimise", history, None, history[-1]), 3)
    assert len(batch) == 3
    assert {_key(p.spec.defines) for p in batch[1:]} <= {_key({**base.defines, **n}) for n in ready}


def _session_on(w, score, steps: int, batch: int = 1) -> list[str]:
    """A tune session's kernels, attempt by attempt, over `steps` steps of `batch`: the best is the starting kernel
    (timed by the plan), then the fastest attempt so far (as the session keeps it), every attempt timed at
    score(kernel, defines) on every case."""
    from warpsmith.agent.evaluate.records import Best, CandidateSpec, CaseOutcome
    from warpsmith.agent.spec.candidate import Candidate
    perf = [c.name for c in w.cases if c.role == "performance"]
    start = CandidateSpec.from_candidate(Candidate.from_spec(w.kernels[w.start]), "start")
    ms = score(w.start, {})
    best = Best(spec=start, score_ms=ms, iteration=0,
                cases=[CaseOutcome(case=c, role="performance", status="ok", median_ms=ms) for c in perf])
    tuner, history = TuneProposer(0, ahead=0), []
    with contextlib.suppress(SearchExhausted):
        for _ in range(steps):
            ctx = ProposalContext(w, DeviceFacts(), len(history) + 1, "optimise", list(history), best,
                                  history[-1] if history else None)
            for p in tuner.propose_batch(ctx, batch):
                ms = score(p.spec.kernel, p.spec.defines)
                cases = [CaseOutcome(case=c, role="performance", status="ok", median_ms=ms) for c in perf]
                new_best = best is None or ms < best.score_ms
                history.append(Attempt(iteration=len(history) + 1, name=p.spec.name, proposer="tune", status="ok",
                                       score_ms=ms, defines=p.spec.defines, new_best=new_best, cases=cases))
                if new_best:
                    best = Best(spec=p.spec, score_ms=ms, cases=cases, iteration=len(history))
    return [a.kernel for a in history]


def test_a_kernel_not_tried_yet_gets_its_turn_after_the_main_kernels_own_three():
    """attention_bf16 as on an H100: rowwarp (the start) has four attempts, then flash_mma wins and becomes the main
    kernel; counted against flash2, rowwarp's turns kept it from ever getting one. flash2's defaults come once
    flash_mma has had its three. (Without the workload's `tune`, which starts the tuner on flash2.)"""
    w = dataclasses.replace(load_workload(SGEMM.parent / "attention_bf16"), tune="")
    # flash2 and fa3 slower: no takeover hides the turn
    speed = {"rowwarp": 29.0, "flash_mma": 0.7, "flash2": 0.9, "fa3": 1.0}
    kernels = _session_on(w, lambda k, d: speed[k] + sum(d.values()) / 1e4, steps=12)
    first = kernels.index("flash_mma")
    assert "flash2" in kernels[:first + 1 + 3 + 1], kernels


def test_once_the_main_kernels_space_is_used_up_the_others_take_every_turn():
    """flash_mma (2 knobs, 6 configurations) fastest and used up: the session goes on with flash2, fa3 and
    rowwarp, and ends only when every tunable kernel's space is used up, with steps of one kernel each."""
    w = load_workload(SGEMM.parent / "attention_bf16")
    speed = {"rowwarp": 29.0, "flash_mma": 0.5, "flash2": 0.9, "fa3": 1.0}
    for batch in (1, 4):
        kernels = _session_on(w, lambda k, d: speed[k] + sum(d.values()) / 1e4, steps=400, batch=batch)
        last_mma = max(i for i, k in enumerate(kernels) if k == "flash_mma")
        assert kernels.count("flash_mma") == 6 and "flash2" in kernels[last_mma + 1:], (batch, kernels)
        sizes = {k: math.prod(len(kn.values) for kn in w.kernels[k].knobs().values()) for k in speed}
        assert all(kernels.count(k) <= sizes[k] for k in ("flash2", "fa3", "rowwarp"))
        assert len(set(kernels)) == 4


def test_a_used_up_main_kernel_is_not_searched_again_on_every_proposal(monkeypatch):
    """Once the main kernel's space is used up the tuner remembers it (until the best changes): each later
    proposal goes straight to the other kernels instead of searching the used-up space again."""
    w = load_workload(SGEMM.parent / "attention_bf16")
    speed = {"rowwarp": 29.0, "flash_mma": 0.5, "flash2": 0.9, "fa3": 1.0}
    searched = []
    real = TuneProposer._propose

    def spy(self, ctx, kernel=None, focus=None):
        searched.append(kernel or self.base(ctx)[0].kernel)
        return real(self, ctx, kernel, focus)
    monkeypatch.setattr(TuneProposer, "_propose", spy)
    kernels = _session_on(w, lambda k, d: speed[k] + sum(d.values()) / 1e4, steps=30)
    after = len(kernels) - 1 - kernels[::-1].index("flash_mma")
    assert kernels[after + 1:] and searched.count("flash_mma") <= kernels.count("flash_mma") + 1, searched


def test_the_workloads_tune_kernel_goes_before_a_slow_starting_kernel():
    """attention_bf16 starts from rowwarp (29 ms, with a knob) and names flash2 as its `tune` kernel: the tuner's first
    proposals are flash2's, not rowwarp's neighbours (29 ms a launch); rowwarp still gets a turn later."""
    w = load_workload(SGEMM.parent / "attention_bf16")
    assert w.tune == "flash2"
    speed = {"rowwarp": 29.0, "flash_mma": 0.7, "flash2": 0.5, "fa3": 1.0}
    kernels = _session_on(w, lambda k, d: speed[k] + sum(d.values()) / 1e4, steps=8)
    assert kernels[:3] == ["flash2"] * 3 and "rowwarp" in kernels, kernels


def test_before_any_best_the_tuner_aims_where_its_first_proposal_will():
    """During the plan (no best yet, what prepare() compiles ahead): the `tune` kernel when the workload names one,
    else the starting kernel when it has knobs (the first proposal tunes it), else the one with most knobs."""
    w = load_workload(SGEMM.parent / "attention_bf16")
    ctx = lambda w: ProposalContext(w, DeviceFacts(), 1, "optimise", [], None, None)
    assert TuneProposer(0, ahead=0).base(ctx(w))[0].name.startswith("flash2")
    assert TuneProposer(0, ahead=0).base(ctx(dataclasses.replace(w, tune="")))[0].name.startswith("rowwarp")
    sgemm = load_workload(SGEMM)  # naive, no knobs, and no `tune`: the kernel with most knobs
    most = max(sgemm.kernels.values(), key=lambda k: len(k.knobs())).name
    assert TuneProposer(0, ahead=0).base(ctx(dataclasses.replace(sgemm, tune="")))[0].name.startswith(most)


def _identity(w, kernel: str) -> dict[str, str]:
    """A tuned configuration's identity fields: the names above are for people and not read."""
    from warpsmith.agent.proposers.compile_pool import source_tag
    from warpsmith.agent.spec.candidate import Candidate
    return {"kernel": kernel, "tag": source_tag(Candidate.from_spec(w.kernels[kernel]).source)}


def _tf32x3_attempts(w, n: int, status: str = "ok", **defines) -> list[Attempt]:
    from warpsmith.agent.evaluate.records import CaseOutcome
    perf = [c.name for c in w.cases if c.role == "performance"]
    out = []
    for i in range(n):
        d = {**{k: kn.default for k, kn in w.kernels["tf32x3"].knobs().items()}, "GROUP": (1, 8, 16)[i % 3], **defines}
        out.append(Attempt(iteration=i + 1, name=f"tf32x3 {i} {status}", **_identity(w, "tf32x3"), proposer="tune",
                           status=status, score_ms=1.0 if status == "ok" else None, defines=d,
                           cases=[CaseOutcome(case=c, role="performance", status=status, median_ms=1.0)
                                  for c in perf] if status == "ok" else []))
    return out


def test_a_turn_proposed_ahead_counts_and_listed_kernels_go_first():
    """sgemm as on the H200 (steps of four proposed ahead): with turns in flight uncounted, tiled got a second turn
    while its first was still in flight, and the split-K kernels none in 20 attempts. A turn in flight counts; among
    the kernels not tried yet, one the workload lists settings for (tf32x3_splitk: SPLITK=32 suits the long-K case)
    goes first."""
    from warpsmith.agent.evaluate.records import CandidateSpec
    from warpsmith.agent.spec.candidate import Candidate
    w = load_workload(SGEMM)
    perf = [c.name for c in w.cases if c.role == "performance"]
    history = _tf32x3_attempts(w, 3)
    tiled = CandidateSpec.from_candidate(Candidate.from_spec(w.kernels["tiled"]), "tune")
    ctx = ProposalContext(w, DeviceFacts(), 4, "optimise", history, _sgemm_best(w, {c: 1.0 for c in perf}), None,
                          in_flight=(tiled,))
    assert TuneProposer(0, ahead=0)._other_turn(ctx)[0] == "tf32x3_splitk"
    ctx = dataclasses.replace(ctx, in_flight=())
    assert TuneProposer(0, ahead=0)._other_turn(ctx)[0] == "tf32x3_splitk"  # listed settings first even so


def test_a_knob_value_that_was_only_ever_wrong_is_proposed_last():
    """tf32x3's FLUSH=0 accumulates in the tensor cores and is wrong on every case of K >= 1024: after two wrong
    attempts with it (and passes without it) no neighbour with FLUSH=0 is proposed while others remain."""
    from warpsmith.agent.proposers.knob_search import doomed_values
    w = load_workload(SGEMM)
    history = _tf32x3_attempts(w, 3) + _tf32x3_attempts(w, 2, status="wrong_answer", FLUSH=0)
    history = [a.model_copy(update={"iteration": i}) for i, a in enumerate(history, 1)]
    assert doomed_values(history) == {("FLUSH", 0)}
    assert doomed_values(history[:4]) == set()  # one wrong attempt is not a pattern
    perf = [c.name for c in w.cases if c.role == "performance"]
    tuner, best = TuneProposer(0, kernel="tf32x3", ahead=0), _sgemm_best(w, {c: 1.0 for c in perf})
    for step in range(12):
        ctx = ProposalContext(w, DeviceFacts(), len(history) + 1, "optimise", list(history), best, None)
        proposals = [tuner.propose(ctx)] if step % 2 else tuner.propose_batch(ctx, 4)
        assert all(p.spec.defines["FLUSH"] == 1 for p in proposals), [p.spec.name for p in proposals]
        history += [Attempt(iteration=len(history) + 1, name=p.spec.name, proposer="tune", status="ok", score_ms=2.0,
                            defines=p.spec.defines) for p in proposals]


def test_a_listed_setting_is_never_held_back_by_a_value_only_ever_wrong():
    """A workload's listed setting is a measurement: proposed even when one of its values was only ever wrong in
    the session (the culprit may be another knob the wrong attempts shared)."""
    w = load_workload(SGEMM)
    listed = {"FLUSH": 0, "BK": 16}
    w = dataclasses.replace(w, kernels={**w.kernels, "tf32x3": dataclasses.replace(w.kernels["tf32x3"],
                                                                                   configs=(listed,))})
    history = _tf32x3_attempts(w, 3) + _tf32x3_attempts(w, 2, status="wrong_answer", FLUSH=0)
    history = [a.model_copy(update={"iteration": i}) for i, a in enumerate(history, 1)]
    perf = [c.name for c in w.cases if c.role == "performance"]
    ctx = ProposalContext(w, DeviceFacts(), len(history) + 1, "optimise", history, _sgemm_best(w, {c: 1.0 for c in perf}),
                          None)
    p = TuneProposer(0, kernel="tf32x3", ahead=0).propose(ctx)
    assert {k: p.spec.defines[k] for k in listed} == listed, p.spec.name


def test_another_kernels_listed_settings_each_get_a_turn_before_the_fastest_on_thefocus_case():
    """sgemm as on an H100 (40 attempts): with one turn per kernel for its listed settings too, tf32x3_splitk had
    one (its defaults, SPLITK=32), then splitk_warptile, fastest on 128x4096x4096, took the turns, and the listed
    SPLITK=4 settings for that case never came. Each listed setting of another kernel gets a turn of its own, after
    which the usual rule (fastest on the focus case, least tried) holds."""
    from warpsmith.agent.evaluate.records import CaseOutcome
    w = load_workload(SGEMM)
    perf = [c.name for c in w.cases if c.role == "performance"]

    def main_turns() -> list[Attempt]:  # tf32x3's, 4x behind on 128x4096x4096: the focus case
        return [a.model_copy(update={"iteration": len(history) + i, "cases": [
            c.model_copy(update={"median_ms": 4.0}) if c.case == "128x4096x4096" else c for c in a.cases]})
            for i, a in enumerate(_tf32x3_attempts(w, 3), 1)]

    history: list[Attempt] = []
    history += main_turns()

    def turn(kernel: str, focus_ms: float, **defines) -> Attempt:
        spec = w.kernels[kernel]
        d = {**{k: kn.default for k, kn in spec.knobs().items()}, **defines}
        return Attempt(iteration=len(history) + 1, name=f"{kernel} {len(history)}", **_identity(w, kernel),
                       proposer="tune", status="ok",
                       score_ms=2.0, defines=d,
                       cases=[CaseOutcome(case=c, role="performance", status="ok",
                                          median_ms=focus_ms if c == "128x4096x4096" else 3.0) for c in perf])

    # Every other kernel tried; tf32x3_padded again until the others' turns leave the final
    # turn below to the fastest (two turns in three) and not to the least tried.
    others = [n for n, k in w.kernels.items() if k.knobs() and n not in ("tf32x3", "tf32x3_splitk", "splitk_warptile")]
    for kernel in ["tf32x3_splitk", *others]:
        history.append(turn(kernel, 5.0))
    # the settings listed for the focus case's sizes (not the narrow tile, written for N <= 32)
    configs = w.kernels["tf32x3_splitk"].listed_for(w.case("128x4096x4096").sizes)
    assert len(configs) < len(w.kernels["tf32x3_splitk"].configs)
    while (len(history) - 3 + 1 + len(configs)) % 3 == 2:
        history.append(turn("tf32x3_padded", 5.0))
    history.append(turn("splitk_warptile", 3.5))  # the fastest on the focus case
    history += main_turns()
    best = _sgemm_best(w, {c: (1.0 if c != "128x4096x4096" else 4.0) for c in perf})
    tuner = TuneProposer(0, ahead=0)
    for config in configs:
        ctx = ProposalContext(w, DeviceFacts(), len(history) + 1, "optimise", list(history), best, None)
        assert tuner._other_turn(ctx) == ("tf32x3_splitk", "128x4096x4096")
        p = tuner.propose(ctx).spec
        assert p.name.startswith("tf32x3_splitk") and {k: p.defines[k] for k in config} == config, p.name
        history.append(turn("tf32x3_splitk", 5.0, **config))
        history += main_turns()
    ctx = ProposalContext(w, DeviceFacts(), len(history) + 1, "optimise", list(history), best, None)
    assert tuner._other_turn(ctx)[0] == "splitk_warptile"  # its listed settings tried: the usual rule again


def _wait_for_compiles(tuner) -> set:
    """Every compile the pool has queued, finished (the GPU's time on a step, in which the pool works): the keys
    NVRTC has accepted."""
    from concurrent.futures import CancelledError, Future
    for f in list(tuner.pool.compiles.values()):
        if isinstance(f, Future):
            with contextlib.suppress(CancelledError):
                f.result(timeout=300)
    return {k for k, v in tuner.pool.compiles.items()
            if v is True or (isinstance(v, Future) and v.done() and not v.cancelled() and v.exception() is None
                             and v.result())}


def test_another_kernels_turn_finds_its_points_compiled_ahead(tmp_path):
    """tiled (the main kernel) stalled, so split-K's steps alternate with tiled's (real NVRTC, steps of four).
    While each step runs, the pool compiles the first points of the other kernel's next turn too (its defaults
    while untried, then the neighbours of its best): every member of a split-K step was compiled before the step
    was proposed. With only the kernel being proposed compiled ahead, the GPU of one H100 waited on NVRTC at most
    other-kernel turns."""
    from warpsmith.agent.evaluate.records import CaseOutcome
    from warpsmith.agent.proposers.compile_pool import defines_key as _key
    from warpsmith.agent.proposers.compile_pool import source_tag
    from warpsmith.agent.proposers.tune_ahead import OTHERS_AHEAD
    w, best, baseline = _tiled_and_splitk(tmp_path)
    facts = DeviceFacts(arch="sm_90")
    tuner, history, splitk_steps = TuneProposer(0, ahead=2), [], 0
    for step in range(6):
        ctx = ProposalContext(w, facts, len(history) + 1, "optimise", list(history), best, None, baseline)
        done = _wait_for_compiles(tuner)
        batch = tuner.propose_batch(ctx, 4)
        kernels = {p.spec.kernel for p in batch}
        if kernels == {"splitk"}:
            splitk_steps += 1
            missing = [p.spec.name for p in batch if (source_tag(p.spec.source), "sm_90", _key(p.spec.defines)) not in done]
            assert not missing, f"step {step}: {missing} not compiled before the step"
        for p in batch:
            history.append(Attempt(iteration=len(history) + 1, name=p.spec.name, proposer="tune", status="ok",
                                   score_ms=1.0, defines=p.spec.defines,
                                   cases=[CaseOutcome(case=c, role="performance", status="ok", median_ms=1.0)
                                          for c in ("square-1024", "long-k")]))
    assert splitk_steps >= 2  # its first turn (the defaults) and a turn from its neighbours
    splitk = source_tag(w.kernels["splitk"].source())
    queued = [k for k, f in tuner.pool.compiles.items() if k[0] == splitk and not isinstance(f, bool) and not f.done()]
    assert len(queued) <= OTHERS_AHEAD  # another kernel's guesses are a few, not a second full queue
    _wait_for_compiles(tuner)


def test_the_tuner_knows_its_attempts_by_their_identity_fields_not_their_names():
    """kernel and tag are fields: a configuration named anything counts as tf32x3's when its fields say so, and a
    name in the tuner's form with other fields does not. Only a record without the fields (stored before they
    existed) is read from its name."""
    from warpsmith.agent.evaluate.records import CandidateSpec
    from warpsmith.agent.proposers.tune_target import attempts_on, tune_base
    w = load_workload(SGEMM)
    ctx = lambda history=(): ProposalContext(w, DeviceFacts(), 9, "optimise", list(history), None, None)
    c = ctx()
    base, _ = tune_base(c, "tf32x3", "tune")
    proposal = TuneProposer(0, ahead=0, kernel="tf32x3").propose(c).spec
    assert (proposal.kernel, proposal.tag) == (base.kernel, base.tag) == ("tf32x3", _identity(w, "tf32x3")["tag"])
    ours = Attempt(iteration=1, name="renamed", **_identity(w, "tf32x3"), proposer="tune", status="ok")
    other = Attempt(iteration=2, name=proposal.name, kernel="tiled", tag=base.tag, proposer="tune", status="ok")
    assert attempts_on(ctx([ours, other]), base, "tune") == [ours]
    stored = {"iteration": 3, "name": "tf32x3@1a2b3c4d[BM=128]", "proposer": "tune", "status": "ok"}
    assert (Attempt.model_validate(stored).kernel, Attempt.model_validate(stored).tag) == ("tf32x3", "1a2b3c4d")
    spec = CandidateSpec(name="llm-3", source="", entry="k", grid=["1"], block=["1"])
    assert (spec.kernel, spec.tag) == ("llm-3", "")


def test_the_focus_moves_on_from_a_case_searched_without_progress():
    """A case searched FOCUS_PATIENCE times since its best last moved by 1% (bf16_gemm's ragged
    case on an H100: 182 of 225 attempts, its best found at attempt 35) hands the focus to the
    case next by gap; attempts in flight count; once every open case has used its patience, the
    largest gap is the focus again, and progress on a case gives it its patience back."""
    from warpsmith.agent.evaluate.records import CaseOutcome
    from warpsmith.agent.proposers.kernel_turns import FOCUS_PATIENCE, focus_case
    w = load_workload(SGEMM)
    perf = [c.name for c in w.cases if c.role == "performance"]
    worst, next_worst = perf[0], perf[1]
    best = _sgemm_best(w, {c: 1.0 for c in perf} | {worst: 3.0, next_worst: 2.0})
    base = {c: 1.0 for c in perf}

    def tried(i: int, focus: str, ms: float) -> Attempt:
        return Attempt(iteration=i, name=f"tf32x3@x[BM={i}]", proposer="tune", status="ok", score_ms=1.0, focus=focus,
                       cases=[CaseOutcome(case=focus, role="performance", status="ok", median_ms=ms)])
    ctx = lambda history, in_flight=(): ProposalContext(w, DeviceFacts(), 99, "optimise", history, best, None, base,
                                                        in_flight=tuple(in_flight))
    # The first attempt sets the worst case's fastest; then FOCUS_PATIENCE - 1 no faster, and one 0.5% faster (noise).
    stuck = [tried(1, worst, 3.0)] + [tried(i, worst, 3.0) for i in range(2, FOCUS_PATIENCE + 1)] + \
        [tried(FOCUS_PATIENCE + 1, worst, 2.985)]
    assert focus_case(ctx(stuck[:-1])) == worst  # one attempt of patience left
    assert focus_case(ctx(stuck)) == next_worst
    spec = best.spec.model_copy(update={"name": "tf32x3@x[BM=7]", "focus": worst})
    assert focus_case(ctx(stuck[:-1], [spec])) == next_worst  # the attempt in flight is its last
    both = stuck + [tried(100 + i, next_worst, 2.0) for i in range(FOCUS_PATIENCE + 1)]
    assert focus_case(ctx(both)) not in (worst, next_worst)  # a case tied with the library, patience untouched
    every = both + [tried(1000 * (j + 1) + i, case, 1.0) for j, case in enumerate(perf[2:])
                    for i in range(FOCUS_PATIENCE + 1)]
    assert focus_case(ctx(every)) == worst  # every open case stale: the largest gap
    assert focus_case(ctx(stuck + [tried(200, worst, 2.9)])) == worst  # 3% faster: progress, patience back
    # Steps of 0.6% add up: the second is 1.2% under the anchor, progress.
    creep = stuck[:-1] + [tried(300, worst, 3.0 * 0.994), tried(301, worst, 3.0 * 0.994 ** 2)]
    assert focus_case(ctx(creep)) == worst
