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
# The envpool extra without the dependencies nothing here uses (pyproject.toml: 532 MB
# instead of ~745): EnvPool, the asset wheels its import and CartPole/MuJoCo/Atari read,
# optree; dm-env and matplotlib came with dev. Its tests run in CI, so it is always installed.
.venv/bin/python -m pip install --quiet --no-deps "envpool==1.2.5" "envpool-assets==0.3.0" \
  "envpool-assets-mujoco-large==0.3.0" "optree==0.20.0"
echo "actorq installed in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
