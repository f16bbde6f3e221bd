"""Which pull-request head a trusted command approves, and the one GPU job per approved head.

In: a command's ``Job`` (its comment's ``created_at``, or when its delivery arrived), the head the
host's API gives for the pull request, and the ``Queue``'s record of heads announced by webhooks.
Out: ``judge_command`` -> an ``Approval``: the one rule, for both hosts, of which head a trusted
command approves (``holds_for(head)`` wherever a head is read again; ``refusal`` says why not);
``command_saw_head`` -> whether the command's author can have seen that head (or ``Retry`` while a
push made just before the bot read it may still be announced); ``gpu_job_id`` -> the id that makes
one GPU run per (repo, pull request, head), or one per command that forces a rerun.

The rules are in docs/security.md ("Approvals bind to a commit", "One GPU run per head");
tests/test_bot_hardening.py probes them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from draftguard.jobs import Job, Queue
from draftguard.errors import Retry


def gpu_job_id(source: str, job: Job, head: str, forced_by: str | None, asked: str | int | None = None) -> str:
    """The id of the GPU job for a pull request head: one per (repo, PR, head), whatever delivery
    asked for it, so a reopened PR or a replayed webhook never queues a second run. A command by a
    trusted person may run it again; its id names what it answers (``asked``: the comment, or the
    re-run request; else the command's own delivery)."""
    base = f"gpu:{source}:{job.repo}#{job.number}@{head}"
    if forced_by is None:
        return base
    return f"{base}:asked:{asked if asked is not None else job.id}"


@dataclass(frozen=True)
class Approval:
    """What a trusted person's command approves: ``head``, the commit it was judged on, or None.

    A command approves only the head it was judged on: wherever the pull request is read again (the
    light check, a retry), ``holds_for`` that read's head decides, on both hosts.

    Example::

        >>> a = Approval("a" * 40, "mona", "/ok-to-test")
        >>> a.holds_for("a" * 40), a.holds_for("b" * 40)
        (True, False)
        >>> a.refusal("b" * 40)
        "the head moved to bbbbbbbbbbbb after @mona's /ok-to-test, so it is not approved"
    """

    head: str | None
    by: str
    command: str = "command"

    def holds_for(self, head: str) -> bool:
        return self.head is not None and self.head == head

    def refusal(self, head: str) -> str:
        return f"the head moved to {head[:12]} after @{self.by}'s {self.command}, so it is not approved"


def judge_command(queue: Queue, job: Job, head: str, *, by: str, command: str = "command",
                  pinned: str | None = None, created_at: str | None = None) -> Approval:
    """The head a trusted command approves, judged on ``head`` (the one the host's API gives now):
    that head when the command names none or names it (``pinned``: the "Re-run" button names its
    check run's commit) and its author can have seen it (``command_saw_head``); else none.

    Raises:
        Retry: As ``command_saw_head``: an unknown head, read less than ``SETTLE_SECONDS`` ago.
    """
    saw = (pinned is None or pinned == head) and command_saw_head(queue, job, head, created_at)
    return Approval(head if saw else None, by, command)


# How long after first reading a head it never heard of (and after the command) the bot waits before
# binding the command to it: time for the webhook of a push made just before that read to arrive.
SETTLE_SECONDS = 5.0


def command_saw_head(queue: Queue, job: Job, head: str, created_at: str | None = None) -> bool:
    """Whether the command in ``job`` was written after the bot learnt of ``head`` (its delivery, or
    the bot's "moved to" reply) and no other head was announced in between: only then can its author
    have seen that commit. The comment's time is the host's ``created_at`` (ISO 8601), else
    its delivery's.

    A head the bot never heard of (the pull request predates the bot, or its delivery was lost) is
    the one the API gave for the command: it is bound to the command, unless a push to the pull
    request was announced after the command was written, or the head moves while the bot waits
    ``SETTLE_SECONDS`` after first reading that head (and after the command) for such an announcement.

    Raises:
        Retry: The head is unknown and was first read less than ``SETTLE_SECONDS`` ago: run it again then.
    """
    said = job.created
    if isinstance(created_at, str):
        try:
            said = datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    same_pull = [j for j in queue.jobs() if j.kind == "pull_request" and j.head_sha
                 and (j.source, j.repo, j.number) == (job.source, job.repo, job.number)]
    seen = queue.head_seen(job.source, job.repo, job.number, head)
    if seen is None:  # that head's own job may not have run yet (it records the time): its delivery
        seen = min((j.created for j in same_pull if j.head_sha == head), default=None)
        if seen is not None:
            queue.mark_head_seen(job.source, job.repo, job.number, head, seen)
    if seen is not None:
        # Seen before the command is not enough: a fork can push B, force-push A back, and push B
        # again once A is approved. The head when the command was written is the one heard of last.
        told = queue.head_seen(job.source, job.repo, job.number, head, told=True)
        heard = [t for t in (seen, told, *(j.created for j in same_pull if j.head_sha == head)) if t and t <= said]
        other = [j.created for j in same_pull if j.head_sha != head and j.created <= said]
        if heard and max(heard) >= max(other, default=0.0):
            return True
        queue.mark_head_told(job.source, job.repo, job.number, head)  # the caller says it moved there
        return False
    if any(j.created > said for j in same_pull):
        queue.mark_head_seen(job.source, job.repo, job.number, head)
        return False  # the pull request was pushed to after the command: not the head its author saw
    # The first head the API gave for this command is the one it can bind to, once a push made just
    # before that read has had time to be announced: a job that runs late waits as long as a prompt one.
    key = f"bind:{job.source}:{job.id}"
    queue.put_if_empty(key, f"{head} {time.time()!r}".encode())
    first, _, read_at = (queue.peek(key) or b"").decode().partition(" ")
    wait = max(said, float(read_at or said)) + SETTLE_SECONDS - time.time()
    if first == head and wait > 0:
        raise Retry(f"waiting {wait:.1f}s for pushes announced after the command before binding it to {head[:12]}",
                    delay=wait)
    queue.forget(key)
    if first != head:
        queue.mark_head_seen(job.source, job.repo, job.number, head)
        return False  # it moved while the bot waited
    queue.mark_head_seen(job.source, job.repo, job.number, head, said)
    return True
