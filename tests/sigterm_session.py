"""Run a headless session the way `warpsmith run` drives it, with an EvaluatorDouble
standing in for the GPU, until a signal arrives (tests/test_sigterm.py sends one).

    python sigterm_session.py WORKLOAD_DIR STORE
"""

import sys
from argparse import Namespace
from pathlib import Path

from agent.cli_loop import _drive
from agent.proposers.tune import TuneProposer
from agent.session import Session, SessionInfo, session_dir
from agent.tracking import Tracker
from agent.workload import load_workload
from evaluator_double import EvaluatorDouble

workload, store = load_workload(Path(sys.argv[1])), Path(sys.argv[2])
info = SessionInfo("sig", str(workload.directory), "tune", 200)
directory = session_dir(store, "sig")
directory.mkdir(parents=True, exist_ok=True)
tracker = Tracker(store)
info.mlflow_run_id = tracker.start(workload.name, "sig", {"proposer": "tune"})
info.save(directory)
session = Session(info, directory, workload, EvaluatorDouble(workload, delay_s=0.1), TuneProposer(0, kernel="tiled"), tracker)
sys.exit(_drive(session, Namespace(headless=True)))
