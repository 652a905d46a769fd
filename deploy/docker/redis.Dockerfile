# Redis from Debian's redis-server package, for machines that cannot pull redis:7.2.5-alpine.
# Built by `make image` (scripts/build_images.sh) on the Debian minbase it imported with
# debootstrap; behaves like the official image for docker-compose.yml: data in /data,
# redis-cli inside, protected mode off (the compose network is the boundary, as in the official image).
ARG BASE=actorq-local/debian:bookworm
FROM ${BASE}
# debs/: the packages and what they need beyond minbase, downloaded by the host's apt
# (build_images.sh reads the package list from the install-debs line below).
COPY install-debs.sh /usr/local/sbin/install-debs
COPY debs/ /tmp/debs/
RUN install-debs redis-server
COPY redis-entrypoint.sh /usr/local/bin/redis-entrypoint
RUN mkdir -p /data && chown redis:redis /data
WORKDIR /data
USER redis
EXPOSE 6379
VOLUME ["/data"]
ENTRYPOINT ["/usr/local/bin/redis-entrypoint"]
CMD ["redis-server"]
