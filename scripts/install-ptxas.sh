#!/usr/bin/env bash
# Installs ptxas 13.0.88 from the PyPI wheel nvidia-cuda-nvcc into .tools/ (no GPU needed) and
# prints its path. Idempotent: a second run only prints the path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir="$root/.tools/nvcc"
find_ptxas() { { find "$dir" -type f -name ptxas -perm -u+x 2>/dev/null || true; } | head -n 1; }
p=$(find_ptxas)
if [ -z "$p" ]; then
  python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$dir" "nvidia-cuda-nvcc==13.0.88" >&2
  p=$(find_ptxas)
fi
if [ -z "$p" ]; then
  echo "install-ptxas: ptxas not found after installing nvidia-cuda-nvcc==13.0.88" >&2
  exit 1
fi
"$p" --version >&2
echo "$p"
