"""The 16-bit tensor-core ceiling of this GPU, measured (issue 17: TFLOP/s beside a measured
bf16 ceiling, measured like the fp32 one): agent/worker/ceilings_probe.py's wgmma probe
(bf16 in, fp32 accumulate, operands from shared memory), beside the peak at the top SM
clock that the floor uses, and the clocks NVML reads around it.

    python3 benchmarks/tensor_ceiling.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if any(ROOT.glob("agent/_runner*.so")):  # a checkout with the module built in place; else the installed package
    sys.path.insert(0, str(ROOT))

from agent.runtime import native  # noqa: E402
from agent.spec.speed_of_light import tensor_peak_tflops  # noqa: E402
from agent.worker.ceilings_probe import measure_tensor_tflops  # noqa: E402
from agent.worker.clocks import Clocks  # noqa: E402


def main() -> int:
    try:
        device = native.open_device(0)
    except (native.CudaError, RuntimeError) as e:
        print(f"no usable GPU: {getattr(e, 'name', '')} {e}")
        return 1
    facts = native.device_facts(device)
    clocks = Clocks(facts.uuid)
    before = clocks.read()
    try:
        measured = measure_tensor_tflops(device, facts)
    except (native.CudaError, RuntimeError) as e:
        print(f"tensor-core probe failed: {getattr(e, 'name', '')} {e}")
        return 1
    after = clocks.read()
    peak = tensor_peak_tflops(facts)
    print(f"{facts.name}: bf16 tensor core (wgmma, fp32 accumulate) measured {measured:.0f} TFLOP/s; "
          f"peak at the top SM clock {peak:.0f} TFLOP/s ({measured / peak:.0%})" if peak else
          f"{facts.name}: bf16 tensor core measured {measured:.0f} TFLOP/s (no peak known)")
    said = lambda c: f"SM {c[0]} MHz, memory {c[1]} MHz" if c else "not read (no NVML)"
    print(f"clocks before: {said(before)}; after: {said(after)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
