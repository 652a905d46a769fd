"""CPU of one container health probe: the Python gRPC probe vs the bash /healthz probe.

Starts Redis and a quantizer container per image on a private network (labelled, removed
at the end even on failure), then, interleaved for `--rounds` rounds, runs each probe
`--probes` times inside the running quantizer container from a small Python wrapper that
reads its children's rusage (user + system CPU-seconds), so the figure is the probe's own
cost as Docker's HEALTHCHECK pays it inside the container. Docker's own exec machinery
(dockerd, containerd, runc) costs the host more per probe; it is the same for both probes
and not counted here.

    python bench/bench_health_probe.py --images actorq:before-issue31,actorq:core
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import time
import uuid

PROBES = {
    "python -m actorq.rpc.healthcheck": ["python", "-m", "actorq.rpc.healthcheck"],
    "actorq-healthz (bash /dev/tcp)": ["actorq-healthz"],
}
WRAPPER = """
import json, resource, subprocess, sys
cmd, n = json.loads(sys.argv[1]), int(sys.argv[2])
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = __import__("time").monotonic()
codes = [subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
         for _ in range(n)]
wall = __import__("time").monotonic() - t0
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
print(json.dumps({"cpu_s": cpu / n, "wall_s": wall / n, "codes": codes}))
"""


def docker(*args: str, check: bool = True) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def start(label: str, images: list[str], redis_image: str) -> dict[str, str]:
    """Redis and one quantizer per image; image -> quantizer container id (healthy)."""
    net = f"probe-bench-{label}"
    docker("network", "create", "--label", f"actorq.bench={label}", net)
    docker("run", "-d", "--label", f"actorq.bench={label}", "--network", net,
           "--name", f"{net}-redis", redis_image, "redis-server", "--save", "")  # fmt: skip
    out = {}
    for i, image in enumerate(images):
        out[image] = docker(
            "run", "-d", "--init", "--label", f"actorq.bench={label}", "--network", net,
            "--no-healthcheck", "-e", f"ACTORQ_REDIS_URL=redis://{net}-redis:6379/0",
            "-e", f"ACTORQ_REDIS_PREFIX=bench{i}", image, "actorq-quantizer",
        )  # fmt: skip
    for image, container in out.items():
        deadline = time.monotonic() + 180
        while run_probe(container, PROBES["python -m actorq.rpc.healthcheck"], 1)["codes"] != [0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{image}: quantizer not SERVING after 180 s")
            time.sleep(2)
    return out


def run_probe(container: str, cmd: list[str], n: int) -> dict:
    return json.loads(docker("exec", container, "python", "-c", WRAPPER, json.dumps(cmd), str(n)))


def remove(label: str) -> None:
    ids = docker("ps", "-aq", "--filter", f"label=actorq.bench={label}").split()
    if ids:
        docker("rm", "-f", "-v", *ids, check=False)  # -v: the images declare volumes
    nets = docker("network", "ls", "-q", "--filter", f"label=actorq.bench={label}").split()
    if nets:
        docker("network", "rm", *nets, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--images", default="actorq:core", help="comma-separated image tags")
    parser.add_argument("--redis-image", default="actorq-local/redis:bookworm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probes", type=int, default=5, help="probes per measurement")
    args = parser.parse_args()
    images = [i for i in args.images.split(",") if i]
    label = uuid.uuid4().hex[:8]
    samples: dict[tuple[str, str], list[dict]] = {}
    try:
        containers = start(label, images, args.redis_image)
        for _ in range(args.rounds):  # interleaved: every (image, probe) once per round
            for image, container in containers.items():
                for name, cmd in PROBES.items():
                    if name.startswith("actorq-healthz") and image.endswith("before-issue31"):
                        continue  # that image has no /healthz
                    samples.setdefault((image, name), []).append(
                        run_probe(container, cmd, args.probes)
                    )
    finally:
        remove(label)
    print(f"# {platform.processor() or platform.machine()}, load average "
          f"{' '.join(f'{x:.1f}' for x in __import__('os').getloadavg())}")  # fmt: skip
    print("| image | probe | CPU-s per probe (median of rounds) | wall s | exit codes |")
    print("|---|---|---|---|---|")
    for (image, name), runs in samples.items():
        cpu = statistics.median(r["cpu_s"] for r in runs)
        wall = statistics.median(r["wall_s"] for r in runs)
        codes = sorted({c for r in runs for c in r["codes"]})
        print(f"| {image} | {name} | {cpu:.4f} | {wall:.3f} | {codes} |")


if __name__ == "__main__":
    main()
