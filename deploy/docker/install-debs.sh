#!/bin/sh
# install-debs PACKAGE...: apt-get install PACKAGES from the .deb files in /tmp/debs only
# (a flat repository the host's apt filled; scripts/build_images.sh), no network, then
# remove what a container never needs.
set -eu
echo 'deb [trusted=yes] file:/tmp/debs ./' >/tmp/debs/local.list
mkdir -p /tmp/debs/parts /var/cache/apt/archives/partial
only_local="-o Dir::Etc::SourceList=/tmp/debs/local.list -o Dir::Etc::SourceParts=/tmp/debs/parts"
# shellcheck disable=SC2086  # a list of options
apt-get $only_local -qq update
# shellcheck disable=SC2086
apt-get $only_local -y -qq --no-install-recommends install "$@" >/dev/null
rm -rf /tmp/debs /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb \
  /usr/share/doc/* /usr/share/man/*
