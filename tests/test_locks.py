"""The queue's lock (draftguard/locks.py), on a real SQLite store and a real redis-server: a long holder
keeps it (it is renewed while held), a holder whose lock expired and was taken never removes the new
holder's, and an expired lock is taken over by exactly one of the processes that saw it expire.
Before (review of issue 25, F4): a light check past the 120 s ttl lost its per-pull-request lock to a
second job, and its exit then removed that job's lock, so two checks of one pull request ran at once.
Before (issue 32): the takeover was a delete then an insert, so two takers could both hold it."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

pytest.importorskip("huey")

from draftguard.errors import Busy, Retry  # noqa: E402
from draftguard.jobs import Queue  # noqa: E402
from tests.test_bot_redis import redis_url  # noqa: E402,F401  (a real redis-server on loopback)


def test_a_long_holder_keeps_its_lock_past_the_ttl(tmp_path):
    queue = Queue(f"sqlite:///{tmp_path}/q.db")
    with queue.lock("pr:demo", ttl=0.3, wait=0.1):
        time.sleep(1.0)  # three ttls
        with pytest.raises(Busy):
            with queue.lock("pr:demo", ttl=0.3, wait=0.2):
                pass
    with queue.lock("pr:demo", ttl=0.3, wait=0.2):  # released on exit
        pass


def test_a_holder_never_removes_the_lock_someone_else_holds_now(tmp_path):
    queue = Queue(f"sqlite:///{tmp_path}/q.db")
    first = queue.lock("pr:demo", ttl=60.0, wait=0.1)
    first.__enter__()
    queue.put("lock:pr:demo", f"{time.time() + 60!r} someone-else".encode())  # expired, then taken
    time.sleep(0.05)
    first.__exit__(None, None, None)
    assert queue.peek("lock:pr:demo").endswith(b"someone-else")


def test_a_busy_lock_raises_at_once_and_is_not_an_attempt(tmp_path):
    """B3 of issue 32: a job whose pull request is busy goes back to the queue; no worker waits."""
    queue = Queue(f"sqlite:///{tmp_path}/q.db")
    with queue.lock("pr:demo"):
        started = time.monotonic()
        with pytest.raises(Busy) as caught:
            with queue.lock("pr:demo"):
                pass
        assert time.monotonic() - started < 0.5 and isinstance(caught.value, Retry) and caught.value.delay > 0


def race_for_an_expired_lock(url: str, takers: int = 8, rounds: int = 15) -> list[int]:
    """How many of ``takers`` processes' queues (own connections, one barrier) hold an expired lock
    at once, per round."""
    holders = []
    queues = [Queue(url) for _ in range(takers)]
    for n in range(rounds):
        name = f"pr:race{n}"
        queues[0].put(f"lock:{name}", f"{time.time() - 5!r} dead-holder".encode())  # expired
        barrier, held, guard = threading.Barrier(takers), [], threading.Lock()

        def take(queue: Queue) -> None:
            lock = queue.lock(name, ttl=60.0, wait=0.2)
            barrier.wait()
            try:
                lock.__enter__()
            except Retry:  # Busy
                return
            with guard:
                held.append(lock)

        threads = [threading.Thread(target=take, args=(q,)) for q in queues]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        holders.append(len(held))
        for lock in held:
            lock.__exit__(None, None, None)
    return holders


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request, tmp_path) -> str:
    """Each store the queue runs on: a SQLite file, a real redis-server on loopback."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/q.db"
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    return request.getfixturevalue("redis_url")


def test_an_expired_lock_is_taken_over_by_exactly_one_taker(store_url):
    holders = race_for_an_expired_lock(store_url)
    assert holders == [1] * len(holders)


def test_a_claim_past_its_lease_is_taken_by_one_worker(tmp_path):
    """The job's claim (jobs.Queue._claim) is taken over the same way: one swap, one winner."""
    from draftguard.jobs import Job

    url = f"sqlite:///{tmp_path}/q.db"
    queues = [Queue(url) for _ in range(6)]
    job = Job(id="j1", source="github", kind="pull_request", repo="acme/m", number=1)
    queues[0].put("claim:j1", repr(time.time() - 1).encode())
    barrier, won = threading.Barrier(len(queues)), []

    def claim(queue: Queue) -> None:
        barrier.wait()
        if queue._claim(job):
            won.append(queue)

    threads = [threading.Thread(target=claim, args=(q,)) for q in queues]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1


def test_a_job_whose_pull_request_stays_busy_backs_off_and_then_fails(tmp_path):
    """Issue 40: a job whose pull request stayed busy went back to the queue every 2 s, without end.
    Now the wait doubles every 10 tries up to a minute, and after MAX_BUSY tries the job fails, saying
    why. A real queue, a real lock held by another holder, the job run as a worker runs it."""
    from draftguard.jobs import FAILED, MAX_BUSY, MAX_BUSY_DELAY, QUEUED, Job

    queue = Queue(f"sqlite:///{tmp_path}/q.db")

    def handler(job: Job, q: Queue) -> str:
        with q.lock(f"pr:{job.repo}#{job.number}", wait=0.0):
            return "done"

    queue.handlers = {"github": handler}
    queue.add(Job(id="j1", source="github", kind="pull_request", repo="acme/m", number=1))
    delays = []
    with queue.lock("pr:acme/m#1", ttl=600.0):  # another job holds the pull request all along
        for _ in range(MAX_BUSY + 5):
            delay = queue.run("j1")
            if delay is None:
                break
            delays.append(delay)
            assert queue.get("j1").state == QUEUED
    assert len(delays) == MAX_BUSY
    assert delays[0] == 2.0 and delays == sorted(delays) and delays[-1] == MAX_BUSY_DELAY
    job = queue.get("j1")
    assert job.state == FAILED and "stayed busy" in job.result and job.attempts == 0
