"""Network namespaces joined by rate-shaped veth links: "other hosts" on one machine.

`NetnsLab` makes a hub namespace (learner, quantizer, Redis) and any number of spoke
namespaces (actors), each joined to the hub by its own veth pair, so every actor has its
own link as it would on its own host. A link is shaped in both directions with
`tc qdisc ... tbf rate R` on each end's egress. Traffic stays on 10.77.<link>.0/30
addresses inside the namespaces made here; nothing is routed to the host.

Added delay (`tc netem`) is not possible on kernels built without CONFIG_NET_SCH_NETEM
(this machine's: only tbf, htb and ingress are built in); `shape` then refuses a delay
with that reason, and `netem_available` lets callers say so.

Cleanup: `close()` (also run by `atexit` and on `with` exit) deletes every namespace it
made, which removes their veth ends too; `remove_stale()` deletes namespaces with this
module's prefix whose creating process is gone (a lab killed with SIGKILL).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import subprocess
from dataclasses import dataclass, field

PREFIX = "aqlk"
"""Every namespace made here is named aqlk<pid>-<role>, so stale ones can be found."""

SUBNET = "10.77"


class NetnsError(RuntimeError):
    """A namespace or link command failed; the message names the command and its error."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `ip ARGS`; NetnsError with the command and stderr on failure."""
    return _run(["ip", *args], check)


def _run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc


def list_namespaces() -> list[str]:
    out = ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def exec_prefix(namespace: str) -> tuple[str, ...]:
    """Argv prefix that runs a command inside `namespace` (`ip netns exec` execs, so the
    command keeps the pid its parent started)."""
    return ("ip", "netns", "exec", namespace)


def unavailable_reason() -> str:
    """Why namespaces cannot be made here ("" when they can): not root, or no `ip`."""
    if os.geteuid() != 0:
        return f"network namespaces need root (running as uid {os.geteuid()})"
    probe = f"{PREFIX}{os.getpid()}-probe"
    try:
        ip("netns", "add", probe)
    except (NetnsError, OSError) as exc:
        return f"cannot make a network namespace: {exc}"
    ip("netns", "del", probe, check=False)
    return ""


def netem_available() -> bool:
    """True when `tc qdisc ... netem` works on this kernel (it is a module or built in)."""
    try:
        with open("/proc/config.gz", "rb") as f:
            import gzip

            return b"CONFIG_NET_SCH_NETEM=" in gzip.decompress(f.read())
    except OSError:
        return os.path.exists("/sys/module/sch_netem")


def remove_stale(prefix: str = PREFIX) -> list[str]:
    """Delete namespaces named <prefix><pid>-... whose pid no longer runs; returns them."""
    removed = []
    for name in list_namespaces():
        if not name.startswith(prefix):
            continue
        pid = name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue
        _kill_inside(name)
        ip("netns", "del", name, check=False)
        removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(namespace: str) -> None:
    """SIGKILL processes still in a namespace that is being removed (left by a crash)."""
    out = ip("netns", "pids", namespace, check=False).stdout.split()
    for pid in out:
        if pid.isdigit() and int(pid) != os.getpid():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), 9)


@dataclass(frozen=True)
class LinkShape:
    """Rate of a link in Mbit/s (each direction), None = unshaped veth."""

    rate_mbit: float | None = None
    delay_ms: float = 0.0  # one-way added delay; needs netem

    def __post_init__(self) -> None:
        if self.rate_mbit is not None and not 0.01 <= self.rate_mbit <= 100_000:
            raise ValueError(f"rate_mbit: expected 0.01..100000 Mbit/s, got {self.rate_mbit}")
        if not 0 <= self.delay_ms <= 10_000:
            raise ValueError(f"delay_ms: expected 0..10000 ms, got {self.delay_ms}")

    @property
    def label(self) -> str:
        rate = "unshaped" if self.rate_mbit is None else f"{self.rate_mbit:g} Mbit/s"
        return rate + (f", +{self.delay_ms:g} ms" if self.delay_ms else "")


def tbf_args(rate_mbit: float) -> list[str]:
    """tbf parameters: the bucket holds at least 4 ms at the rate (a 250 Hz timer must be
    able to refill it) and 32 KiB; the queue holds 100 ms at the rate before dropping."""
    bytes_per_s = rate_mbit * 1e6 / 8
    burst = max(32 * 1024, int(bytes_per_s * 0.004))
    return ["rate", f"{rate_mbit}mbit", "burst", str(burst), "latency", "100ms"]


@dataclass
class Link:
    index: int
    spoke: str
    hub_if: str
    spoke_if: str
    shape: LinkShape

    @property
    def hub_addr(self) -> str:
        return f"{SUBNET}.{self.index}.1"

    @property
    def spoke_addr(self) -> str:
        return f"{SUBNET}.{self.index}.2"


@dataclass
class NetnsLab:
    """A hub namespace and spokes joined to it by shaped veth links; removed on close."""

    made: list[str] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    hub: str = ""

    def __post_init__(self) -> None:
        self._tag = f"{PREFIX}{os.getpid()}-"
        atexit.register(self.close)

    def __enter__(self) -> NetnsLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def namespace(self, role: str) -> str:
        """Make namespace <prefix><pid>-<role> with loopback up; returns its name."""
        name = self._tag + role
        if len(name) > 60 or not role.replace("-", "").isalnum():
            raise ValueError(f"namespace role: expected short [a-z0-9-], got {role!r}")
        ip("netns", "add", name)
        self.made.append(name)
        ip("-n", name, "link", "set", "lo", "up")
        return name

    def make_hub(self) -> str:
        self.hub = self.namespace("hub")
        return self.hub

    def add_spoke(self, role: str, shape: LinkShape) -> Link:
        """A spoke namespace with its own veth link to the hub, shaped both ways."""
        if not self.hub:
            self.make_hub()
        spoke = self.namespace(role)
        index = len(self.links) + 1
        if index > 250:
            raise ValueError("at most 250 links per lab")
        link = Link(index, spoke, f"h{index}", "eth0", shape)
        ip("link", "add", link.hub_if, "netns", self.hub, "type", "veth",
           "peer", "name", link.spoke_if, "netns", spoke)  # fmt: skip
        for ns, dev, addr in ((self.hub, link.hub_if, link.hub_addr),
                              (spoke, link.spoke_if, link.spoke_addr)):  # fmt: skip
            ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            ip("-n", ns, "link", "set", dev, "up")
            shape_device(ns, dev, shape)
        self.links.append(link)
        return link

    def close(self) -> None:
        for name in reversed(self.made):
            _kill_inside(name)
            ip("netns", "del", name, check=False)
        self.made.clear()
        self.links.clear()
        self.hub = ""


def shape_device(namespace: str, dev: str, shape: LinkShape) -> None:
    """tbf on `dev`'s egress in `namespace` (nothing for an unshaped link)."""
    if shape.delay_ms and not netem_available():
        raise NetnsError(
            f"delay {shape.delay_ms:g} ms needs tc netem, which this kernel lacks "
            "(CONFIG_NET_SCH_NETEM not set)"
        )
    tc = ["ip", "netns", "exec", namespace, "tc", "qdisc"]
    if shape.delay_ms:
        _run([*tc, "add", "dev", dev, "root", "handle", "1:", "netem", "delay",
              f"{shape.delay_ms}ms", "limit", "100000"])  # fmt: skip
        if shape.rate_mbit is not None:
            _run([*tc, "add", "dev", dev, "parent", "1:", "handle", "2:", "tbf",
                  *tbf_args(shape.rate_mbit)])  # fmt: skip
    elif shape.rate_mbit is not None:
        _run([*tc, "add", "dev", dev, "root", "tbf", *tbf_args(shape.rate_mbit)])
