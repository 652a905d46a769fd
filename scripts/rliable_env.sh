#!/usr/bin/env bash
# A side environment for the rliable cross-check of actorq/study/stats.py
# (tests/unit/test_stats.py). rliable 1.2.0 pins arch<8, and arch 7 fails to import beside
# pandas 3, which actorq's own environment has; so rliable gets the environment it installs
# with (arch 7.2.0, pandas 2.3.3), and the test runs the comparison there as a subprocess.
# stats.py needs only numpy, so the side environment loads it by path.
set -euo pipefail
cd "$(dirname "$0")/.."
ENV_DIR=.venv-rliable
STAMP="$ENV_DIR/.installed-1"
if [ ! -f "$STAMP" ]; then
  echo "== creating $ENV_DIR (rliable 1.2.0, arch 7.2.0, pandas 2.3.3) for the rliable cross-check"
  python3 -m venv "$ENV_DIR"
  "$ENV_DIR/bin/python" -m pip install --quiet --disable-pip-version-check \
    "rliable==1.2.0" "arch==7.2.0" "pandas==2.3.3"
  touch "$STAMP"
fi
