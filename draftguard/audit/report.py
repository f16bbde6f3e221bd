"""audit.md: the markdown summary of an audit, and the writer of all report files.

The markdown lists what needs someone's attention (failing repos, regressions between transformers
versions, repos that could not be checked) and counts the rest; audit.html (audit/html.py) holds
every finding.

In: an ``AuditResult`` and the transformers versions.
Out: ``render_markdown`` -> audit.md's text; ``write_reports`` writes audit.md and audit.html into the
output folder, each by rename.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from draftguard import __version__
from draftguard.audit.html import render_html
from draftguard.report.comment import esc
from draftguard.audit.record import CLEAN, ERROR, FAILING, RepoRecord, sort_key  # noqa: F401 (RepoRecord: the doctest)

if TYPE_CHECKING:
    from draftguard.audit.record import AuditResult

MD_NAME, HTML_NAME = "audit.md", "audit.html"


def write_reports(out: Path, result: "AuditResult", versions: list[str]) -> None:
    """Write audit.md and audit.html into ``out`` (each by rename, so a reader never sees half)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, text in ((MD_NAME, render_markdown(result, versions)), (HTML_NAME, render_html(result, versions))):
        tmp = out / (name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(out / name)


def _cell(text: str) -> str:
    # Repo ids, keys and messages come from the audited repos: no HTML, links, images, mentions or
    # markers in a report that is published (R2 of issue 25).
    return esc(text)


def _code_cell(text: str) -> str:
    # Inside a code span nothing renders; only a backtick (which would end it) and a pipe or a line
    # break (which would end the table cell) must not pass.
    return str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ").replace("\r", " ")


def render_markdown(result: "AuditResult", versions: list[str]) -> str:
    """The markdown summary.

    Example::

        >>> from draftguard.audit.run import AuditResult
        >>> print(render_markdown(AuditResult(records=[RepoRecord("a/b", "a/b", None)]), ["5.24.0"]).splitlines()[0])
        # draftguard audit
    """
    counts = result.counts()
    records = sorted(result.records, key=sort_key)
    lines = [
        "# draftguard audit",
        "",
        f"{len(records)} repos under transformers {', '.join(versions)} (draftguard {__version__}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}): **{counts[FAILING]} failing**, "
        f"{counts[ERROR]} could not be checked, {counts[CLEAN]} clean.",
        "",
    ]
    for version, why in sorted(result.version_problems.items()):
        lines += [f"> transformers {version} did not run: {why}", ""]
    failing = [r for r in records if r.status == FAILING]
    if failing:
        lines += ["## Failing", "", "| repo | worst | rules | regressions | commit |", "|---|---|---|---|---|"]
        for r in failing:
            rules = ", ".join(r.rules("error")) or ", ".join(e.kind for e in r.errors if e.repo_fault)
            lines.append(f"| {_cell(r.repo)} | {r.worst} | {_cell(rules)} | {len(r.regressions)} | "
                         f"{(r.sha or '')[:12]} |")
        lines.append("")
    regressions = [(r, g) for r in records for g in r.regressions]
    if regressions:
        lines += ["## Regressions between transformers versions", "",
                  "| repo | rule | key | present under | absent under |", "|---|---|---|---|---|"]
        for r, g in regressions:
            lines.append(f"| {_cell(r.repo)} | {g.rule} | `{_code_cell(g.key)}` | {', '.join(g.present)} | "
                         f"{', '.join(g.absent)} |")
        lines.append("")
    errors = [r for r in records if r.status == ERROR]
    if errors:
        lines += ["## Could not be checked", "", "| repo | error | what to do |", "|---|---|---|"]
        for r in errors:
            for e in r.errors:
                lines.append(f"| {_cell(r.repo)} | {e.kind} | {_cell(e.message)} |")
        lines.append("")
    warned = [r for r in records if r.status == CLEAN and r.worst == "warning"]
    if warned:
        lines += ["## Warnings", "", "| repo | rules |", "|---|---|"]
        lines += [f"| {_cell(r.repo)} | {', '.join(r.rules('warning'))} |" for r in warned]
        lines.append("")
    silenced = [(r, line) for r in records for line in r.silenced]
    if silenced:  # what each repo's own .draftguard.yml rules and ignore changed
        lines += ["## Silenced by the repos' own settings", "", "| repo | what |", "|---|---|"]
        lines += [f"| {_cell(r.repo)} | {_cell(line)} |" for r, line in silenced]
        lines.append("")
    unread = [(r, line) for r in records for line in r.notes]
    if unread:  # files beside config.json the per-repo byte budget left unread: their rules did not run
        lines += ["## Not read (over the per-repo byte budget)", "", "| repo | what |", "|---|---|"]
        lines += [f"| {_cell(r.repo)} | {_cell(line)} |" for r, line in unread]
        lines.append("")
    lines += ["Every finding, with its message and fix, is in audit.html; one JSON record per repo in audit.jsonl.",
              ""]
    return "\n".join(lines)
