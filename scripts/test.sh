#!/usr/bin/env bash
# The test command: installs what the tests need (ptxas 13.0.88 from PyPI) and runs every test
# of the workspace. Works on a fresh machine with Rust and Python; needs no GPU (GPU tests say
# that they are skipped).
set -euo pipefail
cd "$(dirname "$0")/.."
REPLAY_PTXAS=$(scripts/install-ptxas.sh)
export REPLAY_PTXAS
echo "ptxas: $REPLAY_PTXAS"
cargo test --workspace --all-targets "$@"
