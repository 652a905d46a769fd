"""Per-service Redis ACL users on a private real redis-server (never the shared one).

Each service's own code paths (replay writer/reader, policy store with its Lua script,
episodes, rate-limit reads) succeed with its user; anything outside its grant is refused.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import redis
from redis.exceptions import NoPermissionError

from actorq.actor.episodes import EpisodeTracker
from actorq.models import MLPSpec, QNetwork
from actorq.procutil import die_with_parent
from actorq.quant import encode_policy
from actorq.quantizer.store import PolicyStore
from actorq.redis_keys import RedisKeys
from actorq.redis_server import RedisUnavailable, find_free_port
from actorq.replay.batch import TransitionBatch
from actorq.replay.redis_io import RedisReplayReader, RedisReplayWriter
from actorq.replay.storage import ReplayStorage
from actorq.security.redis_acl import ROLES, acl_file_text, role_rules, user_name, write_acl
from actorq.service import connect_redis
from actorq.v1 import policy_pb2

PREFIX = "acltest"
KEYS = RedisKeys(PREFIX)


def _redis7() -> str | None:
    exe = shutil.which("redis-server")
    if exe is None:
        return None
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"v=(\d+)\.", version)
    return exe if found and int(found.group(1)) >= 7 else None


REDIS7 = _redis7()
pytestmark = pytest.mark.skipif(
    REDIS7 is None, reason="needs a redis-server >= 7 on PATH (ACL %R~/%W~ key patterns)"
)


class AclRedis:
    """A private redis-server on a free port that loads the generated ACL file."""

    def __init__(self, workdir: Path) -> None:
        self.secrets = workdir / "secrets"
        self.acl = workdir / "users.acl"
        self.files = write_acl(self.acl, self.secrets, KEYS)
        self.port = find_free_port()
        args = [REDIS7, "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        args += ["--appendonly", "no", "--dir", str(workdir), "--aclfile", str(self.acl)]
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        self._wait_ready()

    def url(self, role: str) -> str:
        return f"redis://{user_name(role)}@127.0.0.1:{self.port}/0"

    def password(self, role: str) -> str:
        return self.files[role].read_text().strip()

    def connect(self, role: str) -> redis.Redis:
        """The way services connect: user in the URL, password from a file."""
        return connect_redis(self.url(role), check_timeout=2, password_file=str(self.files[role]))

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "redis-server refused the generated ACL file"
            try:
                self.connect("admin").ping()
                return
            except RedisUnavailable:
                time.sleep(0.05)
        raise AssertionError("redis-server with ACLs did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(5)


@pytest.fixture(scope="module")
def acl_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AclRedis]:
    server = AclRedis(tmp_path_factory.mktemp("acl"))
    yield server
    server.stop()


def _batch(n: int = 8) -> TransitionBatch:
    return TransitionBatch(
        obs=np.zeros((n, 3), np.float32),
        action=np.arange(n, dtype=np.int64),
        reward=np.ones(n, np.float32),
        next_obs=np.ones((n, 3), np.float32),
        done=np.zeros(n, bool),
        actor_id="actor-0",
        policy_version=1,
        precision="int8",
    )


def _encoded(version: int):
    spec = MLPSpec(obs_dim=3, num_outputs=2, hidden=(8,))
    weights = {k: v.detach().numpy() for k, v in QNetwork(spec).state_dict().items()}
    return encode_policy(weights, spec, policy_pb2.PRECISION_INT8, version, 0)


def _refused(call) -> None:
    with pytest.raises(NoPermissionError):
        call()


def test_generated_file_has_every_role_and_no_plain_password(acl_redis: AclRedis) -> None:
    text = acl_redis.acl.read_text()
    assert text.startswith("user default off")
    for role in ROLES:
        assert f"user {user_name(role)} on #" in text
        assert acl_redis.password(role) not in text
        assert acl_redis.files[role].stat().st_mode & 0o077 == 0  # owner-only
    assert f"~{KEYS.policy_latest}" in " ".join(role_rules("learner", KEYS))


def test_services_do_their_work_with_their_own_users(acl_redis: AclRedis) -> None:
    quantizer, learner, actor = (acl_redis.connect(r) for r in ("quantizer", "learner", "actor"))
    # quantizer: blobs, metadata, the Lua script that moves `latest`, trimming old versions
    store = PolicyStore(quantizer, KEYS, keep_versions=1)
    for version in (1, 2, 3):
        store.save(_encoded(version))
    assert store.latest_version() == 3 and store.stored_versions() == [3]
    assert store.announcement(0).version == 3 and len(store.load(3)) > 0
    # actor: replay batches with the counter (MULTI/EXEC), episodes, rate-limit reads
    writer = RedisReplayWriter(actor, KEYS, maxlen_entries=1000)
    assert writer.write_many([_batch(), _batch()]) == 16
    tracker = EpisodeTracker(1, "actor-0", "train")
    tracker.step(np.ones(1), np.ones(1, bool), version=3, env_steps=1)
    tracker.flush(actor, KEYS, maxlen=100)
    assert actor.mget(KEYS.inserted_counter, KEYS.learner_sampled)[0] == b"16"
    # learner: mirror the stream, report progress, read the latest version
    reader = RedisReplayReader(learner, KEYS, ReplayStorage(1000, obs_dim=3))
    assert reader.rebuild() == 16 and reader.poll(block_ms=10) == 0
    pipe = learner.pipeline(transaction=False)
    pipe.set(KEYS.learner_updates, 5).set(KEYS.learner_sampled, 320).execute()
    assert PolicyStore(learner, KEYS).latest_version() == 3
    assert actor.mget(KEYS.inserted_counter, KEYS.learner_sampled)[1] == b"320"
    # monitor: reads everything under the prefix
    monitor = acl_redis.connect("monitor")
    assert monitor.xlen(KEYS.episodes_stream) == 1 and monitor.get(KEYS.policy_latest) == b"3"


def test_each_user_is_refused_outside_its_grant(acl_redis: AclRedis) -> None:
    quantizer, learner, actor = (acl_redis.connect(r) for r in ("quantizer", "learner", "actor"))
    monitor = acl_redis.connect("monitor")
    PolicyStore(quantizer, KEYS).save(_encoded(10))
    blob = KEYS.policy_blob(10)
    # an actor can neither read, forge nor delete policies, nor read or trim replay
    _refused(lambda: actor.delete(blob))
    _refused(lambda: actor.get(blob))
    _refused(lambda: actor.set(KEYS.policy_latest, 99))
    _refused(lambda: actor.xrange(KEYS.replay_stream))
    _refused(lambda: actor.xtrim(KEYS.replay_stream, maxlen=0))
    _refused(lambda: actor.set(KEYS.learner_updates, 0))
    _refused(lambda: actor.flushall())
    _refused(lambda: actor.xadd("otherrun:replay", {"x": "1"}))  # another prefix
    # the learner cannot publish policies or write replay
    _refused(lambda: learner.set(KEYS.policy_latest, 99))
    _refused(lambda: learner.get(blob))
    _refused(lambda: learner.xadd(KEYS.replay_stream, {"x": "1"}))
    _refused(lambda: learner.delete(KEYS.replay_stream))
    # the quantizer touches policy keys only
    _refused(lambda: quantizer.xadd(KEYS.replay_stream, {"x": "1"}))
    _refused(lambda: quantizer.get(KEYS.inserted_counter))
    _refused(lambda: quantizer.config_get("*"))
    # the monitor only reads
    _refused(lambda: monitor.set(KEYS.policy_latest, 1))
    _refused(lambda: monitor.delete(blob))
    assert PolicyStore(monitor, KEYS).latest_version() == 10  # nothing above changed it


def test_wrong_or_missing_password_is_refused_with_a_clear_error(
    acl_redis: AclRedis, tmp_path: Path
) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("x" * 40)
    with pytest.raises(RedisUnavailable, match="refused the credentials") as info:
        connect_redis(acl_redis.url("actor"), check_timeout=2, password_file=str(wrong))
    assert "x" * 40 not in str(info.value)
    pw = acl_redis.password("actor")
    url_with_wrong = f"redis://{user_name('actor')}:not-{pw}@127.0.0.1:{acl_redis.port}/0"
    with pytest.raises(RedisUnavailable) as info:
        connect_redis(url_with_wrong, check_timeout=2)
    assert pw not in str(info.value) and ":***@" in str(info.value)
    anonymous = f"redis://127.0.0.1:{acl_redis.port}/0"  # the default user is off
    with pytest.raises(RedisUnavailable, match="user and password"):
        connect_redis(anonymous, check_timeout=2)
    good = f"redis://{user_name('actor')}:{pw}@127.0.0.1:{acl_redis.port}/0"
    assert connect_redis(good, check_timeout=2).ping()  # password in the URL works too


def test_acl_text_is_rejected_for_unknown_roles_and_short_passwords() -> None:
    with pytest.raises(ValueError, match="unknown Redis role 'spy'"):
        role_rules("spy", KEYS)
    with pytest.raises(ValueError, match="at least 16 characters"):
        acl_file_text({"actor": "short"}, KEYS)


def test_cli_writes_the_file_and_keeps_passwords_on_rerun(tmp_path: Path, capsys) -> None:
    from actorq.cli import main

    args = ["redis-acl", "--prefix", "run7", "--out", str(tmp_path / "u.acl")]
    args += ["--secrets-dir", str(tmp_path / "s")]
    assert main(args) == 0
    first = (tmp_path / "s" / "redis-actor.password").read_text()
    assert "%W~run7:replay" in (tmp_path / "u.acl").read_text()
    assert main(args) == 0
    assert (tmp_path / "s" / "redis-actor.password").read_text() == first
    assert "ACTORQ_REDIS_PASSWORD_FILE=" in capsys.readouterr().out
    bad = ["redis-acl", "--prefix", "run*", "--out", str(tmp_path / "x.acl")]
    assert main([*bad, "--secrets-dir", str(tmp_path / "x")]) == 2
    assert "glob characters" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.acl").exists()
