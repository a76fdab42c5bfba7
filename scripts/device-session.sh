#!/usr/bin/env bash
# Runs on the GPU machine, from the repository root, the checks and measurements one device
# session needs, each under its own time limit; results go to $OUT (default ./device-out).
# Prepare on the build machine: `cargo build --release -p replay && cp target/release/replay
# .carry/replay && scripts/gpu-tests.sh` (the device tool carries .carry/).
#
# Steps (arguments; default: tests memcheck tuned notune, in this order):
#   tests    every GPU test binary in .carry/tests (REPLAY_REQUIRE_GPU=1, SSM tests on the GPU)
#   memcheck compute-sanitizer memcheck over every SSM kernel (bench-ssm Super B=16, T=8)
#   tuned    bench-ssm tuned (REPLAY_TUNE=force) at B ∈ {256, 1}, both models, with Triton
#   notune   bench-ssm with default plans at every batch, both models, with Triton
#   ncu      Nsight Compute on the verify kernel and the replay step (Super, B=256, T=8, default
#            plans; speed of light, occupancy, warp states, instruction mix)
# A failing step is reported and the next one runs; the exit status counts the failures.
set -uo pipefail
out=${OUT:-device-out}
mkdir -p "$out"
bin=.carry/replay
triton=bench/results/triton-ssm-h200-v5.json
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=(tests memcheck tuned notune)
failed=0

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

gpu_tests() {
  export REPLAY_REQUIRE_GPU=1 REPLAY_SSM_DEVICE=cuda
  for t in .carry/tests/*; do
    echo "== $t"
    "$t" --test-threads=1 --skip ptx_assembles --skip scan_variants_assemble || return 1
  done
}

for s in "${steps[@]}"; do
  case $s in
    tests) step tests 240 gpu_tests ;;
    memcheck) step memcheck 180 compute-sanitizer --tool memcheck --error-exitcode 1 \
      "$bin" bench-ssm --model nemotron3-super-120b --batch 16 --drafts 8 --no-tune ;;
    tuned) step tuned 540 env REPLAY_TUNE=force "$bin" bench-ssm --batch 256,1 --triton "$triton" \
      --json "$out/ssm-tuned.json" ;;
    notune) step notune 240 "$bin" bench-ssm --no-tune --triton "$triton" --json "$out/ssm-notune.json" ;;
    ncu) step ncu 300 ncu --clock-control none -k regex:'mamba2_(verify|replay_step)' -c 4 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section InstructionStats \
      --section MemoryWorkloadAnalysis \
      "$bin" bench-ssm --model nemotron3-super-120b --batch 256 --drafts 8 --no-tune ;;
    *) echo "unknown step $s (tests, memcheck, tuned, notune, ncu)" >&2; failed=$((failed + 1)) ;;
  esac
done
exit "$failed"
