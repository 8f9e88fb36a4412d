"""A real `warpsmith run` in the Textual app, driven by Pilot to the end on the
GPU machine; saves an SVG screenshot of the final screen.

    python3 benchmarks/tui_on_gpu.py WORKLOAD BUDGET OUT.svg
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from warpsmith.agent.cli.sessions import open_session
from warpsmith.agent.evaluate.options import EvaluationOptions
from warpsmith.agent.loop.options import SearchOptions
from warpsmith.agent.loop.session import SessionInfo, new_session_id, session_dir
from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.tracking.options import TrackingOptions
from warpsmith.tui.app import WarpsmithApp
from warpsmith.tui.screens.runs import RunsSource


async def drive(app: WarpsmithApp, out: Path) -> None:
    async with app.run_test(size=(180, 52)) as pilot:
        t0 = time.monotonic()
        while app.view.state not in ("finished", "stopped", "failed"):
            await pilot.pause(0.5)
        print(f"app reached '{app.view.state}' in {time.monotonic() - t0:.1f} s at iteration {app.view.iteration}"
              + (f": {app.error}" if app.error else ""))
        await pilot.pause(0.5)
        app.save_screenshot(out.name, str(out.parent))


def main() -> int:
    workload_dir, budget, out = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
    store = Path(tempfile.mkdtemp()) / "store"
    workload = load_workload(workload_dir)
    info = SessionInfo(new_session_id(workload.name), str(workload_dir.resolve()), SearchOptions(budget=budget))
    directory = session_dir(store, info.id)
    directory.mkdir(parents=True, exist_ok=True)
    session = open_session(info, directory, EvaluationOptions(), TrackingOptions(store))
    info.mlflow_run_id = session.tracker.start(workload.name, info.id, {"proposer": "tune", "budget": budget}) or ""
    info.save(directory)
    app = WarpsmithApp(session, RunsSource(session.tracker))
    asyncio.run(drive(app, out))
    session.end(app.status or "stopped")  # the app ended it already unless it was left paused
    session.close()
    if app.view.best_ms is not None:
        print(f"best {app.view.best_ms:.4f} ms ({(app.view.speedup or 0):.2f}x baseline); screenshot {out.name}")
    return 0 if app.status == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
