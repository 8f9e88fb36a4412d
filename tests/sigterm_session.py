"""Run a headless session the way `warpsmith run` drives it, with an EvaluatorDouble
standing in for the GPU, until a signal arrives (tests/test_sigterm.py sends one).
With BASE_URL the llm proposer asks the model server there (a stalled double).

    python sigterm_session.py WORKLOAD_DIR STORE [BASE_URL]
"""

import sys
from pathlib import Path

from evaluator_double import EvaluatorDouble

from warpsmith.agent.cli.sessions import drive_session
from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import Session, SessionInfo, session_dir
from warpsmith.agent.proposers.choice import ProposerChoice
from warpsmith.agent.proposers.llm import LlmProposer
from warpsmith.agent.proposers.tune import TuneProposer
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.tracker import Tracker
from warpsmith.tui.cli import exit_promptly

workload, store = load_workload(Path(sys.argv[1])), Path(sys.argv[2])
base_url = sys.argv[3] if len(sys.argv) > 3 else ""
proposer = LlmProposer("gpt-5-mini", None, base_url) if base_url else TuneProposer(0, kernel="tiled")
info = SessionInfo("sig", str(workload.directory), SearchOptions(ProposerChoice(proposer.name, base_url=base_url), 200))
directory = session_dir(store, "sig")
directory.mkdir(parents=True, exist_ok=True)
tracker = Tracker(store)
info.mlflow_run_id = tracker.start(workload.name, "sig", {"proposer": proposer.name})
info.save(directory)
session = Session(info, directory, workload, EvaluatorDouble(workload, delay_s=0.1), proposer, tracker)
code = drive_session(session)
exit_promptly()  # as the `warpsmith` command does
sys.exit(code)
