"""Compare a workload's reference with a second draft on the same seeded inputs,
case by case, for the cases cheap enough on the CPU. Runs as its own process
(the caller holds the time limit); prints one JSON line per case.

    python -P -m warpsmith.agent.drafting.reference_check WORKLOAD_DIR SECOND_REFERENCE.py
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from ..runtime.parent_watch import exit_with_warpsmith
from ..spec.cpu_budget import cheap
from ..spec.inputs import ReferenceFailed
from ..spec.references import compute_reference
from ..spec.tolerance import case_rtol, relative_error, same_nonfinite
from ..spec.workload import load_workload

SEED = 7  # neither the evaluator's seed nor its fresh one


def main(argv: list[str]) -> int:
    exit_with_warpsmith()  # the model-written references must not outlive warpsmith
    w = load_workload(Path(argv[0]))
    other = dataclasses.replace(w, reference_path=Path(argv[1]).resolve())
    for case in w.cases:
        if not cheap(w, case):
            print(json.dumps({"case": case.name, "agree": True, "detail": "skipped"}))
            continue
        try:
            a, b = compute_reference(w, case, SEED), compute_reference(other, case, SEED)
        except ReferenceFailed as e:
            print(json.dumps({"case": case.name, "agree": False, "detail": str(e)}))
            continue
        worst, detail = 0.0, ""
        for p in w.outputs:
            x, y = a[p.name].astype(np.float64), b[p.name].astype(np.float64)
            odd = ~np.isfinite(x) | ~np.isfinite(y)
            if (odd & ~same_nonfinite(y, x)).any():  # NaN/inf where the other has a number, or another inf
                idx = np.unravel_index(int(np.argmax(odd)), x.shape)
                worst, detail = float("inf"), f"{p.name}{list(idx)}: first {x[idx]:.9g}, second {y[idx]:.9g}"
                break
            err = relative_error(y, x, w.tolerance.per_row_scale)  # 0 where both hold the same NaN or infinity: all that is left of `odd`
            i = int(np.argmax(err))
            if err.flat[i] > worst:
                worst = float(err.flat[i])
                idx = np.unravel_index(i, x.shape)
                detail = f"{p.name}{list(idx)}: first {x[idx]:.9g}, second {y[idx]:.9g}"
        rtol = min(case_rtol(w, case, p.dtype) for p in w.outputs)
        print(json.dumps({"case": case.name, "agree": bool(worst <= rtol), "max_error": worst,
                          "detail": "" if worst <= rtol else f"relative error {worst:.3g} > {rtol:.3g} at {detail}"}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
