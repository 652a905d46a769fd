# One image for every actorq service; pick the process with the command:
#   actorq-quantizer | actorq-learner | actorq-actor | actorq run ... | actorq healthcheck
# Build: docker build -t actorq:latest .      (registry + PyPI; or offline: `make image`)
# Configured only through ACTORQ_* environment variables (actorq/config.py).

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
 && pip install --no-cache-dir --index-url "${TORCH_INDEX}" torch==2.13.0
# The pinned dependencies in their own layer, keyed on pyproject.toml only: a code change
# rebuilds just the last layer (actorq itself, --no-deps).
WORKDIR /src
COPY pyproject.toml ./
RUN python -c "import tomllib; print(*tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" > /tmp/requirements.txt \
 && pip install --no-cache-dir -r /tmp/requirements.txt
COPY README.md ./
COPY actorq ./actorq
COPY services ./services
RUN pip install --no-cache-dir --no-deps . \
 && python -c "import actorq, torch; print('actorq', actorq.__version__, 'torch', torch.__version__)"

# --- runtime: the venv only, a non-root user -------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="actorq" \
      org.opencontainers.image.description="ActorQ: int8 actors, fp32 learner, quantizer" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 10001 actorq \
 && useradd --uid 10001 --gid actorq --no-create-home --home-dir /work --shell /usr/sbin/nologin actorq \
 && mkdir -p /work /checkpoints \
 && chown actorq:actorq /work /checkpoints
COPY --from=build /opt/venv /opt/venv
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
WORKDIR /work
USER 10001:10001
EXPOSE 50051 9100
VOLUME ["/checkpoints"]
# Asks the service's own grpc.health.v1 on 127.0.0.1:$ACTORQ_GRPC_PORT (exit 0 = SERVING).
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=5 \
    CMD ["python", "-m", "actorq.rpc.healthcheck"]
CMD ["actorq", "--help"]
