"""Typed settings for every service, read from environment variables.

Each service has one settings dataclass. A field `foo_bar` is set by the environment
variable `ACTORQ_FOO_BAR`; defaults work on localhost. Compose, Kubernetes and
`actorq run` configure services only through these variables, so the code path is the
same everywhere.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from actorq.config_parse import (
    ALGORITHMS,
    ENV_PREFIX,
    PRECISIONS,
    REPLAY_KINDS,
    UPDATE_PATHS,
    _check,
    _check_port,
    _check_precision,
    check_env_backend,
    check_learner_device,
    load_settings,
    parse_int_tuple,
    redact_url,
    to_environ,
)
from actorq.config_run import RunSettings
from actorq.errors import ConfigError

# Compression of uint8 observations in trajectory segments and pixel replay batches.
from actorq.obs_codec import CODECS as OBS_CODECS

# Helpers and `RunSettings` live in config_parse.py and config_run.py; re-exported here so
# that `from actorq.config import X` works for every name.
__all__ = [
    "ALGORITHMS",
    "AUTO_ACTOR_INDEX",
    "ENV_PREFIX",
    "PRECISIONS",
    "REPLAY_KINDS",
    "ActorSettings",
    "CommonSettings",
    "ConfigError",
    "LearnerSettings",
    "QuantizerSettings",
    "RunSettings",
    "check_learner_device",
    "load_settings",
    "parse_int_tuple",
    "redact_url",
    "to_environ",
]

# ACTORQ_ACTOR_INDEX=-1: replicas started from one template (compose --scale, a k8s
# Deployment) claim distinct indices from a Redis counter (actorq.actor.identity).
AUTO_ACTOR_INDEX = -1


def _check_security(settings: CommonSettings) -> None:
    """Security settings name readable files; imported late (tls pulls in grpc)."""
    from actorq.security.signing import load_policy_keys
    from actorq.security.tls import TlsConfig, parse_peer_names

    tls = TlsConfig.from_settings(settings)
    for name in ("tls_allowed_stop_peers", "tls_allowed_publishers"):
        parse_peer_names(getattr(settings, name, ""), name, tls)
    if settings.redis_password_file:
        _check(
            os.path.isfile(settings.redis_password_file),
            f"redis_password_file: expected a readable file, got {settings.redis_password_file!r}",
        )
    load_policy_keys(settings.policy_key_file, settings.policy_previous_key_file)


@dataclass
class CommonSettings:
    """Settings every service shares."""

    redis_url: str = "redis://127.0.0.1:6379/0"  # where replay and policy blobs live
    redis_prefix: str = "actorq"  # key namespace, so runs can share one Redis
    bind_host: str = "127.0.0.1"  # gRPC and metrics bind here; 0.0.0.0 in containers
    grpc_port: int = 0  # 0 = pick a free port and print it
    metrics_port: int = 0  # Prometheus /metrics; 0 = pick a free port, -1 = disabled
    log_level: str = "INFO"
    # Security, all off when empty (OPERATIONS.md): TLS/mTLS on gRPC, Redis password from a
    # file (e.g. a mounted Secret; the user name goes in redis_url), policy blob HMAC keys.
    tls_ca: str = ""  # CA certificate (PEM); set = TLS on every gRPC server and channel
    tls_cert: str = ""  # this service's certificate (PEM), as server and as client
    tls_key: str = ""  # its private key (PEM)
    tls_require_client_cert: bool = False  # mutual TLS: servers refuse clients without one
    tls_server_name: str = ""  # name to check in servers' certs instead of the address host
    redis_password_file: str = ""  # file holding the Redis password (when the URL has none)
    policy_key_file: str = ""  # HMAC key: the quantizer signs blobs, actors require it
    policy_previous_key_file: str = ""  # still accepted by actors while a key is rotated
    tls_allowed_stop_peers: str = ""  # mTLS: cert names allowed to call Control.Stop

    def __post_init__(self) -> None:
        _check(
            self.redis_url.startswith(("redis://", "rediss://", "unix://")),
            f"redis_url: expected redis://host:port/db, got {redact_url(self.redis_url)!r}",
        )
        _check_security(self)
        _check_port("grpc_port", self.grpc_port)
        _check(
            self.metrics_port == -1 or 0 <= self.metrics_port <= 65535,
            f"metrics_port: expected -1 (off) or a port in 0..65535, got {self.metrics_port}",
        )


@dataclass
class QuantizerSettings(CommonSettings):
    """The quantizer / parameter server."""

    grpc_port: int = 50051
    keep_versions: int = 5  # policy versions kept in Redis; older ones are deleted
    deltas: bool = True  # store each version's delta from the previous one when smaller
    chunk_bytes: int = 1 << 20  # size of blob chunks sent to actors (well under 4 MiB)
    max_publish_bytes: int = 1 << 30  # refuse weight streams declaring more than this
    tls_allowed_publishers: str = ""  # mTLS: cert names allowed to PublishWeights
    # Guarded broadcasts (actorq.guard): each version is measured against fp32 on recent
    # replay observations and layers fall back to float until it is within the threshold.
    guard: bool = False  # opt-in: see earlier BENCHMARKS 16b (costs learner CPU, fires often)
    guard_max_disagreement: float = 0.05  # Q-networks: limit of guard_discrete_measure
    guard_discrete_measure: str = "regret"  # or "disagreement" (actorq.guard says why)
    guard_gamma: float = 0.99  # the Q-network's discount, for regret (actorq run passes it)
    guard_lag_scale: float = 1.0  # limit = max(threshold, this x one version's fp32 change)
    guard_max_action_diff: float = 0.05  # tanh policies: mean |a_q - a_fp32| / range
    guard_probe_size: int = 256  # observations per check
    guard_fallback: str = "fp16"  # first fallback precision of a layer (then fp32)

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self.keep_versions >= 1, f"keep_versions: expected >= 1, got {self.keep_versions}")
        _check(
            4096 <= self.chunk_bytes <= 3 << 20,
            f"chunk_bytes: expected 4096..3145728 bytes, got {self.chunk_bytes}",
        )


@dataclass
class ActorSettings(CommonSettings):
    """One actor process: a vector env, a quantized policy, a replay writer."""

    actor_index: int = 0  # 0..num_actors-1; sets the Ape-X epsilon; -1 = claim one from Redis
    num_actors: int = 1  # size of the actor pool, for the epsilon spread
    evaluator: bool = False  # greedy, writes nothing to replay, reports "return"
    env_id: str = "CartPole-v1"
    envs_per_actor: int = 8  # envs stepped together; one batched forward per step
    # gymnasium | envpool: who builds the vector env (docs/actor-throughput.md says which
    # is faster per family); envpool covers classic control, MuJoCo and ale: ids.
    env_backend: str = "gymnasium"
    seed: int = 0
    quantizer_addr: str = "127.0.0.1:50051"
    epsilon_base: float = 0.4  # Ape-X: eps_i = base ** (1 + alpha * i / (N - 1))
    epsilon_alpha: float = 7.0
    # Transitions per replay batch sent to Redis; 0 = auto: 64 vector steps' worth, at most
    # 1 MiB of observations, at least 32 (actorq.actor.columns.auto_push_every).
    push_every: int = 0
    fast_step: bool = True  # discrete 1-step actors: the fast path (actorq.actor.columns)
    fused_act: bool = True  # fast path: numba forward, exploration, recording (numba+scipy)
    # MLP policies the numba forward does not run go through numpy, so the actor never
    # imports torch (1.5 CPU-s and ~165 MB less per actor; an int8 64x64 forward ~2.4x
    # torch's, BENCHMARKS.md 24c); false: torch's module, as pixel (CNN) policies always.
    numpy_act: bool = True
    max_env_steps: int = 0  # stop after this many env steps of this actor; 0 = no limit
    samples_per_insert: float = 0.0  # 0 = actors never wait for the learner
    insert_error_buffer: float = 20000.0  # transitions actors may run ahead of the ratio
    episodes_maxlen: int = 100000  # cap of the episodes stream, in episodes (approx.)
    eval_min_interval: float = 1.0  # evaluator: seconds between round starts (caps its CPU)
    replay_stream_max_transitions: int = 1_000_000  # cap of the Redis replay stream
    instance: str = ""  # name in logs and metrics; default actor-<index> (or evaluator)
    # Continuous actions (DDPG, TD3, SAC, D4PG): exploration around the tanh policy output.
    noise: str = "gaussian"  # "gaussian" or "ou" (Ornstein-Uhlenbeck, per env)
    noise_sigma: float = 0.1  # std of the Gaussian / OU noise, in units of the [-1, 1] range
    random_steps: int = 0  # uniform random actions for this many env steps first
    n_step: int = 1  # > 1: actors emit n-step transitions (D4PG); reward = discounted sum
    gamma: float = 0.99  # discount of those n-step sums (match the learner's)
    # Discrete n-step: end waiting windows before an exploratory action (actorq.actor.nstep;
    # actorq run sets it from ACTORQ_DQN_IS_CORRECTION).
    nstep_cut: bool = False
    # On-policy (PPO, APPO, A2C; actorq.actor.trajectory): > 0 = stream T-step segments
    # with behaviour log-probs instead of replay transitions.
    unroll_length: int = 0
    onpolicy_queue_segments: int = 4  # wait while the learner is this many segments behind
    obs_codec: str = "none"  # "zstd" compresses uint8 pixel observations (segments, replay)

    @property
    def instance_id(self) -> str:
        if self.instance:
            return self.instance
        return "evaluator" if self.evaluator else f"actor-{self.actor_index}"

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self.num_actors >= 1, f"num_actors: expected >= 1, got {self.num_actors}")
        _check(
            self.actor_index == AUTO_ACTOR_INDEX or 0 <= self.actor_index < self.num_actors,
            f"actor_index: expected 0..{self.num_actors - 1} or -1 (claim one from Redis), "
            f"got {self.actor_index}",
        )
        _check(
            self.envs_per_actor >= 1,
            f"envs_per_actor: expected >= 1, got {self.envs_per_actor}",
        )
        _check(
            0 < self.epsilon_base <= 1,
            f"epsilon_base: expected 0 < x <= 1, got {self.epsilon_base}",
        )
        _check(self.push_every >= 0, f"push_every: expected >= 0 (0 = auto), got {self.push_every}")
        _check(self.max_env_steps >= 0, f"max_env_steps: expected >= 0, got {self.max_env_steps}")
        _check(
            self.samples_per_insert >= 0,
            f"samples_per_insert: expected >= 0, got {self.samples_per_insert}",
        )
        _check(
            self.noise in ("gaussian", "ou"), f"noise: expected gaussian or ou, got {self.noise!r}"
        )
        _check(self.noise_sigma >= 0, f"noise_sigma: expected >= 0, got {self.noise_sigma}")
        _check(self.random_steps >= 0, f"random_steps: expected >= 0, got {self.random_steps}")
        _check(1 <= self.n_step <= 255, f"n_step: expected 1..255, got {self.n_step}")
        _check(0 <= self.gamma <= 1, f"gamma: expected 0..1, got {self.gamma}")
        _check(
            0 <= self.unroll_length <= 4096,
            f"unroll_length: expected 0 (off) or 1..4096, got {self.unroll_length}",
        )
        _check(
            self.onpolicy_queue_segments >= 1,
            f"onpolicy_queue_segments: expected >= 1, got {self.onpolicy_queue_segments}",
        )
        check_env_backend(self.env_backend, self.unroll_length > 0, "env_backend")
        _check(
            self.obs_codec in OBS_CODECS,
            f"obs_codec: expected one of {', '.join(OBS_CODECS)}, got {self.obs_codec!r}",
        )


@dataclass
class LearnerSettings(CommonSettings):
    """The fp32 learner. DQN hyperparameters come from ACTORQ_DQN_* (see DQNConfig)."""

    env_id: str = "CartPole-v1"
    hidden: tuple[int, ...] = (64, 64)
    precision: str = "int8"  # precision the quantizer broadcasts to actors
    seed: int = 0
    quantizer_addr: str = "127.0.0.1:50051"
    replay_capacity: int = 100000  # transitions kept in the learner's local mirror
    samples_per_insert: float = 16.0  # replay ratio: sampled transitions per inserted one
    publish_every: int = 50  # learner updates between policy publications
    # ...and at least this many seconds between them (off-policy; 0 = no floor): a learner
    # making thousands of updates/s would otherwise publish dozens of versions a second,
    # each quantized, fetched and rebuilt by every actor (BENCHMARKS 20).
    publish_min_seconds: float = 0.1
    checkpoint_dir: str = ""  # empty = no checkpoints
    checkpoint_every: int = 5000  # learner updates between checkpoints
    max_updates: int = 0  # stop after this many updates; 0 = until stopped
    # auto | cpu | cuda | cuda:N (`actorq run --learner-device`); auto: the fastest device
    # and update path, timed at start-up on the learner's own updates (docs/gpu-learner.md)
    device: str = "cpu"
    update_path: str = "auto"  # auto | numpy-flat | torch-eager | cuda-graph | compiled
    # Device-resident replay (actorq.learner.device_feed): k >= 1 keeps a copy of the replay
    # on the update's device and runs k updates per call on batches sampled there (one
    # graph replay on cuda-graph); needs a captured path; with ACTORQ_REPLAY=prioritized
    # the priorities live on the device too. 0 = off.
    device_replay_k: int = 0
    torch_threads: int = 1
    # Flush subnormal floats to zero in the learner process (actorq.denormals): Adam's
    # moments of parameters with zero gradients decay into them, and x86 arithmetic on them
    # cost DQN 64x64's service 27% of its updates/s on a Xeon (BENCHMARKS 20i). False: IEEE as is.
    flush_denormals: bool = True
    replay: str = "uniform"  # sampler: uniform | prioritized (K-ary sum tree, lazy writing)
    # Where Redis -> replay ingest runs: thread (in the learner) or process (its own process
    # writing into a replay both map in /dev/shm, off the updates' GIL: for heavy ingest,
    # many actors at a low samples-per-insert, with a core to spare; BENCHMARKS 20b).
    # RLx2's delayed n-step needs thread.
    ingest: str = "thread"
    per_alpha: float = 0.6  # prioritization exponent: stored priority = (|td| + eps) ** alpha
    per_beta: float = 0.4  # importance-sampling exponent at the start ...
    per_beta_steps: int = 100000  # ... annealed linearly to 1.0 over this many updates
    # Data-parallel learners (see actorq.learner.distributed): this process is `rank` of
    # `world_size`; rank 0 hosts the rendezvous at `dist_addr` and alone publishes.
    world_size: int = 1
    rank: int = 0
    dist_addr: str = "127.0.0.1:29500"
    dist_backend: str = ""  # "" = nccl on cuda, gloo otherwise
    dist_timeout: float = 60.0  # seconds a collective waits for a silent rank
    algo: str = "dqn"  # dqn, ddpg, td3, sac or d4pg; hyperparameters from ACTORQ_<ALGO>_*
    # Settle once solved (actorq.learner.settle): when the evaluator's mean greedy return
    # over its last settle_episodes episodes first reaches settle_at, the replay ratio drops
    # to settle_samples_per_insert for the rest of the run. None = never.
    settle_at: float | None = None
    settle_episodes: int = 25  # one evaluator round at its default 25 envs (12t)
    # Greedy episodes the learner plays with a candidate version's weights before it
    # settles on them (actorq.learner.settle): the claim "solved" is a 100-episode mean.
    settle_certify_episodes: int = 100
    settle_samples_per_insert: float = 4.0
    # The learning rate is multiplied by this when settling. 0 (the default) freezes the
    # weights: any rate > 0 let Adam's normalised steps walk a solved policy off (12r).
    settle_lr_scale: float = 0.0
    # On settling, load the weights of the version the evaluator measured (the newest one
    # in its window that averaged the threshold) instead of the learner's current ones,
    # which are 9-27 versions newer and may already be worse (earlier BENCHMARKS 12t).
    settle_rollback: bool = True
    # Share of each batch drawn from episode-ending rows once settled (uniform replay only;
    # actorq.replay.sampler.TerminalShareSampler). 0 = plain uniform sampling.
    settle_terminal_share: float = 0.0
    # Publish gate once settled (actorq.learner.greedy_check): a version is broadcast only
    # if settle_validation_episodes greedy episodes on the learner's own envs average at
    # least settle_validation_bar (None = settle_at); 0 episodes = no gate.
    settle_validation_episodes: int = 0
    settle_validation_bar: float | None = None
    # Behaviour vs learner gap (actorq.learner.behaviour): measured on every gap_every-th
    # sampled batch (0 = never); noise_sigma is the actors' Gaussian exploration (the same
    # ACTORQ_NOISE_SIGMA), the learner's policy density for log-ratios and n-step weights.
    # Every 50th batch: a forward of the batch through the learner's net, ~5% of a DQN
    # 64x64 service's training thread when measured every 10th (py-spy, 2 cores), and at
    # most once per gap_min_seconds: every 50th was still 4% at 4,000 updates/s.
    gap_every: int = 50
    gap_min_seconds: float = 0.1
    noise_sigma: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        _check(self.gap_every >= 0, f"gap_every: expected >= 0, got {self.gap_every}")
        _check(
            math.isfinite(self.gap_min_seconds) and self.gap_min_seconds >= 0,
            f"gap_min_seconds: expected a number of seconds >= 0, got {self.gap_min_seconds}",
        )
        _check(
            0 <= self.device_replay_k <= 64,
            f"device_replay_k: expected 0 (off) to 64 updates per call, got {self.device_replay_k}",
        )
        _check(self.noise_sigma >= 0, f"noise_sigma: expected >= 0, got {self.noise_sigma}")
        _check(
            self.settle_episodes >= 1,
            f"settle_episodes: expected >= 1, got {self.settle_episodes}",
        )
        _check(
            self.settle_certify_episodes >= 1,
            f"settle_certify_episodes: expected >= 1, got {self.settle_certify_episodes}",
        )
        _check(
            self.settle_samples_per_insert > 0,
            f"settle_samples_per_insert: expected > 0, got {self.settle_samples_per_insert}",
        )
        _check(
            0 <= self.settle_lr_scale <= 1,
            f"settle_lr_scale: expected in [0, 1], got {self.settle_lr_scale}",
        )
        _check(
            self.settle_validation_episodes >= 0,
            f"settle_validation_episodes: expected >= 0, got {self.settle_validation_episodes}",
        )
        _check(
            self.settle_validation_bar is None or math.isfinite(self.settle_validation_bar),
            f"settle_validation_bar: expected a finite return or none, "
            f"got {self.settle_validation_bar}",
        )
        _check(
            0 <= self.settle_terminal_share < 1,
            f"settle_terminal_share: expected in [0, 1), got {self.settle_terminal_share}",
        )
        _check(
            self.settle_terminal_share == 0 or self.replay == "uniform",
            f"settle_terminal_share: works with uniform replay, got replay {self.replay!r} "
            f"(set ACTORQ_SETTLE_TERMINAL_SHARE=0 with prioritized replay)",
        )
        _check(
            self.settle_at is None or math.isfinite(self.settle_at),
            f"settle_at: expected a finite return or none, got {self.settle_at}",
        )
        _check(
            self.settle_at is None or self.world_size == 1,
            f"settle_at: settling once solved runs on one learner, got world_size "
            f"{self.world_size} (set ACTORQ_SETTLE_AT=none for parallel learners)",
        )
        _check(
            self.replay in REPLAY_KINDS,
            f"replay: expected one of {', '.join(REPLAY_KINDS)}, got {self.replay!r}",
        )
        _check(
            self.ingest in ("thread", "process"),
            f"ingest: expected thread or process, got {self.ingest!r}",
        )
        _check(self.per_alpha >= 0, f"per_alpha: expected >= 0, got {self.per_alpha}")
        _check(0 <= self.per_beta <= 1, f"per_beta: expected in [0, 1], got {self.per_beta}")
        _check(
            self.per_beta_steps >= 1, f"per_beta_steps: expected >= 1, got {self.per_beta_steps}"
        )
        _check(self.world_size >= 1, f"world_size: expected >= 1, got {self.world_size}")
        _check(
            0 <= self.rank < self.world_size,
            f"rank: expected 0 <= rank < world_size ({self.world_size}), got {self.rank}",
        )
        host, _, port = self.dist_addr.rpartition(":")
        _check(
            bool(host) and port.isdigit() and 0 < int(port) < 65536,
            f"dist_addr: expected host:port, got {self.dist_addr!r}",
        )
        _check(
            self.dist_backend in ("", "gloo", "nccl"),
            f"dist_backend: expected gloo, nccl or empty (auto), got {self.dist_backend!r}",
        )
        _check(self.dist_timeout > 0, f"dist_timeout: expected > 0, got {self.dist_timeout}")
        _check_precision(self.precision)
        _check(
            self.replay_capacity >= 1000,
            f"replay_capacity: expected >= 1000, got {self.replay_capacity}",
        )
        _check(
            self.samples_per_insert > 0,
            f"samples_per_insert: expected > 0, got {self.samples_per_insert}",
        )
        _check(self.publish_every >= 1, f"publish_every: expected >= 1, got {self.publish_every}")
        _check(
            self.publish_min_seconds >= 0,
            f"publish_min_seconds: expected >= 0, got {self.publish_min_seconds}",
        )
        _check(
            self.checkpoint_every >= 1,
            f"checkpoint_every: expected >= 1, got {self.checkpoint_every}",
        )
        _check(self.torch_threads >= 1, f"torch_threads: expected >= 1, got {self.torch_threads}")
        check_learner_device(self.device, "device (ACTORQ_DEVICE)")
        _check(
            self.update_path in UPDATE_PATHS,
            f"update_path (ACTORQ_UPDATE_PATH): expected one of {', '.join(UPDATE_PATHS)}, "
            f"got {self.update_path!r}",
        )
        _check(
            self.algo in ALGORITHMS,
            f"algo: expected one of {', '.join(ALGORITHMS)}, got {self.algo!r}",
        )
