"""Claims sized per job kind, requeued by any process once expired, and finished jobs told to a waiter
(draftguard/jobs.py), on a real SQLite file and a real redis-server.
Before (issue 41): every cpu job held a 600 s claim, so a dead worker machine held an audit chunk for
ten minutes; only a running worker's full scan requeued it; and the audit's gatherer polled every
pending job every 0.1 s."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("huey")

from draftguard import jobs, queue_waits  # noqa: E402
from draftguard.jobs import DONE, QUEUED, RUNNING, Job, Queue  # noqa: E402
from tests.test_bot_redis import redis_url  # noqa: E402,F401  (a real redis-server on loopback)
from tests.test_locks import store_url  # noqa: E402,F401  (each store: SQLite, Redis)


def test_a_claim_is_sized_by_the_job_kind():
    audit = Job(id="a", source="audit", kind="audit", repo="o/m", number=0)
    bot = Job(id="b", source="github", kind="pull_request", repo="o/m", number=1)
    gpu = Job(id="g", source="github", kind="acceptance", repo="o/m", number=1, queue="gpu")
    assert audit.lease <= 30 and bot.lease == 600 and gpu.lease == 3600
    assert audit.lease / 4 + audit.lease + queue_waits.SWEEP_SECONDS < 60  # a dead worker's chunk back within a minute


def _dead_worker_job(queue: Queue, job_id: str, expired: float) -> Job:
    """A running job whose worker died: its record says running, its claim expired ``expired`` s ago."""
    job = Job(id=job_id, source="audit", kind="audit", repo="o/m", number=0)
    queue.add(job)
    job.state = RUNNING
    queue.save(job)
    until = time.time() - expired
    queue.put(f"claim:{job_id}", repr(until).encode())
    queue._index_lease(job_id, until)
    return job


def test_an_expired_claim_is_requeued_by_exactly_one_process(store_url):  # noqa: F811
    queues = [Queue(store_url) for _ in range(5)]
    _dead_worker_job(queues[0], "dead", expired=1.0)
    live = _dead_worker_job(queues[0], "live", expired=-30.0)  # a claim still held: its worker lives
    barrier, requeued = threading.Barrier(len(queues)), []

    def sweep(queue: Queue) -> None:
        barrier.wait()
        requeued.extend(queue.requeue_expired())

    threads = [threading.Thread(target=sweep, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert requeued == ["dead"]
    assert queues[0].get("dead").state == QUEUED and "stopped renewing" in queues[0].get("dead").result
    assert queues[0].pending_ids() == {"dead"}
    assert queues[0].get(live.id).state == RUNNING
    assert queues[0].expired_claims() == []  # the dead one's claim is gone, the live one's is not expired
    assert queues[0].requeue_expired() == []


def test_a_running_worker_renews_its_claim_past_the_lease(store_url, monkeypatch):  # noqa: F811
    monkeypatch.setitem(jobs.KIND_LEASE_SECONDS, "slow", 0.4)
    queue, sweeper = Queue(store_url), Queue(store_url)
    queue.handlers = {"audit": lambda job, q: time.sleep(1.5) or "done"}
    queue.add(Job(id="s1", source="audit", kind="slow", repo="o/m", number=0))
    runner = threading.Thread(target=queue.run, args=("s1",))
    runner.start()
    requeued = []
    while runner.is_alive():  # nearly four leases long, swept all along: never taken from its worker
        requeued += sweeper.requeue_expired()
        time.sleep(0.02)
    assert requeued == [] and queue.get("s1").state == DONE
    assert queue.peek("claim:s1") is None and queue.expired_claims(now=time.time() + 3600) == []


def test_a_finished_job_is_told_to_its_waiter_once(store_url):  # noqa: F811
    queue, waiter = Queue(store_url), Queue(store_url)
    queue.handlers = {"audit": lambda job, q: "done"}
    for n in range(3):
        queue.add(Job(id=f"t{n}", source="audit", kind="audit", repo="o/m", number=n, notify="run-1"))
    queue.add(Job(id="other", source="audit", kind="audit", repo="o/m", number=9, notify="run-2"))
    queue.run("t0")
    queue.run("other")
    assert waiter.wait_finished("run-1", timeout=0.1) == ["t0"]
    assert waiter.wait_finished("run-1", timeout=0.1) == []  # told once

    def later() -> None:
        time.sleep(0.3)
        queue.run("t1")
        queue.run("t2")

    thread = threading.Thread(target=later)
    started = time.monotonic()
    thread.start()
    got = waiter.wait_finished("run-1", timeout=10)
    waited = time.monotonic() - started
    thread.join()
    got += waiter.wait_finished("run-1", timeout=0.5)
    assert sorted(got) == ["t1", "t2"] and 0.25 < waited < 5
    waiter.forget_channel("run-2")
    assert waiter.wait_finished("run-2", timeout=0.1) == []


def test_one_process_of_the_queue_runs_each_full_recovery_scan(store_url):  # noqa: F811
    """The full scan (``recover``) reads every job record and queued task: with many workers each ran
    it every minute. Now one process per interval does, whichever wins the turn."""
    queues = [Queue(store_url) for _ in range(5)]
    now = time.time()
    barrier, turns = threading.Barrier(len(queues)), []

    def turn(queue: Queue, when: float) -> None:
        barrier.wait()
        if queue.recovery_turn(60.0, now=when):
            turns.append(when)

    for when in (now, now + 1, now + 61, now + 62):  # two intervals: one turn each
        threads = [threading.Thread(target=turn, args=(q, when)) for q in queues]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert turns == [now, now + 61]
