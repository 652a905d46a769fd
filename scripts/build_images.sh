#!/usr/bin/env bash
# `make image`: the actorq, Redis and Prometheus images, built on this machine with no
# registry and no network inside any build:
#   1. $LOCAL/debian:bookworm: Debian minbase made with debootstrap, piped into
#      `docker import`; built once, reused by tag
#   2. $LOCAL/{python,redis,prometheus}: that base plus Debian packages (python3 + venv,
#      redis-server, prometheus) whose .deb files the host's apt downloads, resolved
#      against the base's own dpkg status; deploy/docker/*.Dockerfile installs them offline
#   3. wheelhouse/: every pinned dependency (CPU torch 2.13.0 included) downloaded by the
#      host's pip, refilled only when pyproject.toml's dependencies change (and kept per
#      dependency list in $WHEEL_CACHE for other checkouts on this machine)
#   4. the actorq images from Dockerfile with --build-arg PYTHON_IMAGE=<local python>
#      WHEELS=wheelhouse (its defaults stay python:3.11-slim + PyPI and the CPU index), one
#      per role by the pyproject extras it carries (EXTRAS, docs/containers.md):
#        actorq:latest  mujoco,atari,plots,prioritized: the learner, anything
#        actorq:core    no extra, SLIM=1 (no sympy/networkx/pip; the Dockerfile says why):
#                       the quantizer, classic-control actors and evaluator
#        actorq:mujoco  MuJoCo / DMC actors;  actorq:atari  MinAtar / ALE actors
#      ACTORQ_IMAGE_ROLES="latest core" builds only those.
# Starts a Docker engine when none answers (scripts/docker_engine.sh) and leaves it running.
set -euo pipefail
cd "$(dirname "$0")/.."
LOCAL=${ACTORQ_LOCAL_REGISTRY:-actorq-local}
IMAGE=${ACTORQ_IMAGE:-actorq:latest}
ROLES=${ACTORQ_IMAGE_ROLES:-latest core mujoco atari}
FULL_EXTRAS=mujoco,atari,plots,prioritized  # the Dockerfile's default; the wheelhouse's too
SUITE=bookworm
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=$PWD/.image-cache  # debootstrap and apt downloads, build contexts (gitignored)
# Filled wheelhouses by dependency list, shared by every checkout on this machine (CI's
# fresh clones included), so the ~440 MB are downloaded once per pyproject change.
WHEEL_CACHE=${ACTORQ_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/actorq/wheelhouse}
PYTHON=${PYTHON:-python3}
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
BASE=$LOCAL/debian:$SUITE
PYTHON_BASE=$LOCAL/python:3.11-$SUITE

./scripts/docker_engine.sh start

# minbase_image: Debian minbase root filesystem (debootstrap) imported as $BASE.
minbase_image() {
  if docker image inspect "$BASE" >/dev/null 2>&1; then
    echo "== $BASE: present, reused"
    return 0
  fi
  command -v debootstrap >/dev/null || {
    echo "== installing debootstrap (apt-get)"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq debootstrap >/dev/null
  }
  mkdir -p "$CACHE/debootstrap"
  local root
  root=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  echo "== $BASE: debootstrap --variant=minbase $SUITE (about 1-5 min)"
  $SUDO debootstrap --variant=minbase --cache-dir="$CACHE/debootstrap" \
    "$SUITE" "$root" "$MIRROR" >"$root.log" 2>&1 || {
    tail -20 "$root.log" >&2; $SUDO rm -rf "$root" "$root.log"; return 1; }
  # As Debian's official images: services never start during package installs.
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$root/usr/sbin/policy-rc.d" >/dev/null
  $SUDO chmod 755 "$root/usr/sbin/policy-rc.d"
  $SUDO find "$root"/var/cache/apt -type f -delete  # apt needs its (empty) archives/partial
  $SUDO rm -rf "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* "$root"/usr/share/man/* \
    "$root"/usr/share/info/* "$root"/usr/share/locale/*
  $SUDO tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' - "$BASE" >/dev/null
  $SUDO rm -rf "$root" "$root.log"
  echo "== $BASE: $(size "$BASE")"
}

# package_image NAME TAG: $BASE + the packages on the `RUN install-debs` line of
# deploy/docker/NAME.Dockerfile. The host's apt downloads them and what they need beyond
# the base (resolved against the base's own dpkg status) into a flat repository, which
# install-debs.sh installs from inside the build, with no network.
package_image() {
  local name=$1 tag=$2 context=$CACHE/$1 packages
  packages=$(sed -n 's/^RUN install-debs //p' "deploy/docker/$name.Dockerfile")
  if [ "$(cat "$context/.packages" 2>/dev/null)" != "$packages" ]; then
    echo "== $tag: apt-get --download-only $packages"
    rm -rf "$context" && mkdir -p "$context/debs/partial"
    docker run --rm "$BASE" cat /var/lib/dpkg/status >"$context/dpkg-status"
    # shellcheck disable=SC2086  # a list of packages
    $SUDO apt-get install -y -qq --download-only --no-install-recommends \
      -o Dir::State::status="$context/dpkg-status" -o Dir::Cache::archives="$context/debs" \
      $packages >/dev/null
    rm -rf "$context/debs/partial" "$context/debs/lock"
    command -v dpkg-scanpackages >/dev/null || {
      $SUDO apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dpkg-dev >/dev/null; }
    (cd "$context/debs" && dpkg-scanpackages . /dev/null >Packages 2>/dev/null)
    echo "$packages" >"$context/.packages"
  fi
  cp deploy/docker/*.sh "$context/"
  echo "== $tag (deploy/docker/$name.Dockerfile, $(find "$context/debs" -name '*.deb' | wc -l) .debs)"
  docker build --quiet --force-rm -t "$tag" --build-arg BASE="$BASE" \
    -f "deploy/docker/$name.Dockerfile" "$context" >/dev/null
}

size() { docker image inspect -f '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1/1e6}'; }

# fill_wheelhouse: the host's pip downloads what the image's pip installs (wheels only).
fill_wheelhouse() {
  local deps stamp target
  deps=$("$PYTHON" deploy/docker/requirements.py "$FULL_EXTRAS")
  # setuptools + wheel: pip builds actorq itself (pyproject's build-system) offline too.
  deps=$(printf '%s\nsetuptools>=68\nwheel\n' "$deps")
  # Markers are evaluated for the image's Python, not the host's (Debian's 3.11.2 needs
  # async-timeout for redis; a host's 3.11.7 does not).
  target=$(docker run --rm "$PYTHON_BASE" python -c 'import platform; print(platform.python_version())')
  stamp=$(printf '%s\n%s' "$target" "$deps" | sha256sum | cut -c1-16)
  if [ "$(cat wheelhouse/.stamp 2>/dev/null)" = "$stamp" ]; then
    echo "== wheelhouse: up to date ($(find wheelhouse -name '*.whl' | wc -l) wheels)"
    [ -f "$WHEEL_CACHE/$stamp/.stamp" ] || keep_wheelhouse "$stamp"
    return 0
  fi
  if [ -f "$WHEEL_CACHE/$stamp/.stamp" ]; then  # filled before, by another checkout here
    echo "== wheelhouse: from $WHEEL_CACHE/$stamp"
    find wheelhouse -name '*.whl' -delete
    copy_tree "$WHEEL_CACHE/$stamp" wheelhouse
    return 0
  fi
  # Wheels already here stay (pip skips them): a dependency moved between extras costs
  # nothing, a new one only its own download.
  echo "== wheelhouse: pip download for Python $target (host pip; torch 2.13.0 CPU)"
  printf '%s\n' "$deps" >wheelhouse/.requirements.txt
  "$PYTHON" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
    --python-version "$target" --dest wheelhouse -r wheelhouse/.requirements.txt 2>&1 | grep -v '^WARNING: Location' || true
  # The host's pip evaluates markers for the host's Python; ask the image's own pip
  # (offline, --dry-run) what it still misses and fetch that too.
  local missing
  for _ in 1 2 3; do
    missing=$(docker run --rm -v "$PWD/wheelhouse:/wheelhouse:ro" "$PYTHON_BASE" sh -c \
      'python -m venv /tmp/v && /tmp/v/bin/pip install --dry-run --no-index -q \
         --find-links /wheelhouse -r /wheelhouse/.requirements.txt 2>&1' \
      | sed -n 's/.*No matching distribution found for \([^;]*\).*/\1/p' | head -1) || true
    [ -n "$missing" ] || break
    echo "== wheelhouse: + $missing (a marker the image's Python $target selects)"
    "$PYTHON" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
      --python-version "$target" --dest wheelhouse "$missing" 2>&1 | grep -v '^WARNING: Location' || true
  done
  [ -z "$missing" ] || { echo "wheelhouse: still missing $missing" >&2; exit 1; }
  rm wheelhouse/.requirements.txt
  ls wheelhouse/torch-2.13.0+cpu-*.whl >/dev/null || {
    echo "wheelhouse: expected the CPU build of torch 2.13.0, got: $(ls wheelhouse/torch-*)" >&2
    exit 1; }
  echo "$stamp" >wheelhouse/.stamp
  keep_wheelhouse "$stamp"
  echo "== wheelhouse: $(find wheelhouse -name '*.whl' | wc -l) wheels, $(du -sh wheelhouse | cut -f1)"
}

keep_wheelhouse() { mkdir -p "$WHEEL_CACHE/$1" && copy_tree wheelhouse "$WHEEL_CACHE/$1"; }
# copy_tree SRC DST: the wheels and the stamp, hard-linked where the filesystem allows, else
# copied. File by file, skipping what is already the same file: a checkout's tracked
# wheelhouse/README.md made a whole-tree `cp -al` fail half-way and its `cp -a` fallback
# then refused every file the first pass had linked.
copy_tree() {
  local f
  for f in "$1"/*.whl "$1"/.stamp; do
    [ -e "$f" ] || continue
    [ "$f" -ef "$2/${f##*/}" ] && continue
    ln -f "$f" "$2/" 2>/dev/null || cp -f "$f" "$2/"
  done
}

minbase_image
package_image python "$PYTHON_BASE"
package_image redis "$LOCAL/redis:$SUITE"
package_image prometheus "$LOCAL/prometheus:$SUITE"
fill_wheelhouse

# role_tag ROLE: the tag of one role's image (latest is $IMAGE itself).
role_tag() { [ "$1" = latest ] && echo "$IMAGE" || echo "${IMAGE%:*}:$1"; }
role_extras() {
  case $1 in
    latest) echo "$FULL_EXTRAS" ;;
    core) echo "" ;;
    mujoco | atari) echo "$1" ;;
    *) echo "ACTORQ_IMAGE_ROLES: expected latest, core, mujoco or atari, got '$1'" >&2; exit 2 ;;
  esac
}
tags=()
for role in $ROLES; do
  tag=$(role_tag "$role"); extras=$(role_extras "$role")
  slim=0; [ "$role" = core ] && slim=1
  echo "== $tag (Dockerfile on $PYTHON_BASE, EXTRAS='$extras' SLIM=$slim, wheels from wheelhouse/ only)"
  docker build --quiet --force-rm -t "$tag" --build-arg EXTRAS="$extras" --build-arg SLIM=$slim \
    --build-arg PYTHON_IMAGE="$PYTHON_BASE" --build-arg WHEELS=wheelhouse . >/dev/null
  tags+=("$tag")
done
for tag in "${tags[@]}" "$BASE" "$PYTHON_BASE" "$LOCAL/redis:$SUITE" "$LOCAL/prometheus:$SUITE"; do
  printf '%-36s %s\n' "$tag" "$(size "$tag")"
done
