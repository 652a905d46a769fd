"""docs/configuration.md is generated from the settings dataclasses: it must be current."""

from __future__ import annotations

import importlib.util
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
