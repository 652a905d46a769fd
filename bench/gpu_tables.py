"""Rates and markdown tables of bench/gpu_report.py: one report file, rewritten after
every stage so that a check stopped at its limit still leaves what it measured."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import arms

AUTO_TOLERANCE = 1.10  # issue 29: auto never picks a path slower than the other by > 10%
SCALING_TARGET = 4.0  # issue 29: GPU learner >= 4x the CPU learner's env steps/s, 14 actors


def tail(text: str, chars: int = 1500) -> str:
    return text[-chars:].strip()


def steady_rates(run_dir: Path, skip: float) -> dict[str, float]:
    """The GPU check's runs are short: a 2 s window is enough."""
    return arms.steady_rates(run_dir, skip, min_window=2.0)


def _fmt(value: Any, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


# --- sections ---------------------------------------------------------------------------
def env_section(data: dict) -> list[str]:
    return [
        f"- GPU (nvidia-smi): {data.get('nvidia_smi', '-')}; torch sees: "
        f"{', '.join(data.get('gpus') or []) or 'no GPU'}",
        f"- CPU: {data.get('cpu', '-')}, {data.get('cores', '-')} cores",
        f"- Python {data.get('python')}, torch {data.get('torch')} (CUDA {data.get('cuda')}), "
        f"commit {data.get('commit')}, {data.get('date')}; mode {data.get('mode')}, "
        f"plan {data.get('plan')}",
        f"- PYTHONPATH: `{data.get('pythonpath') or '(unset)'}`",
    ]


def cases_section(data: dict) -> list[str]:
    rows = data.get("rows") or []
    timed = [r for r in rows if "device" in r]
    out = ["| case | device | update path | ms/update | updates/s | updates timed |",
           "|---|---|---|---:|---:|---:|"]  # fmt: skip
    for r in timed:
        if "error" in r:
            out.append(f"| {_case(r)} | {r['device']} | {r['path']} | {r['error']} | | |")
            continue
        out.append(f"| {_case(r)} | {r['device']} | {r['path']} | {r['ms']:.3f} | "
                   f"{1e3 / r['ms']:,.0f} | {r.get('updates', '-')} |")  # fmt: skip
    out += [
        "",
        "`auto` against the fastest measured path of each device (target: the device it "
        f"picks is at most {AUTO_TOLERANCE - 1:.0%} slower than the other):",
        "",
        "| case | MFLOP | auto picks | best cpu ms | best cuda ms | picked / best | verdict "
        "| updates/s target (best cuda) |",
        "|---|---:|---|---:|---:|---:|---|---|",
    ]
    for choice in (r for r in rows if "auto" in r):
        out.append(_auto_row(choice, [r for r in timed if _case(r) == _case(choice)]))
    return out


def _case(r: dict) -> str:
    return f"{r['algo']} {'x'.join(map(str, r['hidden']))} b{r['batch']}"


def _best(timed: list[dict], device: str) -> float | None:
    ms = [r["ms"] for r in timed if r["device"] == device and "ms" in r]
    return min(ms) if ms else None


def _auto_row(choice: dict, timed: list[dict]) -> str:
    cpu, cuda = _best(timed, "cpu"), _best(timed, "cuda")
    picked = cpu if choice["auto"] == "cpu" else cuda
    if cpu is None or cuda is None or picked is None:
        ratio, verdict = "-", "not measured (one device only)"
    else:
        best = min(cpu, cuda)
        ratio = f"{picked / best:.2f}"
        verdict = "ok" if picked <= AUTO_TOLERANCE * best else "MISSED"
    target = choice.get("target")
    if target is None:
        goal = "-"
    elif cuda is None:
        goal = f">= {target:,}: not measured"
    else:
        goal = f">= {target:,}: {1e3 / cuda:,.0f} {'met' if 1e3 / cuda >= target else 'NOT met'}"
    return (f"| {_case(choice)} | {choice['mflop']:,.1f} | {choice['auto']} | {_fmt(cpu, '.3f')} "
            f"| {_fmt(cuda, '.3f')} | {ratio} | {verdict} | {goal} |")  # fmt: skip


def scaling_section(data: dict) -> list[str]:
    rows = data.get("rows") or []
    out = [
        "| actors | samples/insert | --learner-device | learner ran on (path) | env steps/s "
        "| updates/s | env steps/s vs 1 actor |",
        "|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['actors']} | {r['spi']:g} | {r['asked']} | {r['error']} | | | |")
            continue
        one = next((b for b in rows if b.get("actors") == 1 and b.get("spi") == r["spi"]
                    and b.get("asked") == "auto" and "error" not in b), None)  # fmt: skip
        vs = f"{r['env_steps_per_s'] / one['env_steps_per_s']:.2f}x" if one else "-"
        out.append(f"| {r['actors']} | {r['spi']:g} | {r['asked']} | {r.get('learner_device')} "
                   f"({r.get('learner_update_path')}) | {r['env_steps_per_s']:,.0f} | "
                   f"{r['updates_per_s']:,.0f} | {vs} |")  # fmt: skip
    return [*out, "", _scaling_target(rows)]


def _scaling_target(rows: list[dict]) -> str:
    ok = [r for r in rows if "error" not in r]
    if not ok:
        return "GPU vs CPU learner at the most actors: not measured."
    most = max(r["actors"] for r in ok)
    spi = rows[0]["spi"]
    gpu = next((r for r in ok if r["actors"] == most and r["asked"] != "auto"), None)
    cpu = next((r for r in ok if r["actors"] == most and r["spi"] == spi and r["asked"] == "auto"
                and r.get("learner_device") == "cpu"), None)  # fmt: skip
    if gpu is None or cpu is None or gpu.get("learner_device", "cpu") == "cpu":
        return (f"GPU vs CPU learner, {most} actors at {spi:g} samples/insert: not measured "
                "(no GPU learner in this check).")  # fmt: skip
    ratio = gpu["env_steps_per_s"] / cpu["env_steps_per_s"]
    verdict = "met" if ratio >= SCALING_TARGET else "NOT met"
    return (f"GPU vs CPU learner, {most} actors at {spi:g} samples/insert: {ratio:.2f}x env "
            f"steps/s (target >= {SCALING_TARGET:g}x: {verdict}).")  # fmt: skip


THROUGHPUT_TARGET = 1_000_000  # env steps/s through the services, 16 cores (issue 30)
RATIO_TARGET = 0.5  # one actor vs its raw vector env (issue 30's 2-core target)


def ratio_cells(results: dict[str, list]) -> list[dict]:
    """bench_throughput.py --json (raw and actor phases) as one row per M: medians."""
    cells = []
    for key, raw in results.items():
        parts = key.split()
        if len(parts) != 4:  # e.g. "cartpole64 services N=14 int8 32": not a raw/actor cell
            continue
        name, phase, _precision, m = parts
        actor = results.get(f"{name} actor int8 {m}")
        if phase != "raw" or not actor:
            continue
        raw_rate = statistics.median(raw)
        actor_rate = statistics.median(v[0] for v in actor)
        phases = {p: statistics.median(v[1][p] for v in actor) for p in actor[0][1]}
        cells.append({"m": int(m), "raw": raw_rate, "actor": actor_rate,
                      "ratio": actor_rate / raw_rate, "phases_us": phases})  # fmt: skip
    return sorted(cells, key=lambda c: c["m"])


def throughput_section(data: dict) -> list[str]:
    ratio = data.get("ratio") or {}
    out = ["One actor (policy in process, pushing to an embedded Redis) vs the raw vector "
           "env, CartPole-v1 64x64 int8, medians of the rounds:", "",
           "| M | raw env steps/s | actor env steps/s | actor/raw | us per vector step "
           "(inference, explore, env, record, push) |", "|---:|---:|---:|---:|---|"]  # fmt: skip
    for c in ratio.get("cells") or []:
        ph = c["phases_us"]
        parts = ", ".join(f"{ph.get(k, 0):.0f}" for k in
                          ("inference", "explore", "env_step", "record", "push"))  # fmt: skip
        out.append(f"| {c['m']} | {c['raw']:,.0f} | {c['actor']:,.0f} | {c['ratio']:.2f}x "
                   f"| {parts} |")  # fmt: skip
    if not ratio.get("cells"):
        out += ["", f"Ratio not measured (exit {ratio.get('code')}):", "", "```",
                ratio.get("out", ""), "```"]  # fmt: skip
    out += ["", "`actorq run`, CartPole-v1 64x64 int8 actors, learner `auto`:", "",
            "| actors | M | samples/insert | learner (path) | env steps/s | updates/s "
            "| inserted | ingested | not ingested |",
            "|---:|---:|---:|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    best = None
    for r in data.get("rows") or []:
        head = f"| {r['actors']} | {r['m']} | {r['spi']:g} |"
        if "error" in r:
            out.append(f"{head} {r['error'][-200:]} | | | | | |")
            continue
        best = max(best or 0.0, r["env_steps_per_s"])
        out.append(f"{head} {r.get('learner_device')} ({r.get('learner_update_path')}) | "
                   f"{r['env_steps_per_s']:,.0f} | {r['updates_per_s']:,.0f} | "
                   f"{_fmt(r.get('transitions_inserted'))} | {_fmt(r.get('transitions_ingested'))} "
                   f"| {_fmt(r.get('transitions_not_ingested'))} |")  # fmt: skip
    if best is None:
        return [*out, "", "Env steps/s through the services: not measured."]
    verdict = "met" if best >= THROUGHPUT_TARGET else "NOT met"
    return [*out, "", f"Best env steps/s through the services: {best:,.0f} (target >= "
            f"{THROUGHPUT_TARGET:,} on 16 cores: {verdict})."]  # fmt: skip


def e2e_section(data: dict) -> list[str]:
    rows = data.get("rows") or []
    out = [
        "| learner (threads) | ran on (path) | precision | env steps/s | updates/s | broadcast "
        "MiB | vs CPU-learner fp32 | int8 / fp32, same learner |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    ok = [r for r in rows if "error" not in r]
    base = next((r for r in ok if r["asked"] == "cpu" and r["precision"] == "fp32"), None)
    for r in rows:
        head = f"| {r['asked']} ({r['threads']}) "
        if "error" in r:
            out.append(f"{head}| {r['error']} | {r['precision']} | | | | | |")
            continue
        fp32 = next((b for b in ok if b["asked"] == r["asked"] and b["threads"] == r["threads"]
                     and b["precision"] == "fp32"), None)  # fmt: skip
        mib = (r.get("broadcast_bytes_total") or 0) / 2**20
        out.append(
            f"{head}| {r.get('learner_device')} ({r.get('learner_update_path')}) | "
            f"{r['precision']} | {r['env_steps_per_s']:,.0f} | {r['updates_per_s']:,.1f} | "
            f"{mib:,.1f} | {_ratio(r, base)} | {_ratio(r, fp32)} |"
        )
    return out


def _ratio(row: dict, base: dict | None) -> str:
    if base is None or not base["env_steps_per_s"]:
        return "-"
    return f"{row['env_steps_per_s'] / base['env_steps_per_s']:.2f}x"


def learner_section(stage: Any) -> list[str]:
    out = [f"_{stage.note}_", ""] if stage.note else []
    for device, result in stage.data.items():
        out += [f"`bench_learner.py` on {device} (exit {result['code']}):", ""]
        out += [*render_bench_output(result["out"]), ""]
    return out


def render_bench_output(text: str) -> list[str]:
    """bench_learner's --json output as a table when it parses (a JSON document, or one
    object per line), its own markdown table lines otherwise, else its tail verbatim."""
    records = _json_records(text)
    if records:
        keys = list(dict.fromkeys(k for r in records for k in r))
        lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        for r in records:
            lines.append("| " + " | ".join(_cell(r.get(k)) for k in keys) + " |")
        return lines
    # its own markdown table, its "# ..." notes as list items (not headings) above it
    notes = [f"- {ln.lstrip('# ')}" for ln in text.splitlines() if ln.startswith("#")]
    table = [ln for ln in text.splitlines() if ln.startswith("|")]
    if table:
        return [*notes, "", *table]
    return ["```", tail(text), "```"]


def _json_records(text: str) -> list[dict]:
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
        lines = []
        for ln in text.splitlines():
            try:
                lines.append(json.loads(ln))
            except ValueError:
                continue
        if lines:
            doc = lines
    if isinstance(doc, dict):
        doc = next((v for v in doc.values() if isinstance(v, list)), [doc])
    if isinstance(doc, list):
        return [r for r in doc if isinstance(r, dict)]
    return []


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value).replace("|", "/")


def pytest_section(data: dict) -> list[str]:
    if not data:
        return []
    return [f"`{data['command']}` (exit {data['code']}):", "", "```", data["out"], "```"]


def service_section(data: dict) -> list[str]:
    if not data:
        return []
    out = [f"`{data['command']}` (exit {data['code']}):", "", *render_bench_output(data["out"])]
    for name in ("ring", "ring_prioritized"):  # ACTORQ_DEVICE_REPLAY_K arms
        ring = data.get(name)
        if ring:
            out += ["", f"`{ring['command']}` (exit {ring['code']}):", "",
                    *render_bench_output(ring["out"])]  # fmt: skip
    return out


SECTIONS = {
    "env": ("Machine", lambda s: env_section(s.data)),
    "throughput": (
        "0. Throughput: one actor vs its env, and many actors through the services",
        lambda s: throughput_section(s.data),
    ),
    "cases": ("1. Learner updates: issue 29's four cases", lambda s: cases_section(s.data)),
    "scaling": ("2. Actor scaling: CartPole 64x64 int8", lambda s: scaling_section(s.data)),
    "e2e": ("3. End to end: DQN 1024^3, 0.125 samples/insert", lambda s: e2e_section(s.data)),
    "learner": ("4. bench_learner.py, cpu and cuda", learner_section),
    "pytest": ("5. The gpu-marked tests", lambda s: pytest_section(s.data)),
    "service": (
        "6. The learner service against its update alone",
        lambda s: service_section(s.data),
    ),
}


def write_report(path: Path, stages: list, args: Any) -> None:
    lines = ["# actorq GPU check", "",
             "Each figure below was measured by this check on the machine named under "
             "Machine; figures from other machines are not comparable.", "",
             "| stage | status | seconds | limit | note |", "|---|---|---:|---:|---|"]  # fmt: skip
    for s in stages:
        note = s.note.splitlines()[-1][:120] if s.note else ""
        lines.append(f"| {s.name} | {s.status} | {s.seconds:.0f} | {s.timeout:.0f} | {note} |")
    for s in stages:
        title, render = SECTIONS[s.name]
        lines += ["", f"## {title}", ""]
        lines += render(s) if s.status != "skipped" or s.data else [f"Skipped: {s.note}"]
        if s.status in ("failed", "timeout") and s.note and s.name == "cases":
            lines += ["", "```", s.note, "```"]
    lines += ["", f"Run folders: `{args.workdir}`; full results beside this file as JSON.", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, path)
    raw = {s.name: {"status": s.status, "seconds": s.seconds, "note": s.note, "data": s.data}
           for s in stages}  # fmt: skip
    path.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=str))
