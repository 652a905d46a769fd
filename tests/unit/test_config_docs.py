"""docs/configuration.md is generated from the settings dataclasses: it must be current."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", ROOT / "scripts/gen_config_docs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_page_equals_a_fresh_generation():
    fresh = _generator().generate()
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == fresh, "docs/configuration.md is stale: run `make config-docs`"


def test_page_names_every_field_with_its_variable_and_comment():
    from actorq.algos.dqn import DQNConfig
    from actorq.config import ActorSettings

    page = _generator().generate()
    for field in ActorSettings.__dataclass_fields__:
        assert f"`ACTORQ_{field.upper()}`" in page
    assert "| `ACTORQ_DQN_LR` | `float` | `0.0025` | Adam learning rate" in page
    assert DQNConfig().lr == 0.0025
    # field comments and docstrings reach the page: the push batch size is documented there
    assert "| `ACTORQ_PUSH_EVERY` | `int` | `0` | Transitions per replay batch" in page
    assert "| `--hidden` | `64,64` |" in page


# Literals that name no variable of their own: prefixes matched with startswith.
NOT_VARIABLES = {"ACTORQ_SPARSITY"}  # launch.plan passes every ACTORQ_SPARSITY* through


def variables_in_source(roots: list[Path]) -> set[str]:
    """Every ACTORQ_* name written as a literal in the code that services run."""
    found: set[str] = set()
    for root in roots:
        for path in root.rglob("*.py"):
            if "testing" in path.parts or "v1" in path.parts:
                continue
            found.update(re.findall(r"ACTORQ_[A-Z0-9_]+", path.read_text()))
    return found - NOT_VARIABLES


def missing_from(page: str, names: set[str]) -> set[str]:
    """Names the page does not document; a prefix (ending in _) needs one variable."""
    documented = set(re.findall(r"`(ACTORQ_[A-Z0-9_]+)`", page))
    return {
        n
        for n in names
        if not (any(d.startswith(n) for d in documented) if n.endswith("_") else n in documented)
    }


def test_every_variable_the_code_reads_is_documented():
    names = variables_in_source([ROOT / "actorq", ROOT / "services"])
    assert "ACTORQ_LAUNCH_MODE" in names and "ACTORQ_DQN_" in names  # the scan sees them
    assert missing_from(_generator().generate(), names) == set()


def test_missing_from_sees_an_undocumented_variable_and_prefix():
    page = "| `ACTORQ_SEED` | and `ACTORQ_TLS_CERT` |"
    names = {"ACTORQ_SEED", "ACTORQ_TLS_", "ACTORQ_NEW_KNOB", "ACTORQ_FOO_"}
    assert missing_from(page, names) == {"ACTORQ_NEW_KNOB", "ACTORQ_FOO_"}
