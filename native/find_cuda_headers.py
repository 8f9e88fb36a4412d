"""Print the include directories holding cuda.h and nvrtc.h (';'-separated for CMake).

Looks in the nvidia-cuda-runtime / nvidia-cuda-nvrtc wheels first, then CUDA_HOME /
CUDA_PATH / /usr/local/cuda. Exits 1 when either header is missing.
"""
import importlib.util
import os
import sys
from pathlib import Path


def wheel_include_dirs():
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    dirs = []
    for root in spec.submodule_search_locations:
        dirs += sorted(Path(root).glob("cu*/include"))  # nvidia/cu13/include
        dirs += sorted(Path(root).glob("*/include"))  # older per-package layout
    return dirs


def toolkit_include_dirs():
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    return [Path(r) / "include" for r in roots if r]


def main():
    found = {}
    for d in wheel_include_dirs() + toolkit_include_dirs():
        for header in ("cuda.h", "nvrtc.h"):
            if header not in found and (d / header).is_file():
                found[header] = str(d)
    if len(found) < 2:
        missing = {"cuda.h", "nvrtc.h"} - found.keys()
        print(f"missing: {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    print(";".join(dict.fromkeys(found.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
