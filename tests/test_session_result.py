"""The session's result: the dispatch where it pays, else the best, against the fastest library of each case."""

from warpsmith.agent.evaluate.dispatch import Dispatch, DispatchEntry
from warpsmith.agent.evaluate.records import Best, CandidateSpec, CaseOutcome
from warpsmith.agent.evaluate.session_result import LibraryTime, session_result


def _spec(name: str) -> CandidateSpec:
    return CandidateSpec(name=name, source="", entry="k", grid=["1"], block=["32"])


def _best() -> Best:
    return Best(spec=_spec("tiled"), score_ms=2.0, iteration=3, cases=[
        CaseOutcome(case="square", role="performance", status="ok", median_ms=1.0, pct_of_floor=0.8),
        CaseOutcome(case="long-k", role="performance", status="ok", median_ms=4.0, pct_of_floor=0.1)])


LIBRARIES = {"square": LibraryTime(kind="cublas_sgemm", median_ms=1.1), "long-k": LibraryTime(kind="torch_eager", median_ms=1.0)}


def test_the_best_single_variant_is_the_result_without_a_dispatch():
    """No dispatch: the best's medians, each against the fastest library there, with the floor."""
    r = session_result(_best(), None, LIBRARIES)
    assert r.served_by == "best" and [round(c.speedup, 3) for c in r.cases] == [1.1, 0.25]
    assert r.cases[0].pct_of_floor == 0.8 and "cublas_sgemm on 1, torch_eager on 1" in r.headline()


def test_a_dispatch_that_pays_is_the_result_beside_the_best_single_variant():
    """A paying dispatch gives each case its variant's time; the best single variant's re-timed time stays beside it."""
    d = Dispatch(variants=[_spec("tiled"), _spec("split")], score_ms=1.0, single_score_ms=2.0,
                 entries=[DispatchEntry(case="square", sizes={"M": 4096}, variant=0, median_ms=1.0),
                          DispatchEntry(case="long-k", sizes={"M": 256}, variant=1, median_ms=0.5)],
                 times=[[1.0, 4.2], [2.0, 0.5]])
    r = session_result(_best(), d, LIBRARIES)
    assert r.served_by == "dispatch" and [c.variant for c in r.cases] == ["tiled", "split"]
    assert [c.single_ms for c in r.cases] == [1.0, 4.2] and r.cases[1].speedup == 2.0
    assert r.cases[1].pct_of_floor == 0.1 * 4.0 / 0.5  # the same floor, at the dispatch's time
    assert r.speedup == (1.1 * 2.0) ** 0.5 and r.headline().startswith("result: dispatch")


def test_a_dispatch_that_does_not_pay_leaves_the_best():
    """Within noise of the best single variant: the best is the result."""
    d = Dispatch(variants=[_spec("tiled"), _spec("split")], score_ms=1.999, single_score_ms=2.0,
                 entries=[DispatchEntry(case="square", sizes={}, variant=0, median_ms=1.0)])
    assert session_result(_best(), d, {}).served_by == "best"
    assert session_result(_best(), d, {}).speedup is None
