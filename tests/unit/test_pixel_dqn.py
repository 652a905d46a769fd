"""DQN on pixel envs: uint8 transitions through replay format "3" (zstd), the learner's
uint8 replay storage, DQN's torch update with the CNN Q-network, and its broadcast."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import zstandard

from actorq.actor.stepper import VectorStepper
from actorq.algos.capture import current_update_path
from actorq.algos.dqn import DQNConfig, DQNLearner
from actorq.algos.factory import make_algorithm, policy_spec
from actorq.envs import EnvError, make_vector_env
from actorq.models.cnn import CNNNetwork, CNNSpec
from actorq.quant import quantized_policy_from_weights
from actorq.replay import ReplayStorage, TransitionBatch
from actorq.replay.batch import ReplayDecodeError, decode_batch, encode_batch
from tests.unit.test_replay_batch import corrupt

SHAPE = (4, 10, 10)  # minatar:breakout


def _minatar_batch(n_steps: int = 8, envs: int = 4, seed: int = 0) -> TransitionBatch:
    """Real breakout transitions (random actions), as an actor pushes them."""
    env = make_vector_env("minatar:breakout", envs, seed=seed)
    stepper = VectorStepper(env)
    obs = stepper.reset(seed=seed)
    rng = np.random.default_rng(seed)
    parts = []
    for _ in range(n_steps):
        action = rng.integers(0, 3, envs)
        step = stepper.step(action)
        parts.append((obs, action, step.rewards, step.next_obs, step.terminated))
        obs = step.obs
    env.close()
    o, a, r, n, d = (np.concatenate(c) for c in zip(*parts, strict=True))
    return TransitionBatch(o, a.astype(np.int64), r.astype(np.float32), n, d.astype(bool),
                           "actor-0", 3, "int8")  # fmt: skip


def test_stepper_keeps_pixels_uint8_and_flat_obs_float32() -> None:
    batch = _minatar_batch(n_steps=2)
    assert batch.obs.dtype == np.uint8 and batch.obs.shape == (8, *SHAPE)
    assert batch.pixels and batch.obs_dim == 400 and batch.obs_shape == SHAPE
    cartpole = VectorStepper(make_vector_env("CartPole-v1", 2, seed=0))
    assert cartpole.reset(seed=0).dtype == np.float32


@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_pixel_batch_round_trips_through_format_3(codec: str) -> None:
    batch = _minatar_batch()
    fields = encode_batch(batch, codec)
    assert fields["v"] == b"3" and fields["obs_shape"] == b"4,10,10"
    assert fields["obs_dtype"] == b"uint8" and fields["obs_codec"] == codec.encode()
    raw = batch.obs.nbytes
    if codec == "zstd":  # sparse 0/1 grids: far smaller than their raw bytes
        assert len(fields["obs"]) < raw / 5 and len(fields["next_obs"]) < raw / 5
    else:
        assert len(fields["obs"]) == raw
    decoded = decode_batch({k.encode(): v for k, v in fields.items()})
    assert decoded.obs.dtype == np.uint8 and decoded.obs.shape == (32, *SHAPE)
    np.testing.assert_array_equal(decoded.obs, batch.obs)
    np.testing.assert_array_equal(decoded.next_obs, batch.next_obs)
    np.testing.assert_array_equal(decoded.action, batch.action)
    assert (decoded.policy_version, decoded.precision) == (3, "int8")


def test_flat_batches_stay_format_1_whatever_the_codec() -> None:
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((3, 4), dtype=np.float32)
    flat = TransitionBatch(obs, np.zeros(3, np.int64), np.zeros(3, np.float32), obs.copy(),
                           np.zeros(3, bool), "a", 1)  # fmt: skip
    fields = encode_batch(flat, "zstd")
    assert fields == encode_batch(flat)  # byte for byte what older readers expect
    assert fields["v"] == b"1" and "obs_codec" not in fields
    np.testing.assert_array_equal(decode_batch(fields).obs, obs)


def _bomb() -> bytes:
    return zstandard.ZstdCompressor(level=1).compress(bytes(50_000_000))


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"obs_shape": None}, "missing_field"),
        ({"obs_codec": None}, "missing_field"),
        ({"obs_shape": b"4,10"}, "bad_header"),
        ({"obs_shape": b"4,10,11"}, "bad_header"),  # product != obs_dim
        ({"obs_dtype": b"float32"}, "bad_header"),
        ({"obs_codec": b"gzip"}, "bad_header"),
        ({"obs": b"not zstd"}, "bad_obs_data"),
        ({"next_obs": _bomb()}, "bad_obs_data"),  # refused before decompressing 50 MB
        ({"obs_codec": b"none"}, "bad_length"),  # compressed bytes read as raw pixels
        ({"n": b"99999999", "action": bytes(8 * 99999999)}, "bad_header"),  # over the cap
    ],
)
def test_malformed_pixel_entries_are_refused(changes: dict, reason: str) -> None:
    with pytest.raises(ReplayDecodeError) as info:
        decode_batch(corrupt(encode_batch(_minatar_batch(n_steps=1), "zstd"), **changes))
    assert info.value.reason == reason


def test_pixel_storage_keeps_uint8_rows_and_refuses_other_layouts() -> None:
    storage = ReplayStorage(64, 400, obs_shape=SHAPE)
    flat = ReplayStorage(64, 400)
    assert storage.obs_layout == (np.dtype(np.uint8), SHAPE)
    # obs + next_obs: 2 x 400 bytes a row instead of 2 x 1600
    assert flat.nbytes - storage.nbytes == 64 * 2 * (1600 - 400)
    batch = _minatar_batch()
    rows = storage.add(batch)
    got = storage.get(rows[:5])
    assert got["obs"].dtype == np.uint8 and got["obs"].shape == (5, *SHAPE)
    np.testing.assert_array_equal(got["next_obs"], batch.next_obs[:5])
    with pytest.raises(ValueError, match="obs"):
        flat.add(batch)
    with pytest.raises(ValueError, match="obs_dim"):
        ReplayStorage(8, 400, obs_shape=(4, 10, 11))


def _pixel_learner(**config) -> DQNLearner:
    spec = policy_spec("minatar:breakout", "dqn", (64, 64))
    assert isinstance(spec, CNNSpec) and spec.obs_shape == SHAPE
    cfg = DQNConfig(batch_size=32, **config)
    learner = make_algorithm("dqn", spec.obs_dim, spec.num_outputs, (64, 64), cfg, spec=spec)
    assert isinstance(learner, DQNLearner)
    return learner


def _sampled(n: int = 32) -> dict[str, np.ndarray]:
    storage = ReplayStorage(256, 400, obs_shape=SHAPE)
    storage.add(_minatar_batch(n_steps=32))
    return storage.get(np.arange(n))


def test_cnn_dqn_takes_torch_path_and_learns_on_uint8_batches(one_torch_thread) -> None:
    learner = _pixel_learner(flat=True)  # flat asked for, but it is MLP-only
    assert isinstance(learner.online, CNNNetwork)
    assert current_update_path(learner) == "torch-eager"
    assert not learner.manual_grad
    batch = _sampled()
    # A target to fit: reward 1 for action 0, episodes end (no bootstrap)
    batch["reward"] = (batch["action"] == 0).astype(np.float32)
    batch["done"][:] = True
    before = {k: v.copy() for k, v in learner.policy_weights().items()}
    losses = [learner.update(batch).loss for _ in range(30)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.2 * losses[0]
    after = learner.policy_weights()
    assert set(after) == set(learner.policy_spec.weight_shapes())
    assert not np.allclose(after["convs.0.weight"], before["convs.0.weight"])
    assert after["act_max"][0] == 1.0 and after["act_max"][1] > 0  # ranges observed


def test_cnn_dqn_checkpoint_round_trip(one_torch_thread) -> None:
    learner = _pixel_learner()
    batch = _sampled()
    for _ in range(3):
        learner.update(batch)
    restored = _pixel_learner()
    restored.load_state_dict(learner.state_dict())
    obs = batch["obs"][:8]
    np.testing.assert_array_equal(restored.q_values(obs), learner.q_values(obs))
    a, b = learner.update(batch), restored.update(batch)
    assert a.loss == pytest.approx(b.loss, rel=1e-6)


def test_cnn_dqn_refuses_qat() -> None:
    with pytest.raises(ValueError, match="MLP Q-networks only"):
        _pixel_learner(qat_bits=4)
    with pytest.raises(EnvError, match="--qat-bits"):
        policy_spec("minatar:breakout", "dqn", (64,), DQNConfig(qat_bits=4))


@pytest.mark.parametrize(
    ("precision", "max_rel_error", "min_agreement"),
    [("fp32", 1e-5, 1.0), ("fp16", 1e-3, 1.0), ("int8", 0.03, 0.95), ("int4", 0.15, 0.8)],
)
def test_cnn_q_network_broadcast_at_every_precision(
    one_torch_thread, precision: str, max_rel_error: float, min_agreement: float
) -> None:
    learner = _pixel_learner()
    batch = _sampled(128)
    for _ in range(20):
        learner.update(batch)
    module = quantized_policy_from_weights(learner.policy_weights(), learner.policy_spec,
                                           precision)  # fmt: skip
    with torch.inference_mode():
        q = module(torch.from_numpy(batch["obs"])).numpy()  # uint8 in, as actors run it
    learner.online.eval()  # no running-range update while reading the reference
    reference = learner.q_values(batch["obs"])
    error = np.abs(q - reference).max() / np.abs(reference).max()
    assert error <= max_rel_error
    agreement = (q.argmax(1) == reference.argmax(1)).mean()
    assert agreement >= min_agreement
