"""The one pull-request flow, for every host: what a pull request's Job does, told once.

1. read the head afresh; skip a closed pull request or a superseded head;
2. find the changed model files, or clear the sticky comment when none are left;
3. the light check (``pr_check.check_pull_request``) with settings from the default branch;
4. the sticky comment's sections;
5. trust: a command's approval (``approvals.judge_command``), else an ``/ok-to-test`` mark on this
   head, else the host's rule for who opened the pull request;
6. one GPU job per head, or one per trusted command; a head whose GPU job ran keeps its section;
7. the sticky comment, and the host's status (GitHub's check runs) and suggestions where it has them;
8. the GPU job, submitted after the comment says "queued";
9. the acceptance test on the GPU worker: "running", then the result or the error.

A host (``hosts/base.PullRequestHost``) brings only what differs: how it reads and writes, who may
command it, whose pull requests it trusts. Every trust and limit rule lives here or beneath
(``approvals``, ``pr_check``), once.

In: a ``Job`` (kinds ``pull_request``, ``comment``, ``acceptance``), the ``Queue``, and a ``host_for(job)``
that gives the job's ``PullRequestHost``.
Out: the sticky comment, replies, statuses and a GPU Job written through the host; the Job's one-line
result ("done: ...", "skipped: ..."), or ``errors.Retry`` for a transient fault.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import tempfile
from typing import Any, Callable

from draftguard.bot import command_limit
from draftguard.bot.approvals import Approval, gpu_job_id, judge_command
from draftguard.bot.commands import OK_TO_TEST
from draftguard.bot.pr_check import check_pull_request, check_sections, launch_paths, read_settings, run_job
from draftguard.check.findings import Report
from draftguard.hosts.base import CommandCall, PullRequestHost, Trust
from draftguard.hosts.retry import DelayOf
from draftguard.jobs import Job, Queue, Retry
from draftguard.payloads import Acceptance
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

AcceptanceRunner = Callable[[Job, Any, Settings], "dict[str, Any]"]


class PullRequestFlow:
    """The queue's handler for one host's pull-request Jobs. ``host_for(job)`` gives the job's
    ``PullRequestHost``; ``acceptance_runner(job, host, settings)`` returns the AcceptanceResult JSON
    dict (the default runs ``draftguard accept`` on the drafter's folder at the head)."""

    # The method that runs each job kind; a host adds its own (the Hub's push to main).
    HANDLERS = {"pull_request": "pull_request", "comment": "comment", "acceptance": "acceptance"}

    def __init__(self, config: Any, *, label: str, retry_delay: DelayOf, refusal: Any,
                 acceptance_runner: AcceptanceRunner | None = None):
        self.config = config
        self.label = label
        self.retry_delay = retry_delay
        self.refusal = refusal
        self.acceptance_runner = acceptance_runner or run_acceptance_subprocess
        self.handlers = {kind: getattr(self, name) for kind, name in self.HANDLERS.items()}
        self.command_limit = command_limit.limit_from_env()  # per pull request and author, per hour
        self.pr_command_limit = command_limit.pr_limit_from_env()  # per pull request, everyone's, per hour

    def host_for(self, job: Job) -> Any:
        raise NotImplementedError  # each host's handler gives its PullRequestHost

    def __call__(self, job: Job, queue: Queue) -> str | None:
        return run_job(job, queue, self.handlers, self.config, self.retry_delay, client=self.host_for,
                       refusal=self.refusal, host=self.label)

    # --- a command -----------------------------------------------------------------------------
    def comment(self, job: Job, queue: Queue, host: PullRequestHost) -> str:
        call = host.command()
        if isinstance(call, str):
            return call
        taken = command_limit.take(queue, f"{job.source}:{job.repo}#{job.number}:{call.by}", self.command_limit)
        if not taken.ok:
            # Before the trust check: a stranger's commands get a reply (GitHub) or a forced check (the
            # Hub) each, so the limit counts everyone's; the first one over it is answered, once.
            if taken.tell and call.comment_id is not None:
                host.reply_once(call.comment_id, command_limit.note(call.by, call.label, self.command_limit))
            return f"skipped: {call.by} ran {taken.count} commands on this pull request within the hour (limit {self.command_limit})"
        # and everyone's together: a new account per command (the Hub) gets no more than this
        every = command_limit.take(queue, f"{job.source}:{job.repo}#{job.number}", self.pr_command_limit)
        if not every.ok:
            if every.tell and call.comment_id is not None:
                host.reply_once(call.comment_id, command_limit.note_pr(call.by, call.label, self.pr_command_limit))
            return (f"skipped: {every.count} commands on this pull request within the hour "
                    f"(limit {self.pr_command_limit}, everyone's)")
        trust = host.may_command(call)
        if not trust.ok and not host.strangers_may_recheck:
            if call.comment_id is not None:
                host.reply_once(call.comment_id, (
                    f"Thanks, @{call.by}! Only people with write access to this repository can run "
                    "`/recheck` or `/ok-to-test`. A maintainer can run it for you."))
            return f"skipped: {call.by} may not run commands ({trust.why})"
        react = getattr(host, "react", None)
        if react is not None and call.comment_id is not None:
            react(call.comment_id, REACT_START)
        head = host.head()
        # The command approves the head its author saw: the one the bot knew of when it was written.
        # A head pushed after it (a fork racing the job) is checked, but not trusted on its word.
        approval = None
        if trust.ok:
            approval = judge_command(queue, job, head, by=call.by, command=call.label, pinned=call.pinned,
                                     created_at=call.created_at)
            if approval.holds_for(head) and OK_TO_TEST in call.commands:
                queue.put(_key("trust", job), head.encode())
        result, checked = self._check(job, queue, host, call=call, trust=trust, approval=approval)
        if approval is not None and call.comment_id is not None and checked is not None \
                and not approval.holds_for(checked):
            host.reply_once(call.comment_id, (
                f"@{call.by}, the pull request's head moved to `{checked[:12]}` after your command, so it was "
                "checked but not approved for a GPU test. Comment again to approve that commit."))
        if react is not None and call.comment_id is not None:
            react(call.comment_id, REACT_DONE)
        return result

    # --- the light check -----------------------------------------------------------------------
    def pull_request(self, job: Job, queue: Queue, host: PullRequestHost) -> str:
        return self._check(job, queue, host)[0]

    def _check(self, job: Job, queue: Queue, host: PullRequestHost, *, call: CommandCall | None = None,
               trust: Trust | None = None, approval: Approval | None = None) -> tuple[str, str | None]:
        """The light check of the pull request's head now, and the head it checked (None when
        skipped). One check per pull request at a time: jobs for the same one (a push and a command,
        the Hub's two webhooks per push) take turns, and each then sees the newest head."""
        with queue.lock(_key("pr", job), ttl=120.0):  # busy: Busy, the job runs again in 2 s
            # Both read once the lock is held: a head read before waiting for it may be gone by now.
            state = host.closed()
            if state is not None:
                return f"skipped: pull request {state}", None
            head = host.head()
            if call is None and job.head_sha and head != job.head_sha:
                return f"skipped: superseded by {head[:12]}", None
            # When the bot first learnt of this head: its delivery's arrival, else now (kept if earlier).
            queue.mark_head_seen(job.source, job.repo, job.number, head, job.created if job.head_sha == head else None)
            checked, by = (_peek(queue, _key("checked", job)) or "").partition(" ")[::2]
            # Another job checked this head; this one's own mark (it died after writing it, before its
            # record said done) is no reason to skip: it runs again, and its writes are idempotent.
            if call is None and host.announces_heads_twice and checked == head and by != job.id:
                return f"skipped: {head[:12]} already checked", None
            return self._check_head(job, queue, host, head, call, trust, approval), head

    def _check_head(self, job: Job, queue: Queue, host: PullRequestHost, head: str, call: CommandCall | None,
                    trust: Trust | None, approval: Approval | None) -> str:
        base = host.base()
        listing = host.changed_files(base, head)
        relevant = [(p, s) for p, s in listing if is_model_file(p)]
        changed = [p for p, _ in listing]
        # A pull request that changes no model file is still checked when it changes a launch file the
        # default branch's settings list under `launch:` (one settings read, only then).
        launches = bool(changed) and not relevant and call is None and bool(launch_paths(read_settings(host), changed))
        if not relevant and call is None and not launches:
            queue.put(_key("checked", job), f"{head} {job.id}".encode())  # the head, and which job checked it
            # A later push can take the model files out of the PR: then the old findings must go.
            if host.find_sticky() is None:
                return "skipped: no model files changed"
            note = (f"### Light check at `{head[:12]}`\n\nThis pull request no longer changes a model "
                    "file (config.json, safetensors index, tokenizer, .draftguard.yml); nothing to check.")
            host.upsert_sticky(lambda old: update_sticky(old, light=note, matrix=None, acceptance=None))
            return "done: no model files changed any more"
        outcome = check_pull_request(host, head, base, relevant, forced=call is not None, changed=changed)
        if call is not None and not hasattr(host, "react"):
            # Without reactions, the comment itself shows that the command ran, and on what.
            outcome.notes.append(f"Rechecked at `{head[:12]}` for @{call.by}.")
        sections, wants_gpu = check_sections(outcome, head, base)
        light = sections["light"] or ""
        gpu_job = None
        if wants_gpu:
            ok, why, forced_by = self._gpu_trust(job, queue, host, head, call, trust, approval)
            if forced_by is not None and queue.get(gpu_job_id(job.source, job, head, None)) is None:
                # A head's first GPU run takes the head's own id, whoever asked: a later reopen, replay
                # or stranger's /recheck trusted by the /ok-to-test mark or the author then finds it.
                forced_by = None
            if ok:
                asked = call.asked if call is not None else None
                gpu_job = Job(id=gpu_job_id(job.source, job, head, forced_by, asked), source=job.source, kind="acceptance",
                              queue="gpu", repo=job.repo, number=job.number, head_sha=head, base_sha=base,
                              installation_id=job.installation_id, data=Acceptance(outcome.drafters).to_data())
                sections["acceptance"] = render_acceptance_section(
                    "queued", detail=f"waiting for a GPU worker ({why})" + "".join(
                        f"; not run: {path}: {reason}" for path, reason in sorted(outcome.untested.items())))
            else:
                sections["acceptance"] = render_acceptance_section("skipped", detail=f"{why}. {host.trust_hint}")
                ran = queue.get(gpu_job_id(job.source, job, head, None))
                if ran is not None and ran.state != "queued":
                    del sections["acceptance"]  # this head's run stands: a refusal now does not hide it
            if gpu_job is not None and (queue.get(gpu_job.id) or gpu_job).state != "queued":
                # This head's GPU job ran already (a retry, a reopened PR, a replayed delivery): one
                # GPU run per head, and that run's section stays as it is.
                del sections["acceptance"]
                gpu_job = None
            if gpu_job is not None and forced_by is not None and _gpu_busy(queue, job, head, gpu_job.id):
                # A rerun of this head is queued or running: this press joins it (one at a time per head).
                del sections["acceptance"]
                gpu_job = None
        else:  # no GPU test asked for: none, or the drafters' plain reason (check_sections)
            sections.setdefault("acceptance", None)
        host.upsert_sticky(lambda old: update_sticky(old, **sections))
        suggest = getattr(host, "post_suggestions", None)
        if suggest is not None:
            suggest(outcome, head)
        publish = getattr(host, "publish_status", None)
        if publish is not None:
            # Statuses belong to the commit, which several pull requests can share.
            pr_id = f"{job.repo}#{job.number}"
            with queue.lock(f"sha:{job.source}:{job.repo}@{head}"):
                notes = annotations(outcome.report)
                more = len(notes) - MAX_ANNOTATIONS
                publish(CONFIG_CHECK, head, status="completed", conclusion="failure" if outcome.fails() else "success",
                        title=outcome.title(), summary=light, annotations=notes[:MAX_ANNOTATIONS],
                        text=(f"{MAX_ANNOTATIONS} annotations shown (errors first), and {more} more in the sticky "
                              "comment." if more > 0 else None), external_id=pr_id)
                if gpu_job is not None:
                    publish(ACCEPTANCE_CHECK, head, status="queued", title="queued",
                            summary="Waiting for a GPU worker.", external_id=pr_id)
        queue.put(_key("checked", job), f"{head} {job.id}".encode())  # the head, and which job checked it
        if gpu_job is not None:
            queue.put(_key("gpu", job) + f"@{head}", gpu_job.id.encode())  # this head's latest GPU job
            queue.submit(gpu_job)  # after the comment says "queued", so "done" can never be overwritten
        return f"done: {outcome.title()}" + (", acceptance queued" if gpu_job else "")

    def _gpu_trust(self, job: Job, queue: Queue, host: PullRequestHost, head: str, call: CommandCall | None,
                   trust: Trust | None, approval: Approval | None) -> tuple[bool, str, str | None]:
        """Whether this head gets a GPU test, why, and who forced a rerun (only a trusted command whose
        approval holds for this head: anyone else's command may not run the GPU again)."""
        if call is not None and trust is not None and trust.ok and approval is not None and approval.holds_for(head):
            return True, f"requested by @{call.by}", call.by
        if _peek(queue, _key("trust", job)) == head:
            return True, "marked /ok-to-test", None
        own = host.author_trust()
        if own.ok:
            return True, own.why, None
        if call is not None and trust is not None:
            why = trust.why if not trust.ok else approval.refusal(head) if approval is not None else own.why
            return False, f"{call.label} by @{call.by}: {why}", None
        return False, own.why, None

    # --- the acceptance test -------------------------------------------------------------------
    def acceptance(self, job: Job, queue: Queue, host: PullRequestHost) -> str:
        head = host.head()
        if head != job.head_sha:
            return f"skipped: superseded by {head[:12]}"
        publish = getattr(host, "publish_status", None)
        # A run's outcome is kept before it is written: a retry (the comment's lock stayed busy, the
        # host answered 5xx) writes it again instead of running the GPU test again.
        saved = queue.peek(f"accepted:{job.id}")
        if saved is not None:
            section, conclusion, title, status = json.loads(saved)
        else:
            settings = read_settings(host)
            with queue.lock(_key("pr", job)):
                host.upsert_sticky(lambda old: update_sticky(old, acceptance=render_acceptance_section("running")))
            if publish is not None:
                with queue.lock(f"sha:{job.source}:{job.repo}@{head}"):
                    publish(ACCEPTANCE_CHECK, head, status="in_progress", title="running")
            try:
                result = self.acceptance_runner(job, host, settings)
                section = render_acceptance_section("done", result)
                status = (result.get("verdict") or {}).get("status", "inconclusive")
                conclusion = {"pass": "success", "fail": "failure"}.get(status, "neutral")
                title = f"τ = {result.get('mean_acceptance_length')}: {status}"
            except Retry:
                raise
            except Exception as exc:
                if self.retry_delay(exc, job.attempts) is not None:
                    raise
                message = scrub(f"{type(exc).__name__}: {exc}", self.config.secrets)
                section, conclusion, title, status = (render_acceptance_section("error", detail=message), "neutral",
                                                      "error", "error")
            queue.put(f"accepted:{job.id}", json.dumps([section, conclusion, title, status]).encode())
        with queue.lock(_key("pr", job)):
            host.upsert_sticky(lambda old: update_sticky(old, acceptance=section))
        if publish is not None:
            with queue.lock(f"sha:{job.source}:{job.repo}@{head}"):
                publish(ACCEPTANCE_CHECK, head, status="completed", conclusion=conclusion, title=title, summary=section)
        queue.forget(f"accepted:{job.id}")
        return f"done: acceptance {status}"


def _key(what: str, job: Job) -> str:
    """The queue store's key (or lock name) for one of a pull request's facts."""
    return f"{what}:{job.source}:{job.repo}#{job.number}"


def _gpu_busy(queue: Queue, job: Job, head: str, wanted: str) -> bool:
    """Whether another GPU job of this head (the last one queued for it) is still queued or running."""
    last = _peek(queue, _key("gpu", job) + f"@{head}")
    other = queue.get(last) if last is not None and last != wanted else None
    return other is not None and other.state in ("queued", "running")


def _peek(queue: Queue, key: str) -> str | None:
    value = queue.peek(key)
    return None if value is None else value.decode()


_LEVEL = {"error": "failure", "warning": "warning", "info": "notice"}
# Annotations on one check run: GitHub takes 50 a request and its page shows a few; a pull request of
# 100 configs put 301 on one run (issue 32). The first ones (errors first) go on, the text counts the rest.
MAX_ANNOTATIONS = 50


def annotations(report: Report) -> list[dict[str, Any]]:
    """Status annotations (GitHub's check runs), one per finding, on the key's line of its config.json;
    failures first, then warnings, then notices (each in the report's order)."""
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
    order = {"failure": 0, "warning": 1, "notice": 2}
    return sorted(out, key=lambda a: order[a["annotation_level"]])


def run_acceptance_subprocess(job: Job, host: PullRequestHost, settings: Settings) -> dict[str, Any]:
    """The default acceptance runner, for every host: the drafter's folder at the head commit (sized
    first; Git LFS objects as their real bytes, checked against their pointers) and the prompt file
    the settings name, then ``draftguard accept --format json`` on them in a child process that gets
    none of the bot's secrets (needs the ``runner`` extra on the GPU worker)."""
    folder = posixpath.dirname(Acceptance.from_data(job.data).drafters[0])
    with tempfile.TemporaryDirectory(prefix="draftguard-accept-") as tmp:
        dest = os.path.join(tmp, "drafter")
        os.mkdir(dest)
        local = host.download_folder(folder, job.head_sha or "", dest)
        prompts = fetch_prompts(host, settings, tmp)
        return run_acceptance_job(settings.target, local, settings, prompts=prompts)
