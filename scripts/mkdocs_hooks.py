"""mkdocs hook: include the repository-root pages (README, OPERATIONS, ARCHITECTURE,
BENCHMARKS) in the site and keep every link checkable under `mkdocs build --strict`.

A page under docs/ whose markdown is one line `<!-- root-page: NAME.md -->` (plus a
sentence for readers on the forge) is replaced by the root file NAME.md. Links are
rewritten so they resolve inside the site: root files link `docs/X` (-> `X`) and each
other (`OPERATIONS.md` -> `operations.md`); docs/ pages link `../OPERATIONS.md` (->
`operations.md`). A link to a file outside the site (source code, proto files) becomes
its text, since the site cannot serve it; mkdocs then checks every link that is left.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT_PAGES = {
    "README.md": "index.md",
    "OPERATIONS.md": "operations.md",
    "ARCHITECTURE.md": "architecture.md",
    "BENCHMARKS.md": "benchmarks-full.md",
}
MARKER = re.compile(r"<!-- root-page: (\S+) -->")
LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def _rewrite(markdown: str, from_root: bool) -> str:
    def fix(match: re.Match) -> str:
        bang, text, target = match.groups()
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            return match.group(0)  # URLs and anchors stay
        path, _, anchor = target.partition("#")
        anchor = f"#{anchor}" if anchor else ""
        if not from_root:
            if not path.startswith("../"):
                return match.group(0)  # a page of the site
            path = path[3:]
        if path in ROOT_PAGES:
            return f"{bang}[{text}]({ROOT_PAGES[path]}{anchor})"
        if path.startswith("docs/"):
            return f"{bang}[{text}]({path[5:]}{anchor})"
        return text if text.startswith("`") else f"`{text}`" if text == path else text

    return LINK.sub(fix, markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:
    marker = MARKER.search(markdown)
    if marker:
        root = Path(config["docs_dir"]).parent / marker.group(1)
        return _rewrite(root.read_text(), from_root=True)
    return _rewrite(markdown, from_root=False)
