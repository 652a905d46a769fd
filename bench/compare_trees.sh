#!/bin/bash
# Interleaved comparison of an old tree and this one (BENCHMARKS.md 23e), same venv:
#   bench/compare_trees.sh throughput OLD_COMMIT [ROUNDS]   one actor alone, M = 32 and 128
#   bench/compare_trees.sh solve OLD_COMMIT [SEEDS [BENCH_SOLVE_ARGS...]]
#       `actorq run` int8 to the solve bar (CartPole-v1 unless the args say otherwise), e.g.
#       solve 2f1ef4c "1 2 3" --env Pendulum-v1 --target -200 --algo td3 --target-return -200
#   bench/compare_trees.sh scale OLD_COMMIT [ROUNDS [ACTORQ_SCALE_ARGS...]]
#       one `actorq scale` grid per tree and round, e.g. scale 573da3e 3 --actors 32
#       --precisions int8 --seeds 1 --max-seconds 60 --no-stop-at-target; prints each run's
#       env steps/s, learner updates/s, CPU-seconds of the learner, actors and all, and
#       the learner's share of time waiting for data; ORDER="new old" runs this tree first
#   bench/compare_trees.sh service OLD_COMMIT [ROUNDS [BENCH_LEARNER_SERVICE_ARGS...]]
#       bench/bench_learner_service.py of each tree per round (its table rows), e.g.
#       service d9afb5e 3 --algos dqn --alone-drawn; ORDER as for scale
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
scale)
  rounds=${3:-2}; shift $(( $# < 3 ? $# : 3 ))  # the rest goes to `actorq scale`
  out=$(mktemp -d /tmp/actorq-scale-XXXXXX)
  trap 'rm -rf "$old" "$out"' EXIT
  columns='actors,env_steps_per_s,updates_per_s,cpu_learner_s,cpu_actors_s,cpu_total_s'
  for r in $(seq 1 "$rounds"); do for tree in ${ORDER:-old new}; do
    echo "round $r $tree, load $(load), $(date -u +%T)"
    case $tree in old) dir=$old ;; new) dir=$here ;; *) echo "ORDER: old and new, got $tree" >&2; exit 2 ;; esac
    (cd "$dir" && PYTHONPATH=$dir $py -m actorq scale --out "$out/$tree-$r" "$@" >/dev/null)
    $py - "$out/$tree-$r/runs.csv" "$columns" <<'PY'
import csv, json, sys
from pathlib import Path
columns = sys.argv[2].split(",")
print("  " + ",".join(columns) + ",learner_wait_fraction")
for row in csv.DictReader(open(sys.argv[1])):
    summary = Path(row["folder"]) / "summary.json"
    wait = json.loads(summary.read_text()).get("learner_wait_fraction") if summary.exists() else ""
    print("  " + ",".join(row[c] for c in columns) + f",{wait}")
PY
  done; done ;;
service)
  rounds=${3:-2}; shift $(( $# < 3 ? $# : 3 ))  # the rest goes to bench_learner_service.py
  for r in $(seq 1 "$rounds"); do for tree in ${ORDER:-old new}; do
    echo "round $r $tree, load $(load), $(date -u +%T)"
    case $tree in old) dir=$old ;; new) dir=$here ;; *) echo "ORDER: old and new, got $tree" >&2; exit 2 ;; esac
    (cd "$dir" && PYTHONPATH=$dir $py bench/bench_learner_service.py --rounds 1 "$@" | grep '^| [a-z0-9]* | ' | grep -v '^| algo ' | sed "s/^/  $tree: /")
  done; done ;;
*) echo "usage: $0 throughput|solve|scale|service OLD_COMMIT [ROUNDS|SEEDS [ARGS...]]" >&2; exit 2 ;;
esac
