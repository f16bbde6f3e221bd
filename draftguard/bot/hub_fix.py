"""The Hub bot's fix pull request: when a repo's settings turn it on (``fix_pull_request: true``,
off by default), a push to main whose config files have proven fixes gets one Hub pull request
holding the fixed files, each edit checked by running the check again on the edited file.

One pull request per fix, named by the fix itself: a digest of each file's edits (keys and values),
not of the whole file, so a push that changes anything else opens nothing new (B4 of issue 32). The
bot's own pull requests are listed first, whatever their status:
- one open (or draft) for the same fix: nothing is opened;
- one that someone else closed for the same fix: nothing is opened, ever (maintainers said no);
  one the bot closed itself (superseded earlier) does not count, nor one that was merged;
- the bot's other open fix pull requests whose files were all checked in this push are superseded
  (the current fix replaces them, or the files need none now): closed with a note naming the new one.
A pull request's description carries a hidden marker with its fix and files; everything a file
chose (paths, keys, values) is escaped as the sticky comment escapes it, the diff sits in a fence.

In: a ``HubPullRequestClient`` (``hosts.hub``: its ``HfApi``, repo and login), the
``PullRequestReview`` of main's head, and that head's sha.
Out: ``open_fix_pull_request(...)`` -> the new pull request's number, or None; one commit with
``create_pr`` on the Hub; superseded fix pull requests closed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import re
from typing import Any

from draftguard.pr_suggestions import fix_file
from draftguard.fix import FixOutcome
from draftguard.hub_access import file_operation
from draftguard.report.comment import code, esc_message
from draftguard.report.fixes import describe, fenced
from draftguard.pr_verdict import PullRequestReview

log = logging.getLogger("draftguard.bot")

TITLE = "draftguard fix: make config.json mean what the model reads ({})"
_TITLE = re.compile(r"^draftguard fix: make config\.json mean what the model reads \(([0-9a-f]{12})\)$")
# The fix's digest and its files (base64 of a JSON list: no character a file chose reaches the text).
MARKER = "<!-- draftguard:hub-fix {} {} -->"
_MARKER = re.compile(r"<!-- draftguard:hub-fix ([0-9a-f]{12}) ([A-Za-z0-9_=-]*) -->")
OPEN = ("open", "draft")


def fix_key(fixed: dict[str, FixOutcome]) -> str:
    """The digest of a fix: each file's path and its edits (key, value or removal), in order. Two
    pushes with the same edits get the same key, whatever else their files hold.

    Example::

        >>> from draftguard.fix.engine import AppliedFix
        >>> from draftguard.fix.text import Edit
        >>> a = FixOutcome("c.json", "{}", '{"b": true}', fixes=[AppliedFix([Edit("b", True)], [], "why")])
        >>> b = FixOutcome("c.json", '{"x": 1}', '{"x": 1, "b": true}', fixes=[AppliedFix([Edit("b", True)], [], "other")])
        >>> fix_key({"c.json": a}) == fix_key({"c.json": b})
        True
    """
    edits = [[path, [applied.to_json()["edits"] for applied in outcome.fixes]] for path, outcome in sorted(fixed.items())]
    return hashlib.sha1(json.dumps(edits, sort_keys=True).encode()).hexdigest()[:12]


def _marker(key: str, paths: list[str]) -> str:
    return MARKER.format(key, base64.urlsafe_b64encode(json.dumps(sorted(paths)).encode()).decode())


def _marked_paths(description: str) -> set[str] | None:
    """The files a fix pull request of the bot fixes, from its marker; None without one."""
    found = _MARKER.search(description or "")
    if found is None:
        return None
    try:
        paths = json.loads(base64.urlsafe_b64decode(found[2]))
    except ValueError:
        return None
    return {p for p in paths if isinstance(p, str)} if isinstance(paths, list) else None


def open_fix_pull_request(client: Any, outcome: PullRequestReview, head: str) -> int | None:
    """Open one Hub pull request with the proven fixes of main's config files, unless the settings
    leave it off, nothing can be fixed, or the bot has one for the same fix (open, or closed by a
    maintainer); close the bot's fix pull requests this push supersedes."""
    if not outcome.settings.fix_pull_request:
        return None
    fixed = {}
    for path, data in sorted(outcome.files.items()):
        findings = {(f.rule, f.key) for f in outcome.report.findings if f.file == path}
        result = fix_file(path, data, findings) if findings else None
        if result is not None:
            fixed[path] = result
    key = fix_key(fixed) if fixed else None
    mine = [d for d in client.my_pull_requests() if _TITLE.match(d.title or "")]
    same = [d for d in mine if _TITLE.match(d.title)[1] == key]
    current = next((d.num for d in same if d.status in OPEN), None)
    opened = refused = None
    if current is None and key is not None:
        refused = next((d.num for d in same if d.status == "closed" and _closed_by_others(client, d.num)), None)
        if refused is None:
            current = opened = _open(client, fixed, key, head)
    # Only files this push checked, and checked to the end (an error is no verdict), can supersede.
    failed = {e.file or e.source for e in outcome.report.errors}
    _close_superseded(client, [d for d in mine if d.status in OPEN and d.num != current],
                      set(outcome.files) - failed, current, refused, head)
    return opened


def _open(client: Any, fixed: dict[str, FixOutcome], key: str, head: str) -> int:
    title = TITLE.format(key)
    body = [_marker(key, list(fixed)) + "\ndraftguard checked main at `" + head[:12] + "` and found findings with a "
            "proven fix: each edit below was checked by running the whole check again on the edited file (the finding "
            "is gone, nothing new appears). Merge to apply it; `fix_pull_request: false` in .draftguard.yml turns "
            "these off."]
    for path, result in fixed.items():
        # Paths, keys and values are the file's words: escaped as in the sticky comment; the diff is fenced.
        body += [f"**{code(path)}**", *[f"- {esc_message(describe(applied))}" for applied in result.fixes],
                 fenced(result.diff(), "diff")]
    info = client.api.create_commit(
        client.repo_name, operations=[file_operation(path, r.after.encode("utf-8")) for path, r in fixed.items()],
        commit_message=title, commit_description="\n\n".join(body), create_pr=True, parent_commit=head)
    log.info("%s: fix pull request #%s opened (%d file(s))", client.repo_name, info.pr_num, len(fixed))
    return info.pr_num


def _closed_by_others(client: Any, num: int) -> bool:
    """Whether the last close of pull request ``num`` was someone else's (a maintainer's) than the bot's."""
    closes = [e for e in client.discussion(num).events
              if e.type == "status-change" and getattr(e, "new_status", None) == "closed"]
    return not closes or closes[-1].author != client.me()


def _close_superseded(client: Any, candidates: list, checked: set[str], current: int | None,
                      refused: int | None, head: str) -> None:
    """Close the bot's open fix pull requests whose files were all checked in this push: the fix they
    hold is not the current one (that is ``current``, or ``refused``, or none)."""
    for d in candidates:
        paths = _marked_paths(next((e.content for e in client.discussion(d.num).events if e.type == "comment"), ""))
        if not paths or not paths <= checked:
            continue  # made before markers, or some of its files were not checked now: it may still hold
        if current is not None:
            note = f"Superseded by #{current}: main at `{head[:12]}` needs a different fix of these files."
        elif refused is not None:
            note = (f"Main at `{head[:12]}` needs a different fix of these files: the one in #{refused}, which was "
                    "closed, so draftguard does not open it again.")
        else:
            note = f"Main at `{head[:12]}` needs no fix of these files any more."
        client.close(d.num, note)
        log.info("%s: fix pull request #%s closed (superseded)", client.repo_name, d.num)
