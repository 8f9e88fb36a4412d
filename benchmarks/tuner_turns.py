"""Which variant per shape does a tune session reach, given per-case times shaped like
the H200's? Runs a real session (LangGraph graph, the tune proposer, early rejection,
the dispatch at the end) on the sgemm example, where the
GPU is the tests' EvaluatorDouble (tests/evaluator_double.py): each case's time is a
function of the kernel and its knobs, modelled on an H200 sgemm bench (tf32x3 at
its bench times; tf32x3_splitk at the sweep's times per SPLITK on 128x4096x4096 and
256x256x131072; every other kernel 2.5x tf32x3). A model of the search, not a
measurement: it shows whether the turn policy (other kernels' turns, the stall rule,
listed configs, per-case early rejection) gets the right variant to each case within a
budget, and it runs without a GPU.

    python3 benchmarks/tuner_turns.py [ATTEMPTS] [--batch N]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from evaluator_double import EvaluatorDouble  # noqa: E402

from warpsmith.agent.loop.options import SearchOptions  # noqa: E402
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir  # noqa: E402
from warpsmith.agent.proposers.choice import ProposerChoice  # noqa: E402
from warpsmith.agent.proposers.tune import TuneProposer  # noqa: E402
from warpsmith.agent.spec.workload import load_workload  # noqa: E402
from warpsmith.agent.tracking.session_tracker import NullTracker  # noqa: E402

TF32X3_MS = {"square-1024": 0.053, "square-4096": 2.40, "rect-2048x8192x1024": 0.62, "128x4096x4096": 0.191,
             "4096x4096x256": 0.174, "256x256x131072": 5.9}
SPLITK_MS = {"128x4096x4096": {1: 0.19, 2: 0.12, 4: 0.093, 8: 0.0985, 16: 0.109, 32: 0.125, 64: 0.15},
             "256x256x131072": {1: 5.9, 2: 3.0, 4: 2.68, 8: 1.33, 16: 0.636, 32: 0.321, 64: 0.33}}


def case_ms(defines: dict, case: str) -> float:
    if "SPLITK" in defines and "FLUSH" in defines:  # tf32x3_splitk
        split = defines["SPLITK"]
        ms = SPLITK_MS[case][split] if case in SPLITK_MS else TF32X3_MS[case] * (1 + 0.08 * split ** 0.5)
        return ms * (1.0 if defines.get("STAGES") == 3 else 1.02)
    if "FLUSH" in defines:  # tf32x3
        return TF32X3_MS[case] * (1.0 if defines.get("BN") == 64 else 1.1)
    return TF32X3_MS[case] * 2.5


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("attempts", nargs="?", type=int, default=40)
    p.add_argument("--batch", type=int, default=4)
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp())
    shutil.copytree(ROOT / "examples" / "sgemm", tmp / "sgemm")
    w = load_workload(tmp / "sgemm")
    ev = EvaluatorDouble(w, score=lambda d: 1.0, case_factor=case_ms)
    info = SessionInfo("tuner-turns", str(w.directory),
                       SearchOptions(ProposerChoice("tune"), args.attempts, batch=args.batch))
    s = Session(info, session_dir(tmp / "store", info.id), w, ev, TuneProposer(0, ahead=0), NullTracker())
    s.end(s.run())
    history, dispatch = s.state["history"], s.state.get("dispatch")
    s.close()
    turns: dict[str, int] = {}
    for a in history:
        turns[a.kernel] = turns.get(a.kernel, 0) + 1
    print(f"{len(history)} attempts, batch {args.batch}; attempts per kernel: "
          + ", ".join(f"{k} {n}" for k, n in sorted(turns.items(), key=lambda kv: -kv[1])))
    if dispatch is None:
        print("no dispatch: one variant serves every case")
        return 0
    for e in dispatch.entries:
        v = dispatch.variants[e.variant]
        print(f"{e.case}: {v.kernel} SPLITK={v.defines.get('SPLITK', '-')} {e.median_ms:.4f} ms (model)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
