"""What a Hub Job does: a Job in (``hub_events.jobs_from_hub`` made it from a webhook), the shared
review of a Hub pull request's head against its target (``pr_check``), one sticky comment in the
discussion, and (for the repo's owner or org members) an acceptance test on the GPU queue out.
``HubHandler`` is the Job handler the queue calls, beside ``github_handler.GitHubHandler``.

In: a ``Job`` and the ``Queue``; ``HubHandler(config)`` talks to the Hub through
``hosts.hub.HubPullRequestClient``.
Out: the sticky comment upserted in the discussion (the Hub has no reactions: the comment shows that
a command ran), an acceptance Job submitted to the gpu queue; the call returns the Job's one-line
result, or raises ``errors.Retry``.
"""

from __future__ import annotations

import logging
import os
import posixpath
import tempfile
from typing import TYPE_CHECKING, Any, Callable

from huey.constants import EmptyData
from huggingface_hub.errors import RevisionNotFoundError

from draftguard.bot.commands import RECHECK, parse_commands
from draftguard.bot.approvals import Approval, gpu_job_id, judge_command
from draftguard.jobs import Job, Queue, Retry
from draftguard.payloads import Acceptance
from draftguard.bot.hub_fix import open_fix_pull_request
from draftguard.bot.pr_check import check_pull_request, check_sections, read_settings, run_job
from draftguard.hosts.hub import OPEN_STATES, HubConfig, HubPullRequestClient, hub_refusal, hub_retry_delay
from draftguard.report.comment import render_acceptance_section, update_sticky
from draftguard.runner.gpu_job import fetch_prompts, run_acceptance_job  # backend, device, runner options
from draftguard.secrets import scrub
from draftguard.settings import Settings
from draftguard.snapshot import is_model_file

if TYPE_CHECKING:  # huggingface_hub is imported where a Hub job runs, not where this module is
    from huggingface_hub import DiscussionWithDetails

log = logging.getLogger("draftguard.bot")

AcceptanceRunner = Callable[[Job, HubPullRequestClient, Settings], "dict[str, Any]"]


# --- what a Hub Job does -------------------------------------------------------------------------

class HubHandler:
    """The queue's handler for Hub jobs (``source="hub"``). ``acceptance_runner(job, client,
    settings)`` returns the AcceptanceResult JSON dict; the default runs ``draftguard accept`` on the
    drafter's folder downloaded at the PR head."""

    # The method that runs each job kind; any other kind fails the job (``UnknownJobKind``).
    HANDLERS = {"branch": "_branch", "pull_request": "_pull_request", "comment": "_comment",
                "acceptance": "_acceptance"}

    def __init__(self, config: HubConfig, acceptance_runner: AcceptanceRunner | None = None):
        self.config = config
        self.acceptance_runner = acceptance_runner or run_acceptance_subprocess
        self.handlers = {kind: getattr(self, name) for kind, name in self.HANDLERS.items()}

    def client(self, job: Job) -> HubPullRequestClient:
        return HubPullRequestClient(self.config, job.repo, job.number)

    def __call__(self, job: Job, queue: Queue) -> str | None:
        # A push to main has no pull request, so no client.
        return run_job(job, queue, self.handlers, self.config, hub_retry_delay,
                       client=lambda job: None if job.kind == "branch" else self.client(job), refusal=hub_refusal,
                       host="Hub")

    # --- /recheck ------------------------------------------------------------------------------
    def _comment(self, job: Job, queue: Queue, client: HubPullRequestClient) -> str:
        comment = client.comment(job.data["comment_id"])
        if comment is None or comment.hidden:
            return "skipped: the comment is gone or hidden"
        if comment.author == client.me():
            return "skipped: the bot's own comment"
        if RECHECK not in parse_commands(comment.content):
            return "skipped: no /recheck"
        trusted, why = client.is_owner_or_member(comment.author)
        # The command approves the head its author saw (the Hub's time of the comment against when
        # the bot first learnt of the head), never a commit pushed after it.
        created = getattr(comment, "created_at", None)
        if created is not None:
            job.data["created_at"] = created.isoformat()
        head = client.head()
        approval = Approval(head, comment.author, "/recheck")
        if trusted:
            approval = judge_command(queue, job, head, by=comment.author, command="/recheck")
            if not approval.holds_for(head):
                trusted, why = False, approval.refusal(head)
        return self._pull_request(job, queue, client, forced_by=comment.author, gpu_allowed=(trusted, why),
                                  approval=approval)

    # --- the light check -----------------------------------------------------------------------
    def _pull_request(self, job: Job, queue: Queue, client: HubPullRequestClient, forced_by: str | None = None,
                      gpu_allowed: tuple[bool, str] | None = None, approval: Approval | None = None) -> str:
        """The light check of the pull request's head now. ``gpu_allowed`` (a command's verdict) holds
        only for the head its ``approval`` holds for: the head is read again here."""
        details = client.details()
        if not details.is_pull_request or details.status not in OPEN_STATES:
            return f"skipped: pull request {details.status}"
        # One check per PR head: jobs for the same PR (its "discussion" and "repo.content" webhooks
        # arrive together, pushes come in bursts) take turns here; each then sees the newest head.
        with queue.lock(f"pr:hub:{job.repo}#{job.number}", ttl=120.0, wait=60.0):
            head = client.head()
            if job.head_sha and head != job.head_sha:
                return f"skipped: superseded by {head[:12]}"
            if gpu_allowed is not None and gpu_allowed[0] and approval is not None and not approval.holds_for(head):
                gpu_allowed = (False, approval.refusal(head))
            return self._check_head(job, queue, client, details, head, forced_by, gpu_allowed)

    def _check_head(self, job: Job, queue: Queue, client: HubPullRequestClient, details: DiscussionWithDetails,
                    head: str, forced_by: str | None, gpu_allowed: tuple[bool, str] | None) -> str:
        checked_key = f"hub-checked:{job.repo}#{job.number}"
        # When the bot first learnt of this head: its delivery's arrival, else now (kept if earlier).
        queue.mark_head_seen("hub", job.repo, job.number, head, job.created if job.head_sha == head else None)
        if forced_by is None and _peek(queue, checked_key) == head:
            return f"skipped: {head[:12]} already checked"
        base_branch = client.default_branch()
        base = client.revision_sha(base_branch)
        relevant = [(p, s) for p, s in client.changed_files(base, head) if is_model_file(p)]
        if not relevant and forced_by is None:
            queue.store.put_data(checked_key, head.encode())
            return "skipped: no model files changed"
        # The light check and its base comparison are the GitHub bot's, on the Hub client.
        outcome = check_pull_request(client, head, base, relevant, forced=forced_by is not None)
        if forced_by is not None:
            # The Hub has no reactions: the comment itself shows that the command ran, and on what.
            outcome.notes.append(f"Rechecked at `{head[:12]}` for @{forced_by}.")
        light, matrix, wants_gpu = check_sections(outcome, head, base)
        acceptance_state, acceptance_detail, gpu_job = None, None, None
        if wants_gpu:
            trusted, why = gpu_allowed if gpu_allowed is not None else client.is_owner_or_member(details.author)
            if trusted:
                gpu_job = Job(id=gpu_job_id("hub", job, head, forced_by), source="hub", kind="acceptance", queue="gpu",
                              repo=job.repo, number=job.number, head_sha=head, base_sha=base,
                              data=Acceptance(outcome.drafters).to_data())
                acceptance_state, acceptance_detail = "queued", f"waiting for a GPU worker ({why})"
            else:
                acceptance_state = "skipped"
                asked = f"/recheck by @{forced_by}: " if forced_by else ""
                acceptance_detail = (f"{asked}{why}. GPU tests run only for the repo's owner or members of the "
                                     "organization that owns it; one of them can comment /recheck.")
        sections = {"light": light, "matrix": matrix,
                    "acceptance": render_acceptance_section(acceptance_state, detail=acceptance_detail)
                    if acceptance_state else None}
        if gpu_job is not None and (queue.get(gpu_job.id) or gpu_job).state != "queued":
            # A retry of this job after its GPU job already ran: leave that job's section alone.
            del sections["acceptance"]
            gpu_job = None
        client.upsert_sticky(lambda old: update_sticky(old, **sections))
        queue.store.put_data(checked_key, head.encode())
        if gpu_job is not None:
            queue.submit(gpu_job)  # after the comment says "queued", so "done" can never be overwritten
        return f"done: {outcome.title()}" + (", acceptance queued" if gpu_job else "")

    # --- a push to main ------------------------------------------------------------------------
    def _branch(self, job: Job, queue: Queue, client: None = None) -> str:
        """A push to main: check the watched files that changed; the result is the job's record
        (there is no pull request to comment on, so no pull-request ``client``)."""

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
        except RevisionNotFoundError:
            changed = None  # a force push dropped the old head: check every watched file
        if changed is None:
            old = None
            changed = [(p, "added") for p in client.tree(head)]
        relevant = [(p, s) for p, s in changed if is_model_file(p)]
        if not relevant:
            return "skipped: no model files changed"
        outcome = check_pull_request(client, head, old or head, relevant, forced=False)
        open_fix_pull_request(client, outcome, head)  # only where .draftguard.yml turns it on
        failed = outcome.fails()
        return f"done: main at {head[:12]}: {len(outcome.report.findings)} finding(s), " + ("fails" if failed else "passes")

    # --- the acceptance test -------------------------------------------------------------------
    def _acceptance(self, job: Job, queue: Queue, client: HubPullRequestClient) -> str:
        if client.head() != job.head_sha:
            return "skipped: superseded by a newer head"
        settings = read_settings(client)
        with queue.lock(f"pr:hub:{job.repo}#{job.number}"):
            client.upsert_sticky(lambda old: update_sticky(old, acceptance=render_acceptance_section("running")))
        try:
            result = self.acceptance_runner(job, client, settings)
            section = render_acceptance_section("done", result)
            status = (result.get("verdict") or {}).get("status", "inconclusive")
        except Retry:
            raise
        except Exception as exc:
            if hub_retry_delay(exc, job.attempts) is not None:
                raise
            section = render_acceptance_section("error", detail=scrub(f"{type(exc).__name__}: {exc}",
                                                                      self.config.secrets))
            status = "error"
        with queue.lock(f"pr:hub:{job.repo}#{job.number}"):
            client.upsert_sticky(lambda old: update_sticky(old, acceptance=section))
        return f"done: acceptance {status}"


def _peek(queue: Queue, key: str) -> str | None:
    value = queue.store.peek_data(key)
    return None if value is EmptyData else bytes(value).decode()


def run_acceptance_subprocess(job: Job, client: HubPullRequestClient, settings: Settings) -> dict[str, Any]:
    """The default acceptance runner: download the drafter's folder at the PR head (huggingface_hub
    cache) and run ``draftguard accept --format json`` on it (needs the ``runner`` extra on the GPU
    worker)."""
    folder = posixpath.dirname(job.data["drafters"][0])
    local = client.download_folder(folder, job.head_sha or client.ref)
    with tempfile.TemporaryDirectory(prefix="draftguard-prompts-") as tmp:
        prompts = fetch_prompts(client, settings, tmp)
        return run_acceptance_job(settings.target, os.path.join(local, folder), settings, prompts=prompts)
