"""What the queue's processes wait on, beside running jobs: the finished jobs of a channel (the
audit's gatherer blocks on them instead of reading every pending job), and the recovery loop every
worker and gatherer runs (expired claims every ``SWEEP_SECONDS``, the full scan by one process per
interval).

In: a ``jobs.Queue`` (this is its mixin: ``store``, ``backend``, ``peek``, ``swap``, ``put_if_empty``,
``requeue_expired`` and ``recover`` are the queue's), channel names and job ids.
Out: ``tell_finished``/``wait_finished``/``forget_channel`` (each finished id told once),
``recovery_turn`` and ``start_recovery`` (a daemon thread; set the returned event to stop it).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger("draftguard.jobs")

SWEEP_SECONDS = 5.0  # how often a worker (and the audit's gatherer) requeues jobs whose claim expired
FINISHED_LIST = "draftguard:finished:{}"  # Redis: ids of a channel's finished jobs, for its waiter


class Waits:
    """The queue's waits and recovery loop (mixed into ``jobs.Queue``)."""

    store: Any
    backend: str

    def recovery_turn(self, interval: float, now: float | None = None) -> bool:
        """Whether this process runs the next full ``recover`` scan: one process of all those on the
        queue per ``interval`` seconds (one atomic swap of ``recover-due`` wins), since each scan reads
        every job record and every queued task, however many workers there are."""
        now = time.time() if now is None else now
        due = str(now + interval).encode()
        held = self.peek("recover-due")
        if held is None:
            return self.put_if_empty("recover-due", due)
        return float(held) <= now and self.swap("recover-due", held, due)

    def start_recovery(self, interval: float = 60.0, sweep: float = SWEEP_SECONDS) -> threading.Event:
        """Every ``sweep`` seconds, queue again the jobs whose claim expired (``requeue_expired``:
        with Redis, a worker on another machine can die while this process lives on); every
        ``interval`` seconds, one process of the queue's also queues again every unfinished job no
        task points at (``recover``, ``recovery_turn``). Set the returned event to stop."""
        stop = threading.Event()
        sweep = min(sweep, interval)

        def loop() -> None:
            while not stop.wait(sweep):
                try:
                    self.requeue_expired()
                    if self.recovery_turn(interval):
                        self.recover(lease=True)
                except Exception:  # the store may be briefly unreachable; try again next round
                    log.warning("periodic recovery failed", exc_info=True)

        threading.Thread(target=loop, name="draftguard-recovery", daemon=True).start()
        return stop

    # --- waiting on finished jobs, without polling each one ----------------------------------------
    def tell_finished(self, channel: str, job_id: str) -> None:
        """Tell ``channel``'s waiter that a job finished. Redis: RPUSH onto a list; SQLite: one kv row."""
        if self.backend == "redis":
            self.store.conn.rpush(FINISHED_LIST.format(channel), job_id)
        else:
            self.store.put_data(f"finished:{channel}:{job_id}", b"1")

    def wait_finished(self, channel: str, timeout: float = 1.0, most: int = 1000) -> list[str]:
        """Ids of ``channel``'s jobs that finished since the last call (each told once), waiting up to
        ``timeout`` seconds for the first. Redis: a blocking pop (BLPOP), then what else is there: its
        cost is per finished job, not per job waited on. SQLite: a range read of the told rows."""
        if self.backend == "redis":
            key = FINISHED_LIST.format(channel)
            first = self.store.conn.blpop([key], timeout=max(timeout, 0.01))
            if first is None:
                return []
            rest = self.store.conn.lpop(key, most - 1) or [] if most > 1 else []
            return [first[1].decode()] + [i.decode() for i in rest]
        deadline = time.monotonic() + timeout
        prefix = f"finished:{channel}:"
        while True:
            with self.store.db(commit=True) as curs:
                curs.execute("select key from kv where queue = ? and key >= ? and key < ? limit ?",
                             (self.store.name, prefix, prefix[:-1] + ";", most))
                keys = [k for (k,) in curs.fetchall()]
                for key in keys:
                    curs.execute("delete from kv where queue = ? and key = ?", (self.store.name, key))
            if keys or time.monotonic() >= deadline:
                return [k[len(prefix):] for k in keys]
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def forget_channel(self, channel: str) -> None:
        """Drop what is left told on ``channel`` (the waiter is done with it)."""
        if self.backend == "redis":
            self.store.conn.delete(FINISHED_LIST.format(channel))
        else:
            with self.store.db(commit=True) as curs:
                prefix = f"finished:{channel}:"
                curs.execute("delete from kv where queue = ? and key >= ? and key < ?",
                             (self.store.name, prefix, prefix[:-1] + ";"))
