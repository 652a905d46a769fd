"""Run a ClusterPlan on a Docker engine through the Docker SDK (PyPI `docker`).

Containers carry labels (actorq.cluster.specs.LABEL_*), so `scale` and `down` find them
again from the engine alone, with no local state file.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

from actorq.cluster.specs import (
    LABEL_CLUSTER,
    LABEL_INDEX,
    LABEL_ROLE,
    ClusterConfig,
    ClusterPlan,
    ContainerSpec,
    actor_spec,
    plan_cluster,
)


class NoDockerEngine(RuntimeError):
    """No Docker engine answered; the message says where the SDK looked."""


def connect() -> Any:
    """A docker-py client whose engine answered a ping, or NoDockerEngine."""
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        import docker
        import requests  # docker-py's transport: a refused ping surfaces as its error
    except ImportError:
        raise NoDockerEngine(
            "the Docker SDK is not installed: pip install 'actorq[cluster]'"
        ) from None
    _check_unix_socket(where)
    # Ping with a fixed API version first: docker.from_env's version auto-detection raises
    # from inside its constructor when no engine answers and leaks the socket it opened.
    probe = None
    try:
        probe = docker.from_env(version="1.24", timeout=10)
        probe.ping()  # /_ping is unversioned, so any engine answers it
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        raise NoDockerEngine(
            f"no Docker engine found at {where} ({exc.__class__.__name__}); "
            "start Docker or point DOCKER_HOST at a running engine"
        ) from None
    finally:
        if probe is not None:
            probe.close()
    client = docker.from_env(timeout=30)  # now negotiates the engine's API version
    return client


def _check_unix_socket(where: str) -> None:
    """Refuse early when a unix socket has no listener: docker-py's transport leaks the
    socket of a failed connect, which would surface later as a ResourceWarning."""
    if not where.startswith("unix://"):
        return
    path = where.removeprefix("unix://")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5.0)
        try:
            sock.connect(path)
        except OSError as exc:
            raise NoDockerEngine(
                f"no Docker engine found at {where} ({exc.strerror or exc}); "
                "start Docker or point DOCKER_HOST at a running engine"
            ) from None


class DockerCluster:
    """up / scale / down for one named cluster on one engine."""

    def __init__(self, client: Any, config: ClusterConfig, wait_seconds: float = 180.0) -> None:
        self.client = client
        self.config = config
        self.wait_seconds = wait_seconds

    def up(self) -> ClusterPlan:
        plan = plan_cluster(self.config)
        self._ensure_network(plan.network)
        for volume in plan.volumes:
            self._ensure_volume(volume)
        for spec in plan.containers:
            container = self._start(spec)
            if spec.role != "actor":  # later services need this one; actors need no waiting
                self._wait_healthy(container)
        return plan

    def scale(self, actors: int) -> list[str]:
        """Start or remove actors so exactly `actors` run; returns the names changed."""
        running = sorted(self._containers("actor"), key=_actor_index)
        changed = []
        for container in running[actors:]:
            container.stop(timeout=30)
            container.remove(v=True)  # and its anonymous volumes (image VOLUMEs)
            changed.append(container.name)
        for index in range(len(running), actors):
            changed.append(self._start(actor_spec(self.config, index, actors)).name)
        return changed

    def down(self, remove_volumes: bool = False) -> list[str]:
        """Stop actors first, then learner (final checkpoint), quantizer, Redis; then
        remove the network, volumes (if asked) and any container that refused to stop,
        all found by this cluster's label. Returns the containers' names."""
        removed = []
        for role in ("actor", "learner", "quantizer", "redis"):
            for container in self._containers(role):
                try:
                    container.stop(timeout=60)
                    container.remove(v=True)
                    removed.append(container.name)
                except self._errors() as exc:
                    print(f"cluster down: {container.name}: {exc}", file=sys.stderr)
        left = self.remove_by_label(remove_volumes)
        if left["containers"]:
            print(f"cluster down: force-removed by label {LABEL_CLUSTER}={self.config.name}: "
                  f"{', '.join(left['containers'])}", file=sys.stderr)  # fmt: skip
        return removed + left["containers"]

    def remove_by_label(self, volumes: bool = True) -> dict[str, list[str]]:
        """Force-remove every container, network and (with `volumes`) volume labelled as
        this cluster's; their names by kind."""
        label = {"label": [f"{LABEL_CLUSTER}={self.config.name}"]}
        gone: dict[str, list[str]] = {"containers": [], "networks": [], "volumes": []}
        for container in self.client.containers.list(all=True, filters=label):
            container.remove(force=True, v=True)
            gone["containers"].append(container.name)
        # by name too: networks made before they carried the cluster's name as label
        found = self.client.networks.list(filters=label)
        found += self.client.networks.list(names=[self.config.network])
        for network in {n.id: n for n in found}.values():
            network.remove()
            gone["networks"].append(network.name)
        if volumes:
            for volume in self.client.volumes.list(filters=label):
                volume.remove(force=True)
                gone["volumes"].append(volume.name)
        return gone

    def _errors(self) -> tuple[type[Exception], ...]:
        import docker
        import requests

        return (docker.errors.DockerException, requests.RequestException)

    def _containers(self, role: str) -> list[Any]:
        labels = [f"{LABEL_CLUSTER}={self.config.name}", f"{LABEL_ROLE}={role}"]
        return list(self.client.containers.list(all=True, filters={"label": labels}))

    def _start(self, spec: ContainerSpec) -> Any:
        return self.client.containers.run(**spec.run_kwargs(self.config.network))

    def _ensure_network(self, name: str) -> None:
        if not self.client.networks.list(names=[name]):
            labels = {LABEL_CLUSTER: self.config.name}
            self.client.networks.create(name, driver="bridge", labels=labels)

    def _ensure_volume(self, name: str) -> None:
        self.client.volumes.create(name=name, labels={LABEL_CLUSTER: self.config.name})

    def _wait_healthy(self, container: Any) -> None:
        deadline = time.monotonic() + self.wait_seconds
        while time.monotonic() < deadline:
            container.reload()
            health = container.attrs.get("State", {}).get("Health", {}).get("Status")
            if health == "healthy":
                return
            if container.status in ("exited", "dead"):
                break
            time.sleep(1.0)
        raise RuntimeError(
            f"{container.name} did not become healthy within {self.wait_seconds:.0f} s "
            f"(status {container.status}); see `docker logs {container.name}`"
        )


def _actor_index(container: Any) -> int:
    return int(container.labels.get(LABEL_INDEX, "0"))
