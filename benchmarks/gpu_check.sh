#!/usr/bin/env bash
# The GPU tests on a machine with an NVIDIA GPU, from the checkout's root:
#
#   bash benchmarks/gpu_check.sh                                        # every test marked gpu
#   bash benchmarks/gpu_check.sh tests/test_gpu_half.py tests/test_gpu_hopper.py   # some files
#
# A machine that downloads nothing gets the dependencies as wheels carried in .whl/
# (WS_WHEELS names another folder, e.g. .whl-ray from benchmarks/ray_wheels.sh for the Ray
# test): they are unpacked into /tmp/site, without an index or dependency resolution, and
# /tmp/site goes first on PYTHONPATH. The project is then built against what is installed.
# The exit status is pytest's: non-zero when a test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

wheels=${WS_WHEELS:-.whl}
if [ -d "$wheels" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
python3 -m pip install -q --no-build-isolation --no-deps .

# From the checkout's root, as the README runs the tests (they import the installed package).
python3 -m pytest -q -m gpu -p no:cacheprovider --durations=15 "${@:-tests}"
