"""The Hub bot's fix pull request: when a repo's settings turn it on (``fix_pull_request: true``,
off by default), a push to main whose config files have proven fixes gets one Hub pull request
holding the fixed files, each edit checked by running the check again on the edited file.

Never twice: the pull request's title names a digest of the fixed files, and the bot's own open
pull requests are listed first. A repo without the setting, or with nothing to fix, gets nothing.

In: a ``HubPullRequestClient`` (``hosts.hub``: its ``HfApi``, repo and login), the
``PullRequestReview`` of main's head, and that head's sha.
Out: ``open_fix_pull_request(...)`` -> the new pull request's number, or None; one commit with
``create_pr`` on the Hub.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from draftguard.bot.suggestions import fix_file
from draftguard.hub_access import file_operation
from draftguard.report.fixes import describe, fenced
from draftguard.pr_verdict import PullRequestReview

log = logging.getLogger("draftguard.bot")

TITLE = "draftguard fix: make config.json mean what the model reads ({})"


def open_fix_pull_request(client: Any, outcome: PullRequestReview, head: str) -> int | None:
    """Open one Hub pull request with the proven fixes of main's config files, unless the settings
    leave it off, nothing can be fixed, or the bot has an open one for the same fix already."""
    if not outcome.settings.fix_pull_request:
        return None
    fixed = {}
    for path, data in sorted(outcome.files.items()):
        findings = {(f.rule, f.key) for f in outcome.report.findings if f.file == path}
        result = fix_file(path, data, findings) if findings else None
        if result is not None:
            fixed[path] = result
    if not fixed:
        return None
    digest = hashlib.sha1(b"".join(path.encode() + b"\0" + r.after.encode() for path, r in fixed.items())).hexdigest()[:12]
    title = TITLE.format(digest)
    api, repo = client.api, client.repo_name
    for discussion in api.get_repo_discussions(repo, author=client.me(), discussion_type="pull_request",
                                               discussion_status="open"):
        if discussion.title == title and discussion.status == "open" and discussion.is_pull_request:
            return None  # opened on an earlier push (or a retry of this job)
    body = ["draftguard checked main at `" + head[:12] + "` and found findings with a proven fix: each edit below "
            "was checked by running the whole check again on the edited file (the finding is gone, nothing new "
            "appears). Merge to apply it; `fix_pull_request: false` in .draftguard.yml turns these off."]
    for path, result in fixed.items():
        body += [f"**{path}**", *[f"- {describe(applied)}" for applied in result.fixes], fenced(result.diff(), "diff")]
    info = api.create_commit(
        repo, operations=[file_operation(path, r.after.encode("utf-8")) for path, r in fixed.items()],
        commit_message=title, commit_description="\n\n".join(body), create_pr=True, parent_commit=head)
    log.info("%s: fix pull request #%s opened (%d file(s))", repo, info.pr_num, len(fixed))
    return info.pr_num
