"""The parts of an acceptance result that both its renderers show: the config view x backend table
with the named cause, and how a figure is written.

In: an acceptance result's JSON blocks (``views``, ``diagnosis``) as plain mappings, so the sticky
comment can render what a GPU worker sent back without the runner.
Out: ``diagnosis_table`` -> table lines (markdown or plain text); ``number_text`` -> a figure as text.
The runner's renderers (runner/render.py) and the sticky comment (report/comment.py) both use them;
nothing here imports the runner.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping


def number_text(value: Any, digits: int = 2) -> str:
    """A figure with ``digits`` decimals, or "n/a" when there is none.

    Example::

        >>> number_text(3.14159), number_text("4", 1), number_text(None)
        ('3.14', '4.0', 'n/a')
    """
    return "n/a" if value is None else f"{float(value):.{digits}f}"


def _cells(views: Mapping[str, Any]) -> tuple[list[str], dict[tuple[str, str], Mapping[str, Any]]]:
    """Backends (columns) and cells keyed by (view, backend) from a result's ``views`` block."""
    cells: dict[tuple[str, str], Mapping[str, Any]] = {}
    for view, block in views.items():
        if isinstance(block, Mapping) and "mean_acceptance_length" in block:
            cells[(view, str(block.get("backend") or "reference"))] = block
        elif isinstance(block, Mapping):
            for backend, cell in block.items():
                cells[(view, backend)] = cell
    backends = sorted({b for _, b in cells}, key=lambda b: (b != "reference", b))
    return backends, cells


def diagnosis_table(views: Mapping[str, Any] | None, diagnosis: Mapping[str, Any] | None,
                    markdown: bool = True, escape: Callable[[str], str] = str) -> list[str]:
    """The config view x backend table (τ, and the first-position rate) and the cause in one line, from
    a result's JSON ``views`` and ``diagnosis``; no lines when neither is there. ``escape`` is applied
    to the texts that come from the drafter (the reason, which quotes config keys, and the class name).

    Example::

        >>> views = {"raw": {"mean_acceptance_length": 4.0, "first_position": {"rate": 1.0}},
        ...          "resolved": {"mean_acceptance_length": 1.19, "first_position": {"rate": 0.17}}}
        >>> diag = {"cause": "config-rewrite", "reason": "τ 4.00 as written, 1.19 as Qwen3Config resolves it",
        ...         "cells": {"raw/reference": "ok", "resolved/reference": "low"}, "config_class": "Qwen3Config"}
        >>> print("\\n".join(diagnosis_table(views, diag)))
        | config view | reference |
        |---|---:|
        | raw (as written) | τ 4.00 · first 1.00 |
        | resolved (as Qwen3Config resolves it) | τ 1.19 · first 0.17 ⚠️ |
        <BLANKLINE>
        **cause: config-rewrite** — τ 4.00 as written, 1.19 as Qwen3Config resolves it
    """
    lines: list[str] = []
    diagnosis = diagnosis or {}
    states = diagnosis.get("cells") or {}
    if views:
        backends, cells = _cells(views)
        klass = escape(str(diagnosis.get("config_class") or "the config class"))
        label = {"raw": "raw (as written)", "resolved": f"resolved (as {klass} resolves it)"}
        # --model-runner both: one row per vLLM model runner, with the aux ids it feeds the drafter.
        runners = diagnosis.get("runners") or {}
        for view, name in (("v1", "V1"), ("v2", "V2")):
            ids = (runners.get(view) or {}).get("aux_ids")
            label[view] = f"{name} model runner" + (f" (aux ids {ids})" if ids is not None else "")
        order = [v for v in ("raw", "resolved", "v1", "v2") if any(k[0] == v for k in cells)]
        rows = []
        for view in order:
            row = []
            for backend in backends:
                cell = cells.get((view, backend))
                if cell is None:
                    row.append("")
                    continue
                first = (cell.get("first_position") or {}).get("rate")
                text = f"τ {number_text(cell.get('mean_acceptance_length'))} · first {number_text(first)}"
                if states.get(f"{view}/{backend}") == "low":
                    text += " ⚠️" if markdown else " (low)"
                row.append(text)
            rows.append((label[view], row))
        if markdown:
            head = "model runner" if set(order) <= {"v1", "v2"} else "config view"
            lines += [f"| {head} | " + " | ".join(backends) + " |", "|---|" + "---:|" * len(backends)]
            lines += [f"| {name} | " + " | ".join(row) + " |" for name, row in rows]
        else:
            width = max(len(name) for name, _ in rows)
            cols = [max(len(b), *(len(r[i]) for _, r in rows)) for i, b in enumerate(backends)]
            lines.append(" " * width + "  " + "  ".join(b.ljust(w) for b, w in zip(backends, cols)))
            lines += [name.ljust(width) + "  " + "  ".join(c.ljust(w) for c, w in zip(row, cols)) for name, row in rows]
    if diagnosis.get("reason"):
        cause = diagnosis.get("cause") or "undecided"
        if lines:
            lines.append("")
        reason = escape(str(diagnosis["reason"]))
        lines.append(f"**cause: {cause}** — {reason}" if markdown else f"cause: {cause} — {reason}")
    return lines
