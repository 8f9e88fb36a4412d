"""Print the Triton kernels torch.compile generates for a workload's PyTorch baseline,
so a hand-written kernel can be compared with the one it has to beat (launch shape,
the loads' eviction hints, how a row maps to threads).

    python benchmarks/inductor_source.py examples/rmsnorm_bf16 8192x8192 > rmsnorm-inductor.py.txt

The second argument names a case of the workload; its inputs are random tensors of the
case's shapes and dtypes (the values do not change the generated code). A one-line
summary of the launch heuristics goes to stderr.
"""

from __future__ import annotations

import re
import sys

from warpsmith.agent.spec.workload import load_workload
from warpsmith.agent.spec.workload_model import ArrayParam
from warpsmith.agent.worker.torch_baseline import load_baseline


def main(workload_dir: str, case_name: str) -> None:
    import torch
    from torch._inductor.utils import run_and_get_code

    w = load_workload(workload_dir)
    if not w.baseline.torch:
        raise SystemExit(f"{w.name} has no PyTorch baseline ([baseline] torch)")
    case = w.case(case_name)
    kwargs: dict = {}
    for p in w.params:
        if isinstance(p, ArrayParam):
            if p.role == "input":
                kwargs[p.name] = torch.randn(w.shape(p, case), device="cuda").to(getattr(torch, p.dtype))  # same names
        else:
            kwargs[p.name] = p.arg(case)[1]
    fn = torch.compile(load_baseline(w.baseline.torch), dynamic=False)
    _, sources = run_and_get_code(lambda: fn(**kwargs))
    for source in sources:
        print(source)
    found = {m.group(0) for s in sources
             for m in re.finditer(r"num_warps=\d+|num_stages=\d+|'[XR]\d?_?BLOCK': \d+|eviction_policy='\w+'", s)}
    print(f"# {w.name} {case_name}: " + ", ".join(sorted(found)), file=sys.stderr)


if __name__ == "__main__":
    main(*sys.argv[1:])
