"""The Hub in the one pull-request flow (``bot/flow.py``): its ``PullRequestHost`` over
``hosts.hub.HubPullRequestClient``, and ``HubHandler``, the flow the queue calls for Hub Jobs.

The Hub's own parts: a pull request is a discussion with ``refs/pr/N``; anyone may comment, so a
stranger's ``/recheck`` re-runs the light check but never a GPU test; the GPU test is for the repo's
owner and the members of the organization that owns it; one push arrives as two webhooks; there are
no reactions (the sticky comment says that a command ran). And one job kind of its own: a push to
main (``branch``), checked with no pull request, which may open a fix pull request.

In: a ``Job`` (kind ``pull_request``, ``comment``, ``acceptance`` or ``branch``) and the ``Queue``; a
``HubConfig``.
Out: what the flow writes (sticky comment, replies, a GPU Job), a fix pull request for main; the Job's
one-line result, or ``errors.Retry``.
"""

from __future__ import annotations

import os

from draftguard.bot.commands import COMMANDS, parse_commands
from draftguard.bot.flow import AcceptanceRunner, PullRequestFlow
from draftguard.bot.hub_fix import open_fix_pull_request
from draftguard.bot.pr_check import check_pull_request
from draftguard.hosts.base import CommandCall, Trust
from draftguard.hub_access import hub_problem
from draftguard.hosts.hub import OPEN_STATES, HubConfig, HubPullRequestClient, hub_refusal, hub_retry_delay
from draftguard.jobs import Job, Queue
from draftguard.payloads import HubCommand
from draftguard.snapshot import is_model_file


class HubPullRequest(HubPullRequestClient):
    """One Hub pull request as the flow's ``PullRequestHost``."""

    source, label = "hub", "the Hub"
    strangers_may_recheck = True
    announces_heads_twice = True
    trust_hint = ("GPU tests run only for the repo's owner or members of the organization that owns it; one of "
                  "them can comment /recheck")

    def __init__(self, config: HubConfig, job: Job):
        super().__init__(config, job.repo, job.number)
        self.job = job

    def closed(self) -> str | None:
        details = self.details(refresh=True)
        return None if details.is_pull_request and details.status in OPEN_STATES else str(details.status)

    def base(self) -> str:
        return self.revision_sha(self.target_branch())  # settings stay main's (default_branch)

    def download_folder(self, folder: str, ref: str, dest: str) -> str:  # type: ignore[override]
        # Through huggingface_hub's cache, not into ``dest``: the folder's files sit under the snapshot.
        return os.path.join(super().download_folder(folder, ref), folder)

    def command(self) -> CommandCall | str:
        data = HubCommand.from_data(self.job.data)
        comment = self.comment(data.comment_id)
        if comment is None or comment.hidden:
            return "skipped: the comment is gone or hidden"
        if comment.author == self.me():
            return "skipped: the bot's own comment"
        commands = [c for c in parse_commands(comment.content) if c in COMMANDS]
        if not commands:
            return "skipped: no /recheck"
        # The command approves the head its author saw: judged by the Hub's time of the comment.
        created = getattr(comment, "created_at", None)
        return CommandCall(by=comment.author, commands=commands, comment_id=data.comment_id, asked=data.comment_id,
                           created_at=created.isoformat() if created is not None else data.created_at)

    def may_command(self, call: CommandCall) -> Trust:
        return Trust(*self.is_owner_or_member(call.by))

    def author_trust(self) -> Trust:
        return Trust(*self.is_owner_or_member(self.details().author))


class HubHandler(PullRequestFlow):
    """The queue's handler for Hub Jobs (``source="hub"``): the one flow on ``HubPullRequest``, and
    the Hub's push to main."""

    HANDLERS = dict(PullRequestFlow.HANDLERS, branch="branch")

    def __init__(self, config: HubConfig, acceptance_runner: AcceptanceRunner | None = None):
        super().__init__(config, label="Hub", retry_delay=hub_retry_delay, refusal=hub_refusal,
                         acceptance_runner=acceptance_runner)

    def host_for(self, job: Job) -> HubPullRequest | None:
        return None if job.kind == "branch" else HubPullRequest(self.config, job)  # a push to main has no PR

    def branch(self, job: Job, queue: Queue, client: None = None) -> str:
        """A push to main: check the watched files that changed; the result is the job's record
        (there is no pull request to comment on)."""
        client = HubPullRequestClient(self.config, job.repo, 0)
        now = client.revision_sha("main")
        head = job.head_sha or now
        if head != now:
            return f"skipped: superseded by {now[:12]}"  # that push has its own job
        old = job.base_sha
        if old and set(old) == {"0"}:
            old = None
        try:
            changed = client.changed_files(old, head) if old else None
        except Exception as exc:
            if getattr(hub_problem(exc, follow=False), "kind", None) != "revision-not-found":
                raise
            changed = None  # a force push dropped the old head: check every watched file
        if changed is None:
            old = None
            changed = [(p, "added") for p in client.tree(head)]
        relevant = [(p, s) for p, s in changed if is_model_file(p)]
        if not relevant:
            return "skipped: no model files changed"
        outcome = check_pull_request(client, head, old or head, relevant, forced=False)
        open_fix_pull_request(client, outcome, head)  # only where .draftguard.yml turns it on
        return (f"done: main at {head[:12]}: {len(outcome.report.findings)} finding(s), "
                + ("fails" if outcome.fails() else "passes"))
