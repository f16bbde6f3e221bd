"""Every surface shows an error's hint (``DraftguardError.hint``, the fix in one line).

An error's text is its message, then ``. Hint: <fix>``; every surface renders an error by its text,
so the hint reaches each without code of its own: the CLI's line (test_offline: check, accept,
audit), every view of a Report that holds the error (text, json, markdown, GitHub annotations, the
sticky comment the bots and the Action post), a bot job's record and log line (test_bot_hardening),
and an audit's records, audit.md, audit.html and discussions. Before, the hint was set and no
surface showed it.
"""

from __future__ import annotations

import io
import json

import pytest

from draftguard.audit.discussions import render_body
from draftguard.audit.html import render_html
from draftguard.audit.record import AuditResult, RepoRecord
from draftguard.audit.report import render_markdown as render_audit_markdown
from draftguard.audit.repo import _recorded
from draftguard.check.findings import InputError, Report
from draftguard.errors import BadInput, RepoFailure
from draftguard.report.annotations import render_annotations
from draftguard.report.comment import render_light_section
from draftguard.report.json import render_json
from draftguard.report.markdown import render_markdown
from draftguard.report.terminal import render_text

HINT = "pass --target with a local folder of the target"


def test_an_errors_text_is_its_message_then_its_hint():
    assert str(BadInput("no target named.", hint=HINT)) == f"no target named. Hint: {HINT}"
    assert str(BadInput("no target named")) == "no target named"  # no hint: the message alone


def _report() -> Report:
    """A Report holding one input error with a hint, made by the check's own conversion."""
    report = Report(transformers_version="5.24.0")
    error = BadInput("acme/d/config.json: the target cannot be found", file="config.json", hint=HINT)
    report.errors.append(InputError.of("acme/d", error))
    return report


def _text(report: Report) -> str:
    out = io.StringIO()
    render_text(report, out)
    return " ".join(out.getvalue().split())  # rich wraps at the terminal's width


@pytest.mark.parametrize("render", [
    _text,                                             # draftguard check (text)
    lambda r: json.loads(render_json(r))["errors"][0]["message"],  # --format json
    render_markdown,                                   # --format markdown
    render_annotations,                                # --format github, and the Action's annotations
    render_light_section,                              # the sticky comment: the bots and the Action's summary
], ids=["text", "json", "markdown", "annotations", "comment"])
def test_every_view_of_a_report_shows_an_input_errors_hint(render):
    assert HINT in render(_report())


def _record(repo: str, failure: RepoFailure) -> RepoRecord:
    record = RepoRecord(repo=repo, repo_id=repo, revision=None, versions=["5.24.0"])
    record.errors.append(_recorded(failure))
    return record


def test_an_audit_shows_a_repos_hint_in_its_record_reports_and_discussion():
    hint = "accept its terms on the Hub, then run again"
    gated = _record("acme/gated", RepoFailure("gated", "the repo is gated", hint=hint))
    assert gated.errors[0].message == f"the repo is gated. Hint: {hint}"
    assert RepoRecord.from_json(gated.to_json()).errors[0].message.endswith(hint)  # audit.jsonl keeps it
    fix = "name the verifier by its Hub repo id"
    broken = _record("acme/broken", RepoFailure("target", "the verifier cannot be read", hint=fix))
    result = AuditResult(records=[gated, broken])
    assert hint in render_audit_markdown(result, ["5.24.0"])  # "could not be checked": with what to do
    assert hint in render_html(result, ["5.24.0"]) and fix in render_html(result, ["5.24.0"])
    assert fix in render_body(broken)  # the repo's own fault: told in its discussion
