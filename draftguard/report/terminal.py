"""The text view for people at a terminal (rich).

In: a ``Report`` and a text stream.
Out: ``render_text`` writes each target's findings, its attention table when layers differ, the
version matrix and a summary line to the stream; returns None.
"""

from __future__ import annotations

from typing import TextIO

from draftguard.check.findings import RULES, Report, attention_runs
from draftguard.report.views import FindingGroup, change, display_items, location, summary_line

_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def render_text(report: Report, file: TextIO) -> None:
    from rich.console import Console  # rich: ~20 ms to import; only drawn output pays it
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text

    console = Console(file=file, highlight=False)
    for e in report.errors:
        console.print(Text.assemble(("cannot check ", "bold red"), e.message))
    for t in report.targets:
        findings = [f for f in report.findings if f.file == t.file]
        klass = t.config_class or "no config class"
        console.print(Text.assemble((t.file, "bold"), f"  {klass}, model_type {t.model_type!r}"))
        if not findings:
            console.print("  no differences between config.json and what the model code reads")
        for f in display_items(findings):
            if isinstance(f, FindingGroup):
                console.print(Text.assemble(
                    "  ", (f"{f.severity.value:<7}", _STYLE[f.severity.value]), " ",
                    (f"{f.rule} {RULES[f.rule].name}", "bold"), "  ", ", ".join(f.keys),
                ))
                console.print(Padding(Text(f.message, style="dim"), (0, 0, 0, 10)))
                continue
            console.print(Text.assemble(
                "  ", (f"{f.severity.value:<7}", _STYLE[f.severity.value]), " ",
                (f"{f.rule} {RULES[f.rule].name}", "bold"),
            ))
            console.print(Padding(Text.assemble((f.key, "bold"), f"  at {location(f)}"), (0, 0, 0, 10)))
            console.print(Padding(Text(f"file -> model code: {change(f)}", style="dim"), (0, 0, 0, 10)))
            console.print(Padding(Text(f.message), (0, 0, 0, 10)))
            if f.versions is not None:
                console.print(Padding(Text(f"transformers: {', '.join(f.versions)}", style="dim"), (0, 0, 0, 10)))
        if any(layer.mismatch for layer in t.attention):
            under = f" (transformers {report.matrix.attention_from[t.file]})" if report.matrix else ""
            table = Table(title="  effective attention" + under, title_justify="left", padding=(0, 1))
            for name in ("layers", "config.json declares", "model runs"):
                table.add_column(name)
            for layers, declared, effective in attention_runs(t.attention):
                table.add_row(layers, declared, Text(effective, style="bold red" if declared != effective else ""))
            console.print(Padding(table, (0, 0, 0, 2)))
        console.print()
    if report.matrix is not None and report.matrix.rows:
        header, body = report.matrix.table()
        table = Table(title="resolved values that differ by transformers version", title_justify="left", padding=(0, 1))
        for name in header:
            table.add_column(name)
        for row in body:
            table.add_row(*row)
        console.print(table)
        console.print()
    console.print(summary_line(report.summary(), len(report.targets), len(report.errors))
                  + f" (transformers {report.transformers_version})")
