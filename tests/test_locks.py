"""The queue's lock (draftguard/locks.py), on a real SQLite store: a long holder keeps it (it is
renewed while held), and a holder whose lock expired and was taken never removes the new holder's.
Before (review of issue 25, F4): a light check past the 120 s ttl lost its per-pull-request lock to a
second job, and its exit then removed that job's lock, so two checks of one pull request ran at once."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("huey")

from draftguard.errors import Retry  # noqa: E402
from draftguard.jobs import Queue  # noqa: E402


def test_a_long_holder_keeps_its_lock_past_the_ttl(tmp_path):
    queue = Queue(f"sqlite:///{tmp_path}/q.db")
    with queue.lock("pr:demo", ttl=0.3, wait=0.1):
        time.sleep(1.0)  # three ttls
        with pytest.raises(Retry):
            with queue.lock("pr:demo", ttl=0.3, wait=0.2):
                pass
    with queue.lock("pr:demo", ttl=0.3, wait=0.2):  # released on exit
        pass


def test_a_holder_never_removes_the_lock_someone_else_holds_now(tmp_path):
    queue = Queue(f"sqlite:///{tmp_path}/q.db")
    first = queue.lock("pr:demo", ttl=60.0, wait=0.1)
    first.__enter__()
    queue.put("lock:pr:demo", f"{time.time() + 60!r} someone-else".encode())  # expired, then taken
    first.__exit__(None, None, None)
    assert queue.peek("lock:pr:demo").endswith(b"someone-else")
