"""The markdown view (`--format markdown`): the same sections as the sticky PR comment, so a finding
reads the same in a terminal pipe, a step summary, a PR and a Hub discussion, and everything taken
from a config file is escaped the same way.

In: a ``Report`` and the ``--fail-on`` level.
Out: ``render_markdown`` -> markdown text: the light-check section, then the matrix section when the
Report has a version matrix with differing rows, then what the engines serve when ``--engine``
asked (``report.engines``).
"""

from __future__ import annotations

from draftguard.check.findings import Report
from draftguard.report.comment import render_light_section, render_matrix_section
from draftguard.report.engines import render_engines_section


def render_markdown(report: Report, *, fail_on: str = "error") -> str:
    parts = [render_light_section(report, fail_on=fail_on)]
    if report.matrix is not None and report.matrix.rows:
        parts.append(render_matrix_section(*report.matrix.table()))
    if (engines := render_engines_section(report)) is not None:
        parts.append(engines)
    return "\n\n".join(parts) + "\n"
