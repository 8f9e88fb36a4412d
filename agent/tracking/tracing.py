"""--trace: MLflow's LangChain autologging, so every model call (prompt, answer,
tokens, latency) becomes an MLflow trace in the workload's experiment. Optional
and best effort: where it cannot be switched on, one warning line and the
session goes on untraced. The API key is never part of a trace (it lives in
the client's headers, which autologging does not record)."""

from __future__ import annotations

import sys

from .tracker import Tracker


def enable_tracing(tracker: Tracker, experiment: str) -> bool:
    try:
        import mlflow
        import mlflow.langchain
        mlflow.set_tracking_uri(tracker.uri)
        mlflow.set_experiment(experiment_id=tracker.experiment(experiment))  # traces' artifacts in the store
        mlflow.langchain.autolog(log_traces=True, silent=True)
        return True
    except Exception as e:  # an mlflow without the LangChain flavour, an unreachable store...
        print(f"warpsmith: warning: --trace is off: {type(e).__name__}: {e}", file=sys.stderr)
        return False
