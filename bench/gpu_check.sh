#!/usr/bin/env bash
# The project's GPU check (issue 29; docs/gpu-learner.md): on one GPU machine with no
# network, in under 8 minutes, one markdown report.
#   bench/gpu_check.sh [gpu_report.py flags]     # make gpu-check ARGS="..."
# The wheels the machine's python3 lacks: bench/gpu_site.sh. The report goes to
# $GPU_REPORT, else $OUT/gpu-report.md where $OUT is set, else ./gpu-report.md.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${GPU_CHECK_LIMIT:-455}  # seconds for bench/gpu_report.py (its stages use 440)
started=$(date +%s)
# shellcheck source=bench/gpu_site.sh
. bench/gpu_site.sh
REPORT=${GPU_REPORT:-${OUT:+$OUT/gpu-report.md}}
REPORT=${REPORT:-gpu-report.md}
code=0
timeout -k 10 "$LIMIT" "$PYTHON" bench/gpu_report.py --out "$REPORT" "$@" || code=$?
echo "gpu check: exit $code after $(( $(date +%s) - started )) s; report $REPORT"
exit "$code"
