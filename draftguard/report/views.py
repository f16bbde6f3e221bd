"""Helpers shared by every view of a Report, so a finding reads the same everywhere."""

from __future__ import annotations

from draftguard.check.findings import Finding, attention_runs, show  # noqa: F401 (attention_runs: views' public name)


def location(finding: Finding) -> str:
    return f"{finding.file}:{finding.line}" if finding.line else finding.file


def change(finding: Finding) -> str:
    return f"{show(finding.raw)} -> {show(finding.resolved)}"


def summary_line(counts: dict[str, int], targets: int, errors: int) -> str:
    parts = [f"{counts['error']} error(s)", f"{counts['warning']} warning(s)", f"{counts['info']} info"]
    text = ", ".join(parts) + f" in {targets} config(s)"
    if errors:
        text += f"; {errors} target(s) could not be checked"
    return text
