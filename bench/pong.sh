#!/usr/bin/env bash
# `make pong` (issue 42): ALE Pong through the real services (EnvPool where it imports,
# CNN policy, int8 actors, the learner on the GPU where there is one) until the
# evaluator's 100-episode mean reaches 18 or 9 minutes pass, start-up included; a report.
#   bench/pong.sh [pong.py flags]        # make pong ARGS="--precision fp32"
# On the GPU machine (no network, no Docker) the packages its python3 lacks come from
# local wheels (bench/gpu_site.sh; make gpu-wheels fills gpu-wheels/, ale-py included).
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/gpu_site.sh
. bench/gpu_site.sh
exec "$PYTHON" bench/pong.py "$@"
