"""Views of an AcceptanceResult: terminal text, markdown, and a per-position chart (matplotlib).

No torch here: the bot and the Action render results that a GPU worker sent back.

In: an ``AcceptanceResult``.
Out: ``render_text`` writes to a stream; ``render_markdown`` -> str; ``plot_per_position`` writes a
PNG (``plot`` extra). The config view x backend table in both comes from report/acceptance.py, which
the sticky comment shares.

Example::

    >>> from draftguard.runner.result import AcceptanceResult, PromptResult, Verdict
    >>> p = PromptResult.from_counts(0, drafts=4, draft_tokens=12, accepted_tokens=9,
    ...                              accepted_per_position=[4, 3, 2], new_tokens=13)
    >>> r = AcceptanceResult.from_prompts([p], wall_seconds=1.0, verdict=Verdict("pass", "τ 3.25 is fine"))
    >>> print(render_markdown(r).splitlines()[0])
    ### ✅ Acceptance test: pass
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

from draftguard.report.acceptance import diagnosis_table, number_text
from draftguard.runner.differential import render_side_by_side
from draftguard.runner.result import FAIL, PASS, AcceptanceResult
from draftguard.errors import install_hint
from draftguard.snapshot import BadInput

_ICON = {PASS: "✅", FAIL: "❌"}


def _bar(rate: float, width: int = 20) -> str:
    full = int(round(max(0.0, min(1.0, rate)) * width))
    return "█" * full + "·" * (width - full)


def _summary_rows(r: AcceptanceResult) -> list[tuple[str, str]]:
    t = r.thresholds
    rows = [
        ("mean acceptance length τ", number_text(r.mean_acceptance_length)),
        ("draft acceptance rate", number_text(r.draft_acceptance_rate, 3)),
        ("drafts / draft tokens / accepted", f"{r.drafts} / {r.draft_tokens} / {r.accepted_tokens}"),
        ("prompts", str(len(r.per_prompt)) + (" (stopped early: verdict settled)" if r.run.get("stopped_early") else "")),
        ("tokens per second", f"{r.tokens_per_second:.1f}"),
        ("wall time", f"{r.wall_seconds:.2f} s"),
    ]
    if t.bar is not None:
        rows.append(("bar", number_text(t.bar) + (f" ({t.tolerance:g} x baseline {number_text(t.baseline_mean_acceptance_length)})"
                                         if t.baseline_mean_acceptance_length is not None else "")))
    for key in ("backend", "target", "drafter", "config_view", "model_runner", "device", "block_size"):
        if key in r.run:
            rows.append((key.replace("_", " "), str(r.run[key])))
    return rows


def render_text(result: AcceptanceResult, out: IO[str]) -> None:
    """The result for a terminal (rich; plain when not a TTY)."""
    from rich.console import Console  # rich: ~20 ms to import; only drawn output pays it
    from rich.markup import escape
    from rich.table import Table

    console = Console(file=out, highlight=False, soft_wrap=True)
    status = result.verdict.status
    style = {PASS: "bold green", FAIL: "bold red"}.get(status, "bold yellow")
    table_lines = diagnosis_table(result.views, result.diagnosis, markdown=False)
    # With a diagnosis, its one line below carries the reason; the header says only the verdict.
    said = "" if table_lines else f" — {escape(result.verdict.reason)}"
    console.print(f"[{style}]acceptance test: {status}[/]{said}")
    if table_lines:
        console.print("\n".join(table_lines) + "\n", markup=False)
    for note in result.run.get("notes") or []:  # what could not run here, said plainly
        console.print(f"note: {note}\n", markup=False)
    table = Table(show_header=False, box=None, pad_edge=False)
    for k, v in _summary_rows(result):
        table.add_row(k, v)
    console.print(table)
    if result.per_position_acceptance:
        console.print("per-position acceptance")
        for i, rate in enumerate(result.per_position_acceptance):
            console.print(f"  {i + 1:>3}  {_bar(rate)}  {rate:.3f}")
    if result.run.get("differential"):  # --backend both: vLLM beside the reference
        console.print(render_side_by_side(result.run["differential"]), markup=False)


def render_markdown(result: AcceptanceResult) -> str:
    """The result as markdown: verdict, totals, per-position bars, per-prompt τ (collapsed)."""
    status = result.verdict.status
    table_lines = diagnosis_table(result.views, result.diagnosis)
    lines = [f"### {_ICON.get(status, '⚠️')} Acceptance test: {status}", ""]
    lines += [*table_lines, ""] if table_lines else [result.verdict.reason, ""]
    lines += [f"> **note:** {note}" for note in result.run.get("notes") or []] + ([""] if result.run.get("notes") else [])
    lines += ["| | |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in _summary_rows(result)]
    if result.per_position_acceptance:
        lines += ["", "| position | acceptance | |", "|---:|---:|---|"]
        lines += [f"| {i + 1} | {rate:.3f} | `{_bar(rate)}` |" for i, rate in enumerate(result.per_position_acceptance)]
    if result.run.get("differential"):  # --backend both: vLLM beside the reference
        lines += ["", render_side_by_side(result.run["differential"], markdown=True)]
    if result.per_prompt:
        lines += ["", "<details><summary>per-prompt τ</summary>", "", "| prompt | τ | drafts | new tokens |",
                  "|---|---:|---:|---:|"]
        lines += [f"| {p.label or p.index} | {number_text(p.mean_acceptance_length)} | {p.drafts} | {p.new_tokens} |"
                  for p in result.per_prompt]
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"


def plot_per_position(result: AcceptanceResult, path: str | Path) -> None:
    """Write a bar chart of the per-position acceptance rates to ``path`` (PNG). Needs the ``plot``
    extra (matplotlib)."""
    try:
        import matplotlib  # matplotlib: the plot extra only

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # matplotlib: the plot extra only
    except ImportError:
        raise BadInput(f"--plot needs matplotlib: {install_hint('plot')}") from None
    rates = result.per_position_acceptance
    fig, ax = plt.subplots(figsize=(max(4.0, 0.5 * len(rates) + 2), 3.2))
    ax.bar(range(1, len(rates) + 1), rates, color="#3b7dd8")
    ax.set_ylim(0, 1)
    ax.set_xticks(range(1, len(rates) + 1))  # positions are whole numbers, not 0.5 steps
    ax.set_xlabel("drafted position")
    ax.set_ylabel("acceptance rate")
    ax.set_title(f"τ {number_text(result.mean_acceptance_length)} — {result.verdict.status}")
    fig.tight_layout()
    fig.savefig(str(path), dpi=100)
    plt.close(fig)
