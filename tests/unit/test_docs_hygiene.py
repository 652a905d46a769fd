"""The documentation stays a results record: no machine paths, BENCHMARKS.md within its
size, every anchor link resolving to a heading, every BENCHMARKS.md section indexed in
docs/benchmarks.md, and no narration of how the work was organised (sessions, branches,
borrowed machines) in the pages that describe the project. Anchors follow GitHub's rule,
which headings are chosen to share with mkdocs (no runs of punctuation or hyphens, on which
the two rules differ)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_BENCHMARK_LINES = 1500
ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/(?:root|home|tmp|work)/")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
NARRATION = re.compile(
    r"\bsessions? \d+|\bthis session\b|\bsitting\b|\bborrowed machine\b|\blent machine\b"
    r"|\bbranch `|\bon this branch\b",
    re.IGNORECASE,
)


def doc_files() -> list[Path]:
    names = ("README.md", "ARCHITECTURE.md", "OPERATIONS.md", "BENCHMARKS.md")
    return [ROOT / name for name in names] + sorted((ROOT / "docs").rglob("*.md"))


def project_pages() -> list[Path]:
    """The pages that describe the project (BENCHMARKS.md, a dated record, is left out)."""
    names = ("README.md", "ARCHITECTURE.md", "OPERATIONS.md")
    return [ROOT / name for name in names] + sorted((ROOT / "docs").glob("*.md"))


def github_anchor(text: str) -> str:
    """GitHub's heading id: lowercase, drop every character that is not a letter, digit,
    space, hyphen or underscore, spaces to hyphens; hyphens are not collapsed."""
    text = re.sub(r"`([^`]*)`", r"\1", text).strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def headings(markdown: str) -> list[tuple[int, str]]:
    """(level, text) of each ATX heading outside fenced code blocks."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            found.append((len(match.group(1)), match.group(2)))
    return found


def anchors(markdown: str) -> set[str]:
    """Every heading's id, with -1, -2, ... for repeated ones as GitHub numbers them."""
    seen: dict[str, int] = {}
    result = set()
    for _, text in headings(markdown):
        base = github_anchor(text)
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def broken_anchor_links(source: Path, markdown: str) -> list[str]:
    """Relative links with an anchor (or same-page anchors) whose heading does not exist."""
    broken = []
    for target in LINK.findall(markdown):
        if re.match(r"^[a-z]+:", target) or "#" not in target:
            continue
        path, _, anchor = target.partition("#")
        file = source if not path else (source.parent / path).resolve()
        if file.suffix != ".md" or not file.is_file():
            continue
        if anchor not in anchors(file.read_text()):
            broken.append(target)
    return broken


def absolute_paths(markdown: str) -> list[str]:
    return [line.strip() for line in markdown.splitlines() if ABSOLUTE_PATH.search(line)]


def narration(markdown: str) -> list[str]:
    """Lines that say how the work was organised rather than what the project does."""
    return [line.strip() for line in markdown.splitlines() if NARRATION.search(line)]


def unindexed_sections(benchmarks: str, index: str) -> list[str]:
    targets = [t for t in LINK.findall(index) if "BENCHMARKS.md#" in t]
    linked = {target.partition("#")[2] for target in targets}
    sections = [github_anchor(text) for level, text in headings(benchmarks) if level >= 2]
    return [anchor for anchor in sections if anchor not in linked]


def test_github_anchor_rule():
    assert github_anchor("10h. CartPole-v1 DQN, 5 seeds") == "10h-cartpole-v1-dqn-5-seeds"
    assert github_anchor("a -- b") == "a----b"
    assert github_anchor("Codecs: `zstd` level 1 (x)") == "codecs-zstd-level-1-x"
    assert github_anchor("Sum tree 2^20, K/8") == "sum-tree-220-k8"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n### A") == {"a", "a-1", "a-2"}


def test_checks_can_fail(tmp_path):
    assert absolute_paths("see /tmp/run and /home/x/y") and not absolute_paths("runs/x a/tmp/b")
    (tmp_path / "other.md").write_text("# Other page\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n[ok](#title) [bad](#missing) [url](https://x.org/#y)\n"
        "[there](other.md#other-page) [not there](other.md#title)\n"
    )
    assert broken_anchor_links(page, page.read_text()) == ["#missing", "other.md#title"]
    assert unindexed_sections("## 1. A\n### 1a. B\n", "[A](../BENCHMARKS.md#1-a)") == ["1a-b"]
    narrated = "Session 33 (branch `actor-fast`) compiled the forward.\nSince c9fce1c: 0.54x."
    assert narration(narrated) == ["Session 33 (branch `actor-fast`) compiled the forward."]
    assert narration("one line per session (`git describe`), 0.60x at M = 32") == []


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_absolute_machine_paths(path):
    assert absolute_paths(path.read_text()) == []


@pytest.mark.parametrize("path", project_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_narration_of_the_work(path):
    assert narration(path.read_text()) == []


def test_benchmarks_length():
    lines = (ROOT / "BENCHMARKS.md").read_text().count("\n")
    assert lines <= MAX_BENCHMARK_LINES, f"BENCHMARKS.md has {lines} lines"


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_anchor_links_resolve(path):
    assert broken_anchor_links(path, path.read_text()) == [], path.relative_to(ROOT)


def test_every_benchmark_section_is_indexed():
    benchmarks = (ROOT / "BENCHMARKS.md").read_text()
    index = (ROOT / "docs" / "benchmarks.md").read_text()
    assert unindexed_sections(benchmarks, index) == []
