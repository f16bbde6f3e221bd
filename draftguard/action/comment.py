"""The Action's one sticky comment on the pull request, the same one the bot writes.

In: the ``Context`` (repository, pull request number, API URL), a token and the sections to merge.
Out: the comment created or edited through ``hosts.github``, and the proven fixes as one review of
suggested changes on a same-repository pull request (``post_fix_suggestions``); transient faults retried a few times
in place (``hosts.retry.call_with_retries``), a refusal (a fork's read-only token) remembered as a
notice, any other failure as one scrubbed line. Nothing here raises into the check's result.
"""

from __future__ import annotations

import os
from typing import Callable

from draftguard.action.inputs import Context, WorkflowCommands
from draftguard.errors import ActionError, CommentRefused
from draftguard.hosts.github import GitHubConfig, PullRequestClient, TransientGitHubError, connect, retry_delay
from draftguard.hosts.retry import call_with_retries
from draftguard.pr_suggestions import post_suggestions
from draftguard.pr_verdict import PullRequestReview
from draftguard.report.comment import section_name, update_sticky
from draftguard.secrets import scrub


NO_COMMENT = (
    "draftguard posted no pull request comment: GitHub refused this token write access "
    "({status} {message}). Pull requests from forks get a read-only token, and same-repo workflows "
    "need `permissions: pull-requests: write`. The results are in this job's summary and annotations."
)


# --- the sticky comment -------------------------------------------------------------------------


def _client(ctx: Context, token: str) -> tuple[GitHubConfig, PullRequestClient]:
    """The Action's client of its pull request. One or two writes per job: no pacing between writes
    is needed. DRAFTGUARD_RETRY_BASE is the bot's knob for the first backoff, honoured here too."""
    config = GitHubConfig(api_url=ctx.api_url, token=token, write_interval=0.0, secrets=[token],
                          retry_base=float(os.environ.get("DRAFTGUARD_RETRY_BASE") or 2.0))
    return config, PullRequestClient(connect(config), ctx.repository, ctx.pr_number)


def sticky_writer(ctx: Context, token: str, *, attempts: int = 3, max_wait: float = 30.0
                  ) -> Callable[[dict[str, str | None]], None]:
    """A function that merges sections into the pull request's one sticky comment (the bot's).

    Transient faults (5xx, rate limits, timeouts) are retried a few times within ``max_wait``
    seconds; a refusal raises CommentRefused.

    Raises:
        CommentRefused: (from the writer) GitHub answered 403 or 404 to the comment write.
    """
    # PyGithub is the `action` extra, imported only when a comment is wanted: StickyComment turns
    # its absence into an ActionError that says to install it or set `comment: false`.
    from github import GithubException

    config, client = _client(ctx, token)

    def write(sections: dict[str, str | None]) -> None:
        try:
            call_with_retries(lambda: client.upsert_sticky(lambda old: update_sticky(old, **sections)),
                              delay_of=retry_delay, attempts=attempts, max_wait=max_wait, base=config.retry_base)
        except GithubException as exc:
            if exc.status in (403, 404):
                message = exc.data.get("message", "") if isinstance(exc.data, dict) else ""
                raise CommentRefused(exc.status, message or "Forbidden") from None
            raise
    return write


class StickyComment:
    """Merges sections into the pull request's sticky comment; remembers a refusal or a failure
    instead of raising, so the check's result, summary and annotations always come out."""

    def __init__(self, ctx: Context, token: str, commands: WorkflowCommands, secrets: list[str],
                 key: str | None = None):
        self.key = key  # this use's own sections (``ActionInputs.section_key``), None for the plain ones
        try:
            self.write = sticky_writer(ctx, token)
        except ImportError as exc:
            raise ActionError(f"the pull request comment needs PyGithub ({exc.name} is missing): install "
                              "draftguard[action], or set `comment: false`") from None
        self.commands = commands
        self.secrets = secrets
        self.refused: str | None = None
        self.failed: str | None = None

    def __call__(self, sections: dict[str, str | None]) -> None:
        import requests  # with PyGithub, which sticky_writer has already imported
        from github import GithubException

        if self.refused or self.failed:
            return
        try:
            self.write({section_name(kind, self.key): text for kind, text in sections.items()})
        except CommentRefused as exc:
            self.refused = NO_COMMENT.format(status=exc.status, message=exc.message)
            self.commands.command("notice", self.refused, title="draftguard: no comment")
        except (GithubException, TransientGitHubError, requests.RequestException) as exc:
            status = getattr(exc, "status", None)
            self.failed = scrub(f"GitHub API: {status or type(exc).__name__}: {exc}", self.secrets)[:500]


# --- one-click fixes ------------------------------------------------------------------------------


def same_repository(ctx: Context) -> bool:
    """Whether the pull request's head branch is in the repository itself (not a fork): only then does
    a workflow's token write reviews, and only then can a suggestion be committed by its authors."""
    head_repo = ((ctx.event.get("pull_request") or {}).get("head") or {}).get("repo") or {}
    return bool(ctx.repository) and head_repo.get("full_name") == ctx.repository


def post_fix_suggestions(ctx: Context, token: str, review: PullRequestReview, head: str,
                         commands: WorkflowCommands, secrets: list[str]) -> int:
    """The bot's proven fixes as one review of suggested changes (``pr_suggestions``), on a pull
    request from the same repository. Returns how many were posted; a failure is one notice and 0,
    never the job's failure (the sticky comment and the summary carry the result)."""
    import requests  # with PyGithub, the `action` extra
    from github import GithubException


    config, client = _client(ctx, token)
    try:
        client.changed_files()  # the listing with each file's patch, as the bot reads it
        return call_with_retries(lambda: post_suggestions(client, review, head), delay_of=retry_delay,
                                 attempts=3, max_wait=30.0, base=config.retry_base)
    except (GithubException, TransientGitHubError, requests.RequestException) as exc:
        status = getattr(exc, "status", None)
        commands.command("notice", scrub(f"fix suggestions not posted: GitHub API: {status or type(exc).__name__}: "
                                         f"{exc}", secrets)[:500], title="draftguard: no suggestions")
        return 0
