"""The markdown view, for PR comments, Hub discussions and step summaries."""

from __future__ import annotations

from draftguard.check.findings import Report, RULES
from draftguard.report.views import attention_runs, change, location, summary_line

_ICON = {"error": ":x:", "warning": ":warning:", "info": ":information_source:"}
RULES_URL = "docs/rules.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report, *, title: str = "draftguard light check") -> str:
    out = [f"### {title}", ""]
    counts = report.summary()
    out.append(f"**{summary_line(counts, len(report.targets), len(report.errors))}** "
               f"(transformers {report.transformers_version})")
    out.append("")
    for e in report.errors:
        out.append(f"- :no_entry: could not check `{e.source}`: {_cell(e.message)}")
    if report.errors:
        out.append("")
    findings = report.findings
    if findings:
        out += ["| | rule | key | where | file -> model code | what, why, fix |", "|---|---|---|---|---|---|"]
        for f in findings:
            out.append(
                f"| {_ICON[f.severity.value]} | {f.rule} {RULES[f.rule].name} | `{_cell(f.key)}` | "
                f"`{_cell(location(f))}` | `{_cell(change(f))}` | {_cell(f.message)} |"
            )
        out.append("")
    if report.matrix is not None and report.matrix.rows:
        header, body = report.matrix.table()
        out += ["#### Resolved values that differ by transformers version", "",
                "| " + " | ".join(_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
        out += ["| " + " | ".join(f"`{_cell(c)}`" for c in row) + " |" for row in body]
        out.append("")
    for t in report.targets:
        if any(layer.mismatch for layer in t.attention):
            under = f" (transformers {report.matrix.attention_from[t.file]})" if report.matrix else ""
            out += [f"<details><summary>Effective attention of <code>{t.file}</code>{under}</summary>", "",
                    "| layers | config.json declares | model runs |", "|---|---|---|"]
            for layers, declared, effective in attention_runs(t.attention):
                mark = " :x:" if declared != effective else ""
                out.append(f"| {layers} | {declared} | {effective}{mark} |")
            out += ["", "</details>", ""]
    if not findings and not report.errors:
        out.append("No differences between config.json and what the model code reads.")
    return "\n".join(out).rstrip() + "\n"
