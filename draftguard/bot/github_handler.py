"""GitHub in the one pull-request flow (``bot/flow.py``): its ``PullRequestHost`` over
``hosts.github.PullRequestClient``, and ``GitHubHandler``, the flow the queue calls for GitHub Jobs.

GitHub's own parts: a command needs write access (anyone else is answered once and dropped); a
writer's pull request is trusted only from a branch of the repo or of the writer's own fork; and its
optional capabilities, reactions, check runs with annotations, and suggested changes.

In: a ``Job`` (kind ``pull_request``, ``comment`` or ``acceptance``) and the ``Queue``; a ``GitHubConfig``.
Out: what the flow writes (sticky comment, check runs, replies, reactions, a GPU Job); the Job's
one-line result, or ``errors.Retry``.
"""

from __future__ import annotations

import logging
from typing import Any

from draftguard.bot.commands import may_command
from draftguard.bot.flow import ACCEPTANCE_CHECK, CONFIG_CHECK, AcceptanceRunner, PullRequestFlow, annotations
from draftguard.pr_suggestions import post_suggestions
from draftguard.hosts.base import CommandCall, Trust
from draftguard.hosts.github import GitHubConfig, PullRequestClient, bot_login, connect, refusal, retry_delay
from draftguard.jobs import Job
from draftguard.payloads import Command, PullRequest
from draftguard.pr_verdict import PullRequestReview

__all__ = ["ACCEPTANCE_CHECK", "CONFIG_CHECK", "GitHubHandler", "GitHubPullRequest", "annotations"]

log = logging.getLogger("draftguard.bot")


class GitHubPullRequest(PullRequestClient):
    """One GitHub pull request as the flow's ``PullRequestHost``."""

    source, label = "github", "GitHub"
    strangers_may_recheck = False
    announces_heads_twice = False
    trust_hint = "GPU tests run only for trusted pull requests. A maintainer can comment /ok-to-test to run it"

    def __init__(self, gh: Any, job: Job, me: str | None):
        super().__init__(gh, job.repo, job.number, me=me)
        self.job = job

    def closed(self) -> str | None:
        state = self.pull(refresh=True).state
        self._just_read = True  # the head() the flow asks next reads this same answer
        return None if state in (None, "open") else str(state)

    def head(self) -> str:
        fresh, self._just_read = getattr(self, "_just_read", False), False
        return self.pull(refresh=not fresh).head.sha

    def base(self) -> str:
        return self.pull().base.sha

    def changed_files(self, base: str = "", head: str = "") -> list[tuple[str, str]]:
        return super().changed_files()  # the pull request's own listing, whatever its base

    def download_folder(self, folder: str, ref: str, dest: str) -> str:  # type: ignore[override]
        super().download_folder(folder, ref, dest)
        return dest

    def command(self) -> CommandCall | str:
        data = Command.from_data(self.job.data)
        if not data.user:
            return "skipped: the command names no user"
        return CommandCall(by=data.user, commands=list(data.commands), comment_id=data.comment_id, pinned=data.head_sha,
                           created_at=data.created_at, asked=data.comment_id)
        # The Re-run button's rerun answers that press (the job id is its delivery), not the check
        # run's name: each press reruns (B5 of issue 32), one at a time per head (the flow).

    def may_command(self, call: CommandCall) -> Trust:
        permission = self.permission(call.by)
        if may_command(permission, Command.from_data(self.job.data).user_type):
            return Trust(True, f"@{call.by} has write access")
        return Trust(False, f"@{call.by} has {permission or 'no'} access")

    def author_trust(self) -> Trust:
        # A command's job carries no author: the pull request itself says who opened it.
        author = PullRequest.from_data(self.job.data).author or getattr(getattr(self.pull(), "user", None), "login", None)
        if not author:
            return Trust(False, "the author has no write access")
        # A writer's pull request is trusted only from a branch of this repo or of the writer's own
        # fork: a third party's fork takes pushes from others (R10 of issue 25).
        head_repo = getattr(getattr(self.pull().head, "repo", None), "full_name", None)
        if head_repo != self.repo_name and (head_repo or "").partition("/")[0].lower() != author.lower():
            return Trust(False, f"the head branch is in {head_repo or 'a deleted fork'}, which others can push to")
        if may_command(self.permission(author), "User"):
            return Trust(True, f"@{author} has write access")
        return Trust(False, "the author has no write access")

    def post_suggestions(self, outcome: PullRequestReview, head: str) -> int:
        return post_suggestions(self, outcome, head)

    def publish_status(self, name: str, head_sha: str, **fields: Any) -> int | None:
        """Create or update a check run. Without the right to write checks (a personal token; GitHub
        lets only Apps and Actions' token write them) this logs one warning and the sticky comment
        carries the result alone, instead of failing the job."""
        from github import GithubException  # PyGithub: the bot and action extras, not the base install

        try:
            return self.upsert_check_run(name, head_sha, **fields)
        except GithubException as exc:
            if exc.status in (403, 404) and retry_delay(exc) is None:
                log.warning("%s: cannot write check run %s (HTTP %s); check runs need a GitHub App "
                            "with checks: write", self.repo_name, name, exc.status)
                return None
            raise


class GitHubHandler(PullRequestFlow):
    """The queue's handler for GitHub Jobs: the one flow, on ``GitHubPullRequest``."""

    def __init__(self, config: GitHubConfig, acceptance_runner: AcceptanceRunner | None = None):
        super().__init__(config, label="GitHub", retry_delay=retry_delay, refusal=refusal,
                         acceptance_runner=acceptance_runner)

    def host_for(self, job: Job) -> GitHubPullRequest:
        gh = connect(self.config, job.installation_id)
        return GitHubPullRequest(gh, job, me=bot_login(self.config, gh))
