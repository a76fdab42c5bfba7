#!/usr/bin/env bash
# Builds the release test binaries whose tests need a GPU — replay-dsl's property tests
# (prop_elementwise, prop_reduce: `gpu_matches_interpreter`), GPU special cases (gpu_special)
# and dot products (gpu_dot), replay-runtime's `gpu` smoke tests and its kernels loaded from
# ptxas cubins (ptxas_jit: needs a ptxas on the GPU machine too, the toolkit's or
# $REPLAY_PTXAS), the SSM kernel tests of replay-kernels (on the GPU with
# REPLAY_SSM_DEVICE=cuda) and the state manager's tests — copies them into .carry/tests/
# (ignored by git) and prints the command that runs them all on a machine with a GPU, from the
# repository root. Without a GPU the same binaries print "skipped: no CUDA GPU" for each GPU
# test and pass; with REPLAY_REQUIRE_GPU=1 (set by the printed command) replay-dsl's GPU tests
# fail instead. Tests that run ptxas on snapshots (ptx_assembles, scan_variants_assemble) are
# skipped there: they belong to the build machine.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.carry/tests
rm -rf "$out"
mkdir -p "$out"

build() { # package, test targets...
  local pkg=$1
  shift
  local args=()
  for t in "$@"; do args+=(--test "$t"); done
  cargo test --release --no-run -p "$pkg" "${args[@]}" --message-format=json |
    grep -F '"kind":["test"]' | grep -o '"executable":"[^"]*"' | sed 's/^"executable":"//; s/"$//' |
    while read -r exe; do
      name=$(basename "$exe" | sed 's/-[0-9a-f]*$//')
      cp "$exe" "$out/$pkg-$name"
      strip "$out/$pkg-$name" 2>/dev/null || true
    done
}

build replay-dsl prop_elementwise prop_reduce gpu_special gpu_dot
build replay-runtime gpu ptxas_jit
build replay-kernels ssm_decode ssm_replay ssm_verify ssm_commit
build replay ssm_state

ls -l "$out" >&2
total=$(du -sm "$out" | cut -f1)
echo "total: ${total} MiB in $out (the device tool carries at most 64 MiB)" >&2
echo
echo "Run on the GPU machine (carry .carry/tests), from the repository root:"
echo "  export REPLAY_REQUIRE_GPU=1 REPLAY_SSM_DEVICE=cuda REPLAY_PTXAS=\$(command -v ptxas || echo /usr/local/cuda/bin/ptxas); for t in $out/*; do echo \"== \$t\"; \$t --test-threads=1 --nocapture --skip ptx_assembles --skip scan_variants_assemble || exit 1; done"
