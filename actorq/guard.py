"""Guarded broadcasts: no actor acts with a policy that strays past a threshold from fp32.

For every version the quantizer runs the broadcast policy (built exactly as actors build
it: blob -> verified decode -> inference module) and the fp32 policy on a probe batch of
recent observations from replay, and measures how differently they act. MLP and CNN
policies (pixel envs: uint8 [C, H, W] frames, DQN Q-values or PPO logits) are covered;
any other spec is broadcast unguarded. The measures:
- Q-networks (discrete actions): regret, the share of return the quantized greedy
  actions lose under the fp32 Q-values, mean_s (max_a q(s, a) - q(s, a_q)) / ((1 - gamma)
  mean_s |max_a q(s, a)|) by the performance difference lemma (the guarded measure by
  default), greedy-action disagreement (share of probe
  observations whose argmax differs) and the relative Q error mean|q_q - q_fp32| /
  mean|q_fp32|. Regret is disagreement weighted by how much each flip costs: DQN's
  Q-values of two actions are often nearly tied (CartPole's most of all), and flipping a
  near-tie costs nothing, yet counts fully as disagreement (earlier BENCHMARKS 16b: int8 read
  0.76 disagreement and fell back on nearly every version);
- deterministic tanh policies (continuous): mean |a_q - a_fp32| / action range (2, actions
  live in [-1, 1]; the guarded measure), and the KL between the actors' Gaussian
  exploration distributions around the two actions, sum_d (a_q - a_fp32)^2 / (2 sigma^2)
  averaged over the probe (sigma = ACTORQ_NOISE_SIGMA's default 0.1), which is what a
  stochastic actor's behaviour gap is.
The limit is the larger of a fixed threshold and how far the previous version's fp32
policy acts from this one (the lag actors already live with; `lag_scale`). Above the
limit it falls back per layer: layers are ranked by the divergence each causes alone
(that layer quantized, the rest fp32; Linear and conv weights alike) and the worst are
stored as fp16 (then fp32) until the measure is under the threshold. Every fallback is
counted and recorded in the version's metadata.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from actorq import metrics
from actorq.config import ConfigError
from actorq.guard_probes import Probe
from actorq.models import MLPSpec
from actorq.models.cnn import CNNSpec
from actorq.models.mlp import INPUT_SCALE, INPUT_SHIFT, linear_layer_names
from actorq.quant import EncodedPolicy, build_policy_module, decode_policy
from actorq.quant.precision import parse_precision, precision_name
from actorq.v1 import policy_pb2

log = logging.getLogger(__name__)

ACTION_RANGE = 2.0  # continuous actions are in [-1, 1] (actorq.envs)
FP32 = policy_pb2.PRECISION_FP32
DISCRETE_MEASURES = ("regret", "disagreement")
GuardedSpec = MLPSpec | CNNSpec


@dataclass(frozen=True)
class GuardConfig:
    """ACTORQ_GUARD_* settings of the quantizer."""

    enabled: bool = True
    max_disagreement: float = 0.05  # discrete: limit of discrete_measure (0..1)
    discrete_measure: str = "regret"  # or "disagreement" (every greedy flip counts fully)
    gamma: float = 0.99  # the Q-network's discount (regret scales with 1 / (1 - gamma))
    # The limit is max(threshold, lag_scale x how far the previous fp32 version acts from
    # this one): actors already act with a version or more of lag, so quantization may
    # move the policy as far as one publish of learning does. 0 = the fixed threshold.
    lag_scale: float = 1.0
    max_action_diff: float = 0.05  # continuous: mean |a_q - a_fp32| / action range
    probe_size: int = 256  # recent replay observations per check
    fallback: str = "fp16"  # first fallback precision of an offending layer (then fp32)
    noise_sigma: float = 0.1  # exploration std for the reported KL (continuous)

    def __post_init__(self) -> None:
        for name in ("max_disagreement", "max_action_diff"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"guard {name}: expected 0..1, got {value}")
        if self.discrete_measure not in DISCRETE_MEASURES:
            raise ConfigError(
                f"guard discrete_measure: expected one of {', '.join(DISCRETE_MEASURES)}, "
                f"got {self.discrete_measure!r}"
            )
        if not 0.0 <= self.gamma < 1.0:
            raise ConfigError(f"guard gamma: expected 0 <= gamma < 1, got {self.gamma}")
        if self.lag_scale < 0:
            raise ConfigError(f"guard lag_scale: expected >= 0, got {self.lag_scale}")
        if self.probe_size < 1:
            raise ConfigError(f"guard probe_size: expected >= 1, got {self.probe_size}")
        if self.fallback not in ("fp16", "fp32"):
            raise ConfigError(f"guard fallback: expected fp16 or fp32, got {self.fallback!r}")
        if self.noise_sigma <= 0:
            raise ConfigError(f"guard noise_sigma: expected > 0, got {self.noise_sigma}")


@dataclass(frozen=True)
class Divergence:
    """How differently a broadcast policy acts from fp32 on the probe."""

    measure: str  # the guarded one: "regret" or "disagreement" (discrete), "action_diff"
    value: float
    agreement: float | None = None  # discrete: 1 - disagreement
    disagreement: float | None = None  # discrete, when regret is the guarded measure
    regret: float | None = None  # discrete, when disagreement is the guarded measure
    q_error: float | None = None  # discrete: relative mean |dQ|
    kl: float | None = None  # continuous: Gaussian exploration KL

    def fields(self, prefix: str) -> dict[str, float]:
        out = {f"{prefix}{self.measure}": self.value}
        for name in ("agreement", "disagreement", "regret", "q_error", "kl"):
            value = getattr(self, name)
            if value is not None:
                out[f"{prefix}{name}"] = value
        return out


def divergence(
    reference: np.ndarray,
    candidate: np.ndarray,
    continuous: bool,
    sigma: float = 0.1,
    discrete_measure: str = "regret",
    gamma: float = 0.99,
) -> Divergence:
    """Divergence of `candidate` outputs from `reference` (fp32) outputs, [B, outputs]."""
    if continuous:
        diff = np.abs(candidate - reference)
        kl = float(np.mean(np.sum(diff**2, axis=1) / (2 * sigma**2)))
        return Divergence("action_diff", float(diff.mean() / ACTION_RANGE), kl=kl)
    agree = float(np.mean(candidate.argmax(axis=1) == reference.argmax(axis=1)))
    scale = float(np.abs(reference).mean()) + 1e-8
    q_error = float(np.abs(candidate - reference).mean() / scale)
    values = {"disagreement": 1.0 - agree, "regret": greedy_regret(reference, candidate, gamma)}
    other = "regret" if discrete_measure == "disagreement" else "disagreement"
    return Divergence(
        discrete_measure, values[discrete_measure], agreement=agree, q_error=q_error,
        **{other: values[other]},
    )  # fmt: skip


def greedy_regret(reference: np.ndarray, candidate: np.ndarray, gamma: float) -> float:
    """The share of return lost by acting greedily on `candidate` instead of `reference`
    (fp32) Q-values, estimated by the performance difference lemma: the loss is
    E[max_a q(s, a) - q(s, a_q)] / (1 - gamma), and the return is about E[max_a q(s, a)].
    0 when every flip is between tied actions; a flip costs what the fp32 Q says it does."""
    best = reference.max(axis=1)
    taken = np.take_along_axis(reference, candidate.argmax(axis=1)[:, None], axis=1)[:, 0]
    value = float(np.abs(best).mean()) * (1.0 - gamma)
    return float(np.mean(best - taken) / value) if value > 0 else 0.0


@dataclass
class GuardResult:
    encoded: EncodedPolicy  # what is stored and broadcast
    before: Divergence  # the plain quantized policy
    after: Divergence  # the broadcast one (after fallbacks)
    fallback_layers: dict[str, str] = field(default_factory=dict)  # weight -> fp16/fp32
    probe_source: str = "replay"  # "segments" (on-policy pixels), "synthetic" before any
    probe_size: int = 0
    threshold: float = 0.0  # the limit applied: max(fixed threshold, lag_scale x lag)
    lag: Divergence | None = None  # the previous fp32 version against this one

    @property
    def within(self) -> bool:
        return self.after.value <= self.threshold

    def meta(self) -> dict[str, str]:
        """Fields for the version's Redis metadata hash."""
        out = {k: repr(v) for k, v in self.after.fields("guard_").items()}
        out |= {k: repr(v) for k, v in self.before.fields("guard_before_").items()}
        if self.lag is not None:
            out |= {k: repr(v) for k, v in self.lag.fields("guard_lag_").items()}
        out["guard_threshold"] = repr(self.threshold)
        out["guard_fallback_layers"] = ",".join(f"{k}={v}" for k, v in self.fallback_layers.items())
        out["guard_probe"] = f"{self.probe_source}:{self.probe_size}"
        return out


def fp32_outputs(
    weights: Mapping[str, np.ndarray], spec: GuardedSpec, probe: torch.Tensor
) -> np.ndarray:
    """The fp32 policy's outputs straight from the weights (no blob round trip: the
    reference is computed for every version, so it must be cheap)."""
    if isinstance(spec, CNNSpec):
        return cnn_fp32_outputs(weights, spec, probe)
    x = probe
    if spec.input_norm:
        shift, scale = (torch.from_numpy(weights[n]) for n in (INPUT_SHIFT, INPUT_SCALE))
        x = (x - shift) * scale
    names = linear_layer_names(len(spec.widths) - 1)
    with torch.inference_mode():
        for i, name in enumerate(names):
            w, b = (torch.from_numpy(weights[f"{name}.{k}"]) for k in ("weight", "bias"))
            x = torch.addmm(b, x, w.t())
            if i < len(names) - 1:
                x = x.relu()
        if spec.output_activation == "tanh":
            x = x.tanh()
        return x.numpy()


def cnn_fp32_outputs(
    weights: Mapping[str, np.ndarray], spec: CNNSpec, probe: torch.Tensor
) -> np.ndarray:
    """A CNN's fp32 outputs from uint8 (or float) frames [B, C, H, W], the ops an fp32
    blob's actor module runs (actorq.quant.cnn_blob): frames x input_scale, conv + ReLU
    per conv, flatten, addmm (+ ReLU but the last) per head Linear. act_max is unused:
    it only sets int8 activation scales."""

    def pair(prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
        w, b = weights[f"{prefix}.weight"], weights[f"{prefix}.bias"]
        return torch.from_numpy(w), torch.from_numpy(b)

    with torch.inference_mode():
        x = probe.float()
        if spec.input_scale != 1.0:  # as ScaleInput: skipped at 1 so MinAtar stays exact
            x = x * spec.input_scale
        for i, (_out, _k, stride) in enumerate(spec.convs):
            x = F.conv2d(x, *pair(f"convs.{2 * i}"), stride).relu_()
        x = x.flatten(1)
        count = len(spec.hidden) + 1
        for j in range(count):
            w, b = pair(f"head.{2 * j}")
            x = torch.addmm(b, x, w.t())
            if j < count - 1:
                x = x.relu_()
        return x.numpy()


def _outputs(encoded: EncodedPolicy, spec: GuardedSpec, probe: torch.Tensor) -> np.ndarray:
    module = build_policy_module(decode_policy(encoded.envelope, expected_spec=spec))
    with torch.inference_mode():
        return module(probe).numpy()


def synthetic_probe(spec: GuardedSpec, n: int) -> np.ndarray:
    """Observations before any real ones exist (fixed seed, so versions compare alike).
    MLPs: standard normal. CNNs: uniform uint8 frames whose scaled values span [0, 1],
    the range both pixel families live in (Atari 0..255 x 1/255, MinAtar's 0/1 channels
    x 1): frames past that range would saturate the int8 convs' act_max and fall back
    for nothing."""
    rng = np.random.default_rng(0)
    if isinstance(spec, CNNSpec):
        top = min(255, round(1.0 / spec.input_scale))
        return rng.integers(0, top, (n, *spec.obs_shape), np.uint8, endpoint=True)
    return rng.standard_normal((n, spec.obs_dim), np.float32)


def _obs_shape(spec: GuardedSpec) -> tuple[int, ...]:
    return spec.obs_shape if isinstance(spec, CNNSpec) else (spec.obs_dim,)


def _as_probe(obs: np.ndarray | None, spec: GuardedSpec) -> torch.Tensor | None:
    """`obs` as the policy's input (uint8 frames or float32 rows), None unless it holds
    observations of this spec's shape."""
    if obs is None or not len(obs) or obs.shape[1:] != _obs_shape(spec):
        return None
    dtype = np.uint8 if isinstance(spec, CNNSpec) else np.float32
    return torch.from_numpy(np.ascontiguousarray(obs, dtype=dtype))


class PolicyGuard:
    """Measures each version against fp32 and re-encodes it with fallbacks when needed."""

    def __init__(
        self, config: GuardConfig, probe: Probe | None = None, segment_probe: Probe | None = None
    ) -> None:
        self.config = config
        self._probe = probe  # replay: n -> recent observations [<= n, *obs], None when none
        # On-policy runs write trajectory segments, not replay; read for CNN specs only
        # (MLP probes stay replay or synthetic, as before CNNs were guarded).
        self._segment_probe = segment_probe
        self._fallback = parse_precision(config.fallback)
        self._previous: tuple[GuardedSpec, dict[str, np.ndarray]] | None = None  # fp32
        self._said_unguarded = False

    def covers(self, spec: object) -> bool:
        """MLP and CNN policies: the reference forward, the probe and the per-layer
        fallbacks are written for them. Any other spec is broadcast unguarded, said once."""
        if isinstance(spec, MLPSpec | CNNSpec):
            return True
        if not self._said_unguarded:
            log.warning("guard: %s policies are not measured; broadcasting them unguarded",
                        type(spec).__name__)  # fmt: skip
            self._said_unguarded = True
        return False

    def threshold(self, spec: GuardedSpec) -> float:
        continuous = spec.output_activation == "tanh"
        return self.config.max_action_diff if continuous else self.config.max_disagreement

    def probe_batch(self, spec: GuardedSpec) -> tuple[torch.Tensor, str]:
        """Recent observations of the spec's shape and where they came from: replay, then
        (CNNs) on-policy segments, else synthetic ones (the first versions)."""
        n = self.config.probe_size
        sources = [("replay", self._probe)]
        if isinstance(spec, CNNSpec):
            sources.append(("segments", self._segment_probe))
        for name, source in sources:
            probe = _as_probe(source(n), spec) if source is not None else None
            if probe is not None:
                return probe, name
        return torch.from_numpy(synthetic_probe(spec, n)), "synthetic"

    def check(
        self,
        weights: Mapping[str, np.ndarray],
        spec: GuardedSpec,
        encoded: EncodedPolicy,
        encode: Callable[[Mapping[str, int]], EncodedPolicy],
    ) -> GuardResult:
        """`encode(fallbacks)` re-encodes the same weights with some layers in float."""
        probe, source = self.probe_batch(spec)
        continuous = spec.output_activation == "tanh"
        measure = functools.partial(
            divergence, continuous=continuous, sigma=self.config.noise_sigma,
            discrete_measure=self.config.discrete_measure, gamma=self.config.gamma,
        )  # fmt: skip
        reference = fp32_outputs(weights, spec, probe)
        before = measure(reference, _outputs(encoded, spec, probe))
        lag = self._lag(weights, spec, probe, reference, measure)
        limit = self.threshold(spec)
        if lag is not None:
            limit = max(limit, self.config.lag_scale * lag.value)
        result = GuardResult(encoded, before, before, {}, source, len(probe), limit, lag)
        if before.value <= limit or encoded.precision == FP32:
            return result
        ranked = self._ranked_layers(spec, probe, reference, encode)
        fallbacks: dict[str, int] = {}
        # Worst layers first at the fallback precision (fp16); if every layer is fp16 and
        # it is still too far, the same order at fp32. All-fp32 is the reference itself.
        for precision in dict.fromkeys((self._fallback, FP32)):
            for name in ranked:
                fallbacks[name] = precision
                candidate = encode(fallbacks)
                after = measure(reference, _outputs(candidate, spec, probe))
                result.encoded, result.after = candidate, after
                if after.value <= limit:
                    result.fallback_layers = {k: precision_name(v) for k, v in fallbacks.items()}
                    return result
        result.fallback_layers = {k: precision_name(v) for k, v in fallbacks.items()}
        return result

    def _lag(self, weights, spec, probe, reference, measure) -> Divergence | None:
        """How far the previous version's fp32 policy acts from this one (then remembers
        this one); None for the first version or after the network changed."""
        previous, self._previous = self._previous, None
        if self.config.lag_scale > 0:  # a copy: the caller's arrays may be reused
            self._previous = (spec, {k: np.array(v, copy=True) for k, v in weights.items()})
        if previous is None or previous[0] != spec:
            return None
        return measure(reference, fp32_outputs(previous[1], spec, probe))

    def _ranked_layers(self, spec, probe, reference, encode) -> list[str]:
        """Weights (Linear matrices, conv kernels), worst first: the divergence each
        causes when it alone is quantized (all others fp32)."""
        continuous = spec.output_activation == "tanh"
        names = [n for n, shape in spec.weight_shapes().items() if len(shape) >= 2]
        scores = {}
        for name in names:
            others_fp32 = {other: FP32 for other in names if other != name}
            alone = _outputs(encode(others_fp32), spec, probe)
            scores[name] = _layer_score(reference, alone, continuous)
        return sorted(names, key=lambda n: -scores[n])


def _layer_score(reference: np.ndarray, candidate: np.ndarray, continuous: bool) -> float:
    # Mean absolute output error: it ranks layers even where the greedy action rarely flips.
    scale = 1.0 if continuous else float(np.abs(reference).mean()) + 1e-8
    return float(np.abs(candidate - reference).mean() / scale)


class GuardStats:
    """Counts and exports what the guard did: Prometheus, GetStatus counters, logs."""

    def __init__(self) -> None:
        self.checks = self.fallback_versions = self.fallback_layers = 0
        self.latest: GuardResult | None = None
        self.max_broadcast = self.max_before = 0.0

    def record(self, result: GuardResult) -> None:
        self.checks += 1
        self.latest = result
        self.max_broadcast = max(self.max_broadcast, result.after.value)
        self.max_before = max(self.max_before, result.before.value)
        stages = (("before", result.before), ("broadcast", result.after), ("lag", result.lag))
        for stage, d in stages:
            for name, value in (d.fields("") if d is not None else {}).items():
                metrics.QUANTIZER_GUARD_DIVERGENCE.labels(name, stage).set(value)
        metrics.QUANTIZER_GUARD_THRESHOLD.set(result.threshold)
        if result.fallback_layers:
            self.fallback_versions += 1
            self.fallback_layers += len(result.fallback_layers)
            metrics.QUANTIZER_GUARD_FALLBACK_VERSIONS.inc()
            for layer, precision in result.fallback_layers.items():
                metrics.QUANTIZER_GUARD_FALLBACK_LAYERS.labels(layer, precision).inc()
            log.info(
                "version %d: %s %.4f > %.4f; fallback %s -> %.4f",
                result.encoded.version,
                result.before.measure,
                result.before.value,
                result.threshold,
                result.fallback_layers,
                result.after.value,
            )

    def counters(self) -> dict[str, float]:
        if self.latest is None:
            return {}
        return {
            "guard_checks": self.checks,
            "guard_fallback_versions": self.fallback_versions,
            "guard_fallback_layers": self.fallback_layers,
            "guard_threshold": self.latest.threshold,
            "guard_divergence": self.latest.after.value,
            "guard_divergence_before": self.latest.before.value,
            "guard_max_divergence": self.max_broadcast,
            "guard_max_divergence_before": self.max_before,
            "guard_synthetic_probe": float(self.latest.probe_source == "synthetic"),
            **self.latest.after.fields("guard_latest_"),
            **(self.latest.lag.fields("guard_latest_lag_") if self.latest.lag else {}),
        }
