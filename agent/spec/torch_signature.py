"""What a workload's PyTorch baseline file must accept, checked without running it.

The worker calls ``baseline(**inputs, **scalars)``, and each variant's ``baseline_NAME``
alike: every input array and every scalar parameter by its name
(agent/worker/torch_baseline.py). A mismatch (a size named where a scalar parameter is
meant, a missing ``eps``) would otherwise surface only on the GPU,
as a TypeError inside the worker. The file is parsed with ``ast``, never imported: a
workload drafted by a model must not run on the host.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Optional, Sequence


def signature_problem(path: Path, inputs: Sequence[str], scalars: Sequence[str],
                      function: str = "baseline") -> Optional[str]:
    """None when `function` in `path` accepts `inputs` and `scalars` by name; else what is wrong, one line."""
    try:
        tree = ast.parse(path.read_text(), filename=path.name)
    except (SyntaxError, ValueError, UnicodeDecodeError) as e:
        return f"{path.name} does not parse: {e}"
    wanted = ", ".join(inputs) + (", *, " + ", ".join(scalars) if scalars else "")
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function), None)
    if fn is None:
        return f"{path.name} must define {function}({wanted})"
    a = fn.args
    named = [x.arg for x in a.args + a.kwonlyargs]  # positional-only ones cannot be passed by name
    missing = [n for n in (*inputs, *scalars) if n not in named]
    if missing and a.kwarg is None:
        return (f"{path.name}: {function}() is called with every input and scalar parameter by name and does not "
                f"accept {', '.join(missing)}: {function}({wanted})")
    optional = {x.arg for x in a.args[len(a.args) - len(a.defaults):]} | \
        {x.arg for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
    extra = [n for n in named if n not in (*inputs, *scalars) and n not in optional]
    if extra:
        return (f"{path.name}: {function}() asks for {', '.join(extra)}, which is neither an input nor a scalar "
                f"parameter: {function}({wanted})")
    return None
