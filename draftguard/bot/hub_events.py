"""The Hub bot: Hub webhook payloads in, Jobs on the shared queue, one sticky comment per Hub PR out.

``jobs_from_hub`` is pure (payload in, Jobs or a reason out). The Hub webhook payload (version 3,
as huggingface_hub's ``WebhookPayload`` models it) has ``event.scope`` and ``event.action``, ``repo``,
``discussion``, ``comment`` and ``updatedRefs``. What counts:

- ``repo.content``: each of ``updatedRefs`` (ref, oldSha, newSha). ``refs/pr/N`` is new commits on
  pull request N; ``refs/heads/main`` is a push to main. ``repo.headSha`` is never used: the
  client's own payload model drops it, and it is main's head, not a PR's.
- ``discussion`` (a pull request created or updated while open or draft): check ``refs/pr/N``
  against its target branch.
- ``discussion.comment`` created on a pull request, with ``/recheck`` alone on a line. The GPU test
  reruns only for the repo's owner or members of the owning org; others get the light check and a
  note why no GPU run happened. The bot's own comments (they carry its hidden markers, and it checks
  the author) never trigger it.

The Hub sends no delivery id, so a Job id names what it is about: ``hub:{repo}#{N}@{sha}`` for a
PR head, ``...:comment:{id}`` for a comment. A redelivery, or the same head announced twice, is one
Job. Bursts coalesce: a job whose head is no longer the PR's head is skipped (the newest wins), and a
head already checked is not checked again unless someone asks with ``/recheck``. The Hub allows
1,000 webhook triggers a day per webhook, so the bot answers each in milliseconds and runs at most
one check per PR head.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import posixpath
from typing import Any, Callable, Mapping

from draftguard.bot.commands import RECHECK, parse_commands
from draftguard.bot.hub import HubConfig, HubPullRequestClient, hub_retry_delay
from draftguard.bot.jobs import Job, Queue, Retry, command_saw_head, gpu_job_id
from draftguard.bot.webhooks import PayloadError, WebhookRefused, WebhookRoute

log = logging.getLogger("draftguard.bot")

PR_REF_PREFIX = "refs/pr/"
MAIN_REF = "refs/heads/main"
OPEN_STATES = ("open", "draft")
# Hidden markers the bot writes into its comments ("<!-- draftguard:sticky -->", replies).
BOT_MARKER = "<!-- draftguard:"

AcceptanceRunner = Callable[[Job, HubPullRequestClient, Any], "dict[str, Any]"]


class HubPayloadError(PayloadError):
    """The webhook body is JSON but not a Hub webhook payload (answered 400)."""


def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise HubPayloadError(f"{what} is missing or not an object")
    return value


def _pr_number(ref: str) -> int | None:
    if ref.startswith(PR_REF_PREFIX) and ref[len(PR_REF_PREFIX):].isdigit():
        return int(ref[len(PR_REF_PREFIX):])
    return None


def _valid_repo_id(name: str) -> bool:
    """A Hub repo id: ``namespace/name``, or a legacy name without a namespace (``gpt2``).

    Example::

        >>> [_valid_repo_id(n) for n in ("acme/m", "gpt2", "a/b/c", "../x", "")]
        [True, True, False, False, False]
    """
    parts = name.split("/")
    return 1 <= len(parts) <= 2 and all(p and p not in (".", "..") and len(p) <= 96 and
                                        all(c.isalnum() or c in "-_." for c in p) for p in parts)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def jobs_from_hub(payload: Mapping[str, Any]) -> tuple[list[Job], str]:
    """The Jobs a Hub webhook asks for (none, with the reason, when it asks for nothing).

    Example::

        >>> p = {"event": {"scope": "repo.content", "action": "update"},
        ...      "repo": {"type": "model", "name": "acme/m"},
        ...      "updatedRefs": [{"ref": "refs/pr/3", "oldSha": "a" * 40, "newSha": "b" * 40}]}
        >>> jobs, why = jobs_from_hub(p)
        >>> [(j.id, j.kind, j.number) for j in jobs], why
        ([('hub:acme/m#3@bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 'pull_request', 3)], 'queued')
    """
    event = _obj(payload.get("event"), "event")
    repo = _obj(payload.get("repo"), "repo")
    scope, action = event.get("scope"), event.get("action")
    name = repo.get("name")
    if not isinstance(scope, str) or not isinstance(name, str) or not _valid_repo_id(name):
        raise HubPayloadError("event.scope or repo.name is missing")
    if repo.get("type", "model") != "model":
        return [], f"ignored: {repo.get('type')} repo"
    if scope == "repo.content":
        jobs = []
        refs = payload.get("updatedRefs") or []
        if not isinstance(refs, list):
            raise HubPayloadError("updatedRefs is not a list")
        for ref in refs:
            ref = _obj(ref, "updatedRefs[]")
            new, old, name_ = ref.get("newSha"), ref.get("oldSha"), ref.get("ref")
            if not isinstance(name_, str) or not new:
                continue  # a deleted ref: nothing to check
            number = _pr_number(name_)
            if number is not None:
                jobs.append(Job(id=f"hub:{name}#{number}@{new}", source="hub", kind="pull_request", repo=name,
                                number=number, head_sha=new, data={"trigger": "push"}))
            elif name_ == MAIN_REF:
                jobs.append(Job(id=f"hub:{name}@main:{new}", source="hub", kind="branch", repo=name, number=0,
                                head_sha=new, base_sha=old or None, data={"ref": name_}))
        return jobs, "queued" if jobs else "ignored: no pull request or main ref updated"
    if scope not in ("discussion", "discussion.comment"):
        return [], f"ignored: {scope}"
    discussion = _obj(payload.get("discussion"), "discussion")
    number = discussion.get("num")
    if not isinstance(number, int) or number <= 0:
        raise HubPayloadError("discussion.num is missing")
    if not discussion.get("isPullRequest"):
        return [], "ignored: a discussion, not a pull request"
    if discussion.get("status") not in OPEN_STATES:
        return [], f"ignored: pull request {discussion.get('status')}"
    if scope == "discussion":
        if action not in ("create", "update"):
            return [], f"ignored: discussion {action}"
        # No head in this payload: the id dedupes redeliveries, the handler dedupes heads.
        return [Job(id=f"hub:{name}#{number}:discussion:{_digest([action, discussion])}", source="hub",
                    kind="pull_request", repo=name, number=number, data={"trigger": f"discussion {action}"})], "queued"
    comment = _obj(payload.get("comment"), "comment")
    if action != "create":
        return [], f"ignored: comment {action}"
    if comment.get("hidden"):
        return [], "ignored: hidden comment"
    content = comment.get("content")
    if isinstance(content, str) and BOT_MARKER in content:
        return [], "ignored: the bot's own comment"
    commands = parse_commands(content) if isinstance(content, str) else None
    if commands is not None and RECHECK not in commands:
        return [], "ignored: no command"
    comment_id = comment.get("id")
    if not isinstance(comment_id, str) or not comment_id:
        raise HubPayloadError("comment.id is missing")
    author = _obj(comment.get("author"), "comment.author").get("id")
    return [Job(id=f"hub:{name}#{number}:comment:{comment_id}", source="hub", kind="comment", repo=name,
                number=number, data={"comment_id": comment_id, "author_id": author})], "queued"


# --- the webhook route ---------------------------------------------------------------------------

def hub_route(secret: str, path: str = "/webhooks/hub") -> WebhookRoute:
    """``POST /webhooks/hub`` for the edge: the Hub sends the webhook's secret verbatim in
    ``X-Webhook-Secret`` (no signature over the body), so it is compared in constant time before the
    body is read: missing is 401, wrong 403. 202 once queued.

    Example::

        >>> hub_route("s").path, hub_route("s").many
        ('/webhooks/hub', True)
    """
    expected = secret.encode()

    def admit(headers: Mapping[str, str]) -> None:
        given = headers.get("x-webhook-secret")
        if not given:
            raise WebhookRefused(401, "missing X-Webhook-Secret")
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected):
            raise WebhookRefused(403, "wrong X-Webhook-Secret")

    return WebhookRoute(path, "hub", to_jobs=lambda headers, payload: jobs_from_hub(payload), admit=admit,
                        many=True)


# --- what a Hub Job does -------------------------------------------------------------------------

class HubHandler:
    """The queue's handler for Hub jobs (``source="hub"``). ``acceptance_runner(job, client,
    settings)`` returns the AcceptanceResult JSON dict; the default runs ``draftguard accept`` on the
    drafter's folder downloaded at the PR head."""

    def __init__(self, config: HubConfig, acceptance_runner: AcceptanceRunner | None = None):
        self.config = config
        self.acceptance_runner = acceptance_runner or run_acceptance_subprocess

    def client(self, job: Job) -> HubPullRequestClient:
        return HubPullRequestClient(self.config, job.repo, job.number)

    def __call__(self, job: Job, queue: Queue) -> str | None:
        from draftguard.bot.pipeline import run_job

        kinds = {"branch": lambda job, queue, client: self._branch(job), "comment": self._comment,
                 "pull_request": self._pull_request, "acceptance": self._acceptance}
        # A push to main has no pull request, so no client.
        return run_job(job, queue, kinds, self.config, hub_retry_delay,
                       client=lambda job: None if job.kind == "branch" else self.client(job))

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
        if trusted and not command_saw_head(queue, job, head):
            trusted, why = False, (f"the head moved to {head[:12]} after @{comment.author}'s /recheck, so it is "
                                   "not approved")
        return self._pull_request(job, queue, client, forced_by=comment.author, gpu_allowed=(trusted, why))

    # --- the light check -----------------------------------------------------------------------
    def _pull_request(self, job: Job, queue: Queue, client: HubPullRequestClient, forced_by: str | None = None,
                      gpu_allowed: tuple[bool, str] | None = None) -> str:
        details = client.details()
        if not details.is_pull_request or details.status not in OPEN_STATES:
            return f"skipped: pull request {details.status}"
        # One check per PR head: jobs for the same PR (its "discussion" and "repo.content" webhooks
        # arrive together, pushes come in bursts) take turns here; each then sees the newest head.
        with queue.lock(f"pr:hub:{job.repo}#{job.number}", ttl=120.0, wait=60.0):
            head = client.head()
            if job.head_sha and head != job.head_sha:
                return f"skipped: superseded by {head[:12]}"
            return self._check_head(job, queue, client, details, head, forced_by, gpu_allowed)

    def _check_head(self, job: Job, queue: Queue, client: HubPullRequestClient, details: Any, head: str,
                    forced_by: str | None, gpu_allowed: tuple[bool, str] | None) -> str:
        from draftguard.bot.pipeline import check_pull_request, check_sections, check_title
        from draftguard.snapshot import is_model_file
        from draftguard.report.comment import render_acceptance_section, update_sticky

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
                              data={"drafters": outcome.drafters})
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
        return f"done: {check_title(outcome)}" + (", acceptance queued" if gpu_job else "")

    # --- a push to main ------------------------------------------------------------------------
    def _branch(self, job: Job) -> str:
        """A push to main: check the watched files that changed; the result is the job's record
        (there is no pull request to comment on)."""
        from draftguard.bot.pipeline import check_pull_request
        from draftguard.snapshot import is_model_file

        client = HubPullRequestClient(self.config, job.repo, 0)
        now = client.revision_sha("main")
        head = job.head_sha or now
        if head != now:
            return f"skipped: superseded by {now[:12]}"  # that push has its own job
        old = job.base_sha
        if old and set(old) == {"0"}:
            old = None
        from huggingface_hub.errors import RevisionNotFoundError

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
        report = outcome.report
        failed = report.fails(outcome.settings.fail_on) or bool(report.errors)
        return f"done: main at {head[:12]}: {len(report.findings)} finding(s), " + ("fails" if failed else "passes")

    # --- the acceptance test -------------------------------------------------------------------
    def _acceptance(self, job: Job, queue: Queue, client: HubPullRequestClient) -> str:
        from draftguard.bot.github import scrub
        from draftguard.bot.pipeline import read_settings
        from draftguard.report.comment import render_acceptance_section, update_sticky

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
    from huey.constants import EmptyData

    value = queue.store.peek_data(key)
    return None if value is EmptyData else bytes(value).decode()


def run_acceptance_subprocess(job: Job, client: HubPullRequestClient, settings: Any) -> dict[str, Any]:
    """The default acceptance runner: download the drafter's folder at the PR head (huggingface_hub
    cache) and run ``draftguard accept --format json`` on it (needs the ``runner`` extra on the GPU
    worker)."""
    import tempfile

    from draftguard.runner.gpu_job import fetch_prompts, run_acceptance_job  # backend, device, runner options

    folder = posixpath.dirname(job.data["drafters"][0])
    local = client.download_folder(folder, job.head_sha or client.ref)
    with tempfile.TemporaryDirectory(prefix="draftguard-prompts-") as tmp:
        prompts = fetch_prompts(client, settings, tmp)
        return run_acceptance_job(settings.target, os.path.join(local, folder), settings, prompts=prompts)
