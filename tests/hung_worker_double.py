"""For a machine with no GPU: the real WorkerProcess spawn path and the real
worker_main, with the GPU replaced by a double that never returns (as a kernel
stuck in `while (1);` would). Run as a script it is the parent, warpsmith's part:
it starts a WorkerProcess and waits for it; tests/test_parent_watch.py SIGKILLs it.
The hung worker writes its pid to $HUNG_WORKER_MARKER once it hangs.

    python hung_worker_double.py
"""

import os
import time
from pathlib import Path


class HungGpuDouble:
    def __init__(self, ordinal: int, judge=None):
        marker = Path(os.environ["HUNG_WORKER_MARKER"])
        marker.with_suffix(".tmp").write_text(str(os.getpid()))
        os.replace(marker.with_suffix(".tmp"), marker)  # whole or absent: the test reads it once it exists
        while True:
            time.sleep(1)


def hung_worker_main(conn, ordinal, log_path=None, parent_pid=None, judge=None):
    import warpsmith.agent.worker.gpu_side
    warpsmith.agent.worker.gpu_side.GpuWorker = HungGpuDouble
    warpsmith.agent.worker.gpu_side.worker_main(conn, ordinal, log_path, parent_pid)


if __name__ == "__main__":
    import warpsmith.agent.worker.process
    warpsmith.agent.worker.process.worker_main = hung_worker_main  # what WorkerProcess starts, with its real arguments
    warpsmith.agent.worker.process.WorkerProcess(0, start_timeout_s=600)
