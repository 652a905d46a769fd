#!/usr/bin/env python3
"""Offline checks of the deployment files with the real tools (run by check_deploy.sh).

    deploy_checks.py compose COMPOSE_BIN   # config is valid; --scale actor=32 collides nowhere
    deploy_checks.py k8s KUBECTL KUBERNETES_VALIDATE  # render overlays, validate, inspect

Each check also runs once on a deliberately broken input and fails if it does not notice,
so a check that can no longer fail is caught too. Needs PyYAML (the tools venv has it).
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SCALE = 32
OVERLAYS = {"dev": 2, "scale-32": 32, "scale-32-gpu": 32}  # overlay -> actor replicas
ACTORQ_ROLES = ("quantizer", "learner", "actor", "evaluator")


class CheckFailed(AssertionError):
    pass


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _run(cmd: list[str], **kwargs) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    if proc.returncode != 0:
        raise CheckFailed(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}")
    return proc.stdout


# --- environment variable names ----------------------------------------------------------
def known_variables() -> set[str]:
    """Every ACTORQ_* name a service reads: the fields of the *Settings dataclasses in
    actorq/config.py (and ACTORQ_DQN_* from DQNConfig), read with ast so no import is
    needed. A misspelt variable in compose or a manifest would be silently ignored."""
    names = set()
    sources = {"actorq/config.py": "ACTORQ_", "actorq/algos/dqn.py": "ACTORQ_DQN_"}
    for path, prefix in sources.items():
        tree = ast.parse((ROOT / path).read_text())
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            if node.name == "DQNConfig" or (
                node.name.endswith("Settings") and node.name != "RunSettings"
            ):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        names.add(prefix + item.target.id.upper())
    return names


def device_pattern() -> re.Pattern[str]:
    """The learner-device syntax (auto, cpu, cuda, cuda:N) as actorq/config_parse.py's
    `_DEVICE_RE` states it, read with ast like the variable names above."""
    tree = ast.parse((ROOT / "actorq/config_parse.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_DEVICE_RE" for t in node.targets
        ):
            call = node.value
            assert isinstance(call, ast.Call) and isinstance(call.args[0], ast.Constant)
            return re.compile(str(call.args[0].value))
    raise CheckFailed("actorq/config_parse.py defines no _DEVICE_RE")


def check_learner_device(where: str, device: str | None, gpu: bool) -> None:
    """A GPU learner names cuda[:N]; one without a GPU must not (it would exit at start)."""
    _expect(
        device is None or device_pattern().fullmatch(device) is not None,
        f"{where}: ACTORQ_DEVICE {device!r} is not auto, cpu, cuda or cuda:N",
    )
    on_gpu = device is not None and device.startswith("cuda")
    _expect(on_gpu == gpu, f"{where}: ACTORQ_DEVICE {device!r} with GPU resources {gpu}")


def check_variables(where: str, names: set[str]) -> None:
    known = known_variables()
    unknown = sorted(n for n in names if n.startswith("ACTORQ_") and n not in known)
    _expect(not unknown, f"{where}: variables no service reads: {unknown}")


# --- compose --------------------------------------------------------------------------
def compose_config(binary: str, *overrides: Path) -> dict:
    """The binary's resolved model (as `docker compose config --format json`)."""
    files = ["-f", str(ROOT / "docker-compose.yml")]
    for path in overrides:
        files += ["-f", str(path)]
    return json.loads(_run([binary, *files, "config", "--format", "json"], cwd=ROOT))


def scale_override(tmp: Path, service: str, replicas: int, extra: dict | None = None) -> Path:
    """`--scale actor=32` as a file: compose's `config` has no --scale flag, but the
    binary resolves deploy.replicas from an override exactly like --scale sets it."""
    path = tmp / f"scale-{service}-{replicas}.yml"
    service_doc = {"deploy": {"replicas": replicas}, **(extra or {})}
    path.write_text(yaml.safe_dump({"services": {service: service_doc}}))
    return path


def containers(model: dict) -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    """(service, container name, host ports) for every replica compose would start."""
    project = model["name"]
    out = []
    for name, service in model["services"].items():
        replicas = int((service.get("deploy") or {}).get("replicas") or service.get("scale") or 1)
        ports = [
            (p.get("host_ip", ""), str(p["published"]), p.get("protocol", "tcp"))
            for p in service.get("ports", [])
            if p.get("published")
        ]
        for i in range(1, replicas + 1):
            cname = service.get("container_name") or f"{project}-{name}-{i}"
            out.append((name, cname, ports))
    return out


def collisions(model: dict) -> list[str]:
    """Container names or host ports that two containers would both claim."""
    seen_names: dict[str, str] = {}
    seen_ports: dict[tuple[str, str, str], str] = {}
    problems = []
    for service, cname, ports in containers(model):
        if cname in seen_names:
            problems.append(f"container name {cname} ({service} and {seen_names[cname]})")
        seen_names[cname] = service
        for port in ports:
            if port in seen_ports:
                problems.append(f"host port {port[1]}/{port[2]} ({cname} and {seen_ports[port]})")
            seen_ports[port] = cname
    return problems


def check_compose(binary: str) -> None:
    _run([binary, "-f", str(ROOT / "docker-compose.yml"), "config", "-q"], cwd=ROOT)
    with tempfile.TemporaryDirectory() as tmp:
        model = compose_config(binary, scale_override(Path(tmp), "actor", SCALE))
        actor = model["services"]["actor"]
        _expect(actor["deploy"]["replicas"] == SCALE, f"actor replicas: {actor['deploy']}")
        _expect("container_name" not in actor, "actor must not set container_name")
        _expect(not actor.get("ports"), f"actor must publish no host ports: {actor.get('ports')}")
        replicas = [c for c in containers(model) if c[0] == "actor"]
        _expect(len(replicas) == SCALE, f"expected {SCALE} actor containers, got {len(replicas)}")
        problems = collisions(model)
        _expect(not problems, f"collisions at --scale actor={SCALE}: {problems}")
        for name, service in model["services"].items():
            _expect("healthcheck" in service, f"service {name} has no healthcheck")
            for dep, cond in (service.get("depends_on") or {}).items():
                _expect(
                    cond["condition"] == "service_healthy",
                    f"{name} depends on {dep} without condition: service_healthy",
                )
        redis = model["services"]["redis"]
        _expect("--appendonly" in redis["command"], "redis without append-only persistence")
        check_variables(
            "docker-compose.yml",
            {k for s in model["services"].values() for k in s.get("environment") or {}},
        )
        _expect(known_variables() >= {"ACTORQ_ACTOR_INDEX", "ACTORQ_DQN_LR"}, "known variables")
        try:  # the name check must be able to fail
            check_variables("self-test", {"ACTORQ_ENVS_PER_ACTR"})
        except CheckFailed:
            pass
        else:
            raise CheckFailed("variable-name check accepted ACTORQ_ENVS_PER_ACTR")
        print(
            f"compose: valid; --scale actor={SCALE} gives {len(replicas)} actor replicas, "
            f"{len(containers(model))} containers, no name or host-port collision, "
            "every ACTORQ_* variable is one a service reads"
        )
        # The check must be able to fail: a fixed host port on the actor collides...
        bad = compose_config(
            binary,
            scale_override(Path(tmp), "actor", SCALE, {"ports": ["9100:9100"]}),
        )
        _expect(collisions(bad), "collision check missed a fixed actor host port")
        # ...and the binary itself refuses a fixed container name on a scaled service.
        named = scale_override(Path(tmp), "actor", SCALE, {"container_name": "actor"})
        proc = subprocess.run(
            [binary, "-f", str(ROOT / "docker-compose.yml"), "-f", str(named), "config", "-q"],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        _expect(proc.returncode != 0, "compose accepted container_name on a scaled service")
        print("compose: self-test caught a fixed host port and a fixed container name")
        check_local_override(binary, Path(tmp))
        check_gpu_override(binary, Path(tmp))


LOCAL_OVERRIDE = ROOT / "deploy" / "compose.local.yml"


def check_local_override(binary: str, tmp: Path) -> None:
    """deploy/compose.local.yml: local images for Redis and Prometheus, offline build args
    for every actorq service, Grafana only behind its profile; the main file unchanged."""
    model = compose_config(binary, LOCAL_OVERRIDE, scale_override(tmp, "actor", SCALE))
    services = model["services"]
    _expect("grafana" not in services, "grafana must not start with the local override")
    for name in ("redis", "prometheus"):
        image = services[name]["image"]
        _expect(image.startswith("actorq-local/"), f"{name}: expected a local image, got {image}")
    for name in ("quantizer", "learner", "actor", "evaluator"):
        args = services[name]["build"].get("args") or {}
        _expect(args.get("WHEELS") == "wheelhouse", f"{name}: build args {args}")
    _expect(not collisions(model), f"collisions with the local override: {collisions(model)}")
    main = compose_config(binary)
    _expect("grafana" in main["services"], "the main file must keep grafana")
    _expect(main["services"]["redis"]["image"].startswith("redis:"), "main file: official redis")
    print(
        f"compose: local override valid at --scale actor={SCALE}: local Redis and "
        "Prometheus images, offline build args, no Grafana; main file keeps the official images"
    )


GPU_OVERRIDE = ROOT / "deploy" / "compose.gpu.yml"


def gpu_reservations(service: dict) -> list[dict]:
    devices = ((service.get("deploy") or {}).get("resources") or {}).get("reservations") or {}
    return [d for d in devices.get("devices") or [] if "gpu" in (d.get("capabilities") or [])]


def inspect_gpu_model(model: dict) -> None:
    services = model["services"]
    for name, service in services.items():
        gpus = gpu_reservations(service)
        env = service.get("environment") or {}
        if name == "learner":
            _expect(len(gpus) == 1 and int(gpus[0].get("count", 0)) == 1, f"learner: {gpus}")
            _expect(gpus[0].get("driver") == "nvidia", f"learner GPU driver: {gpus[0]}")
            args = (service.get("build") or {}).get("args") or {}
            _expect("/cu" in args.get("TORCH_INDEX", ""), f"learner: CUDA torch index {args}")
            _expect(service["image"] != "actorq:latest", "learner: expected the CUDA image")
        else:
            _expect(not gpus, f"{name} reserves a GPU: {gpus}")
        if name in ACTORQ_ROLES:
            check_learner_device(f"compose gpu {name}", env.get("ACTORQ_DEVICE"), bool(gpus))
    _expect(not collisions(model), f"collisions with the GPU override: {collisions(model)}")


def check_gpu_override(binary: str, tmp: Path) -> None:
    """deploy/compose.gpu.yml: one NVIDIA GPU reserved for the learner, which is told to
    use it (ACTORQ_DEVICE cuda) and built with CUDA torch; no other service changes."""
    model = compose_config(binary, GPU_OVERRIDE, scale_override(tmp, "actor", SCALE))
    inspect_gpu_model(model)
    check_variables(
        "deploy/compose.gpu.yml",
        {k for s in model["services"].values() for k in s.get("environment") or {}},
    )
    main = compose_config(binary)
    _expect(not gpu_reservations(main["services"]["learner"]), "main file reserves a GPU")
    check_learner_device("compose learner", main["services"]["learner"]["environment"].get(
        "ACTORQ_DEVICE"), gpu=False)  # fmt: skip
    # The check must be able to fail: a GPU learner told to stay on the CPU ...
    cpu = tmp / "gpu-cpu.yml"
    cpu.write_text(yaml.safe_dump({"services": {"learner": {"environment": {
        "ACTORQ_DEVICE": "cpu"}}}}))  # fmt: skip
    try:
        inspect_gpu_model(compose_config(binary, GPU_OVERRIDE, cpu))
    except CheckFailed:
        pass
    else:
        raise CheckFailed("GPU override check accepted a GPU learner on ACTORQ_DEVICE=cpu")
    # ... and a misspelt device.
    try:
        check_learner_device("self-test", "gpu", gpu=True)
    except CheckFailed:
        pass
    else:
        raise CheckFailed("device check accepted ACTORQ_DEVICE=gpu")
    print(
        f"compose: GPU override valid at --scale actor={SCALE}: the learner alone reserves "
        "one NVIDIA GPU, runs the CUDA image with ACTORQ_DEVICE=cuda; self-test caught a "
        "GPU learner on cpu and ACTORQ_DEVICE=gpu"
    )


# --- kubernetes -------------------------------------------------------------------------
def render(kubectl: str, overlay: str) -> list[dict]:
    text = _run([kubectl, "kustomize", str(ROOT / "deploy" / "k8s" / "overlays" / overlay)])
    return [doc for doc in yaml.safe_load_all(text) if doc]


def validate(validator: str, docs: list[dict], label: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=f"-{label}.yaml", delete=False) as f:
        yaml.safe_dump_all(docs, f)
    try:
        _run([validator, "--strict", "--quiet", f.name])
    finally:
        Path(f.name).unlink()


def _by_kind(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _workloads(docs: list[dict]) -> dict[str, dict]:
    return {**_by_kind(docs, "Deployment"), **_by_kind(docs, "StatefulSet")}


def inspect_workloads(docs: list[dict], overlay: str, actors: int) -> None:
    workloads = _workloads(docs)
    _expect(set(workloads) == {"redis", *ACTORQ_ROLES}, f"workloads: {sorted(workloads)}")
    _expect(workloads["actor"]["spec"]["replicas"] == actors, f"{overlay}: actor replicas")
    _expect(_by_kind(docs, "StatefulSet").keys() == {"redis", "learner"}, "statefulsets")
    for name, work in workloads.items():
        pod = work["spec"]["template"]["spec"]
        _expect(pod["securityContext"]["runAsNonRoot"] is True, f"{name}: runAsNonRoot")
        for c in pod["containers"]:
            sec = c["securityContext"]
            _expect(sec["readOnlyRootFilesystem"] is True, f"{name}: readOnlyRootFilesystem")
            _expect(sec["allowPrivilegeEscalation"] is False, f"{name}: privilege escalation")
            _expect({"requests", "limits"} <= set(c["resources"]), f"{name}: resources")
            if name in ACTORQ_ROLES:
                for probe in ("readinessProbe", "livenessProbe"):
                    _expect(c[probe]["grpc"]["port"] == 50051, f"{name}: native gRPC {probe}")
                notes = work["spec"]["template"]["metadata"]["annotations"]
                _expect(notes["prometheus.io/scrape"] == "true", f"{name}: scrape annotation")
    for claim_owner in ("redis", "learner"):
        _expect(workloads[claim_owner]["spec"]["volumeClaimTemplates"], f"{claim_owner}: PVC")
    hpa = _by_kind(docs, "HorizontalPodAutoscaler")["actor"]["spec"]
    _expect(hpa["minReplicas"] <= actors <= hpa["maxReplicas"], f"{overlay}: HPA range")
    policy = _by_kind(docs, "NetworkPolicy")["redis-from-actorq-services"]["spec"]
    _expect(policy["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "redis", "netpol")
    _expect(_by_kind(docs, "Secret")["redis-auth"], "redis password secret")
    config = _by_kind(docs, "ConfigMap")["actorq-config"]["data"]
    env = {e["name"] for w in workloads.values() for c in w["spec"]["template"]["spec"]
           ["containers"] for e in c.get("env", [])}  # fmt: skip
    check_variables(f"k8s {overlay}", set(config) | env)
    learner = workloads["learner"]["spec"]["template"]["spec"]["containers"][0]
    gpus = learner["resources"].get("limits", {}).get("nvidia.com/gpu")
    _expect((gpus == 1) == overlay.endswith("-gpu"), f"{overlay}: learner GPU limit {gpus}")
    learner_env = {e["name"]: e.get("value") for e in learner.get("env", [])}
    device = learner_env.get("ACTORQ_DEVICE", config.get("ACTORQ_DEVICE"))
    check_learner_device(f"k8s {overlay} learner", device, gpu=gpus == 1)
    for name, work in workloads.items():
        for c in work["spec"]["template"]["spec"]["containers"]:
            if name != "learner":
                _expect("nvidia.com/gpu" not in c["resources"].get("limits", {}), f"{name}: GPU")


def check_k8s(kubectl: str, validator: str) -> None:
    for overlay, actors in OVERLAYS.items():
        docs = render(kubectl, overlay)
        validate(validator, docs, overlay)
        inspect_workloads(docs, overlay, actors)
        print(f"k8s {overlay}: {len(docs)} objects, valid (--strict), {actors} actors")
    # The GPU check must be able to fail: a GPU learner left on the CPU is caught.
    cpu_learner = render(kubectl, "scale-32-gpu")
    container = _workloads(cpu_learner)["learner"]["spec"]["template"]["spec"]["containers"][0]
    for entry in container["env"]:
        if entry["name"] == "ACTORQ_DEVICE":
            entry["value"] = "cpu"
    try:
        inspect_workloads(cpu_learner, "scale-32-gpu", OVERLAYS["scale-32-gpu"])
    except CheckFailed:
        print("k8s: self-test: a GPU learner with ACTORQ_DEVICE=cpu was caught")
    else:
        raise CheckFailed("k8s check accepted a GPU learner with ACTORQ_DEVICE=cpu")
    # The validator must be able to fail: a misspelt field is refused under --strict.
    broken = render(kubectl, "dev")
    _workloads(broken)["actor"]["spec"]["replica"] = 3
    try:
        validate(validator, broken, "broken")
    except CheckFailed:
        print("k8s: self-test: kubernetes-validate --strict refused a misspelt field")
    else:
        raise CheckFailed("kubernetes-validate --strict accepted spec.replica")


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["compose"] and len(argv) == 2:
            check_compose(argv[1])
        elif argv[:1] == ["k8s"] and len(argv) == 3:
            check_k8s(argv[1], argv[2])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except CheckFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
