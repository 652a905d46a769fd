# actorq: the verbs people expect. Every target sets up the venv itself when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test test-unit test-integration test-e2e lint format proto proto-check bench bench-quick bench-solve bench-sumtree clean deploy-check dashboard dev-certs redis-acl bench-fuzz bench-input-norm bench-threads

$(STAMP): pyproject.toml
	./scripts/setup.sh
	@touch $(STAMP)

setup: $(STAMP)  ## create .venv and install actorq with its pinned dependencies

run: $(STAMP)  ## train DQN on CartPole-v1 with int8 actors (embedded Redis); ARGS="--actors 4" to change
	$(VENV)/bin/actorq run $(ARGS)

test: $(STAMP)  ## the whole suite: unit, integration (real Redis + gRPC), end to end
	./scripts/test.sh

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit -q

test-integration: $(STAMP)
	$(PY) -m pytest tests/integration -q

test-e2e: $(STAMP)
	$(PY) -m pytest tests/e2e -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

proto: $(STAMP)  ## regenerate actorq/v1 from proto/
	./scripts/gen_proto.sh

proto-check: $(STAMP)  ## fail if the committed generated code differs from a fresh generation
	./scripts/gen_proto.sh
	git diff --exit-code -- actorq/v1 || (echo "generated code is stale: run 'make proto' and commit" && exit 1)

bench: $(STAMP)  ## print the benchmark tables recorded in BENCHMARKS.md (sections 1-4)
	$(PY) bench/bench_quant.py --ao-baseline
	$(PY) bench/bench_actor.py
	$(PY) bench/bench_replay.py

bench-solve: $(STAMP)  ## time to solve CartPole-v1, int8 vs fp32, 3 seeds (BENCHMARKS.md section 5; ~10 min)
	$(PY) bench/bench_solve.py --seeds 0,1,2 --precisions int8,fp32

# cpprb and TorchRL are benchmark contestants only, never runtime dependencies.
BENCH_SUMTREE_LIBS := cpprb==11.0.0 torchrl==0.13.3

bench-sumtree: $(STAMP)  ## K-ary sum tree vs K=2, cpprb, TorchRL (BENCHMARKS.md "K-ary sum tree"; ARGS=--quick)
	$(PY) -m pip install --quiet $(BENCH_SUMTREE_LIBS)
	$(PY) bench/bench_sumtree.py $(ARGS)

bench-input-norm: $(STAMP)  ## int8/int4 action error, obs normalisation carried vs folded (BENCHMARKS.md 10d; ARGS=--runs DIR,DIR)
	$(PY) bench/bench_input_norm.py $(ARGS)

bench-threads: $(STAMP)  ## policy forward in a service worker thread, torch thread count inherited or not (BENCHMARKS.md 11)
	$(PY) bench/bench_threads.py

bench-quick: $(STAMP)
	$(PY) bench/bench_quant.py --quick
	$(PY) bench/bench_actor.py --quick

deploy-check:  ## offline checks of Dockerfile, compose (--scale actor=32), k8s overlays, Prometheus, Grafana
	./scripts/check_deploy.sh

dashboard:  ## regenerate deploy/grafana/dashboards/actorq.json from deploy/grafana/build_dashboard.py
	$(PYTHON) deploy/grafana/build_dashboard.py

bench-fuzz: $(STAMP)  ## >= 10,000 adversarial inputs per gRPC method, table of statuses (BENCHMARKS.md; ~15 min)
	$(PY) bench/fuzz_grpc.py --inputs 10000

dev-certs: $(STAMP)  ## dev CA + one TLS cert per service in certs/dev (gitignored); OPERATIONS.md
	$(PY) -m actorq.security.certs --out certs/dev

redis-acl: $(STAMP)  ## Redis ACL file + per-service passwords in certs/redis; ARGS="--prefix myrun"
	$(VENV)/bin/actorq redis-acl $(ARGS)

clean:
	rm -rf $(VENV) .deploy-tools .pytest_cache .ruff_cache .mypy_cache
