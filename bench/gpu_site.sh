# Sourced by bench/gpu_check.sh and bench/pong.sh: the GPU machine's python3 (3.12, a CUDA
# torch of its own; torch is never installed here) lacks some packages, which come as
# cp312 wheels from a local folder (make gpu-wheels fills gpu-wheels/ on a machine with
# network), installed with --no-index --no-deps into a target dir that PYTHONPATH puts
# first, with this checkout. Without wheels, $PYTHON's own packages are used.
PYTHON=${PYTHON:-python3}
WHEELS=${GPU_WHEELS:-gpu-wheels}
SITE=${GPU_SITE:-${TMPDIR:-/tmp}/actorq-gpu-site}
if compgen -G "$WHEELS/*.whl" >/dev/null; then
  echo "== installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS into $SITE (no index)"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl
  export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
else
  echo "== no wheels in $WHEELS: using $PYTHON's own packages"
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONUNBUFFERED=1
