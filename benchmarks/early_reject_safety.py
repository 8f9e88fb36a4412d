"""Would early rejection ever have cut a winner? Replays the rule
(agent/evaluate/early_reject.py) over every recorded attempt of every session in a
store: each attempt's first launches per case (attempts/NNN/samples.json) against the
best score and the case winners it was timed against, and whether it became the new
best (attempts/NNN/attempt.json) or a case's new winner (its median below that case's). Prints, per session and in all, the attempts the rule
would cut and the winners among them, which must be zero, and how far the screens of the
candidates it kept bounded their later full medians (the margin must cover the worst).
Exits 1 if a winner is cut or a screen's bound exceeds its full median by the margin.

    python3 benchmarks/early_reject_safety.py [STORE ...]   (default: mlruns)
    python3 benchmarks/early_reject_safety.py STORE --margin 0.03   (a tighter margin, to see where it breaks)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from warpsmith.agent.evaluate.early_reject import Replay, replay, screen_slack  # noqa: E402
from warpsmith.agent.spec.timing_policy import MARGIN  # noqa: E402


def session_attempts(session: Path) -> list[tuple[dict, float | None, bool, dict | None]]:
    rows = []
    for samples in sorted(session.glob("attempts/*/samples.json")):
        data = json.loads(samples.read_text())
        if data.get("status") not in ("ok", "rejected_early"):
            continue  # failed while timing: no verdict on speed to replay
        attempt = samples.with_name("attempt.json")
        won = bool(json.loads(attempt.read_text()).get("new_best")) if attempt.exists() else False
        cases, case_best = data.get("cases") or {}, data.get("case_best_ms")
        if data["status"] == "ok" and case_best is not None:  # a case's new winner counts as a winner too
            won = won or any(s and (c not in case_best or statistics.median(s) < case_best[c]) for c, s in cases.items())
        rows.append((cases, data.get("best_ms"), won, case_best))
    return rows


def screen_pairs(session: Path) -> list[tuple[dict, dict]]:
    """(screen samples, full samples) per kept candidate whose screen was archived."""
    pairs = []
    for samples in sorted(session.glob("attempts/*/samples.json")):
        data = json.loads(samples.read_text())
        if data.get("screen") and data.get("status") == "ok":
            pairs.append((data["screen"], data.get("cases") or {}))
    return pairs


def slack_text(pairs: list[tuple[dict, dict]], margin: float) -> str:
    n, worst = screen_slack(pairs)
    return (f"screens kept and timed in full: {n} cases, worst screen bound / full median {worst:.3f} "
            f"(the rule is safe while under {1 + margin:.2f})") if n else "no archived screen of a kept candidate"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("stores", nargs="*", type=Path, default=[ROOT / "mlruns"])
    p.add_argument("--margin", type=float, default=MARGIN)
    args = p.parse_args(argv)
    everything, pairs = [], []
    for store in args.stores:
        for session in sorted((store / "sessions").glob("*")):
            rows = session_attempts(session)
            if rows:
                print(f"{session.name}: {replay(rows, args.margin).text()}")
                everything += rows
            pairs += screen_pairs(session)
    total: Replay = replay(everything, args.margin)
    print(f"all sessions (margin {args.margin:.0%}): {total.text()}")
    print(slack_text(pairs, args.margin))
    return 1 if total.winners_cut or screen_slack(pairs)[1] > 1 + args.margin else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
