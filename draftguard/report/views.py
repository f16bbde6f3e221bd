"""Helpers shared by every view of a Report, so a finding reads the same everywhere."""

from __future__ import annotations

from draftguard.check.findings import Finding, LayerAttention
from draftguard.check.fidelity import show


def location(finding: Finding) -> str:
    return f"{finding.file}:{finding.line}" if finding.line else finding.file


def change(finding: Finding) -> str:
    return f"{show(finding.raw)} -> {show(finding.resolved)}"


def attention_runs(layers: list[LayerAttention]) -> list[tuple[str, str, str]]:
    """Consecutive layers with the same (declared, effective) pair, as (layers, declared, effective)."""
    runs: list[tuple[int, int, str, str]] = []
    for layer in layers:
        if runs and runs[-1][2:] == (layer.declared, layer.effective) and runs[-1][1] == layer.index - 1:
            start, _, d, e = runs[-1]
            runs[-1] = (start, layer.index, d, e)
        else:
            runs.append((layer.index, layer.index, layer.declared, layer.effective))
    return [(str(a) if a == b else f"{a}-{b}", d, e) for a, b, d, e in runs]


def summary_line(counts: dict[str, int], targets: int, errors: int) -> str:
    parts = [f"{counts['error']} error(s)", f"{counts['warning']} warning(s)", f"{counts['info']} info"]
    text = ", ".join(parts) + f" in {targets} config(s)"
    if errors:
        text += f"; {errors} target(s) could not be checked"
    return text
