"""NcuDouble: stands in for Nsight Compute's `ncu` on machines without a GPU.

Replays the raw CSV ncu printed for the sgemm example on the H200
(tests/fixtures/ncu-h200-sgemm-*.csv), one row per requested launch
(`--launch-count N`); the profiled program is not run. NCU_DOUBLE_MODE=perm
answers like a machine without counter permission; NCU_DOUBLE_MODE=hang starts
a child (the "profiled program"), writes its pid to $NCU_DOUBLE_PIDFILE and never
returns, like an ncu stuck on a kernel that hangs.
"""

import os
import sys
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "ncu-h200-sgemm-tiled.csv"


def main(argv: list[str]) -> int:
    if os.environ.get("NCU_DOUBLE_MODE") == "perm":
        print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
              "Counters on the target device 0.")
        return 1
    if os.environ.get("NCU_DOUBLE_MODE") == "hang":
        import subprocess
        import time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(os.environ["NCU_DOUBLE_PIDFILE"]).write_text(str(child.pid))
        time.sleep(600)
    launches = int(argv[argv.index("--launch-count") + 1])
    lines = FIXTURE.read_text().splitlines()
    head = [l for l in lines if not l.startswith('"')]
    rows = [l for l in lines if l.startswith('"')]
    print("\n".join(head + rows[:2] + rows[2:2 + launches]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
