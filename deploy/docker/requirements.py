"""Print the requirements of actorq's base dependencies plus the named extras, one a line.

    python requirements.py EXTRAS [pyproject.toml]     # EXTRAS: "" | mujoco | mujoco,atari | all

The Dockerfile installs these before actorq itself (--no-deps), so an image carries only
the extras its role needs; scripts/build_images.sh fills the wheelhouse with `all`.
Self-references (`actorq[mujoco,atari]` inside an extra) are expanded here, offline.
"""

from __future__ import annotations

import re
import sys
import tomllib

SELF = re.compile(r"^actorq\[([^\]]*)\]$")


def requirements(project: dict, extras: list[str]) -> list[str]:
    optional = project.get("optional-dependencies", {})
    out = list(project["dependencies"])
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop(0)
        if extra in seen:
            continue
        seen.add(extra)
        if extra not in optional:
            raise SystemExit(
                f"requirements.py: unknown extra {extra!r}; expected some of "
                f"{', '.join(sorted(optional))} (comma-separated, or empty)"
            )
        for req in optional[extra]:
            nested = SELF.match(req.replace(" ", ""))
            if nested:
                pending.extend(e for e in nested.group(1).split(",") if e)
            elif req not in out:
                out.append(req)
    return out


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print(__doc__, file=sys.stderr)
        return 2
    path = argv[1] if len(argv) == 2 else "pyproject.toml"
    with open(path, "rb") as f:
        project = tomllib.load(f)["project"]
    extras = [e.strip() for e in argv[0].split(",") if e.strip()]
    print("\n".join(requirements(project, extras)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
