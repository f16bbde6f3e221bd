"""Proven fixes as GitHub suggested changes: one pull-request review whose comments carry a
```suggestion block on the config.json lines, which a maintainer commits in one click.

Only on config files the pull request changes, only for findings the bot itself reported, only on
lines GitHub lets a review comment on (inside a hunk of the file's patch; a fix elsewhere goes into
the review's body as a diff), and never twice: each suggestion carries a marker naming the file and
the edit, and the bot's own review comments are read first. The bot reads no weights or tokenizer
files, so it proves its fixes with the config rules (``draftguard fix`` on a clone does the rest).

In: a ``PullRequestClient`` (``hosts.github``: the bot's, or the Action's through
``action.comment.post_fix_suggestions``), the ``PullRequestReview`` of the head, the head sha.
Out: ``post_suggestions(...)`` -> how many suggestions were posted; one review created (or none).
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from draftguard.fix import FixOutcome, config_checker, fix_text
from draftguard.report.comment import esc_message
from draftguard.report.fixes import describe, fenced
from draftguard.pr_verdict import PullRequestReview
from draftguard.snapshot import BadInput

log = logging.getLogger("draftguard.bot")

MARKER = "<!-- draftguard:fix {} -->"
_MARKER = re.compile(r"<!-- draftguard:fix (\S+) -->")


def fix_file(path: str, data: bytes, findings: set[tuple[str, str]]) -> FixOutcome | None:
    """The proven fixes of one config file's ``findings`` (rule, key), checked as the bot checks it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None

    try:
        outcome = fix_text(text, config_checker(path), file=path, only=findings)
    except BadInput:
        return None
    return outcome if outcome.fixes else None


def suggestion_comments(outcome: FixOutcome, commentable: list[range]) -> tuple[list[dict[str, Any]], list[str]]:
    """The review comments for one file's fixes (path, line, side, body with the marker and the
    suggestion block), and the marker ids of hunks that no review comment can sit on."""
    why = esc_message("; ".join(describe(applied) for applied in outcome.fixes))
    eol = "\r\n" if "\r\n" in outcome.before else "\n"
    comments, elsewhere = [], []
    for hunk in outcome.hunks():
        ident = hashlib.sha1(f"{outcome.file}\0{hunk.start}\0{hunk.end}\0{eol.join(hunk.lines)}".encode()).hexdigest()[:16]
        marker = MARKER.format(ident)
        if not any(hunk.start in lines and hunk.end in lines for lines in commentable):
            elsewhere.append(ident)
            continue
        body = (f"{marker}\n**draftguard fix**, proven by checking the edited file again: {why}.\n\n"
                + fenced("\n".join(hunk.lines), "suggestion"))
        comment = {"path": outcome.file, "line": hunk.end, "side": "RIGHT", "body": body}
        if hunk.start != hunk.end:
            comment.update(start_line=hunk.start, start_side="RIGHT")
        comments.append(comment)
    return comments, elsewhere


def hunk_ranges(patch: str | None) -> list[range]:
    """The new-file line numbers each hunk of a pull request file's patch covers.

    Example::

        >>> hunk_ranges("@@ -37,5 +37,6 @@\\n x\\n@@ -1 +1 @@\\n-a\\n+b")
        [range(37, 43), range(1, 2)]
    """
    return [range(int(m[1]), int(m[1]) + int(m[2] if m[2] is not None else 1))
            for m in re.finditer(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", patch or "", re.M)]


def post_suggestions(client: Any, outcome: PullRequestReview, head: str) -> int:
    """Post the proven fixes of the head's config files as one review of suggested changes.
    Returns how many suggestions were posted (0 when there is nothing new to suggest)."""
    pull = client.pull()
    listing = getattr(client, "files", None)  # kept by changed_files() earlier in the run
    patches = {f.filename: f.patch for f in (listing if listing is not None else pull.get_files())}
    # What the bot suggested before, on any push: markers in its review comments and review bodies.
    me = client.login()
    mine = {marker for item in [*pull.get_review_comments(), *pull.get_reviews()]
            if item.user is not None and item.user.login == me for marker in _MARKER.findall(item.body or "")}
    comments: list[dict[str, Any]] = []
    diffs: list[str] = []
    for path, data in sorted(outcome.files.items()):
        if path not in patches:
            continue  # a config checked but not changed by the pull request
        findings = {(f.rule, f.key) for f in outcome.report.findings if f.file == path}
        fixed = fix_file(path, data, findings) if findings else None
        if fixed is None:
            continue
        new, elsewhere = suggestion_comments(fixed, hunk_ranges(patches[path]))
        comments += [c for c in new if _MARKER.search(c["body"])[1] not in mine]
        if elsewhere and not set(elsewhere) <= mine:
            diffs.append("".join(MARKER.format(m) + "\n" for m in elsewhere) + fenced(fixed.diff(), "diff"))
    if not comments and not diffs:
        return 0
    body = ("draftguard found a fix for what it reports on these lines, and checked each edited file again: the "
            "finding is gone and nothing new appears. Commit a suggestion to apply it.")
    if diffs:
        body += "\n\nOutside this pull request's changed lines:\n\n" + "\n\n".join(diffs)
    from github import GithubException  # PyGithub: the bot extra, which this module runs under

    try:
        pull.create_review(commit=client.repo.get_commit(head), body=body, event="COMMENT", comments=comments)
    except GithubException as exc:
        if exc.status not in (403, 404, 422):
            raise  # transient: the job is retried, and the markers keep the retry from posting twice
        # A token without pull-requests: write, or lines GitHub will not take: the sticky comment stands.
        log.warning("%s#%s: fix suggestions not posted (HTTP %s)", client.repo_name, client.number, exc.status)
        return 0
    log.info("%s#%s: %d fix suggestion(s) posted", client.repo_name, client.number, len(comments))
    return len(comments)
