#!/bin/sh
# As the official image does: `redis-server ARGS` runs with protected mode off, so other
# containers on the network can connect (Debian's build keeps Redis's default, on).
set -e
if [ "${1:-}" = redis-server ]; then
  shift
  set -- redis-server --protected-mode no "$@"
fi
exec "$@"
