#!/usr/bin/env bash
# GPU probes of session 24's harness attack, as they ran (the calls ran them from a folder .probe24 in the checkout)
cd "$(dirname "$0")"
mkdir -p "${OUT:-/tmp}/probes"
for p in ${PROBES:-ctx_isolation_probe}; do
  echo "=== $p"; timeout 120 python3 $p.py 2>&1 | tee "${OUT:-/tmp}/probes/$p.txt" | tail -40
done
