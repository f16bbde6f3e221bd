"""GitHub workflow commands: one annotation per finding, on the key's line of config.json.

In: a ``Report``.
Out: ``render_annotations`` -> ``::error|warning|notice file=,line=,title=::message`` lines (a str),
one per finding and one ``::error`` per target that could not be checked.
"""

from __future__ import annotations

from draftguard.check.findings import Report, RULES

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def render_annotations(report: Report) -> str:
    """``::error file=...,line=...,title=...::message`` lines, as GitHub Actions reads them."""
    lines = []
    for f in report.findings:
        props = [f"file={_prop(f.file)}"]
        if f.line:
            props.append(f"line={f.line}")
        props.append(f"title={_prop(f'{f.rule} {RULES[f.rule].name}: {f.key}')}")
        lines.append(f"::{_LEVEL[f.severity.value]} {','.join(props)}::{_data(f.message)}")
    for e in report.errors:
        props = [f"file={_prop(e.file or e.source)}"]
        if e.line:
            props.append(f"line={e.line}")
        lines.append(f"::error {','.join(props)},title=draftguard could not check this::{_data(e.message)}")
    return "\n".join(lines) + ("\n" if lines else "")
