#!/bin/bash
# Interleaved comparison of an old tree and this one (BENCHMARKS.md 23e), same venv:
#   bench/compare_trees.sh throughput OLD_COMMIT [ROUNDS]   one actor alone, M = 32 and 128
#   bench/compare_trees.sh solve OLD_COMMIT [SEEDS [BENCH_SOLVE_ARGS...]]
#       `actorq run` int8 to the solve bar (CartPole-v1 unless the args say otherwise), e.g.
#       solve 2f1ef4c "1 2 3" --env Pendulum-v1 --target -200 --algo td3 --target-return -200
# The old tree is exported with `git archive` to a temporary folder and imported through
# PYTHONPATH (its generated protos are committed, so it needs no build).
set -euo pipefail
mode=$1; commit=$2
here=$(cd "$(dirname "$0")/.." && pwd)
py=$here/.venv/bin/python
old=$(mktemp -d /tmp/actorq-old-XXXXXX)
trap 'rm -rf "$old"' EXIT
git -C "$here" archive "$commit" | tar -x -C "$old"
load() { cut -d' ' -f1-3 /proc/loadavg; }
case $mode in
throughput)
  for r in $(seq 1 "${3:-2}"); do for m in 32 128; do
    echo "round $r M=$m load $(load)"
    (cd "$old" && PYTHONPATH=$old $py bench/actor_inproc.py --m $m --seconds 3 | sed 's/^/  old: /')
    (cd "$here" && $py bench/actor_inproc.py --m $m --seconds 3 | sed 's/^/  new: /')
  done; done ;;
solve)
  seeds=${3:-1 2 3 4 5}; shift $(( $# < 3 ? $# : 3 ))  # the rest goes to bench_solve.py
  for seed in $seeds; do
    echo "seed $seed old, load $(load), $(date -u +%T)"
    (cd "$old" && PYTHONPATH=$old $py bench/bench_solve.py --seeds "$seed" --precisions int8 "$@" | grep "^| int8 | $seed")
    echo "seed $seed new, load $(load), $(date -u +%T)"
    (cd "$here" && $py bench/bench_solve.py --seeds "$seed" --precisions int8 "$@" | grep "^| int8 | $seed")
  done ;;
*) echo "usage: $0 throughput|solve OLD_COMMIT [ROUNDS|SEEDS [BENCH_SOLVE_ARGS...]]" >&2; exit 2 ;;
esac
