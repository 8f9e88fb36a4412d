"""Where a tracking store lives and what warpsmith sets before MLflow starts: the
store's folder and URI, telemetry off by default, and the experiment kind whose view
opens on the runs table. No MLflow import here: every tracking module reads these."""

from __future__ import annotations

import os
from pathlib import Path
from typing import MutableMapping

TELEMETRY_VAR = "MLFLOW_DISABLE_TELEMETRY"
# MLflow's experiment kind; "genai_development" opens on traces, this one on runs.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def default_store() -> Path:
    return Path.cwd() / "mlruns"


def tracking_uri(store: Path) -> str:
    return f"sqlite:///{store.resolve() / 'mlflow.db'}"


def telemetry_off_by_default(env: MutableMapping[str, str] = os.environ) -> None:
    """Before mlflow is imported or started: off, unless the user said otherwise."""
    env.setdefault(TELEMETRY_VAR, "true")
