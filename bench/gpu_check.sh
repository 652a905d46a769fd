#!/usr/bin/env bash
# The project's GPU check (issue 29; docs/gpu-learner.md): on one GPU machine with no
# network, in under 8 minutes, one markdown report.
#   bench/gpu_check.sh [gpu_report.py flags]     # make gpu-check ARGS="..."
# python3 there is 3.12 with a CUDA torch of its own (torch is never installed here); the
# packages it lacks come as cp312 wheels from a local folder (make gpu-wheels fills
# gpu-wheels/ on a machine with network) installed with --no-index --no-deps into a
# target dir that PYTHONPATH puts first, with this checkout. The report goes to
# $GPU_REPORT, else $OUT/gpu-report.md where $OUT is set, else ./gpu-report.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-gpu-wheels}
SITE=${GPU_SITE:-${TMPDIR:-/tmp}/actorq-gpu-site}
LIMIT=${GPU_CHECK_LIMIT:-455}  # seconds for bench/gpu_report.py (its stages use 440)
started=$(date +%s)

if compgen -G "$WHEELS/*.whl" >/dev/null; then
  echo "== installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE (no index)"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "== no wheels in $WHEELS: using $PYTHON's own packages"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
REPORT=${GPU_REPORT:-${OUT:+$OUT/gpu-report.md}}
REPORT=${REPORT:-gpu-report.md}
code=0
timeout -k 10 "$LIMIT" "$PYTHON" bench/gpu_report.py --out "$REPORT" "$@" || code=$?
echo "gpu check: exit $code after $(( $(date +%s) - started )) s; report $REPORT"
exit "$code"
