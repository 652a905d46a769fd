"""Atomic checkpoints: tensors in checkpoint.pt, human-readable facts in checkpoint.json.

Written to temporary files and moved into place with os.replace, so a crash mid-write
never leaves a half-written checkpoint. Loaded with torch.load(weights_only=True): only
tensors and plain containers, never arbitrary pickled objects.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FILE = "checkpoint.pt"
META_FILE = "checkpoint.json"


def checkpoint_meta(settings: Any, spec: Any, algo_config: Any, updates: int, version: int) -> dict:
    """checkpoint.json's common fields; `actorq ptq` rebuilds the learner from algo_config
    (obs_norm, D4PG atoms, ...)."""
    return {
        "updates": updates,
        "version": version,
        "env_id": settings.env_id,
        "algo": settings.algo,
        "hidden": list(spec.hidden),
        "precision": settings.precision,
        "algo_config": dataclasses.asdict(algo_config),
    }


class Checkpointer:
    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)

    @property
    def path(self) -> Path:
        return self.dir / CHECKPOINT_FILE

    def save(self, state: dict[str, Any], meta: dict[str, Any]) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / (CHECKPOINT_FILE + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)
        meta_tmp = self.dir / (META_FILE + ".tmp")
        meta_tmp.write_text(json.dumps({**meta, "saved_unix": time.time()}, indent=2))
        os.replace(meta_tmp, self.dir / META_FILE)
        return self.path

    def load(self) -> dict[str, Any] | None:
        """The saved state, or None when there is no checkpoint yet."""
        if not self.path.exists():
            return None
        return torch.load(self.path, map_location="cpu", weights_only=True)
