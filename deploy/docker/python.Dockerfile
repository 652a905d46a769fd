# Python 3.11 from Debian's packages on the debootstrapped minbase: the PYTHON_IMAGE of
# `make image` (scripts/build_images.sh) on machines that cannot pull python:3.11-slim.
# debs/: the packages and what they need beyond minbase, downloaded by the host's apt
# (build_images.sh reads the package list from the install-debs line below).
ARG BASE=actorq-local/debian:bookworm
FROM ${BASE}
COPY install-debs.sh /usr/local/sbin/install-debs
COPY debs/ /tmp/debs/
RUN install-debs python3 python3-venv python-is-python3
CMD ["python"]
