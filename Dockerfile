# actorq's images; pick the process with the command:
#   actorq-quantizer | actorq-learner | actorq-actor | actorq run ... | actorq healthcheck
# Build: docker build -t actorq:latest .      (registry + PyPI; or offline: `make image`)
# Configured only through ACTORQ_* environment variables (actorq/config.py).
# EXTRAS picks the pyproject extras the image carries (docs/containers.md):
#   docker build --build-arg EXTRAS= --build-arg SLIM=1 -t actorq:core .
#                                                  quantizer, classic-control actors, evaluator
#   docker build --build-arg EXTRAS=mujoco -t actorq:mujoco .  MuJoCo / DMC actors
#   docker build --build-arg EXTRAS=atari -t actorq:atari .    MinAtar / ALE actors
#   default (actorq:latest): mujoco,atari,plots,prioritized, for the learner and anything

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# --- build: a virtual environment with the CPU-only torch wheel and actorq ---------------
FROM ${PYTHON_IMAGE} AS build
# CPU wheels by default; a CUDA image for the GPU learner (deploy/k8s/overlays/scale-32-gpu):
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu128 -t actorq:cuda .
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# Where pip finds wheels: "index" (PyPI, torch from TORCH_INDEX) or "wheelhouse": only the
# wheels in ./wheelhouse, no network (`make image` fills it with the host's pip and builds
# with --build-arg PYTHON_IMAGE=actorq-local/python:3.11-bookworm WHEELS=wheelhouse).
ARG WHEELS=index
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
COPY wheelhouse/ /wheelhouse/
# The pip.conf applies to every pip below, build isolation included (setuptools, wheel).
RUN case "$WHEELS" in \
      index) ;; \
      wheelhouse) printf '[global]\nno-index = true\nfind-links = /wheelhouse\n' > /etc/pip.conf ;; \
      *) echo "WHEELS: expected index or wheelhouse, got '$WHEELS'" >&2; exit 2 ;; \
    esac \
 && python -m venv /opt/venv \
 && pip install --no-cache-dir --index-url "${TORCH_INDEX}" torch==2.13.0 \
 && torch=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch \
 && rm -rf "$torch/test" "$torch/include" "$torch/share/cmake" "$torch"/bin/protoc* \
      "$torch"/bin/*Test "$torch"/bin/test_* "$torch"/lib/*_test.so \
      "$torch/lib/libbackend_with_compiler.so"
# Removed above (~190 MB): C++ test binaries, headers and cmake files. They serve only
# C++ extension builds and torch.compile's C++ code generation, which actorq never runs.
# The pinned dependencies in their own layer, keyed on pyproject.toml only: a code change
# rebuilds only the `app` stage below (actorq itself, --no-deps).
# Declared only here: every image shares the torch layer above (an ARG is part of the
# cache key of each RUN after it).
ARG EXTRAS=mujoco,atari,plots,prioritized
WORKDIR /src
COPY pyproject.toml deploy/docker/requirements.py ./
RUN python requirements.py "$EXTRAS" > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt
# --- actorq itself, apart from its dependencies: a code change rebuilds this stage and one
# small layer of the runtime, not the ~1.5 GB venv (which the runtime used to copy again).
# --prefix puts it in lib/python3.11/site-packages and bin/ under /opt/app, the venv's
# layout, with the venv's python in the scripts' first line.
FROM build AS app
COPY README.md ./
COPY actorq ./actorq
COPY services ./services
RUN pip install --no-cache-dir --no-deps --prefix /opt/app .

# --- the dependencies as the runtime gets them
# SLIM=1 (actorq:core, for the quantizer, actors and evaluator): without pip/setuptools and
# without sympy, mpmath and networkx (~105 MB). torch needs those three only for
# torch._dynamo / torch.compile, which the learner reaches (optimizer.state_dict) and the
# quantizer and actors never do; a stub in their place says which image to use instead.
FROM build AS deps
ARG SLIM=0
RUN if [ "$SLIM" = 1 ]; then \
      site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
   && python -m pip uninstall -y -q sympy mpmath networkx setuptools wheel pip \
   && for m in sympy mpmath networkx; do mkdir "$site/$m" && printf '%s%s\n' \
        "raise ImportError('$m is left out of the slim actorq:core image (SLIM=1); this " \
        "code path needs it: run this role from actorq:latest')" >"$site/$m/__init__.py"; done; \
    elif [ "$SLIM" != 0 ]; then echo "SLIM: expected 0 or 1, got '$SLIM'" >&2; exit 2; fi

# --- runtime: the venv only, a non-root user -------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ARG EXTRAS=mujoco,atari,plots,prioritized
ARG SLIM=0
LABEL io.actorq.extras="${EXTRAS}" \
      io.actorq.slim="${SLIM}" \
      org.opencontainers.image.title="actorq" \
      org.opencontainers.image.description="ActorQ: int8 actors, fp32 learner, quantizer" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 10001 actorq \
 && useradd --uid 10001 --gid actorq --no-create-home --home-dir /work --shell /usr/sbin/nologin actorq \
 && mkdir -p /work /checkpoints \
 && chown actorq:actorq /work /checkpoints
COPY --from=deps /opt/venv /opt/venv
COPY --from=app /opt/app/ /opt/venv/
COPY deploy/docker/actorq-healthz /usr/local/bin/actorq-healthz
# Inside a container every service listens on all interfaces, on the same two ports
# (each container has its own network namespace); compose and Kubernetes rely on these.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    NUMBA_CACHE_DIR=/tmp/numba \
    ACTORQ_BIND_HOST=0.0.0.0 \
    ACTORQ_GRPC_PORT=50051 \
    ACTORQ_METRICS_PORT=9100
# Both halves fit: actorq imports with its dependencies (and the slim image's roles without
# the three packages it leaves out).
RUN python -c "import actorq, torch; print('actorq', actorq.__version__, 'torch', torch.__version__)" \
 && if [ "$SLIM" = 1 ]; then \
      python -c "import services.actor.main, services.quantizer.main, torch.ao.quantization"; fi
WORKDIR /work
USER 10001:10001
EXPOSE 50051 9100
VOLUME ["/checkpoints"]
# GET /healthz on 127.0.0.1:$ACTORQ_METRICS_PORT with bash alone (exit 0 = the service's
# grpc.health.v1 says SERVING): ~1 ms of CPU, where a Python gRPC probe cost 0.5 s
# (BENCHMARKS.md "Health probes"). `actorq healthcheck` still asks gRPC by hand.
HEALTHCHECK --interval=10s --timeout=30s --start-period=120s --retries=5 \
    CMD ["actorq-healthz"]
CMD ["actorq", "--help"]
