#!/usr/bin/env bash
# One call on the GPU machine: build, doctor, GPU tests, example evaluations,
# the harness benchmark. Full logs go to $OUT (when set); a short table is last.
set -uo pipefail
OUT=${OUT:-/tmp/warpsmith-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 WARPSMITH_CACHE=/tmp/warpsmith-cache
step() { echo; echo "=== $* ==="; }

step build
wheels=${WS_WHEELS:-.whl}  # .whl-ray for a call of the Ray backend (benchmarks/ray_wheels.sh)
if [ -d "$wheels" ]; then  # the loop's dependencies, carried as wheels (nothing can be downloaded there)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheels"/*.whl > "$OUT/wheels.log" 2>&1 \
    || { tail -20 "$OUT/wheels.log"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-build-isolation --no-deps . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
profiler=""  # WS_PROFILE=1: the search-speed runs under py-spy (its wheel carried in .whl-tools), if it can sample here
if [ "${WS_PROFILE:-0}" != 0 ] && [ -d .whl-tools ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/tools .whl-tools/*.whl > "$OUT/tools.log" 2>&1
  if /tmp/tools/bin/py-spy record -r 100 -f raw -o /tmp/py-spy-try.txt -- python3 -c "sum(range(10**7))" >> "$OUT/tools.log" 2>&1; then
    profiler="/tmp/tools/bin/py-spy record -r 100 -f raw --threads --subprocesses -o"
  else
    echo "py-spy cannot sample on this machine (tools.log): the search runs unprofiled"
  fi
fi
if [ -n "${WS_BEFORE:-}" ]; then  # an older tree (e.g. git archive of the last commit before a harness change)
  case $WS_BEFORE in /*|./*|../*) before_path=$WS_BEFORE ;; *) before_path=./$WS_BEFORE ;; esac  # pip: a path, not a name
  python3 -m pip install -q --no-build-isolation --no-deps --target /tmp/before-site "$before_path" > "$OUT/build-before.log" 2>&1 \
    || { tail -40 "$OUT/build-before.log"; exit 1; }
fi
cd /tmp  # import the installed package, not the source tree

step doctor
warpsmith doctor 2>&1 | tee "$OUT/doctor.txt"
if [ "${WS_CEILING:-1}" != 0 ]; then  # the measured bf16 ceiling (issue 17); WS_CEILING=0 skips it in a short call
  python3 "$OLDPWD/benchmarks/tensor_ceiling.py" 2>&1 | tee "$OUT/tensor-ceiling.txt"  # its own process: a fault stays there
fi

if [ "${WS_NSIGHT:-1}" != 0 ]; then
  for kernel in naive tiled; do
    step "Nsight Compute on sgemm $kernel"
    python3 "$OLDPWD/benchmarks/nsight_once.py" "$OLDPWD/examples/sgemm" "$kernel" "$OUT/ncu" 2>&1 | tee "$OUT/nsight-$kernel.txt"
  done
fi

if [ "${WS_PYTEST:-1}" != 0 ]; then  # WS_PYTEST_FILES: some test files instead of all of tests/
  step "GPU tests, from the checkout's root as the README runs them"
  (cd "$OLDPWD" && python3 -m pytest -q -m gpu -p no:cacheprovider --durations=15 ${WS_PYTEST_FILES:-tests} 2>&1) | tee "$OUT/pytest-gpu.txt" | tail -30
fi

if [ -n "${WS_SWEEP:-}" ]; then  # e.g. WS_SWEEP='"" MINB=1 BK=16,MINB=1', WS_SWEEP_KERNEL=softmax:online
  target=${WS_SWEEP_KERNEL:-sgemm:warptile}
  step "knob sweep of $target"
  eval "python3 \"\$OLDPWD/benchmarks/knob_sweep.py\" \"\$OLDPWD/examples/${target%%:*}\" ${target#*:} $WS_SWEEP" 2>&1 | tee "$OUT/sweep.txt"
fi

if [ -n "${WS_PLAN:-}" ]; then  # a file of sweeps: "SECONDS WORKLOAD KERNEL SETTING..." per line, # comments
  while read -r line; do
    case "$line" in ''|'#'*) continue ;; esac
    eval "set -- $line"
    step "knob sweep of $2 $3 (at most $1 s)"
    (cd "$OLDPWD" && timeout "$1" python3 benchmarks/knob_sweep.py "examples/$2" "$3" "${@:4}" < /dev/null 2>&1) \
      | tee -a "$OUT/sweeps.txt" | tail -12
  done < "$(cd "$OLDPWD" && realpath "$WS_PLAN")"
fi

for pair in ${WS_INDUCTOR:-}; do  # e.g. WS_INDUCTOR="rmsnorm_bf16:8192x8192": torch.compile's kernels for a case
  step "torch.compile's Triton source for ${pair%%:*} ${pair#*:}"
  (cd "$OLDPWD" && python3 benchmarks/inductor_source.py "examples/${pair%%:*}" "${pair#*:}" \
    > "$OUT/inductor-${pair%%:*}-${pair#*:}.txt" 2> "$OUT/inductor-${pair%%:*}-${pair#*:}.err") \
    ; tail -3 "$OUT/inductor-${pair%%:*}-${pair#*:}.err"
done

for kernel in ${WS_KERNELS:-naive tiled}; do
  step "eval sgemm --kernel $kernel"
  warpsmith eval "$OLDPWD/examples/sgemm" --kernel "$kernel" 2>&1 | tee "$OUT/eval-$kernel.txt"
done

for pair in ${WS_EVALS:-}; do  # e.g. WS_EVALS="softmax:online gemm_bias_relu:warptile"
  step "eval ${pair%%:*} --kernel ${pair#*:}"
  (cd "$OLDPWD" && warpsmith eval "examples/${pair%%:*}" --kernel "${pair#*:}" 2>&1) | tee -a "$OUT/evals.txt" | tail -14
done

if [ -n "${WS_BEFORE:-}" ] && [ -n "${WS_ATTEMPT_BUDGET:-}" ]; then
  # The same tune session (the older tree's sgemm workload, so both see the same cases and
  # kernels) with the older and the current package: seconds per attempt.
  for side in before after; do
    site=$([ $side = before ] && echo /tmp/before-site: || echo "")
    step "attempt time ($side): run sgemm --proposer tune --budget $WS_ATTEMPT_BUDGET"
    PYTHONPATH="$site${PYTHONPATH:-}" python3 -m tui run "$OLDPWD/$WS_BEFORE/examples/sgemm" --proposer tune \
      --budget "$WS_ATTEMPT_BUDGET" --headless --no-tracking --store "/tmp/attempt-$side" 2>&1 | tail -3 \
      | tee -a "$OUT/attempt-time.txt"
  done
fi

if [ -n "${WS_BEFORE:-}" ] && [ -n "${WS_SPEED:-1}" ] && [ "${WS_SPEED:-1}" != 0 ]; then
  step "harness speed: the examples' medians before and after ($WS_BEFORE)"
  python3 "$OLDPWD/benchmarks/harness_speed.py" /tmp/before-site /tmp/no-such-site ${WS_SPEED_TARGETS:-} 2>&1 | tee "$OUT/speed.txt"
fi

if [ -n "${WS_SEARCH:-}" ]; then  # e.g. WS_SEARCH="examples/sgemm --cases square-4096 --time-budget 60"
  # Issue 18's bar: this tree's search, then (with WS_BEFORE) the older install's, on the same workload.
  # Several searches one after another: separated by ';' (e.g. the same with "-- --no-overlap").
  IFS=';' read -ra searches <<< "$WS_SEARCH"
  n=0
  for search in "${searches[@]}"; do
    for side in after ${WS_BEFORE:+before}; do
      site=$([ $side = before ] && echo "--site /tmp/before-site" || echo "")
      # Each search from a cold compile cache (the references stay): a second search would
      # otherwise find the first one's CUBINs and look faster for it.
      rm -rf "$WARPSMITH_CACHE/cubin"
      step "search speed ($side): $search"
      n=$((n + 1))  # each search's attempt records kept for replays (benchmarks/early_reject_safety.py)
      # Under py-spy (WS_PROFILE=1) the timings are a profiled run's: a bar is measured without it.
      (cd "$OLDPWD" && ${profiler:+$profiler "$OUT/search-profile-$n-$side.txt" --} python3 benchmarks/search_speed.py \
         --keep "$OUT/search-records-$n-$side" $site $search 2>&1) | tee -a "$OUT/search-speed.txt"
      [ -f "$OUT/search-profile-$n-$side.txt" ] && python3 "$OLDPWD/benchmarks/profile_summary.py" \
        "$OUT/search-profile-$n-$side.txt" >> "$OUT/search-profile-summary.txt" 2>&1
    done
  done
fi

if [ -n "${WS_TENMIN:-}" ]; then  # issue 18's 10-minute session in two calls on a warm machine, e.g.
  # WS_TENMIN="examples/sgemm --cases square-4096" WS_TENMIN_PART=1, then the same with WS_TENMIN_PART=2 at once
  # (the store stays in /tmp while the machine is warm; the second part resumes it to 600 s of running)
  name=$(echo "$WS_TENMIN" | tr -c 'a-zA-Z0-9\n' '-')
  part=${WS_TENMIN_PART:-1}
  step "10-minute session, part $part: $WS_TENMIN"
  # search_speed's own flags first: WS_TENMIN may end in "-- <flags for run>"
  if [ "$part" = 1 ]; then
    rm -rf "/tmp/tenmin-$name" "$WARPSMITH_CACHE/cubin"  # from a cold compile cache, as WS_SEARCH's runs
    (cd "$OLDPWD" && python3 benchmarks/search_speed.py --time-budget 300 --store "/tmp/tenmin-$name" $WS_TENMIN 2>&1) \
      | tee -a "$OUT/search-speed.txt"
  else
    (cd "$OLDPWD" && python3 benchmarks/search_speed.py --time-budget 600 --store "/tmp/tenmin-$name" --resume \
       --keep "$OUT/tenmin-records-$name" $WS_TENMIN 2>&1) | tee -a "$OUT/search-speed.txt"
  fi
fi

if [ -n "${WS_RAY_SCALING:-}" ]; then  # issue 19, on a machine with several GPUs and WS_WHEELS=.whl-ray, e.g.
  # WS_RAY_SCALING="examples/sgemm --gpus 1,2 --time-budget 120 --kill-after 60 -- --no-tracking"
  step "Ray backend scaling: $WS_RAY_SCALING"
  (cd "$OLDPWD" && python3 benchmarks/ray_scaling.py $WS_RAY_SCALING 2>&1) | tee -a "$OUT/ray-scaling.txt" | tail -30
fi

if [ -n "${WS_REPLAY:-}" ]; then  # issue 18: local and Ray on one GPU over the same candidates, with WS_WHEELS=.whl-ray, e.g.
  # WS_REPLAY="examples/sgemm --cases square-4096 --sequence docs/measurements/2026-12-06-gpu-session23/sgemm-square-4096-sequence.json"
  step "backend replay: $WS_REPLAY"
  (cd "$OLDPWD" && python3 benchmarks/backend_replay.py $WS_REPLAY 2>&1) | tee -a "$OUT/backend-replay.txt" | tail -30
fi

for w in ${WS_COSTS:-}; do  # e.g. WS_COSTS="examples/sgemm": what the worker's own checks cost per run
  step "worker costs: $w"
  (cd "$OLDPWD" && python3 benchmarks/worker_costs.py "$w" 2>&1) | tee -a "$OUT/worker-costs.txt"
done

if [ -d "$OLDPWD/.whl-peer" ] && [ "${WS_KT:-0}" != 0 ]; then  # the peer, Kernel Tuner, from its carried wheels
  step "Kernel Tuner against warpsmith's tuner: ${WS_KT_ARGS:-}"
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/kt "$OLDPWD"/.whl-peer/*.whl > "$OUT/kt-wheels.log" 2>&1
  (cd "$OLDPWD" && PYTHONPATH="/tmp/kt:${PYTHONPATH:-}" python3 benchmarks/kernel_tuner_compare.py ${WS_KT_ARGS:-} 2>&1) \
    | tee "$OUT/kernel-tuner.txt" | tail -25
fi

if [ "${WS_RUN_EXAMPLES:-0}" != 0 ]; then
  for w in $(cd "$OLDPWD" && ls -d examples/*/); do
    step "run $w --proposer tune --budget $WS_RUN_EXAMPLES"
    (cd "$OLDPWD" && warpsmith run "$w" --proposer tune --budget "$WS_RUN_EXAMPLES" --headless --store /tmp/ws-examples \
       --no-tracking 2>&1 | tail -4) | tee -a "$OUT/run-examples.txt"
  done
fi

if [ "${WS_HARNESS:-1}" != 0 ]; then
  step harness
  python3 "$OLDPWD/benchmarks/harness.py" 2>&1 | tee "$OUT/harness.txt"
fi

if [ "${WS_LOOP:-1}" != 0 ]; then
  step "loop overhead"
  python3 "$OLDPWD/benchmarks/loop_overhead.py" 30 2>&1 | tee "$OUT/loop-overhead.txt"
fi

if [ "${WS_RUN_BUDGET:-30}" != 0 ]; then
  step "run sgemm --proposer tune --budget ${WS_RUN_BUDGET:-30} ${WS_RUN_ARGS:-}"
  store=/tmp/warpsmith-store
  start=$(date +%s)
  warpsmith run "$OLDPWD/examples/sgemm" --proposer tune --budget "${WS_RUN_BUDGET:-30}" ${WS_RUN_ARGS:-} --headless --store "$store" 2>&1 | tee "$OUT/run-tune.txt"
  echo "wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/run-tune.txt"
  warpsmith runs --store "$store" 2>&1 | tee "$OUT/runs.txt"
  session=$(ls "$store/sessions" | head -1)
  warpsmith export "$session" /tmp/export --store "$store" 2>&1
  step "diff of the first attempt and the best"
  warpsmith diff "$session" 1 --store "$store" 2>&1 | tee "$OUT/diff.txt"
  warpsmith runs --store "$store" --attempts "$session" 2>&1 | tee "$OUT/mlflow-runs.txt" | tail -15
fi

if [ "${WS_NSIGHT_BUDGET:-4}" != 0 ]; then
  step "run sgemm --proposer tune --use-nsight --budget ${WS_NSIGHT_BUDGET:-4}"
  (cd "$OLDPWD" && warpsmith run examples/sgemm --proposer tune --use-nsight --budget "${WS_NSIGHT_BUDGET:-4}" --headless \
    --store /tmp/warpsmith-nsight-store 2>&1) | tee "$OUT/run-nsight.txt"
fi

if [ "${WS_BENCH:-0}" != 0 ]; then
  step "bench ${WS_BENCH_WORKLOADS:-all examples}, tune budget ${WS_BENCH_BUDGET:-40}"
  start=$(date +%s)
  # One workload at a time, so each table is on disk as soon as it is measured.
  # --json: the table comes from the JSON (benchmarks/suite_table.py renders it as bench
  # does), and the JSONs of every workload make the suite line at the end.
  rm -f /tmp/bench-json/*.json && mkdir -p /tmp/bench-json
  for w in ${WS_BENCH_WORKLOADS:-$(cd "$OLDPWD" && ls -d examples/*/)}; do
    json=/tmp/bench-json/$(basename "$w").json
    (cd "$OLDPWD" && warpsmith bench "$w" --budget "${WS_BENCH_BUDGET:-40}" ${WS_BENCH_ARGS:-} --store /tmp/warpsmith-bench \
       --json > "$json" 2> /tmp/bench-progress.txt; echo "exit $?" >> /tmp/bench-progress.txt)
    cat /tmp/bench-progress.txt >> "$OUT/bench-log.txt"
    sed -n '/^## /,$p' /tmp/bench-progress.txt | tee -a "$OUT/bench.txt"
    if [ -s "$json" ]; then
      (cd "$OLDPWD" && python3 benchmarks/suite_table.py "$json") | tee -a "$OUT/bench.txt"
      cp "$json" "$OUT/bench-$(basename "$json")"
    else  # no table: bench's last lines say why
      rm -f "$json"
      tail -5 /tmp/bench-progress.txt | tee -a "$OUT/bench.txt"
    fi
  done
  if ls /tmp/bench-json/*.json > /dev/null 2>&1; then
    (cd "$OLDPWD" && python3 benchmarks/suite_table.py --suite /tmp/bench-json/*.json) | tee -a "$OUT/bench.txt"
  fi
  echo "wall time: $(( $(date +%s) - start )) s" | tee -a "$OUT/bench.txt"
fi

if [ "${WS_TUI_BUDGET:-10}" != 0 ]; then
  step "the app, driven by Pilot, budget ${WS_TUI_BUDGET:-10}"
  python3 "$OLDPWD/benchmarks/tui_on_gpu.py" "$OLDPWD/examples/sgemm" "${WS_TUI_BUDGET:-10}" "$OUT/warpsmith-h200.svg" 2>&1 | tee "$OUT/tui.txt"
fi

step summary
grep ceilings "$OUT/doctor.txt"
grep -s SUMMARY "$OUT/tensor-ceiling.txt"
grep -E "^[a-z0-9x-]+: .* us, SM" "$OUT/nsight-tiled.txt" 2>/dev/null | head -3
[ -f "$OUT/pytest-gpu.txt" ] && grep -E "passed|failed|error" "$OUT/pytest-gpu.txt" | tail -1
[ -f "$OUT/sweep.txt" ] && cat "$OUT/sweep.txt"
[ -f "$OUT/sweeps.txt" ] && grep -E " \| |baseline" "$OUT/sweeps.txt"
for kernel in ${WS_KERNELS:-naive tiled}; do echo "$kernel: $(tail -1 "$OUT/eval-$kernel.txt")"; done
[ -f "$OUT/harness.txt" ] && grep SUMMARY "$OUT/harness.txt"
[ -f "$OUT/loop-overhead.txt" ] && grep "per iteration" "$OUT/loop-overhead.txt"
[ -f "$OUT/tui.txt" ] && tail -2 "$OUT/tui.txt"
[ -f "$OUT/run-tune.txt" ] && grep -E "^\| |wall time|Score|attempts" "$OUT/run-tune.txt"
[ -f "$OUT/run-nsight.txt" ] && grep -E "ncu|profiled|attempts" "$OUT/run-nsight.txt" | tail -4
[ -f "$OUT/bench.txt" ] && cat "$OUT/bench.txt"
[ -f "$OUT/run-examples.txt" ] && grep -E "finished|best|Score|error" "$OUT/run-examples.txt"
[ -f "$OUT/speed.txt" ] && grep -E "^\||SUMMARY" "$OUT/speed.txt"
[ -f "$OUT/attempt-time.txt" ] && grep -E "attempts" "$OUT/attempt-time.txt"
[ -f "$OUT/search-speed.txt" ] && grep -E "^workload|^attempts|^throughput|^best|^first|^running|^where|^worker|^evaluator|^early" "$OUT/search-speed.txt"
[ -f "$OUT/backend-replay.txt" ] && grep -E "^\||^Ray over|^verdicts" "$OUT/backend-replay.txt"
[ -f "$OUT/kernel-tuner.txt" ] && grep -E "^\\|" "$OUT/kernel-tuner.txt"
[ -f "$OUT/worker-costs.txt" ] && cat "$OUT/worker-costs.txt"
[ -f "$OUT/evals.txt" ] && grep -E "^status|^=== |^[a-z0-9x-]+ +perf" "$OUT/evals.txt"

# At most 8 files come back from the GPU machine: everything but the main outputs travels as one archive.
cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -vE '^(tensor-ceiling|sweeps|search-speed|search-profile-summary|kernel-tuner|backend-replay|worker-costs|pytest-gpu|harness|run-tune|run-nsight|speed|run-examples|bench|diff|attempt-time|evals)\.txt$|\.svg$')
