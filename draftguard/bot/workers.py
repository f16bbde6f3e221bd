"""The bot's workers in their own processes: ``draftguard serve`` answers webhooks in its interpreter
alone, and every job runs in a huey process worker, so a check that eats the machine's memory is
killed by the OS without taking the server (or the other jobs) with it.

- ``ProcessConsumer``: huey's consumer with ``worker_type="process"``: its main process only
  supervises (huey restarts a worker that died); each worker is a forked process. A worker marks the
  job it runs (``worker:<pid>`` in the store); when a worker dies under a job (killed for memory,
  a signal), the job goes back to the queue at once, and a job that killed its worker twice is
  marked failed with the reason, never run again. When the process that started it (``serve``) dies,
  it stops its workers and exits.
- ``WorkerProcesses``: what ``serve`` starts after recovering the queue: one ``draftguard worker``
  child per queue kind (cpu, gpu), restarted if it exits, stopped with the server.

In: a ``jobs.Queue`` with its handlers, worker counts, the parent's pid.
Out: running worker processes; job records updated for the workers that died.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from huey.consumer import Consumer, ConsumerStopped, Scheduler, Worker

from draftguard.jobs import FAILED, FINISHED, QUEUED, Queue

log = logging.getLogger("draftguard.jobs")

MAX_DEATHS = 2  # a job whose worker died under it this often is failed, not run again


def _fresh_store(queue: Queue) -> None:
    """In a forked child: new store connections and locks. The parent's (a thread of it may have held
    a lock at the fork) must never be used here."""
    for huey in queue.hueys.values():
        storage = huey.storage
        if hasattr(storage, "_conn"):  # SQLite: a connection per process
            storage.lock = threading.Lock()
            storage._conn = None
    queue._lock = threading.Lock()


def died(queue: Queue, pid: int, exitcode: int | None) -> str | None:
    """Account for a worker process that died: the job it ran goes back to the queue, or, the second
    time, is failed with the reason. Returns the job's id, or None when it ran none."""
    key = f"worker:{pid}"
    marked = queue.peek(key)
    queue.forget(key)
    if marked is None:
        return None
    for name, value in list(queue.store.result_items().items()):  # its locks: free now, not at their ttl
        name = name.decode() if isinstance(name, bytes) else name
        if name.startswith("lock:") and bytes(value).split(b" ")[2:] == [str(pid).encode()]:
            queue.swap(name, bytes(value), None)
    job = queue.get(marked.decode())
    if job is None or job.state in FINISHED:
        return None
    how = (f"signal {-exitcode} ({signal.Signals(-exitcode).name})" if exitcode is not None and exitcode < 0
           else f"exit code {exitcode}")
    job.deaths += 1
    queue.forget(f"claim:{job.id}")
    queue._index_lease(job.id, None)
    if job.deaths >= MAX_DEATHS:
        queue._finish(job, FAILED, f"its worker process died under it {job.deaths} times (last: {how}; "
                                   "killed for memory?); not run again", level=logging.WARNING)
    else:
        job.state, job.result = QUEUED, f"its worker process died ({how}); runs again"
        queue.save(job)
        queue.enqueue(job)
        log.warning("job %s: its worker process died (%s); queued again", job.id, how)
    return job.id


class ProcessConsumer(Consumer):
    """huey's consumer, with process workers, for one kind of the queue (cpu or gpu)."""

    def __init__(self, queue: Queue, kind: str, workers: int, *, parent: int | None = None, **kwargs: Any):
        self.queue, self.parent = queue, parent

        class _Worker(Worker):
            def initialize(self) -> None:
                _fresh_store(queue)
                queue.mark_pid = True
                queue.forget(f"worker:{os.getpid()}")  # a mark left by an earlier process with this pid
                super().initialize()

        class _Scheduler(Scheduler):
            def initialize(self) -> None:
                _fresh_store(queue)
                super().initialize()

        self.worker_class, self.scheduler_class = _Worker, _Scheduler
        kwargs.setdefault("health_check_interval", 1)
        super().__init__(queue.hueys[kind], workers=workers, periodic=False, worker_type="process",
                         check_worker_health=True, **kwargs)

    def start(self) -> None:
        for huey in self.queue.hueys.values():  # no connection crosses the fork
            huey.storage.close()
        super().start()

    def check_worker_health(self) -> bool:
        for _, proc in self.worker_threads:
            if not proc.is_alive() and proc.pid is not None:
                try:
                    died(self.queue, proc.pid, proc.exitcode)
                except Exception:  # the store is briefly unreachable: the lease recovers the job later
                    log.warning("could not account for worker %s", proc.pid, exc_info=True)
        return super().check_worker_health()

    def loop(self, health_check_ts: float | None = None) -> float | None:
        if self.parent is not None and os.getppid() != self.parent:
            # The server that started these workers is gone: stop at once; the next server recovers.
            for _, proc in self.worker_threads:
                if proc.is_alive():
                    os.kill(proc.pid, signal.SIGKILL)
            if self.scheduler.is_alive():
                os.kill(self.scheduler.pid, signal.SIGKILL)
            raise ConsumerStopped
        return super().loop(health_check_ts)


class WorkerProcesses:
    """``serve``'s workers: a ``draftguard worker`` child per queue kind, restarted when it exits."""

    def __init__(self, queue_url: str, kinds: dict[str, int]):
        self.queue_url, self.kinds = queue_url, {k: n for k, n in kinds.items() if n > 0}
        self.children: dict[str, subprocess.Popen] = {}
        self._stop = threading.Event()

    def _spawn(self, kind: str) -> subprocess.Popen:
        # The queue's URL (it may hold a password) through the environment, never the command line
        # that anyone on the host can read (/proc/<pid>/cmdline, ps).
        return subprocess.Popen([sys.executable, "-m", "draftguard", "worker", "--queue", kind,
                                 "--workers", str(self.kinds[kind]), "--parent-pid", str(os.getpid())],
                                env={**os.environ, "DRAFTGUARD_QUEUE": self.queue_url})

    def start(self) -> "WorkerProcesses":
        for kind in self.kinds:
            self.children[kind] = self._spawn(kind)
        threading.Thread(target=self._watch, name="draftguard-workers", daemon=True).start()
        return self

    def _watch(self) -> None:
        while not self._stop.wait(1.0):
            for kind, child in list(self.children.items()):
                if child.poll() is not None and not self._stop.is_set():
                    log.warning("the %s worker process exited (code %s); starting it again", kind, child.returncode)
                    self.children[kind] = self._spawn(kind)

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        for child in self.children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for child in self.children.values():
            try:
                child.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
