"""The Job and the durable queue (huey): SQLite by default, Redis for several machines.

A webhook becomes a Job record, stored under the delivery id with an atomic put-if-empty. That one
write is both the dedupe of the delivery and the durable promise to process it; the huey task that
follows carries only the job id. Whatever dies in between (the server after the record, a worker in
the middle of a job), ``Queue.recover`` finds the unfinished records that no queued or scheduled task
points at and queues them again. A job is claimed with a lease before it runs, so a task queued twice
still runs once, and every GitHub write is idempotent, so a job cut off half way can run again.

Two huey queues share one storage: ``cpu`` (light check, comments, check runs) and ``gpu``
(acceptance tests), so GPU work only reaches ``draftguard worker --queue gpu``.

In: a queue URL (``sqlite:///FILE`` or ``redis://HOST:PORT/DB``), ``Job`` records to ``submit``, and
``handlers`` by Job source (a callable ``(job, queue) -> str | None``).
Out: ``submit`` -> True when queued, False for a duplicate; each Job run once by a handler and its
record finished (done, skipped or failed, with the scrubbed result), rescheduled after ``Retry``.

Example::

    >>> import tempfile, os
    >>> q = Queue(f"sqlite:///{tempfile.mkdtemp()}/q.db")
    >>> q.add(Job(id="d-1", source="github", kind="pull_request", repo="acme/m", number=1))
    True
    >>> q.add(Job(id="d-1", source="github", kind="pull_request", repo="acme/m", number=1))
    False
    >>> q.get("d-1").state
    'queued'
"""

from __future__ import annotations

import collections
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Iterator

from draftguard.errors import Busy, JobFailed, Retry
from draftguard.locks import StoreLock
from draftguard.queue_store import SWAP_LUA, parse_queue_url
from draftguard.queue_waits import Waits
from draftguard.secrets import scrub_known

log = logging.getLogger("draftguard.jobs")

DEFAULT_QUEUE_URL = "sqlite:///draftguard-queue.db"
QUEUED, RUNNING, DONE, FAILED, SKIPPED = "queued", "running", "done", "failed", "skipped"
STATES = (QUEUED, RUNNING, DONE, FAILED, SKIPPED)
FINISHED = (DONE, FAILED, SKIPPED)
KINDS = ("cpu", "gpu")
# With backoff doubling to a 2-minute cap, 20 attempts ride out about half an hour of GitHub trouble.
MAX_ATTEMPTS = 20
# A job whose pull request another job holds goes back to the queue: after 2 s, the wait doubling every
# 10 tries up to a minute; after 100 tries (about an hour) it fails, saying so, instead of forever.
MAX_BUSY, MAX_BUSY_DELAY = 100, 60.0
# How long a claim on a running job holds before another worker may take the job over, by queue, and
# by job kind where a kind's jobs are much shorter: an audit chunk takes seconds, so a worker machine
# that dies under one has it back on the queue within half a minute, not after the bots' ten.
# A live worker renews its claim every quarter lease however long the job runs.
LEASE_SECONDS = {"cpu": 600.0, "gpu": 3600.0}
KIND_LEASE_SECONDS = {"audit": 20.0}
LEASES = "draftguard:leases"  # Redis: job id -> claim expiry, so expired claims are found without a scan
TASK_NAME = "draftguard.run_job"
KEEP_SECONDS = 7 * 24 * 3600


@dataclass
class Job:
    """One unit of work: a webhook delivery to process, or an acceptance test to run.

    ``id`` is the webhook's delivery id (a redelivery keeps it), so the record dedupes deliveries.
    ``queue`` is ``cpu`` or ``gpu``. ``data`` holds what the handler needs from the event payload.
    """

    id: str
    source: str  # "github" or "hub": picks the handler
    kind: str  # "pull_request", "comment", "acceptance", ...
    repo: str
    number: int
    queue: str = "cpu"
    head_sha: str | None = None
    base_sha: str | None = None
    installation_id: int | None = None
    data: dict[str, Any] = field(default_factory=dict)
    state: str = QUEUED
    attempts: int = 0
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    result: str | None = None  # one line: what the job did, or why it failed
    deaths: int = 0  # times the worker process running it died under it (bot/workers.py)
    busy: int = 0  # times it found its pull request busy (MAX_BUSY)
    notify: str | None = None  # a channel told this job's id when it finishes (``Queue.wait_finished``)

    @property
    def lease(self) -> float:
        """Seconds a claim on this job holds unrenewed: by its kind, else by its queue."""
        return KIND_LEASE_SECONDS.get(self.kind, LEASE_SECONDS.get(self.queue, LEASE_SECONDS["cpu"]))

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes | memoryview) -> "Job":
        raw = json.loads(bytes(data))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

Handler = Callable[["Job", "Queue"], "str | None"]

class Queue(Waits):
    """Job records plus two huey queues (cpu, gpu) on one storage: SQLite or Redis."""

    def __init__(self, url: str = DEFAULT_QUEUE_URL):
        # huey: the bot extra; the base install loads this module too (audit)
        from huey import RedisHuey, SqliteHuey

        self.url = url
        self.backend, kwargs = parse_queue_url(url)
        cls = SqliteHuey if self.backend == "sqlite" else RedisHuey
        extra: dict[str, Any] = {"results": False}
        if self.backend == "sqlite":
            extra["timeout"] = 30  # busy timeout: webhooks and workers write the same file
        self.hueys = {kind: cls(f"draftguard-{kind}", **extra, **kwargs) for kind in KINDS}
        self.store = self.hueys["cpu"].storage  # job records live beside the cpu queue
        self.handlers: dict[str, Handler] = {}
        self.tasks = {kind: h.task(name=TASK_NAME)(self._task) for kind, h in self.hueys.items()}
        self._consumers: list[Any] = []
        # In-process figures for /metrics: latency of jobs this process finished.
        self.latencies: collections.deque[float] = collections.deque(maxlen=10000)
        self._lock = threading.Lock()
        self._finished = 0
        self.mark_pid = False  # in a process worker: mark the job it runs, for the supervisor (bot/workers.py)

    # --- records -------------------------------------------------------------------------------
    def add(self, job: Job) -> bool:
        """Record a new job; False when a job with this id (a delivery seen before) exists."""
        return bool(self.store.put_if_empty(f"job:{job.id}", job.to_bytes()))

    def get(self, job_id: str) -> Job | None:
        # huey: the bot extra; the base install loads this module too (audit)
        from huey.constants import EmptyData

        data = self.store.peek_data(f"job:{job_id}")
        return None if data is EmptyData else Job.from_bytes(data)

    def save(self, job: Job) -> None:
        job.updated = time.time()
        self.store.put_data(f"job:{job.id}", job.to_bytes())

    def jobs(self) -> Iterator[Job]:
        for key, value in self.store.result_items().items():
            key = key.decode() if isinstance(key, bytes) else key
            if key.startswith("job:"):
                yield Job.from_bytes(value)

    def prune(self, older_than: float = KEEP_SECONDS) -> int:
        """Delete records of jobs finished more than ``older_than`` seconds ago. They stay a week by
        default: the record is also the delivery's dedupe, and GitHub lets people redeliver for days."""
        cutoff = time.time() - older_than
        gone = 0
        for job in self.jobs():
            if job.state in FINISHED and (job.finished or job.updated) < cutoff:
                self.store.delete_data(f"job:{job.id}")
                gone += 1
        return gone

    def counts(self) -> dict[str, int]:
        counts = {s: 0 for s in STATES}
        for job in self.jobs():
            counts[job.state] = counts.get(job.state, 0) + 1
        return counts

    # --- queueing ------------------------------------------------------------------------------
    def submit(self, job: Job) -> bool:
        """Record the job and queue it. False (and nothing queued) when the id was seen before."""
        if job.queue not in KINDS:
            raise ValueError(f"job queue must be one of {KINDS}, not {job.queue!r}")
        if not self.add(job):
            return False
        self.enqueue(job)
        return True

    def mark_head_seen(self, source: str, repo: str, number: int, head: str, when: float | None = None) -> None:
        """Record when the bot first learnt of a pull request's head (kept if already recorded). The
        handlers record it when a job runs, with the time its delivery arrived (``Job.created``):
        one write less at the door, where every millisecond counts."""
        self.store.put_if_empty(f"seen:{source}:{repo}#{number}@{head}", repr(when or time.time()).encode())

    def head_seen(self, source: str, repo: str, number: int, head: str, told: bool = False) -> float | None:
        """When the bot first learnt of a head (its delivery arrived), or ``told`` it last named it; or None."""
        # huey: the bot extra; the base install loads this module too (audit)
        from huey.constants import EmptyData

        value = self.store.peek_data(f"{'told' if told else 'seen'}:{source}:{repo}#{number}@{head}")
        return None if value is EmptyData else float(bytes(value))

    # --- small facts kept between jobs (a trust mark, the last head checked, a command's binding) ---
    def peek(self, key: str) -> bytes | None:
        """The value the store keeps under ``key``, or None. Nothing outside this module reads the
        store's own types (huey's ``EmptyData``)."""
        from huey.constants import EmptyData  # huey: the bot extra; the base install loads this module too

        value = self.store.peek_data(key)
        return None if value is EmptyData else bytes(value)

    def put(self, key: str, value: bytes) -> None:
        self.store.put_data(key, value)

    def put_if_empty(self, key: str, value: bytes) -> bool:
        """Keep ``value`` under ``key`` unless one is kept there; whether this call kept it."""
        return bool(self.store.put_if_empty(key, value))

    def forget(self, key: str) -> None:
        self.store.delete_data(key)

    def swap(self, key: str, old: bytes, new: bytes | None) -> bool:
        """Replace the value under ``key`` with ``new`` (remove it when None) only if it is ``old`` now,
        in one atomic step of the store: of two processes that read the same ``old``, one wins. SQLite:
        one UPDATE (or DELETE) ... WHERE value = old, in a transaction; Redis: one Lua script."""
        if self.backend == "sqlite":
            with self.store.db(commit=True) as curs:
                if new is None:
                    curs.execute("delete from kv where queue = ? and key = ? and value = ?", (self.store.name, key, old))
                else:
                    curs.execute("update kv set value = ? where queue = ? and key = ? and value = ?",
                                 (new, self.store.name, key, old))
                return curs.rowcount == 1
        return bool(self.store.conn.eval(SWAP_LUA, 1, self.store.result_key, key, old, b"" if new is None else new,
                                         0 if new is None else 1))

    def ping(self) -> None:
        """One cheap read of the store: raises when it cannot be reached (``/healthz``)."""
        self.store.has_data_for_key("healthz")

    def mark_head_told(self, source: str, repo: str, number: int, head: str) -> None:
        """Record that the bot names ``head`` to people now (its "moved to" reply) for later commands."""
        self.store.put_data(f"told:{source}:{repo}#{number}@{head}", repr(time.time()).encode())

    def enqueue(self, job: Job, delay: float | None = None) -> None:
        self.tasks[job.queue].schedule(args=(job.id,), delay=delay) if delay else self.tasks[job.queue](job.id)

    def pending_ids(self) -> set[str]:
        ids: set[str] = set()
        for h in self.hueys.values():
            for task in list(h.pending()) + list(h.scheduled()):
                if task.args:
                    ids.add(task.args[0])
        return ids

    def recover(self, *, lease: bool = True) -> list[str]:
        """Queue again every unfinished job that no queued or scheduled task points at.

        With ``lease=False`` (one process owns the SQLite queue and has just started, so nothing can
        be running) every such job is taken, and stale claims are dropped; with ``lease=True`` a
        running job is taken only once its claim has expired.
        """
        now = time.time()
        pending = self.pending_ids()
        again = []
        if not lease:
            # Claims and locks of a killed process would otherwise hold until their ttl.
            for key in list(self.store.result_items()):
                key = key.decode() if isinstance(key, bytes) else key
                if key.startswith(("claim:", "lock:")):
                    self.store.delete_data(key)
        for job in self.jobs():
            if job.state in FINISHED or job.id in pending:
                continue
            if lease:
                if job.state == RUNNING and (now - job.updated < job.lease or self._held(job.id, now)):
                    continue  # a live worker renews its claim however long the job runs
                if job.state == QUEUED and now - job.updated < 30:
                    continue  # maybe a webhook between its record and its task
            self.enqueue(job)
            again.append(job.id)
        if again:
            log.warning("recovered %d unfinished job(s): %s", len(again), ", ".join(again[:20]))
        self.prune()
        return again

    def expired_claims(self, now: float | None = None) -> list[str]:
        """Ids of jobs whose claim has expired (their worker stopped renewing it). Redis: one range
        read of the lease index, whatever the queue's length; SQLite (one machine): a scan of claims."""
        now = time.time() if now is None else now
        if self.backend == "redis":
            return [i.decode() for i in self.store.conn.zrangebyscore(LEASES, "-inf", now)]
        with self.store.db() as curs:
            curs.execute("select key, value from kv where queue = ? and key >= 'claim:' and key < 'claim;'",
                         (self.store.name,))
            return [key[len("claim:"):] for key, value in curs.fetchall() if float(bytes(value)) < now]

    def requeue_expired(self, now: float | None = None) -> list[str]:
        """Queue again every running job whose claim expired: its worker (or its whole machine) died.
        Any process on the queue may call it (every worker, the audit's gatherer): of two that see the
        same expired claim, one atomic swap lets only one requeue the job."""
        now = time.time() if now is None else now
        again = []
        for job_id in self.expired_claims(now):
            held = self.peek(f"claim:{job_id}")
            if held is not None and (float(held) >= now or not self.swap(f"claim:{job_id}", held, None)):
                continue  # renewed since, or another process took it first
            if self.backend == "redis":
                self.store.conn.zrem(LEASES, job_id)
            if held is None:
                continue  # released: its job finished
            job = self.get(job_id)
            if job is None or job.state in FINISHED:
                continue
            job.state, job.result = QUEUED, f"its worker stopped renewing its claim ({job.lease:.0f} s lease); runs again"
            self.save(job)
            self.enqueue(job)
            again.append(job_id)
        if again:
            log.warning("requeued %d job(s) whose worker died: %s", len(again), ", ".join(again[:20]))
        return again

    # --- running -------------------------------------------------------------------------------
    def _claim(self, job: Job) -> bool:
        key = f"claim:{job.id}"
        expiry = time.time() + job.lease
        until = str(expiry).encode()
        if self.store.put_if_empty(key, until):
            self._index_lease(job.id, expiry)
            return True
        # huey: the bot extra; the base install loads this module too (audit)
        from huey.constants import EmptyData

        held = self.store.peek_data(key)
        if held is not EmptyData and float(bytes(held)) < time.time():
            # atomic: of two takers that saw it expire, one wins
            if self.swap(key, bytes(held), until):
                self._index_lease(job.id, expiry)
                return True
        return False

    def _index_lease(self, job_id: str, expiry: float | None) -> None:
        """Redis: keep the lease index (``LEASES``) in step with the claim: set its expiry, or drop it."""
        if self.backend != "redis":
            return
        if expiry is None:
            self.store.conn.zrem(LEASES, job_id)
        else:
            self.store.conn.zadd(LEASES, {job_id: expiry})

    def _held(self, job_id: str, now: float) -> bool:
        # huey: the bot extra; the base install loads this module too (audit)
        from huey.constants import EmptyData

        held = self.store.peek_data(f"claim:{job_id}")
        return held is not EmptyData and float(bytes(held)) > now

    def _heartbeat(self, job: Job) -> threading.Event:
        """Renew the job's claim every quarter lease while it runs: a slow job stays with the worker
        that runs it, never handed to a second worker that the same input would hold too (R11 of
        issue 25). A worker that dies stops renewing, and the claim expires as before."""
        stop = threading.Event()
        lease = job.lease

        def beat() -> None:
            while not stop.wait(lease / 4):
                try:
                    expiry = time.time() + lease
                    self.store.put_data(f"claim:{job.id}", str(expiry).encode())
                    self._index_lease(job.id, expiry)
                except Exception:  # the store is briefly unreachable: the next beat tries again
                    log.warning("job %s: could not renew its claim", job.id)

        threading.Thread(target=beat, name=f"draftguard-lease-{job.id[:40]}", daemon=True).start()
        return stop

    def _release(self, job: Job) -> None:
        self.store.delete_data(f"claim:{job.id}")
        self._index_lease(job.id, None)

    def lock(self, name: str, *, ttl: float = 120.0, wait: float = 0.0) -> StoreLock:
        """A lock shared by every process on this queue, that expires after ``ttl`` seconds (so a
        killed holder cannot block it forever). Waits ``wait`` seconds (none by default: a worker
        never sits on a busy lock), then raises Busy.

        Raises:
            Busy: (on entering) The lock stayed busy for ``wait`` seconds; the job runs again later.
        """
        return StoreLock(self, name, ttl, wait)

    def _task(self, job_id: str) -> None:
        # huey: the bot extra; the base install loads this module too (audit)
        from huey.exceptions import RetryTask

        delay = self.run(job_id)
        if delay is not None:
            raise RetryTask(f"job {job_id} retries in {delay:.1f}s", delay=delay)

    def run(self, job_id: str) -> float | None:
        """Run one job now, in this thread. Returns a delay when the job must run again later."""
        job = self.get(job_id)
        if job is None or job.state in FINISHED:
            return None  # processed already: a duplicate task
        if not self._claim(job):
            return None  # another worker holds it; its own retry covers a failure
        beating = self._heartbeat(job)
        if self.mark_pid:
            self.put(f"worker:{os.getpid()}", job.id.encode())
        try:
            job.state, job.attempts, job.started = RUNNING, job.attempts + 1, job.started or time.time()
            self.save(job)
            handler = self.handlers.get(job.source)
            if handler is None:
                raise RuntimeError(f"no handler for {job.source} jobs in this process")
            try:
                outcome = handler(job, self)
            except Busy as exc:  # another job holds the pull request: back to the queue, not an attempt
                job.state, job.attempts, job.result, job.busy = QUEUED, job.attempts - 1, str(exc), job.busy + 1
                if job.busy > MAX_BUSY:
                    return self._finish(job, FAILED, f"its pull request stayed busy: gave up after {MAX_BUSY} tries")
                delay = min(exc.delay * 2 ** (job.busy // 10), MAX_BUSY_DELAY)
                self.save(job)
                log.info("job %s: %s; runs again in %.1fs", job.id, exc, delay)
                return delay
            except Retry as exc:
                if job.attempts >= MAX_ATTEMPTS:
                    return self._finish(job, FAILED, f"gave up after {job.attempts} attempts: {exc}")
                job.state, job.result = QUEUED, str(exc)
                self.save(job)
                log.info("job %s: %s; attempt %d, retry in %.1fs", job.id, exc, job.attempts, exc.delay)
                return exc.delay
            except JobFailed as exc:  # it cannot succeed, and says why in one line: no traceback, no retry
                return self._finish(job, FAILED, str(exc), level=logging.WARNING)
            except Exception as exc:  # a bug or a permanent failure: record it, never loop on it
                log.exception("job %s failed", job.id)
                return self._finish(job, FAILED, f"{type(exc).__name__}: {exc}")
            return self._finish(job, SKIPPED if outcome and outcome.startswith("skipped") else DONE, outcome)
        finally:
            beating.set()
            self._release(job)
            if self.mark_pid:
                self.forget(f"worker:{os.getpid()}")

    def _finish(self, job: Job, state: str, result: str | None, level: int = logging.INFO) -> None:
        # An exception's text can carry a token; job records outlive the log and are listed by /metrics.
        job.state, job.result, job.finished = state, scrub_known(result) if result else result, time.time()
        self.save(job)
        if job.notify:
            self.tell_finished(job.notify, job.id)
        with self._lock:
            self.latencies.append(job.finished - job.created)
            self._finished += 1
            prune = self._finished % 1000 == 0
        if prune:
            self.prune()
        log.log(level, "job %s %s: %s", job.id, state, job.result or "")
        return None

    # --- consumers -----------------------------------------------------------------------------
    def start_consumers(self, kinds: dict[str, int], *, in_process: bool = True) -> None:
        """Start huey consumer threads, ``{"cpu": 2, "gpu": 1}``. In process (inside the server) no
        signal handlers are installed; uvicorn owns them."""
        # huey: the bot extra; the base install loads this module too (audit)
        from huey.consumer import Consumer

        class _InProcess(Consumer):
            def _set_signal_handlers(self) -> None:  # the server owns signals
                pass

        poll = 0.5 if self.backend == "sqlite" else 1.0
        for kind, workers in kinds.items():
            if workers <= 0:
                continue
            cls = _InProcess if in_process else Consumer
            consumer = cls(self.hueys[kind], workers=workers, periodic=False, initial_delay=0.05,
                           max_delay=poll, backoff=1.3, check_worker_health=False)
            consumer.start()
            self._consumers.append(consumer)

    def stop_consumers(self, graceful: bool = False) -> None:
        for consumer in self._consumers:
            consumer.stop(graceful=graceful)
        self._consumers.clear()

    def wait_idle(self, timeout: float = 30.0, ids: list[str] | None = None) -> bool:
        """Block until every job (or the given ones) is finished; for tests and benchmarks."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            jobs = [self.get(i) for i in ids] if ids is not None else list(self.jobs())
            if all(j is not None and j.state in FINISHED for j in jobs):
                return True
            time.sleep(0.05)
        return False
