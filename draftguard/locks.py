"""A lock in the queue's store, shared by every process on that queue: the bot's per-pull-request and
per-commit locks.

In: a store with ``peek``, ``put_if_empty`` and ``swap`` (``jobs.Queue``: an atomic compare-and-swap
on SQLite and Redis), a name, a ttl and how long to wait (none by default).
Out: ``StoreLock``, a context manager that holds ``lock:<name>`` (renewed while held; removed only by
its holder), or raises ``errors.Busy`` when it stays busy for ``wait`` seconds: the job goes back to
the queue with a delay instead of holding a worker (B3 of issue 32).

Every change of a held lock is one compare-and-swap against the value read: taking over an expired
lock, renewing it, removing it. Two processes that both see a lock expire cannot both take it, and a
holder whose lock was taken over can neither renew nor remove the new holder's.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from typing import Any

from draftguard.errors import Busy

log = logging.getLogger("draftguard.jobs")

BUSY_DELAY = 2.0  # seconds before a job whose lock was busy runs again


class StoreLock:
    """A lock in the queue's store: ``lock:<name>`` holds its expiry and its holder's token. While held
    it is renewed every third of its ttl, so a long holder (a light check of many configs) keeps it,
    and a holder that died lets it expire; only its holder removes it."""

    def __init__(self, queue: Any, name: str, ttl: float, wait: float = 0.0):
        self.queue, self.key, self.ttl, self.wait = queue, f"lock:{name}", ttl, wait
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._mine: bytes | None = None  # the value this holder wrote last
        self._guard = threading.Lock()  # a renewal and the exit never swap at once

    def _value(self) -> bytes:
        # The holder's pid too: when its worker process dies, the supervisor frees its locks at once.
        return f"{time.time() + self.ttl!r} {self.token} {os.getpid()}".encode()

    def _take(self) -> bool:
        value = self._value()
        if self.queue.put_if_empty(self.key, value):
            self._mine = value
            return True
        held = self.queue.peek(self.key)
        if held is not None and float(held.decode().partition(" ")[0]) < time.time():
            # Its holder died (the ttl is the proof): take it over in one atomic swap, so of two
            # processes that saw it expire only one holds it.
            if self.queue.swap(self.key, held, value):
                self._mine = value
                return True
        return False

    def __enter__(self) -> "StoreLock":
        deadline = time.monotonic() + self.wait
        pause = 0.01
        while not self._take():
            if time.monotonic() >= deadline:
                raise Busy(f"{self.key} is busy", delay=BUSY_DELAY)
            time.sleep(pause)
            pause = min(0.25, pause * 2)
        threading.Thread(target=self._renew, name=f"draftguard-{self.key[:40]}", daemon=True).start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                with self._guard:
                    value = self._value()
                    if self._stop.is_set() or self._mine is None or not self.queue.swap(self.key, self._mine, value):
                        return  # released, or expired and taken: not ours to renew
                    self._mine = value
            except Exception:  # the store is briefly unreachable: the next turn tries again
                log.warning("%s: could not renew it", self.key)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        with self._guard:
            if self._mine is not None:
                self.queue.swap(self.key, self._mine, None)  # only if it is still ours
                self._mine = None
