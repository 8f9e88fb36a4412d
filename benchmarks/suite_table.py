"""The bench tables and the suite line from `warpsmith bench --json` outputs of separate
runs (one `bench` per workload keeps each table on disk as soon as it is measured):

    python3 benchmarks/suite_table.py bench-sgemm.json bench-softmax.json ...

Prints each workload's table as `warpsmith bench` does, then every workload against the
fastest library of each case and the suite's geomean (the measure docs/performance.md
reports). --suite prints only the latter.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from warpsmith.agent.cli.bench import WorkloadBench, render, render_suite


def main(argv: list[str]) -> int:
    suite_only = "--suite" in argv
    paths = [a for a in argv if a != "--suite"]
    if not paths:
        sys.exit(__doc__)
    results = []
    for p in paths:  # one unreadable run costs its own rows, not the suite line of the others
        try:
            results += [WorkloadBench.from_json(d) for d in json.loads(Path(p).read_text())]
        except (OSError, ValueError, TypeError) as e:
            print(f"suite_table: {p} left out: {e}", file=sys.stderr)
    parts = [] if suite_only else [render(r) for r in results]
    suite = render_suite(results)
    print("\n\n".join(parts + ([suite] if suite else [])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
