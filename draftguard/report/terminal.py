"""The text view for people at a terminal (rich).

In: a ``Report`` and a text stream.
Out: ``render_text`` writes each target's findings (first those filed against the files beside its
config.json, such as ``.draftguard.yml``; any other file's under its own name), causes before their
symptoms, its attention table when layers differ, an effective-attention line per engine (with
``--engine``; ``report.engines``), the version matrix and a summary line
to the stream; returns None. At a terminal rich draws it as it likes; anywhere else (a CI log, a
pipe, a file) the same lines, each unwrapped (a long path stays whole) and without the spaces rich
pads each line with to the width.
"""

from __future__ import annotations

import io
import re
from typing import TextIO

from draftguard.check.findings import RULES, Finding, Report, attention_runs
from draftguard.report.engines import attention_lines
from draftguard.report.views import (
    FindingGroup,
    causes_first,
    change,
    display_items,
    is_config_value_rule,
    location,
    summary_line,
)

_UNWRAPPED = 100_000  # columns: wider than any line draftguard prints
_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def render_text(report: Report, file: TextIO) -> None:
    from rich.console import Console  # rich: ~20 ms to import; only drawn output pays it

    terminal = _is_terminal(file)
    sink = file if terminal else io.StringIO()  # not a terminal (a CI log, a pipe): drawn, then trimmed
    # Not a terminal: no width to fit, so nothing is wrapped; rich's 80 columns cut a long path in two
    # (".draftgu" / "ard.yml:5"), which neither grep nor a click in a CI log then finds.
    console = Console(file=sink, highlight=False, width=None if terminal else _UNWRAPPED)
    _draw(console, report)
    if not terminal:  # rich pads each line to the width; a log or a file keeps no trailing spaces
        file.write(re.sub(r"[ \t]+$", "", sink.getvalue(), flags=re.M))


def _is_terminal(file: TextIO) -> bool:
    try:
        return file.isatty()
    except (AttributeError, ValueError):
        return False


def _draw(console, report: Report) -> None:
    from rich.padding import Padding  # rich: ~20 ms to import; only drawn output pays it
    from rich.table import Table  # rich, as above
    from rich.text import Text  # rich, as above

    for e in report.errors:
        console.print(Text.assemble(("cannot check ", "bold red"), e.message))
    beside = _beside(report)
    for t in report.targets:
        if getattr(t, "launch_view", None) is not None:  # a compose file's services share the file, not findings
            findings = [f for f in report.findings if any(f is g for g in t.findings)]
        else:
            findings = [f for f in report.findings if f.file == t.file]
        klass = t.config_class or "no config class"
        console.print(Text.assemble((t.source if getattr(t, "launch_view", None) is not None else t.file, "bold"),
                                    f"  {klass}, model_type {t.model_type!r}"))
        if not findings:
            console.print("  nothing to say about this launch" if getattr(t, "launch_view", None) is not None
                          else "  no differences between config.json and what the model code reads")
        _print_findings(console, beside.pop(t.file, []) + causes_first(findings))
        if any(layer.mismatch for layer in t.attention):
            under = f" (transformers {report.matrix.attention_from[t.file]})" if report.matrix else ""
            table = Table(title="  effective attention" + under, title_justify="left", padding=(0, 1))
            for name in ("layers", "config.json declares", "model runs"):
                table.add_column(name)
            for layers, declared, effective in attention_runs(t.attention):
                table.add_row(layers, declared, Text(effective, style="bold red" if declared != effective else ""))
            console.print(Padding(table, (0, 0, 0, 2)))
        _print_engine_attention(console, t, report.transformers_version)
        console.print()
    for name, findings in beside.items():  # what no target owns, under its own file's name
        console.print(Text(name, style="bold"))
        _print_findings(console, findings)
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
    for line in report.silenced:  # what .draftguard.yml's rules and ignore changed
        console.print(Text(line, style="dim"))
    console.print(summary_line(report.summary(), len(report.targets), len(report.errors))
                  + f" (transformers {report.transformers_version})")


def _folder(path: str) -> str:
    return path.rpartition("/")[0]


def _beside(report: Report) -> dict[str, list[Finding]]:
    """The findings filed against a file other than a target's config.json (the ``.draftguard.yml``
    that named a drafter's target, its weights...), each under the target in whose folder it lies,
    else under its own name, so the text view shows every finding json has. Report order."""
    files = {t.file for t in report.targets}
    out: dict[str, list[Finding]] = {}
    for f in report.findings:
        if f.file not in files:
            owner = next((t.file for t in report.targets if _folder(t.file) == _folder(f.file)), f.file)
            out.setdefault(owner, []).append(f)
    return out


def _print_engine_attention(console, target, transformers_version: str) -> None:
    """With ``--engine``: one effective-attention line per engine (and vLLM runner where they differ)
    under transformers' own, so what each really runs reads side by side."""
    from rich.padding import Padding  # rich: ~20 ms to import; only drawn output pays it
    from rich.table import Table  # rich, as above
    from rich.text import Text  # rich, as above

    lines = attention_lines(target, transformers_version)
    if not lines:
        return
    grid = Table.grid(padding=(0, 2))  # two columns, so a long refusal wraps inside its own
    grid.add_column(no_wrap=True)
    grid.add_column()
    for who, what in lines:
        grid.add_row(who, Text(what, style="bold red" if what != lines[0][1] else ""))
    console.print(Text("  effective attention, by what serves it", style="bold"))
    console.print(Padding(grid, (0, 0, 0, 4)))


def _print_findings(console, findings: list[Finding]) -> None:
    from rich.padding import Padding  # rich: ~20 ms to import; only drawn output pays it
    from rich.text import Text  # rich, as above

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
        if is_config_value_rule(f.rule):
            console.print(Padding(Text(f"file -> model code: {change(f)}", style="dim"), (0, 0, 0, 10)))
        console.print(Padding(Text(f.message), (0, 0, 0, 10)))
        if f.versions is not None:
            console.print(Padding(Text(f"transformers: {', '.join(f.versions)}", style="dim"), (0, 0, 0, 10)))
