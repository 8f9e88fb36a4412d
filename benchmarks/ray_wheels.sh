#!/usr/bin/env bash
# The wheels a GPU call of the Ray backend carries (the GPU machine downloads nothing and a
# call carries at most 64 MiB): Ray's core (79 MB as published; without its Java jar, 31 MB
# for Java workers, and the libraries on top of the core), Ray's dependencies, and .whl's
# wheels less MLflow's and the model client's (a tune session with --no-tracking imports
# neither).
#
#   bash benchmarks/ray_wheels.sh          # writes .whl-ray/ (keep it untracked, like .whl)
#   WS_WHEELS=.whl-ray bash benchmarks/gpu_check.sh tests/test_gpu_ray.py   # on the GPU machine
#
# pip installs a wheel without checking its RECORD against the files, so the slimmed wheel
# installs as the original would, less the removed files.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .whl ] || { echo "no .whl/: download the project's wheels first (docs/development.md)"; exit 1; }
out=.whl-ray
rm -rf "$out" && mkdir -p "$out"
platform=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
python3 -m pip download -q "${platform[@]}" -d "$out/all" "ray>=2.9"
for w in .whl/*.whl; do
  case "$(basename "$w")" in
    # MLflow's, the model client's (the tune proposer never imports it) and the snapshot tests'
    mlflow*|sqlalchemy*|alembic*|cryptography*|databricks*|flask*|werkzeug*|gunicorn*|openai*|tiktoken*|\
    langchain_openai*|pytest_textual*|syrupy*|scikit_build*) ;;
    *) cp "$w" "$out/" ;;
  esac
done
for w in "$out"/all/*.whl; do
  case "$(basename "$w")" in
    numpy*) ;;  # the image's own stays
    ray-*)
      # Nor the libraries on top of Ray's core, nor the dashboard's web client (the backend
      # starts Ray with include_dashboard=False). Entry by entry, so each keeps its mode bits
      # (gcs_server and raylet are executables; an extract-and-zip loses that).
      python3 - "$w" "$out/$(basename "$w")" <<'PY'
import sys, zipfile
drop = tuple(f"ray/{d}/" for d in ("jars", "rllib", "data", "serve", "tune", "train", "llm", "dashboard/client"))
with zipfile.ZipFile(sys.argv[1]) as zin, zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as zout:
    for info in zin.infolist():
        if not info.filename.startswith(drop):
            zout.writestr(info, zin.read(info))
PY
      ;;
    *) [ -e "$out/$(basename "$w")" ] || cp "$w" "$out/" ;;
  esac
done
rm -rf "$out/all"
du -sh "$out"
