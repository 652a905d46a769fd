#!/usr/bin/env bash
# Create .venv and install actorq with its pinned dependencies (idempotent).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first and pinned, so no other requirement pulls a different (CUDA) build.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[dev,docs]"
echo "actorq installed in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
