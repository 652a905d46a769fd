# Prometheus from Debian's prometheus package, for machines that cannot pull
# prom/prometheus. Built by `make image` (scripts/build_images.sh) on the Debian minbase it
# imported with debootstrap; same entrypoint contract as the official image (docker-compose.yml
# passes only flags), data in /prometheus, wget for the health check.
ARG BASE=actorq-local/debian:bookworm
FROM ${BASE}
# debs/: the packages and what they need beyond minbase, downloaded by the host's apt
# (build_images.sh reads the package list from the install-debs line below).
COPY install-debs.sh /usr/local/sbin/install-debs
COPY debs/ /tmp/debs/
RUN install-debs prometheus wget
RUN mkdir -p /prometheus && chown prometheus:prometheus /prometheus
WORKDIR /prometheus
USER prometheus
EXPOSE 9090
VOLUME ["/prometheus"]
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
