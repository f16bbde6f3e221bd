"""Releases: the package version, CHANGELOG.md's newest entry and the version every example pins
agree, and every `uses:` a reader may copy from the docs is pinned to a commit."""

from __future__ import annotations

import re
from pathlib import Path

import draftguard

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "runner" / "README.md"]
WORKFLOWS = sorted((ROOT / "examples" / "workflows").glob("*.yml"))
USES = re.compile(r"^\s*-?\s*uses:\s*(\S+)(.*)$")


def uses_lines(path: Path) -> list[str]:
    """The `uses:` lines a reader copies: every one in a workflow, those in a doc's code blocks."""
    lines, in_code = [], path.suffix != ".md"
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif in_code and USES.match(line) and not line.strip().startswith("#"):
            lines.append(line)
    return lines


def test_the_changelog_has_an_entry_for_this_version():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    released = [h for h in headings if h != "Unreleased"]
    assert released[0] == draftguard.__version__


def test_every_uses_in_the_docs_is_pinned_to_a_commit_with_its_version():
    found = 0
    for path in DOCS + WORKFLOWS:
        for line in uses_lines(path):
            found += 1
            ref, comment = USES.match(line).groups()
            name, _, sha = ref.partition("@")
            assert re.fullmatch(r"[0-9a-f]{40}", sha), (path.name, line)
            assert comment.strip().startswith("# v"), (path.name, line)
    assert found >= 5  # docs/action.md's example and the shipped workflows are really read


def test_the_examples_pin_this_release_of_draftguard():
    tag = f"v{draftguard.__version__}"
    major = "v" + draftguard.__version__.split(".")[0]  # the moving tag, where the docs explain it
    mentions = []
    for path in DOCS + WORKFLOWS:
        for line in path.read_text().splitlines():
            if "OWNER/draftguard@" in line and "<sha>" not in line and "@0000..." not in line:
                mentions.append(line)
                assert re.search(r"OWNER/draftguard@([0-9A-Za-z.]+)", line).group(1) in (tag, major, "0" * 40), line
                if "@" + "0" * 40 in line:
                    assert f"# {tag}" in line, line
    assert len(mentions) >= 4
