"""What a GitHub Job does: a Job in (``github_events.job_from_github`` made it from a webhook), the
shared review of head against base (``pr_check``), one sticky comment, check runs, and (for trusted pull
requests) an acceptance test on the GPU queue out. ``GitHubHandler`` is the Job handler the queue calls.

In: a ``Job`` (kind ``pull_request``, ``comment`` or ``acceptance``) and the ``Queue``;
``GitHubHandler(config)`` talks to GitHub through ``hosts.github.PullRequestClient``.
Out: the sticky comment upserted, check runs published, replies and reactions to commands, an
acceptance Job submitted to the gpu queue; the call returns the Job's one-line result
("done: ...", "skipped: ..."), or raises ``errors.Retry`` for a transient fault.
"""

from __future__ import annotations

import logging
import os
import posixpath
import tempfile
from typing import Any, Callable

from github import GithubException
from huey.constants import EmptyData

from draftguard.bot.commands import OK_TO_TEST, may_command
from draftguard.bot.approvals import Approval, gpu_job_id, judge_command
from draftguard.jobs import Job, Queue, Retry
from draftguard.payloads import Acceptance
from draftguard.bot.pr_check import check_pull_request, check_sections, read_settings, run_job
from draftguard.bot.suggestions import post_suggestions
from draftguard.check.findings import Report
from draftguard.hosts.github import GitHubConfig, PullRequestClient, bot_login, connect, refusal, retry_delay
from draftguard.report.comment import render_acceptance_section, update_sticky
from draftguard.runner.gpu_job import fetch_prompts, run_acceptance_job  # backend, device, runner options
from draftguard.secrets import scrub
from draftguard.settings import Settings
from draftguard.snapshot import is_model_file

log = logging.getLogger("draftguard.bot")

CONFIG_CHECK = "draftguard/config"
ACCEPTANCE_CHECK = "draftguard/acceptance"
# GitHub has no check-mark reaction; "+1" is the closest it offers.
REACT_START, REACT_DONE = "eyes", "+1"
_LEVEL = {"error": "failure", "warning": "warning", "info": "notice"}

AcceptanceRunner = Callable[[Job, PullRequestClient, Settings], "dict[str, Any]"]


class GitHubHandler:
    """The queue's handler for GitHub jobs. ``acceptance_runner(job, client, settings)`` returns the
    AcceptanceResult JSON dict; the default runs ``draftguard accept`` on the drafter's files."""

    # The method that runs each job kind; any other kind fails the job (``UnknownJobKind``).
    HANDLERS = {"pull_request": "_pull_request", "comment": "_comment", "acceptance": "_acceptance"}

    def __init__(self, config: GitHubConfig, acceptance_runner: AcceptanceRunner | None = None):
        self.config = config
        self.acceptance_runner = acceptance_runner or run_acceptance_subprocess
        self.handlers = {kind: getattr(self, name) for kind, name in self.HANDLERS.items()}

    def __call__(self, job: Job, queue: Queue) -> str | None:
        return run_job(job, queue, self.handlers, self.config, retry_delay, client=self.client, refusal=refusal,
                       host="GitHub")

    def client(self, job: Job) -> PullRequestClient:
        gh = connect(self.config, job.installation_id)
        return PullRequestClient(gh, job.repo, job.number, me=bot_login(self.config, gh))

    # --- comments ------------------------------------------------------------------------------
    def _comment(self, job: Job, queue: Queue, client: PullRequestClient) -> str:
        user, comment_id = job.data.get("user"), job.data.get("comment_id")
        permission = client.permission(user) if user else None
        if not may_command(permission, job.data.get("user_type")):
            if comment_id is not None:
                client.reply_once(
                    comment_id,
                    f"Thanks, @{user}! Only people with write access to this repository can run "
                    "`/recheck` or `/ok-to-test`. A maintainer can run it for you.",
                )
            return f"skipped: {user} ({permission or 'no access'}) may not run commands"
        if comment_id is not None:
            client.react(comment_id, REACT_START)
        head = client.pull(refresh=True).head.sha
        # The command approves the head its author saw: the one the bot knew of when it was written.
        # A head pushed after it (a fork racing the job) is checked, but not trusted on its word.
        # The "Re-run" button names the commit of its check run; an older commit's run approves no newer head.
        approval = judge_command(queue, job, head, by=user, command="command", pinned=job.data.get("head_sha"))
        saw = approval.holds_for(head)
        if saw and OK_TO_TEST in job.data.get("commands", []):
            queue.store.put_data(f"trust:{job.repo}#{job.number}", head.encode())
        result = self._pull_request(job, queue, client, forced_by=user, approval=approval)
        # The light check reads the head again: a push can land between the two reads.
        checked = client.pull().head.sha
        if (not saw or checked != head) and comment_id is not None:
            client.reply_once(
                comment_id,
                f"@{user}, the pull request's head moved to `{checked[:12]}` after your command, so it was checked "
                "but not approved for a GPU test. Comment again to approve that commit.",
            )
        if comment_id is not None:
            client.react(comment_id, REACT_DONE)
        return result

    # --- the light check -----------------------------------------------------------------------
    def _pull_request(self, job: Job, queue: Queue, client: PullRequestClient, forced_by: str | None = None,
                      approval: Approval | None = None) -> str:
        """The light check of the pull request's head now. A command (``forced_by``) trusts only the
        head its ``approval`` holds for: the pull request is read again here, and a fork may have pushed since."""
        if job.kind == "pull_request" and job.head_sha:
            queue.mark_head_seen(job.source, job.repo, job.number, job.head_sha, job.created)
        pull = client.pull(refresh=True)
        head, base = pull.head.sha, pull.base.sha
        if forced_by is None and job.head_sha and head != job.head_sha:
            return f"skipped: superseded by {head[:12]}"
        changed = client.changed_files()
        relevant = [(p, s) for p, s in changed if is_model_file(p)]
        if not relevant and forced_by is None:
            # A later push can take the model files out of the PR: then the old findings must go.
            if client.find_sticky() is not None:
                note = (f"### Light check at `{head[:12]}`\n\nThis pull request no longer changes a model "
                        "file (config.json, safetensors index, tokenizer, .draftguard.yml); nothing to check.")
                with queue.lock(f"pr:{job.repo}#{job.number}"):
                    client.upsert_sticky(lambda old: update_sticky(old, light=note, matrix=None, acceptance=None))
                return "done: no model files changed any more"
            return "skipped: no model files changed"
        outcome = check_pull_request(client, head, base, relevant, forced=forced_by is not None)
        report = outcome.report
        light, matrix, wants_gpu = check_sections(outcome, head, base)
        acceptance_state, acceptance_detail, gpu_job = None, None, None
        if wants_gpu:
            trusted, why = self._trusted(job, queue, client, head,
                                         forced_by if approval is not None and approval.holds_for(head) else None)
            if trusted:
                gpu_job = Job(id=gpu_job_id("github", job, head, forced_by), source="github", kind="acceptance",
                              queue="gpu", repo=job.repo, number=job.number, head_sha=head, base_sha=base,
                              installation_id=job.installation_id, data=Acceptance(outcome.drafters).to_data())
                acceptance_state, acceptance_detail = "queued", f"waiting for a GPU worker ({why})"
            else:
                acceptance_state = "skipped"
                acceptance_detail = (f"{why}; GPU tests run only for trusted pull requests. A maintainer can "
                                     "comment /ok-to-test to run it.")
        failed = outcome.fails()
        title = outcome.title()
        sections = {"light": light, "matrix": matrix, "acceptance": render_acceptance_section(acceptance_state, detail=acceptance_detail)
                    if acceptance_state else None}
        if gpu_job is not None and (queue.get(gpu_job.id) or gpu_job).state != "queued":
            # This head's GPU job ran already (a retry, a reopened PR, a replayed delivery): one GPU
            # run per head, and that run's section stays as it is.
            del sections["acceptance"]
            gpu_job = None
        with queue.lock(f"pr:{job.repo}#{job.number}"):
            client.upsert_sticky(lambda old: update_sticky(old, **sections))
            post_suggestions(client, outcome, head)
        # Check runs belong to the commit, which several pull requests can share.
        pr_id = f"{job.repo}#{job.number}"
        with queue.lock(f"sha:{job.repo}@{head}"):
            publish_check_run(
                client, CONFIG_CHECK, head, status="completed", conclusion="failure" if failed else "success",
                title=title, summary=light, annotations=annotations(report), external_id=pr_id)
            if gpu_job is not None:
                publish_check_run(client, ACCEPTANCE_CHECK, head, status="queued", title="queued",
                                  summary="Waiting for a GPU worker.", external_id=pr_id)
        if gpu_job is not None:
            queue.submit(gpu_job)  # after the comment says "queued", so "done" can never be overwritten
        return f"done: {title}" + (", acceptance queued" if gpu_job else "")

    def _trusted(self, job: Job, queue: Queue, client: PullRequestClient, head: str,
                 forced_by: str | None) -> tuple[bool, str]:
        if forced_by:
            return True, f"requested by @{forced_by}"
        trust = queue.store.peek_data(f"trust:{job.repo}#{job.number}")
        if trust is not EmptyData and bytes(trust).decode() == head:
            return True, "marked /ok-to-test"
        author = job.data.get("author")
        # A writer's pull request is trusted only from a branch of this repo or of the writer's own
        # fork: a third party's fork takes pushes from others (R10 of issue 25).
        head_repo = getattr(getattr(client.pull().head, "repo", None), "full_name", None)
        if author and head_repo != job.repo and (head_repo or "").partition("/")[0].lower() != author.lower():
            return False, f"the head branch is in {head_repo or 'a deleted fork'}, which others can push to"
        if author and may_command(client.permission(author), "User"):
            return True, f"@{author} has write access"
        return False, "the author has no write access"

    # --- the acceptance test -------------------------------------------------------------------
    def _acceptance(self, job: Job, queue: Queue, client: PullRequestClient) -> str:
        pull = client.pull(refresh=True)
        if pull.head.sha != job.head_sha:
            return f"skipped: superseded by {pull.head.sha[:12]}"
        settings = read_settings(client)
        with queue.lock(f"pr:{job.repo}#{job.number}"):
            client.upsert_sticky(lambda old: update_sticky(old, acceptance=render_acceptance_section("running")))
        with queue.lock(f"sha:{job.repo}@{job.head_sha}"):
            publish_check_run(client, ACCEPTANCE_CHECK, job.head_sha, status="in_progress", title="running")
        try:
            result = self.acceptance_runner(job, client, settings)
            section = render_acceptance_section("done", result)
            status = (result.get("verdict") or {}).get("status", "inconclusive")
            conclusion = {"pass": "success", "fail": "failure"}.get(status, "neutral")
            title = f"τ = {result.get('mean_acceptance_length')}: {status}"
        except Retry:
            raise
        except Exception as exc:
            if retry_delay(exc, job.attempts) is not None:
                raise
            message = scrub(f"{type(exc).__name__}: {exc}", self.config.secrets)
            section, conclusion, title, status = render_acceptance_section("error", detail=message), "neutral", "error", "error"
        with queue.lock(f"pr:{job.repo}#{job.number}"):
            client.upsert_sticky(lambda old: update_sticky(old, acceptance=section))
        with queue.lock(f"sha:{job.repo}@{job.head_sha}"):
            publish_check_run(client, ACCEPTANCE_CHECK, job.head_sha, status="completed", conclusion=conclusion,
                                    title=title, summary=section)
        return f"done: acceptance {status}"


def publish_check_run(client: PullRequestClient, name: str, head_sha: str, **kwargs: Any) -> int | None:
    """Create or update a check run. Without the right to write checks (a personal token; GitHub only
    lets Apps and Actions' token write them) this logs one warning and the sticky comment carries the
    result alone, instead of failing the job."""
    try:
        return client.upsert_check_run(name, head_sha, **kwargs)
    except GithubException as exc:
        if exc.status in (403, 404) and retry_delay(exc) is None:
            log.warning("%s: cannot write check run %s (HTTP %s); check runs need a GitHub App "
                        "with checks: write", client.repo_name, name, exc.status)
            return None
        raise


def annotations(report: Report) -> list[dict[str, Any]]:
    """Check-run annotations, one per finding, on the key's line of the repo's config.json."""
    out = []
    for f in report.findings:
        line = f.line or 1
        out.append({
            "path": f.file, "start_line": line, "end_line": line, "annotation_level": _LEVEL[f.severity.value],
            "title": f"{f.rule}: {f.key}"[:255], "message": f.message[:64000],
            "raw_details": f"config.json: {f.raw!r}\nmodel code reads: {f.resolved!r}"[:64000],
        })
    for e in report.errors:
        line = e.line or 1
        out.append({"path": e.file or e.source, "start_line": line, "end_line": line, "annotation_level": "failure",
                    "title": "draftguard could not check this", "message": e.message[:64000]})
    return out


def run_acceptance_subprocess(job: Job, client: PullRequestClient, settings: Settings) -> dict[str, Any]:
    """The default acceptance runner: fetch the drafter folder at the head commit through the API
    (Git LFS files as their real bytes, checked against their pointers) and the prompt file the
    settings name, then run ``draftguard accept --format json`` on them (needs the ``runner`` extra
    on the GPU worker)."""

    drafter = job.data["drafters"][0]
    folder = posixpath.dirname(drafter)
    with tempfile.TemporaryDirectory(prefix="draftguard-accept-") as tmp:
        local = os.path.join(tmp, "drafter")
        os.mkdir(local)
        client.download_folder(folder, job.head_sha, local)
        prompts = fetch_prompts(client, settings, tmp)
        return run_acceptance_job(settings.target, local, settings, prompts=prompts)
