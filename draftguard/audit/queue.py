"""Auditing on the shared queue: ``draftguard audit --queue redis://...``.

Each chunk of repos becomes one Job (source ``audit``) on the cpu queue that ``draftguard worker
--queue cpu --queue-url redis://...`` already serves; huey delivers it, the Job record's claim
keeps it to one worker (a 20 s lease for audit jobs, renewed while the worker runs), and any live
worker or this process requeues it within half a minute when its worker, or the whole worker machine,
dies (``Queue.requeue_expired``). The worker audits the chunk with the same ``audit_chunk`` as a local
run and stores the records beside the Job record; its Job's id is pushed on this run's channel as it
finishes, and this process waits on that channel (a blocking pop, not a poll of every pending Job:
its cost does not grow with the queue), appends each chunk's records to audit.jsonl, and writes the
one report. No scheduling of our own: huey's consumers pick the work.

The Jobs' ids are a digest of the chunks and the options (``run_digest``): an audit started again
after its gatherer was killed finds the Jobs it queued, takes the ones that finished meanwhile, waits
for the others, and queues nothing twice; a finished Job whose records were gathered already (an
earlier run with the same repos) is run again.

In: the queue URL, the chunks of ``RepoRef``, the ``AuditOptions`` and a ``take(record, skipped)``
callback (``run_on_queue``); on the worker, an audit Job (``AuditJobHandler``).
Out: each chunk's ``RepoRecord`` objects passed to ``take`` as its Job finishes (a failed Job's repos
get the worker's error); on the worker, the records stored under ``audit-result:<job id>``.
``BadInput`` for a bad queue URL or a missing ``bot`` extra.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from typing import Any, Callable

from draftguard import __version__
from draftguard.audit.inputs import RepoRef
from draftguard.audit.record import RepoError, RepoRecord
from draftguard.audit.repo import AuditOptions, audit_chunk
from draftguard.errors import QueueConfigError
from draftguard.hub_access import share_budget
from draftguard.jobs import FAILED, FINISHED, Job, Queue
from draftguard.queue_waits import SWEEP_SECONDS
from draftguard.payloads import AuditChunk
from draftguard.retry_after import SharedBudget
from draftguard.check import resolver
from draftguard.snapshot import BadInput

SOURCE = "audit"
RESULT_KEY = "audit-result:{}"
WAIT_SECONDS = 1.0  # longest blocking wait for a finished Job before the gatherer's housekeeping
STALL_SECONDS = 300.0  # no chunk finished this long: say that no worker may be serving the queue


def _result_key(job_id: str) -> str:
    return RESULT_KEY.format(job_id)


class AuditJobHandler:
    """The worker side: audit one chunk Job and store its records under ``audit-result:<job id>``.

    Registered by ``draftguard worker`` for Jobs whose source is ``audit``."""

    def __call__(self, job: Any, queue: Any) -> str:
        chunk = AuditChunk.from_data(job.data)
        options = AuditOptions(
            versions=list(chunk.versions), host_version=resolver.transformers_version(),
            full=bool(chunk.full), retries=int(chunk.retries), max_wait=float(chunk.max_wait),
            fetch_workers=int(chunk.fetch_workers),
            previous={k: RepoRecord.from_json(v) for k, v in chunk.previous.items()},
        )
        refs = [RepoRef(r["repo"], r.get("revision")) for r in chunk.refs]
        # Every worker on this Redis draws from one Hub budget and honours any worker's 429 wait.
        share_budget(SharedBudget(queue.store.conn, chunk.hub_rate) if queue.backend == "redis" else None)
        results = audit_chunk(refs, options)
        payload = {"records": [[r.to_json(), skipped] for r, skipped in results],
                   "version_problems": options.version_problems}
        queue.put(_result_key(job.id), json.dumps(payload, default=str).encode())
        failing = sum(1 for r, _ in results if r.status == "failing")
        return f"audited {len(results)} repos ({failing} failing)"


def run_digest(parts: list[list[RepoRef]], options: AuditOptions) -> str:
    """12 hex digits naming an audit on the queue: its chunks, versions, --full and draftguard's version.

    Example::

        >>> from draftguard.audit.repo import AuditOptions
        >>> o = AuditOptions(versions=["4.57.1"], host_version="4.57.1")
        >>> run_digest([[RepoRef("a/x")]], o) == run_digest([[RepoRef("a/x")]], o) != run_digest([[RepoRef("a/y")]], o)
        True
    """
    text = json.dumps([[[r.repo, r.revision] for r in part] for part in parts] +
                      [options.versions, options.full, __version__])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def run_on_queue(url: str, parts: list[list[RepoRef]], options: AuditOptions,
                 take: Callable[[RepoRecord, bool], None], *, run_id: str | None = None,
                 timeout: float | None = None, hub_rate: float = 0.0) -> int:
    """Submit one Job per chunk, then gather each chunk's records (``take``) as its Job finishes.
    A Job that fails records its repos with the worker's error. Returns how many Jobs were found
    queued by an earlier run of the same audit (resumed, not queued again). Raises BadInput for a
    bad URL."""
    try:
        import huey  # huey: the `bot` extra, which only --queue needs  # noqa: F401
    except ImportError as exc:
        raise BadInput(f"--queue needs the `bot` extra ({exc.name} is missing): pip install "
                       "'draftguard[bot]'", key="queue") from None
    try:
        queue = Queue(url)
    except QueueConfigError as exc:
        raise BadInput(f"--queue: {exc}", key="queue") from None
    run_id = run_id or run_digest(parts, options)
    channel = f"audit-{run_id}"
    pending: dict[str, list[RepoRef]] = {}
    resumed = 0
    for number, part in enumerate(parts):
        job = Job(id=f"audit-{run_id}-{number}", source=SOURCE, kind="audit", repo=part[0].repo, number=number,
                  notify=channel,
                  data=AuditChunk(
                      refs=[{"repo": r.repo, "revision": r.revision} for r in part],
                      versions=options.versions, full=options.full, retries=options.retries,
                      max_wait=options.max_wait, fetch_workers=max(1, options.fetch_workers),
                      previous={r.key: options.previous[r.key].to_json() for r in part if r.key in options.previous},
                      hub_rate=hub_rate,
                  ).to_data())
        pending[job.id] = part
        if queue.submit(job):
            continue
        earlier = queue.get(job.id)
        if earlier is not None and earlier.state in FINISHED and queue.peek(_result_key(job.id)) is None:
            queue.forget(f"job:{job.id}")  # gathered by an earlier run: this run audits it again
            queue.submit(job)
            continue
        resumed += 1
        if earlier is not None and earlier.state in FINISHED:
            queue.tell_finished(channel, job.id)  # finished while no gatherer was there: take it now
        # else queued or running still: told when it finishes (a lost task: the workers' recover)
    gather(queue, channel, pending, options, take, timeout=timeout)
    return resumed


def gather(queue: Queue, channel: str, pending: dict[str, list[RepoRef]], options: AuditOptions,
           take: Callable[[RepoRecord, bool], None], *, timeout: float | None = None) -> None:
    """Wait on ``channel`` for the pending Jobs to finish and ``take`` each one's records. Each pass
    costs one blocking pop and, every ``SWEEP_SECONDS``, one read of the expired claims: nothing per
    pending Job. Raises TimeoutError after ``timeout`` seconds with Jobs still pending."""
    deadline = time.monotonic() + timeout if timeout else None
    swept = last_done = time.monotonic()
    stalled = False
    while pending:
        for job_id in queue.wait_finished(channel, timeout=WAIT_SECONDS):
            if job_id not in pending:
                continue  # told twice (a Job requeued while its first worker still finished it)
            job = queue.get(job_id)
            if job is None or job.state not in FINISHED:
                continue  # requeued since: it is told again when it finishes
            part = pending.pop(job_id)
            last_done, stalled = time.monotonic(), False
            if job.data:  # the chunk (its repos' previous records) weighs on Redis for the week a record stays
                job.data = {}
                queue.save(job)
            raw = queue.peek(_result_key(job_id))
            if job.state == FAILED or raw is None:
                for ref in part:
                    record = RepoRecord(repo=ref.key, repo_id=ref.repo, revision=ref.revision,
                                        versions=list(options.versions))
                    record.errors.append(RepoError("server-error", f"the audit worker failed: {job.result}"))
                    take(record, False)
                continue
            payload = json.loads(raw)
            options.version_problems.update(payload.get("version_problems", {}))
            for data, skipped in payload["records"]:
                take(RepoRecord.from_json(data), skipped)
            queue.forget(_result_key(job_id))
        if not stalled and time.monotonic() - last_done >= STALL_SECONDS:
            stalled = True  # said once per stall: the audit waits on, a worker may start later
            sys.stderr.write(f"draftguard: no audit chunk finished for {STALL_SECONDS:.0f} s ({len(pending)} "
                             "waiting): is a `draftguard worker --queue cpu` serving this queue?\n")
        if time.monotonic() - swept >= SWEEP_SECONDS:
            # A worker machine that died holds its chunk's claim until it expires; when no worker is
            # left alive to requeue it, this process does.
            swept = time.monotonic()
            queue.requeue_expired()
        if pending and deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{len(pending)} audit jobs did not finish in time")
    queue.forget_channel(channel)
