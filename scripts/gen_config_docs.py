"""Write docs/configuration.md from the code: `actorq run`'s flags (its argparse parser),
every service's settings dataclass (actorq/config.py) and every algorithm's config
dataclass (actorq/algos/factory.py), with each field's environment variable, type,
default and the comment or docstring beside it in the source. Generated, so it cannot
drift: tests/unit/test_config_docs.py fails when the committed page differs.

    .venv/bin/python scripts/gen_config_docs.py [--check]      # or: make config-docs
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import textwrap
import tokenize
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"

SERVICE_CLASSES = ("CommonSettings", "QuantizerSettings", "LearnerSettings", "ActorSettings")
EXTRA_CLASSES = (("actorq.sparse.config", "SparseTrainingConfig", "ACTORQ_"),)


def _field_docs(cls: type) -> dict[str, str]:
    """field -> its comment (trailing, or the comment lines right above) and docstring,
    from the class body as written."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for i, node in enumerate(body):
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        parts = []
        above = node.lineno - 1
        block: list[str] = []
        while above >= 1 and lines[above - 1].strip().startswith("#"):
            block.insert(0, comments.get(above, ""))
            above -= 1
        parts += block
        trailing = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
        parts += trailing
        after = body[i + 1] if i + 1 < len(body) else None
        if (
            isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            parts.append(" ".join(after.value.value.split()))
        docs[node.target.id] = " ".join(p for p in parts if p)
    return docs


def _docs_in_mro(cls: type) -> dict[str, str]:
    """Each field's doc from the class that defines (or last redefines) it."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass) and klass is not object:
            docs.update({k: v for k, v in _field_docs(klass).items() if v or k not in docs})
    return docs


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
        return ",".join(map(str, value)) if value else '""'
    if isinstance(value, str):
        return f'"{value}"' if value == "" else value
    return repr(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _table(cls: type, prefix: str, own_only: bool) -> list[str]:
    docs = _docs_in_mro(cls)
    own = set(_field_docs(cls))
    rows = ["| variable | type | default | meaning |", "|---|---|---|---|"]
    hints = {f.name: f.type for f in dataclasses.fields(cls)}
    for field in dataclasses.fields(cls):
        if own_only and field.name not in own:
            continue
        kind = hints[field.name] if isinstance(hints[field.name], str) else field.type.__name__
        rows.append(
            f"| `{prefix}{field.name.upper()}` | `{_cell(str(kind))}` | "
            f"`{_cell(_default(field))}` | {_cell(docs.get(field.name, ''))} |"
        )
    return rows


def _run_flags() -> list[str]:
    from actorq.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    run = sub.choices["run"]
    rows = ["| flag | default | meaning |", "|---|---|---|"]
    for action in run._actions:
        if not action.option_strings or action.dest == "help":
            continue
        flag = max(action.option_strings, key=len)
        default = "" if action.default in (None, argparse.SUPPRESS) else action.default
        if isinstance(default, tuple):
            default = ",".join(map(str, default))
        default = str(default)
        helptext = (action.help or "").replace("%%", "%").replace("%(default)s", default)
        rows.append(f"| `{flag}` | `{_cell(default) or '-'}` | {_cell(helptext)} |")
    return rows


def _other_variables() -> list[str]:
    """Variables read outside the settings dataclasses, with defaults taken from the code
    that reads them (tests/unit/test_config_docs.py fails on one missing here)."""
    from actorq.energy import DEFAULT_GRID_G_PER_KWH, DEFAULT_WATTS_PER_CORE
    from actorq.launch.zygote import LAUNCH_MODE_VAR
    from actorq.quant.conv import CONV_ENGINE_ENV, DEFAULT_CONV_ENGINE

    rows = [
        (
            LAUNCH_MODE_VAR,
            "fork",
            "`actorq run` and the supervisor: `fork` starts each "
            "service from a zygote that has imported torch once; `spawn` gives each service its "
            "own interpreter (`actorq/launch/zygote.py`)",
        ),
        (
            CONV_ENGINE_ENV,
            DEFAULT_CONV_ENGINE,
            "torch's quantized engine the int8 convs of "
            "pixel policies are packed under (`actorq/quant/conv.py`)",
        ),
        (
            "ACTORQ_WATTS_PER_CORE",
            DEFAULT_WATTS_PER_CORE,
            "power model for the energy "
            "estimate when no RAPL counter is readable (`actorq/energy.py`)",
        ),
        (
            "ACTORQ_GRID_G_PER_KWH",
            DEFAULT_GRID_G_PER_KWH,
            "grid carbon intensity, grams "
            "CO2e per kWh, for the carbon estimate (`actorq/energy.py`)",
        ),
        (
            "ACTORQ_PIN_LEARNER",
            "auto",
            "`actorq run --pin-learner`'s default: `on` gives a CPU learner cores of its "
            "own, `auto` too but shares them while the learner waits for data, `off` leaves "
            "every process to the scheduler (`actorq/launch/cores.py`)",
        ),
        (
            "ACTORQ_INGEST_CORES",
            "-",
            "the cores a learner's ingest process (ACTORQ_INGEST=process) runs on, e.g. "
            "`0-3,6`; set by `actorq run` where it pins the learner: the other services' "
            "cores (unset: the learner's own; `actorq/learner/ingest_process.py`)",
        ),
        (
            "ACTORQ_RUN_DIR",
            "-",
            "set by `actorq run` for its services (not read as a "
            "setting): lets operators find a run's processes",
        ),
    ]
    out = ["| variable | default | meaning |", "|---|---|---|"]
    out += [f"| `{name}` | `{default}` | {_cell(text)} |" for name, default, text in rows]
    return out


def generate() -> str:
    import importlib

    from actorq import config
    from actorq.algos.factory import _REGISTRY, config_prefix

    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/gen_config_docs.py from the code; do not edit by hand:",
        "     run `make config-docs`. tests/unit/test_config_docs.py checks it is current. -->",
        "",
        "Every service is configured only by `ACTORQ_*` environment variables: a field",
        "`foo_bar` of a settings dataclass is set by `ACTORQ_FOO_BAR` (`actorq/config.py`).",
        "Algorithm hyperparameters are fields of each algorithm's config dataclass, set by",
        "`ACTORQ_<ALGO>_<FIELD>`, e.g. `ACTORQ_DQN_LR=1e-3`. `actorq run` passes its flags",
        "to the services as these variables; any variable already set in the environment",
        "reaches them too.",
        "",
        "The section [Other variables](#other-variables) lists the few read outside these",
        "classes.",
        "",
        "## `actorq run` flags",
        "",
        *_run_flags(),
    ]
    for name in SERVICE_CLASSES:
        cls = getattr(config, name)
        title = (cls.__doc__ or "").strip().splitlines()[0]
        shared = "" if name == "CommonSettings" else " Also reads every `CommonSettings` field."
        out += [
            "",
            f"## `{name}`",
            "",
            f"{title}{shared}",
            "",
            *_table(cls, "ACTORQ_", name != "CommonSettings"),
        ]
    for module, name, prefix in EXTRA_CLASSES:
        cls = getattr(importlib.import_module(module), name)
        title = (cls.__doc__ or "").strip().splitlines()[0]
        out += ["", f"## `{name}` ({module})", "", title, "", *_table(cls, prefix, False)]
    out += ["", "## Other variables", "", *_other_variables()]
    out += ["", "## Algorithms"]
    for algo, (cls, _) in _REGISTRY.items():
        title = (cls.__doc__ or "").strip().splitlines()[0]
        out += [
            "",
            f"### `{algo}`: `{cls.__name__}`",
            "",
            title,
            "",
            *_table(cls, config_prefix(algo), False),
        ]
    return "\n".join(out) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the page is stale")
    args = parser.parse_args()
    page = generate()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != page:
            print(f"{PAGE} is stale: run `make config-docs` and commit it")
            return 1
        print(f"{PAGE.name} is up to date")
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
