"""Where a command keeps its sessions and MLflow runs, and the tracker it opens for them."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .session_tracker import SessionTracker


@dataclass(frozen=True)
class TrackingOptions:
    store: Path = Path("mlruns")  # --store: session folders (STORE/sessions/ID) and the MLflow store
    uri: Optional[str] = None  # --tracking-uri: another MLflow tracking server
    enabled: bool = True  # --no-tracking: False
    trace: bool = False  # --trace: an llm session's model calls traced in MLflow


def open_tracker(options: TrackingOptions) -> SessionTracker:
    """The MLflow tracker the options ask for, or one that records nothing."""
    from .session_tracker import NullTracker
    from .tracker import Tracker
    return Tracker(options.store, options.uri) if options.enabled else NullTracker()


def check_readable(options: TrackingOptions) -> None:
    """Before any GPU work or session folder: StoreUnreadable if MLflow is not installed, or
    the store exists and this mlflow cannot open it (agent/tracking/store_schema.py)."""
    if options.enabled:
        from .store_schema import StoreUnreadable, check_store
        if importlib.util.find_spec("mlflow") is None:  # a dependency, but an install can lack it
            raise StoreUnreadable("MLflow is not installed, so the session cannot be tracked: "
                                  "`pip install mlflow`, or run with --no-tracking")
        check_store(options.store, options.uri)
