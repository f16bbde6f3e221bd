"""Telling owners (opt-in): one marked Hub discussion per repo with errors.

``--open-discussions`` alone is a dry run: it prints, per repo, what it would open, edit or close.
``--open-discussions post`` writes, with ``HF_TOKEN``:

- a repo with error-level findings, regressions or faults of its own gets one discussion, found
  again on later runs by its hidden marker and its author (the token's user), never a second one;
- a later run edits that discussion's first comment when the findings changed (and reopens it when
  it had been closed);
- a repo that is clean again gets a closing comment and the discussion is closed.

Repos that could not be checked (gated, deleted, 5xx) are left alone: that is not their owner's
fault.

In: the run's ``RepoRecord`` list, the mode (dry-run or post) and a ``say`` callback; an ``HfApi``.
Out: discussions opened, edited, reopened or closed on the Hub (post), what was (or would be) done
per repo through ``say``, and the list of ``Action`` objects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from draftguard.audit.record import CLEAN, FAILING, RepoRecord
from draftguard.hub_access import hub_api, hub_problem
from draftguard.markers import AUDIT as MARKER
from draftguard.markers import is_audit
from draftguard.report.comment import code, esc, esc_message

TITLE = "draftguard audit: config or drafter problems found"
DRY_RUN, POST = "dry-run", "post"


@dataclass
class Action:
    """What was (or would be) done for one repo: open, edit, reopen, close or none."""

    repo: str
    action: str
    num: int | None = None
    body: str = ""


def render_body(record: RepoRecord) -> str:
    """The discussion's text: marker, what is wrong, and where the rest is."""
    # What the audited repo wrote is escaped: no HTML, links, images, mentions or markers posted
    # under the auditor's account (R2 of issue 25).
    lines = [MARKER, f"draftguard audited {code(record.repo_id)} at commit `{(record.sha or '')[:12]}` under "
             f"transformers {', '.join(record.versions)} and found problems:", ""]
    for f in record.findings:
        if f.get("severity") == "error":
            where = f"{f.get('file')}:{f['line']}" if f.get("line") else f.get("file")
            lines.append(f"- **{esc(f['rule'])}** {code(f['key'])} ({esc(where)}): {esc_message(f['message'])}")
    for reg in record.regressions:
        lines.append(f"- **{esc(reg.rule)}** {code(reg.key)} appears under transformers {', '.join(reg.present)} but not "
                     f"under {', '.join(reg.absent)}: a newer (or older) transformers reads this config differently.")
    for error in record.errors:
        if error.repo_fault:
            lines.append(f"- **{esc(error.kind)}**: {esc_message(error.message)}")
    if record.fix:
        # A fence longer than any backtick run in the diff, so the repo's text cannot close it.
        fence = "`" * max(3, 1 + max((len(r) for r in re.findall(r"`+", record.fix)), default=0))
        lines += ["", "This edit ends the config errors above; draftguard checked it by running the check again on the "
                  "edited file (`draftguard fix` writes it):", "", fence + "diff", record.fix.rstrip("\n"), fence]
    lines += ["", "Each rule and its fix: https://github.com/draftguard/draftguard/blob/main/docs/rules.md. "
              "This discussion is edited when the findings change and closed when the repo is clean."]
    return "\n".join(lines)


def wants_discussion(record: RepoRecord) -> bool:
    return record.status == FAILING


def sync_discussions(records: list[RepoRecord], mode: str, *, say: Callable[[str], None],
                     api: Any | None = None) -> list[Action]:
    """Open, edit or close each repo's audit discussion (``mode`` post), or say what would be done
    (dry-run). Returns the actions; a repo whose discussion cannot be written is said and skipped."""
    actions = []
    api = api or (hub_api() if mode == POST else None)
    me = api.whoami()["name"] if api is not None else None
    for record in records:
        if record.status not in (FAILING, CLEAN):
            continue
        try:
            action = _sync_one(record, mode, api, me)
        except Exception as exc:
            problem = hub_problem(exc)  # the one reading of the Hub's errors
            if problem is None and not isinstance(exc, OSError):
                raise
            why = (f"Hub answered {problem.status}" if problem is not None and problem.status else
                   problem.message if problem is not None else f"Hub answered {type(exc).__name__}")
            say(f"{record.repo}: discussion not written ({why})")
            continue
        if action.action != "none":
            verb = action.action if mode == POST else f"would {action.action}"
            say(f"{record.repo}: {verb} discussion" + (f" #{action.num}" if action.num else "")
                + (f"\n{action.body}" if mode == DRY_RUN and action.body else ""))
        actions.append(action)
    return actions


def _find(api: Any, repo: str, me: str) -> Any | None:
    for discussion in api.get_repo_discussions(repo, author=me, discussion_type="discussion"):
        if discussion.title == TITLE:
            details = api.get_discussion_details(repo, discussion.num)
            first = next((e for e in details.events if e.type == "comment"), None)
            if first is not None and first.author == me and is_audit(first.content):
                return details
    return None


def _sync_one(record: RepoRecord, mode: str, api: Any | None, me: str | None) -> Action:
    wanted = wants_discussion(record)
    if api is None:  # dry run: without a token nothing can be looked up, so say what a first run does
        return Action(record.repo, "open", body=render_body(record)) if wanted else Action(record.repo, "none")
    found = _find(api, record.repo_id, me)
    if not wanted:
        if found is None or found.status != "open":
            return Action(record.repo, "none")
        api.change_discussion_status(record.repo_id, found.num, "closed",
                                     comment=f"{MARKER}\ndraftguard's audit finds this repo clean now "
                                             f"(commit `{(record.sha or '')[:12]}`); closing.")
        return Action(record.repo, "close", found.num)
    body = render_body(record)
    if found is None:
        created = api.create_discussion(record.repo_id, title=TITLE, description=body)
        return Action(record.repo, "open", created.num, body)
    first = next(e for e in found.events if e.type == "comment")
    action = "none"
    if found.status != "open":
        api.change_discussion_status(record.repo_id, found.num, "open")
        action = "reopen"
    if first.content != body:
        api.edit_discussion_comment(record.repo_id, found.num, first.id, body)
        action = "edit" if action == "none" else action
    return Action(record.repo, action, found.num, body if action != "none" else "")
