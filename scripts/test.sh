#!/usr/bin/env bash
# The test command: installs what the tests need (ptxas 13.0.88 from PyPI) and runs every test
# of the workspace. Works on a fresh machine with Rust and Python; needs no GPU (GPU tests say
# that they are skipped).
#
# Then runs the tests that execute generated PTX once more on the PTX emulator
# (replay-ptx-emu, release build): the SSM kernel and state-manager tests
# (REPLAY_SSM_DEVICE=emulator; the state manager also at both benchmark models' shapes) and
# the GPU differential tests — dot, special cases, the
# elementwise and reduction property kernels — against the interpreter
# (REPLAY_GPU_TESTS_ON_EMULATOR=1; 1000 property cases each). REPLAY_SKIP_EMULATOR=1 skips that pass.
set -euo pipefail
cd "$(dirname "$0")/.."
REPLAY_PTXAS=$(scripts/install-ptxas.sh)
export REPLAY_PTXAS
echo "ptxas: $REPLAY_PTXAS"
cargo test --workspace --all-targets "$@"

if [[ "${REPLAY_SKIP_EMULATOR:-0}" != 1 ]]; then
    echo "== the generated PTX on the emulator"
    REPLAY_SSM_DEVICE=emulator cargo test --release -p replay-kernels \
        --test ssm_decode --test ssm_replay --test ssm_verify --test ssm_commit
    REPLAY_SSM_DEVICE=emulator cargo test --release -p replay --test ssm_state
    REPLAY_GPU_TESTS_ON_EMULATOR=1 PROPTEST_CASES=1000 cargo test --release -p replay-dsl \
        --test gpu_dot --test gpu_special --test prop_elementwise --test prop_reduce \
        -- gpu_ dots_ casts_ integer_ atomics_ layout_ runtime_ stochastic_ reductions_ masked_ prefetched_
fi
