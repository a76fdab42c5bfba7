#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, the checks and measurements one device
# session needs, each under its own time limit; results go to $OUT (default ./device-out).
# Prepare on the build machine: `cargo build --release -p replay && cp target/release/replay
# .carry/replay && scripts/gpu-tests.sh` (the device tool carries .carry/).
#
# Steps (arguments; default: tests memcheck racecheck tuned notune, in this order):
#   tests    every GPU test binary in .carry/tests whose name matches the regex $GPU_TESTS
#            (default all; REPLAY_REQUIRE_GPU=1, SSM tests on the GPU), each run even when an
#            earlier one fails, with its time
#   memcheck compute-sanitizer memcheck over every SSM kernel (bench-ssm Super and Nano B=16,
#            T=8, default plans), then over the tail-tile tests (.carry/tests: the default plans
#            mask Nano's last value block, TAIL takes a tile of its rows)
#   racecheck compute-sanitizer racecheck (shared-memory hazards: the staging scratch's barriers,
#            the ASYNC buffers) over the ASYNC verification tests and the dot tests (.carry/tests)
#   tuned    bench-ssm tuned (REPLAY_TUNE=$TUNED_MODE, default force), with Triton: batches
#            $TUNED_BATCHES (default 256,1), models $TUNED_MODELS (default both), drafts
#            $TUNED_DRAFTS (default 2,4,8; one model at B=256 with drafts 8 takes ~8 minutes,
#            both precisions: a run cut at the limit leaves its finished stages in the cache,
#            which comes back compressed as $out/tune-v1.json.gz — it is larger than the device
#            tool returns uncompressed; unpack it into .carry/cache/replay/tune-v1.json and run
#            again with TUNED_MODE=cached to tune only the rest); at most $TUNED_LIMIT seconds
#            (default 570)
#   notune   bench-ssm with default plans at every batch, both models, with Triton
#   table    the table of record: bench-ssm --plans $TABLE_PLANS (default the latest,
#            bench/results/plans-h200-v41-batches.json) with Triton, JSON and plot as
#            $out/ssm-table.*, while nvidia-smi samples the SM clock, temperature, power and
#            the clock-limiting reasons every 500 ms into $out/clocks.csv (whole tables read a few
#            per cent apart between machines: bench/NOTES.md, session 37). Run it first in a call
#   ab       builds $AB_BUILDS (default `old new`: `new` is this one, .carry/replay, any other
#            name N the binary .carry/N/replay) at equal plans, alternated, two rounds: bench-ssm
#            --plans F for each file F in $AB_PLANS (default the latest plans at B=256, both
#            models: bench/results/plans-h200-v33-b256.json), the file's models and batches unless $AB_MODEL / $AB_BATCH name them,
#            --drafts $AB_DRAFTS (default 8); each run at most $AB_RUN_LIMIT seconds (default 120)
#   jit      the driver's JIT against REPLAY_JIT=ptxas: a forced tuning of Nano at B=1, T=8 in
#            each mode (fresh caches; each run cut at $JIT_TUNE_LIMIT s, default 250: the stages
#            it finished and their seconds are on stderr and in the JSON), then the v28 plans
#            timed in each mode, alternated, two rounds (the cubins must run as fast)
#   ncu      Nsight Compute on the conventional, replay-step, verify and fold kernels (models
#            $NCU_MODELS, kernels $NCU_KERNELS, batch $NCU_BATCH; default all, B=256, T=8; tuned plans when
#            the cache has them; speed of light, occupancy, warp states, instruction mix,
#            and per-SASS-instruction counts and stalls as CSV)
#   flush    Nsight Compute on the fold's flushing launch (the longest of its first 24 launches:
#            most of them find no row to fold) at $FLUSH_PLANS (default the v29 Nano plans),
#            $FLUSH_MODEL, B=256, T=8: speed of light, warp states, L1 wavefronts (shared
#            memory; global sectors and requests: one wavefront per sector is an access too
#            narrow for L1) and the per-SASS summary
#   lines    Nsight Compute on one launch of $LINES_KERNEL (default mamba2_verify; the launch after
#            skipping $LINES_SKIP, default 6: a full record tier at Nano's v33 plans) for each
#            pair of $LINES_BUILDS (default `new`; names as for ab) and $LINES_PLANS (one plans
#            file per build, default the v33 plans): duration, instructions, warp states, and the
#            SASS lines with the most stall samples (`ncu_sass.py --top 15`; every line's counts
#            gzipped as $out/lines-BUILD-sass.csv.gz), to compare builds whose instruction counts
#            and speeds disagree
# A failing step is reported and the next one runs; the exit status counts the failures.
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
bin=.carry/replay
triton=bench/results/triton-ssm-h200-v5.json
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests memcheck racecheck tuned notune)
failed=0
# The tuning cache lives in $out/cache (it comes back with the results); a carried
# .carry/cache seeds it, and then the ncu step profiles the tuned plans.
cache=$(cd "$out" && pwd)/cache
mkdir -p "$cache"
[[ -d .carry/cache ]] && cp -r .carry/cache/. "$cache"/
export XDG_CACHE_HOME=$cache

step() { # name, limit (s), command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  echo "== $name (limit ${limit}s)"
  if timeout "$limit" "$@" >"$out/$name.txt" 2>&1; then
    echo "   ok in $((SECONDS - t0))s"
  else
    echo "   FAILED ($?) in $((SECONDS - t0))s; tail of $out/$name.txt:"
    tail -n 15 "$out/$name.txt" | sed 's/^/   /'
    failed=$((failed + 1))
  fi
}

# The toolkit's ptxas on this machine (no network to install one): $REPLAY_PTXAS, else on PATH,
# else beside nvcc, else /usr/local/cuda/bin/ptxas.
toolkit_ptxas() {
  local nvcc
  [[ -n ${REPLAY_PTXAS:-} ]] && { echo "$REPLAY_PTXAS"; return; }
  command -v ptxas && return
  nvcc=$(command -v nvcc) && [[ -x ${nvcc%/*}/ptxas ]] && { echo "${nvcc%/*}/ptxas"; return; }
  echo /usr/local/cuda/bin/ptxas
}

gpu_tests() {
  export REPLAY_REQUIRE_GPU=1 REPLAY_SSM_DEVICE=cuda
  REPLAY_PTXAS=$(toolkit_ptxas) # ptxas_jit compiles with it
  export REPLAY_PTXAS
  local t t0 bad=0
  for t in .carry/tests/*; do
    [[ ${t##*/} =~ ${GPU_TESTS:-.} ]] || continue
    echo "== $t"
    t0=$SECONDS
    "$t" --test-threads=1 --skip ptx_assembles --skip scan_variants_assemble || bad=$((bad + 1))
    echo "== $t: $((SECONDS - t0)) s"
  done
  return "$bad"
}

sass_summary() { # report (without .ncu-rep), ncu_sass.py options...: its per-SASS CSV, summarised
  local name=$1
  shift
  ncu -i "$name.ncu-rep" --page source --print-source sass --csv >"$name-sass.csv" || return 1
  python3 bench/tools/ncu_sass.py "$name-sass.csv" "$@"
}

build_exe() { # the binary of build NAME: `new` is this one ($bin), any other .carry/NAME/replay
  if [[ $1 == new ]]; then echo "$bin"; else echo ".carry/$1/replay"; fi
}

profile() { # one launch of each SSM kernel per model under Nsight Compute, with per-SASS counts
  local model k name plans=--no-tune
  [[ -f $XDG_CACHE_HOME/replay/tune-v1.json ]] && plans=
  for model in ${NCU_MODELS:-nemotron3-super-120b nemotron3-nano-4b}; do
    for k in ${NCU_KERNELS:-mamba2_decode_HEADS mamba2_replay_step mamba2_verify mamba2_fold}; do
      name=$out/ncu-$model-${k%%_HEADS}
      ncu --clock-control none -k regex:"$k" -s 2 -c 1 --import-source no -f -o "$name" \
        --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
        --section InstructionStats --section MemoryWorkloadAnalysis --section SchedulerStats \
        --section SourceCounters \
        "$bin" bench-ssm --model "$model" --batch "${NCU_BATCH:-256}" --drafts 8 $plans >/dev/null || return 1
      ncu -i "$name.ncu-rep" --print-summary none || return 1
      sass_summary "$name" || true
      rm -f "$name.ncu-rep"
    done
  done
}

flush_profile() { # the fold's flushing launch under Nsight Compute, with L1 wavefronts
  local name=$out/ncu-flush idx
  local run=("$bin" bench-ssm --plans "${FLUSH_PLANS:-bench/results/ssm-h200-v29-nano-b256.json}"
    --model "${FLUSH_MODEL:-nemotron3-nano-4b}" --batch 256 --drafts 8)
  ncu --clock-control none -k regex:mamba2_fold -c 24 --metrics gpu__time_duration.sum --csv \
    --log-file "$name-times.csv" "${run[@]}" >/dev/null || return 1
  idx=$(python3 -c 'import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
h = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
v, i = rows[h].index("Metric Value"), rows[h].index("ID")
t = [(float(r[v].replace(",", "")), int(r[i])) for r in rows[h + 1:] if len(r) > v]
print("fold launches (us):", " ".join(f"{x / 1000:.1f}" for x, _ in t), file=sys.stderr)
print(max(t)[1])' "$name-times.csv") || return 1
  ncu --clock-control none -k regex:mamba2_fold -s "$idx" -c 1 --import-source no -f -o "$name" \
    --section SpeedOfLight --section WarpStateStats --section Occupancy --section SourceCounters \
    --metrics l1tex__data_pipe_lsu_wavefronts.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__t_requests_pipe_lsu_mem_global_op_st.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum \
    "${run[@]}" >/dev/null || return 1
  ncu -i "$name.ncu-rep" --page details --print-units base |
    grep -E "Duration|Throughput|Eligible|Warp Cycles Per Issued|Registers Per|Achieved Active|l1tex__" || return 1
  sass_summary "$name" --top 12 || true
  rm -f "$name.ncu-rep"
}

file_field() { # the distinct values of a row field of a bench-ssm JSON file, comma-separated
  python3 -c 'import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print(",".join(str(v) for v in sorted({r[sys.argv[2]] for r in rows})))' "$1" "$2"
}

ab() { # the builds $AB_BUILDS at the plans of each file in $AB_PLANS, alternated
  local plans=(${AB_PLANS:-bench/results/plans-h200-v33-b256.json}) round b p exe n=0
  local json # the runs' JSON and plots stay on the machine: ab.txt has their tables
  json=$(mktemp -d)
  for round in 1 2; do
    for b in ${AB_BUILDS:-old new}; do
      exe=$(build_exe "$b")
      for p in "${plans[@]}"; do
        n=$((n + 1))
        echo "== $b, round $round, $p"
        # Models and batches named explicitly (a binary older than the --plans defaults would
        # otherwise tune every batch), and each run limited: a stray tuning run fails fast.
        timeout "${AB_RUN_LIMIT:-120}" "$exe" bench-ssm --plans "$p" \
          --model "${AB_MODEL:-$(file_field "$p" model)}" --batch "${AB_BATCH:-$(file_field "$p" batch)}" \
          --drafts "${AB_DRAFTS:-8}" --json "$json/ab-$b-$round-$n.json" || return 1
      done
    done
  done
}

lines() { # one launch per build under Nsight Compute: where its warps stall, by SASS line
  local builds=(${LINES_BUILDS:-new}) plans=(${LINES_PLANS:-bench/results/plans-h200-v33-b256.json}) i b exe p
  for i in "${!builds[@]}"; do
    b=${builds[$i]} p=${plans[$i]:-${plans[0]}}
    exe=$(build_exe "$b")
    echo "=== $b at $p"
    ncu --clock-control none -k regex:"${LINES_KERNEL:-mamba2_verify}" -s "${LINES_SKIP:-6}" -c 1 \
      --section WarpStateStats --section SourceCounters --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
      -f -o "/tmp/lines-$b" "$exe" bench-ssm --plans "$p" --model "${LINES_MODEL:-nemotron3-nano-4b}" \
      --batch 256 --drafts 8 >/dev/null || return 1
    ncu -i "/tmp/lines-$b.ncu-rep" --print-summary none | grep -E 'gpu__time|inst_executed|Warp Cycles Per Issued|Eligible'
    sass_summary "/tmp/lines-$b" --top 15 || return 1
    gzip -c "/tmp/lines-$b-sass.csv" >"$out/lines-$b-sass.csv.gz"
  done
}

jit() { # the driver's JIT against ptxas cubins: tuning time, then speed at equal plans
  local mode round
  REPLAY_PTXAS=$(toolkit_ptxas)
  export REPLAY_PTXAS
  echo "ptxas: $REPLAY_PTXAS ($("$REPLAY_PTXAS" --version | tail -1))"
  for mode in driver ptxas; do
    echo "== tuning with REPLAY_JIT=$mode"
    XDG_CACHE_HOME=$(mktemp -d) REPLAY_JIT=$mode REPLAY_TUNE=force timeout "${JIT_TUNE_LIMIT:-250}" \
      "$bin" bench-ssm --model nemotron3-nano-4b --batch 1 --drafts 8 --json "$out/jit-tune-$mode.json" 2>&1 |
      grep -E '^replay: |verify|ms' || true
  done
  for round in 1 2; do
    for mode in driver ptxas; do
      echo "== REPLAY_JIT=$mode, round $round"
      REPLAY_JIT=$mode timeout 120 "$bin" bench-ssm --plans bench/results/ssm-h200-v28-b256.json --drafts 8 \
        --json "$out/jit-bench-$mode-$round.json" | grep -E '^nemotron' || return 1
    done
  done
}

memcheck() { # out-of-bounds and misaligned accesses of every SSM kernel, tail tiles and the fold's verification included
  local sanitize=(compute-sanitizer --tool memcheck --error-exitcode 1)
  "${sanitize[@]}" "$bin" bench-ssm --model nemotron3-super-120b,nemotron3-nano-4b --batch 16 --drafts 8 \
    --no-tune &&
    REPLAY_REQUIRE_GPU=1 REPLAY_SSM_DEVICE=cuda "${sanitize[@]}" .carry/tests/replay-kernels-ssm_verify \
      --test-threads=1 the_last_value_block chained_products the_fold_verifies
}

table() { # the table of record, with the GPU's clock and power sampled beside it
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active \
    --format=csv -lms 500 >"$out/clocks.csv" 2>&1 &
  local smi=$!
  "$bin" bench-ssm --plans "${TABLE_PLANS:-bench/results/plans-h200-v41-batches.json}" --triton "$triton" \
    --json "$out/ssm-table.json"
  local rc=$?
  kill "$smi"
  return "$rc"
}

racecheck() { # shared-memory hazards of the verification's ASYNC tiles and of the dot products
  export REPLAY_REQUIRE_GPU=1 REPLAY_SSM_DEVICE=cuda
  local sanitize=(compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 1)
  "${sanitize[@]}" .carry/tests/replay-kernels-ssm_verify --test-threads=1 speculative_window_16 two_precisions \
    the_last_value_block &&
    "${sanitize[@]}" .carry/tests/replay-dsl-gpu_dot --test-threads=1
}

for s in "${steps[@]}"; do
  case $s in
    tests) export -f gpu_tests toolkit_ptxas; step tests 480 bash -c gpu_tests ;;
    memcheck) export -f memcheck; export bin; step memcheck 360 bash -c memcheck ;;
    racecheck) export -f racecheck; step racecheck 240 bash -c racecheck ;;
    tuned) step tuned "${TUNED_LIMIT:-570}" env REPLAY_TUNE="${TUNED_MODE:-force}" "$bin" bench-ssm --batch "${TUNED_BATCHES:-256,1}" \
      ${TUNED_MODELS:+--model "$TUNED_MODELS"} ${TUNED_DRAFTS:+--drafts "$TUNED_DRAFTS"} --triton "$triton" \
      --json "$out/ssm-tuned.json"
      gzip -c "$cache/replay/tune-v1.json" >"$out/tune-v1.json.gz" ;;
    notune) step notune 240 "$bin" bench-ssm --no-tune --triton "$triton" --json "$out/ssm-notune.json" ;;
    table) export -f table; export out bin triton; step table 300 bash -c table ;;
    ncu) export -f profile sass_summary; export out bin; step ncu 300 bash -c profile ;;
    flush) export -f flush_profile sass_summary; export out bin; step flush 240 bash -c flush_profile ;;
    jit) export -f jit toolkit_ptxas; export out bin; step jit 580 bash -c jit ;;
    ab) export -f ab file_field build_exe; export out bin; step ab 540 bash -c ab ;;
    lines) export -f lines sass_summary build_exe; export out bin; step lines 300 bash -c lines ;;
    *) echo "unknown step $s (tests, memcheck, racecheck, tuned, notune, table, ncu, flush, ab, lines, jit)" >&2; failed=$((failed + 1)) ;;
  esac
done
# The cubins ptxas compiled stay here: thousands of files, and the tool brings back few.
rm -rf "$cache/replay/cubin"
exit "$failed"
