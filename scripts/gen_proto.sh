#!/usr/bin/env bash
# Regenerate the Python code for proto/actorq/v1/*.proto into actorq/v1/.
# The generated files are committed; CI checks that running this changes nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m grpc_tools.protoc -Iproto \
  --python_out=. --pyi_out=. --grpc_python_out=. \
  proto/actorq/v1/*.proto
