#!/usr/bin/env bash
# A Docker engine for `make image` and the compose tests, on machines that have none.
#   scripts/docker_engine.sh start   an engine answers afterwards; when none did, installs
#                                    Debian's docker.io (root, apt-get) if dockerd is
#                                    missing, starts dockerd and writes its pid to $PIDFILE
#   scripts/docker_engine.sh stop    stops dockerd only if `start` started it ($PIDFILE)
# An engine that was already running is used as it is and never stopped.
# CPU weight: an engine started here puts each container's cgroup at the root
# (--cgroup-parent /, cgroupfs driver), so every container weighs what one process does.
# Docker's default parent (/docker) gives ALL containers together the weight of ONE process:
# 32 actors beside two CPU hogs then get a third of the CPU (docs/containers.md, BENCHMARKS
# 24). ACTORQ_DOCKER_CGROUP_PARENT="" keeps Docker's default; systemd hosts (systemd
# cgroup driver) are left as they are.
set -euo pipefail
PIDFILE=${ACTORQ_DOCKERD_PIDFILE:-/tmp/actorq-dockerd.pid}
LOG=${ACTORQ_DOCKERD_LOG:-/tmp/actorq-dockerd.log}
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"

engine_answers() { docker info >/dev/null 2>&1; }

start() {
  if engine_answers; then
    echo "docker engine: already running ($(docker version -f '{{.Server.Version}}'))"
    return 0
  fi
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    echo "docker engine: installing Debian's docker.io with apt-get"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
      docker.io >/dev/null
  fi
  local flags=()
  local parent=${ACTORQ_DOCKER_CGROUP_PARENT-/}
  if [ -n "$parent" ] && [ "$(cat /proc/1/comm 2>/dev/null)" != systemd ]; then
    flags+=(--cgroup-parent "$parent")
  fi
  echo "docker engine: starting dockerd ${flags[*]} (log $LOG)"
  # setsid: dockerd outlives this script (and the test that ran it) until `stop`.
  $SUDO setsid dockerd --pidfile "$PIDFILE.dockerd" "${flags[@]}" >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 60); do
    if engine_answers; then
      echo "docker engine: dockerd $(docker version -f '{{.Server.Version}}') answers"
      return 0
    fi
    sleep 1
  done
  echo "docker engine: dockerd did not answer within 60 s; last lines of $LOG:" >&2
  tail -20 "$LOG" >&2
  return 1
}

stop() {
  [ -f "$PIDFILE" ] || { echo "docker engine: not started by this script; left running"; return 0; }
  pid=$(cat "$PIDFILE")
  if kill -0 "$pid" 2>/dev/null; then
    $SUDO kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  fi
  rm -f "$PIDFILE"
  echo "docker engine: dockerd $pid stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop (got '${1:-}')" >&2; exit 2 ;;
esac
