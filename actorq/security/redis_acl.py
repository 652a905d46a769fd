"""Redis ACL users, one per service, each allowed only the commands and keys it uses.

The rules are built from `RedisKeys`, so they change when key names change. `actorq
redis-acl` writes an ACL file (passwords stored as SHA-256 hashes) and one password file
per user; load the ACL file with `redis-server --aclfile users.acl` (Redis >= 7: rules use
read-only `%R~` and write-only `%W~` key patterns) and give each service its user in
ACTORQ_REDIS_URL (redis://actorq-actor@host:6379/0) and its password in
ACTORQ_REDIS_PASSWORD_FILE.

What each user may do (see the code that issues each command):
- actor (and evaluator): XADD replay batches with INCRBY of the inserted counter in
  MULTI/EXEC (replay/redis_io.py), XADD episodes (actor/episodes.py), MGET the inserted and
  learner-sampled counters for rate limiting (actor/loop.py). No policy keys at all.
- learner: XREAD/XRANGE the replay stream (replay/redis_io.py), SET its progress counters
  (learner/loop.py), GET the latest policy version (learner resumes its version from it).
- quantizer: the policy blob keys only: SET/GET blobs, HSET/HGETALL metadata, ZRANGE/ZREM
  the version set, DEL old versions, and the Lua script that moves `latest` (EVALSHA,
  SCRIPT LOAD; it runs GET/SET/ZADD on the keys it is given) (quantizer/store.py); and
  XREVRANGE of the replay stream, read-only, for the guard's probe (guard.py).
- monitor: read-only access to every key under the prefix (the launcher's progress view,
  dashboards, operators).
The `default` user is switched off; `admin` keeps full access for operators.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from actorq.redis_keys import RedisKeys

ROLES = ("quantizer", "learner", "actor", "monitor", "admin")
# Sent by redis-py and redis-cli while connecting, or harmless: allowed for every user.
CONNECTION = ("+ping", "+select", "+hello", "+client|setname", "+client|id", "+echo")


def user_name(role: str, user_prefix: str = "actorq") -> str:
    return f"{user_prefix}-{role}"


def role_rules(role: str, keys: RedisKeys) -> list[str]:
    """ACL rules (commands then key patterns) for `role` under the key prefix of `keys`."""
    p = keys.prefix
    if any(c in p for c in "*?[]\\"):
        raise ValueError(f"key prefix {p!r}: glob characters *?[]\\ would widen ACL patterns")
    if role == "actor":
        commands = ["+xadd", "+incrby", "+mget", "+get", "+multi", "+exec", "+discard"]
        patterns = [
            f"%W~{keys.replay_stream}",
            f"~{keys.inserted_counter}",
            f"%W~{keys.episodes_stream}",
            f"%R~{p}:learner:*",
        ]
    elif role == "learner":
        commands = ["+xread", "+xrange", "+xlen", "+get", "+set", "+mget"]
        patterns = [
            f"%R~{keys.replay_stream}",
            f"%R~{keys.inserted_counter}",
            f"~{p}:learner:*",
            f"%R~{keys.policy_latest}",
            f"%R~{keys.episodes_stream}",  # settling once solved reads the evaluator's returns
        ]
    elif role == "quantizer":
        commands = ["+get", "+set", "+del", "+hset", "+hgetall", "+zadd", "+zrange", "+zrem"]
        commands += ["+multi", "+exec", "+discard", "+evalsha", "+eval", "+script|load"]
        commands += ["+xrevrange"]  # the guard's probe of recent observations
        patterns = [f"~{p}:policy:*", f"%R~{keys.replay_stream}"]
    elif role == "monitor":
        commands = ["+@read", "-@dangerous"]
        patterns = [f"%R~{p}:*"]
    elif role == "admin":
        return ["~*", "&*", "+@all"]
    else:
        raise ValueError(f"unknown Redis role {role!r}; expected one of {', '.join(ROLES)}")
    return ["resetkeys", "resetchannels", "-@all", *CONNECTION, *commands, *patterns]


def acl_line(role: str, password: str, keys: RedisKeys, user_prefix: str = "actorq") -> str:
    """One `user ...` line of an ACL file; the password appears only as its SHA-256."""
    if len(password) < 16:
        raise ValueError(f"password for {role}: expected at least 16 characters")
    digest = hashlib.sha256(password.encode()).hexdigest()
    rules = " ".join(role_rules(role, keys))
    return f"user {user_name(role, user_prefix)} on #{digest} {rules}"


def acl_file_text(
    passwords: Mapping[str, str], keys: RedisKeys, user_prefix: str = "actorq"
) -> str:
    """A whole ACL file: the default user off, then one user per role in `passwords`."""
    lines = ["user default off resetkeys resetchannels -@all"]
    lines += [acl_line(role, pw, keys, user_prefix) for role, pw in passwords.items()]
    return "\n".join(lines) + "\n"


def _password(secrets_dir: Path, role: str) -> str:
    """The role's password from its file, made (random, mode 0600) when missing."""
    path = secrets_dir / f"redis-{role}.password"
    if path.exists():
        return path.read_text().strip()
    password = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(password + "\n")
    return password


def write_acl(
    out: Path, secrets_dir: Path, keys: RedisKeys, roles: Sequence[str] = ROLES
) -> dict[str, Path]:
    """Write the ACL file to `out` and password files to `secrets_dir` (kept if present)."""
    for role in roles:
        role_rules(role, keys)  # refuse a bad prefix or role before writing anything
    secrets_dir.mkdir(parents=True, exist_ok=True)
    passwords = {role: _password(secrets_dir, role) for role in roles}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(acl_file_text(passwords, keys))
    return {role: secrets_dir / f"redis-{role}.password" for role in roles}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="actorq redis-acl",
        description="Write a Redis ACL file with one least-privilege user per actorq service.",
    )
    parser.add_argument("--prefix", default="actorq", help="key prefix (ACTORQ_REDIS_PREFIX)")
    parser.add_argument("--out", default="certs/redis/users.acl", help="ACL file to write")
    parser.add_argument(
        "--secrets-dir",
        default="certs/redis",
        help="folder of redis-<role>.password files (existing ones are kept, so reruns "
        "only refresh the rules)",
    )
    args = parser.parse_args(argv)
    try:
        files = write_acl(Path(args.out), Path(args.secrets_dir), RedisKeys(args.prefix))
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} (redis-server --aclfile {args.out}; Redis >= 7)")
    for role, path in files.items():
        print(
            f"  {role:<10} ACTORQ_REDIS_URL=redis://{user_name(role)}@HOST:6379/0 "
            f"ACTORQ_REDIS_PASSWORD_FILE={path}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
