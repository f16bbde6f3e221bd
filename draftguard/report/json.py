"""The json view: the contract the bot, the Action and scripts read.

In: a ``Report``.
Out: ``render_json`` -> ``Report.to_json()`` as indented JSON text (``draftguard check --format json``).
"""

from __future__ import annotations

import json

from draftguard.check.findings import Report


def render_json(report: Report) -> str:
    return json.dumps(report.to_json(), indent=2, default=str) + "\n"
