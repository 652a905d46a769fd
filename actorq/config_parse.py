"""Settings from ACTORQ_* environment variables and back, and the checks they share.

`load_settings` reads a settings dataclass field `foo_bar` from `ACTORQ_FOO_BAR`,
converting the text to the field's declared type; `to_environ` is its inverse.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar

from actorq.errors import ConfigError

ENV_PREFIX = "ACTORQ_"
PRECISIONS = ("fp32", "fp16", "int8", "int4")
ALGORITHMS = (
    "dqn",
    "ddpg",
    "td3",
    "sac",
    "d4pg",
    "ppo",
    "appo",
    "a2c",
)  # = actorq.algos.ALGORITHMS

T = TypeVar("T")


REPLAY_KINDS = ("uniform", "prioritized")
# Who builds actors' vector envs (actorq.envs.make_vector_env): gymnasium (and ale-py,
# dm_control, MinAtar) for every family, or EnvPool for the families it covers.
ENV_BACKENDS = ("gymnasium", "envpool")
ON_POLICY = ("ppo", "appo", "a2c")  # = actorq.algos.factory.ON_POLICY_ALGORITHMS


def check_env_backend(backend: str, on_policy: bool, flag: str) -> None:
    """A known backend; on-policy segments need SAME_STEP autoreset, which EnvPool lacks
    (it resets on the step after an episode ends, actorq.envs.envpool_backend)."""
    _check(
        backend in ENV_BACKENDS,
        f"{flag}: expected one of {', '.join(ENV_BACKENDS)}, got {backend!r}",
    )
    _check(
        not (on_policy and backend == "envpool"),
        f"{flag} envpool: on-policy algorithms ({', '.join(ON_POLICY)}) need SAME_STEP "
        "autoreset, which EnvPool does not do; use gymnasium",
    )


# Where the learner trains (actorq.learner.device): "auto" picks cpu or cuda by the rule
# there; "cuda:N" names one GPU. Checked here by syntax only (no torch import).
LEARNER_DEVICES = ("auto", "cpu", "cuda", "cuda:N")
_DEVICE_RE = re.compile(r"auto|cpu|cuda(:\d+)?")
# How each update runs (= actorq.algos.capture.UPDATE_PATHS); "auto" = the fastest one
# the learner offers on its device (actorq.learner.update_path).
UPDATE_PATHS = ("auto", "numpy-flat", "torch-eager", "cuda-graph", "compiled")


def parse_int_tuple(text: str, name: str = "value") -> tuple[int, ...]:
    """Parse '512,512,512' into (512, 512, 512); every width must be a positive int."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise ConfigError(
            f"{name}: expected comma-separated positive integers like 256,256, got {text!r}"
        ) from None
    if not values or any(v < 1 for v in values):
        raise ConfigError(
            f"{name}: expected comma-separated positive integers like 256,256, got {text!r}"
        )
    return values


def _parse_bool(text: str, name: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}: expected true/false, got {text!r}")


def _parse_value(text: str, kind: Any, name: str) -> Any:
    """Convert one environment string to the field's declared type."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(kind) if a is not type(None)]
        if text.strip().lower() in ("", "none"):
            return None
        return _parse_value(text, inner[0], name)
    if kind is bool:
        return _parse_bool(text, name)
    if kind is int or kind is float:
        try:
            return kind(text)
        except ValueError:
            raise ConfigError(f"{name}: expected {kind.__name__}, got {text!r}") from None
    if origin is tuple:
        return parse_int_tuple(text, name)
    return text


def load_settings(
    cls: type[T],
    environ: Mapping[str, str] | None = None,
    prefix: str = ENV_PREFIX,
    **overrides: Any,
) -> T:
    """Build settings `cls` from `prefix`+FIELD variables, then apply explicit overrides."""
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        var = prefix + f.name.upper()
        if var in environ:
            values[f.name] = _parse_value(environ[var], hints[f.name], var)
    values.update(overrides)
    return cls(**values)


def to_environ(settings: Any, prefix: str = ENV_PREFIX) -> dict[str, str]:
    """The inverse of `load_settings`: variables that reproduce `settings`."""
    env: dict[str, str] = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if value is None:
            continue
        if isinstance(value, tuple):
            text = ",".join(str(v) for v in value)
        elif isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value)
        env[prefix + f.name.upper()] = text
    return env


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def check_learner_device(device: str, name: str) -> None:
    """`device` is auto, cpu, cuda or cuda:N (whether that GPU exists is checked later)."""
    _check(
        _DEVICE_RE.fullmatch(device) is not None,
        f"{name}: expected one of {', '.join(LEARNER_DEVICES)}, got {device!r}",
    )


def _check_precision(precision: str) -> None:
    _check(
        precision in PRECISIONS,
        f"precision: expected one of {', '.join(PRECISIONS)}, got {precision!r}",
    )


def _check_port(name: str, port: int) -> None:
    _check(
        0 <= port <= 65535, f"{name}: expected a port in 0..65535 (0 = pick a free one), got {port}"
    )


def redact_url(url: str) -> str:
    """`url` with any password replaced by ***, for logs and error messages."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    auth, _, host = rest.partition("@")
    user, colon, _password = auth.partition(":")
    return f"{scheme}://{user}{':***' if colon else ''}@{host}"
