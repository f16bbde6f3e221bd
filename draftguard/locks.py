"""A lock in the queue's store, shared by every process on that queue: the bot's per-pull-request and
per-commit locks.

In: a store with ``peek``, ``put``, ``put_if_empty`` and ``forget`` (``jobs.Queue``), a name, a ttl
and how long to wait.
Out: ``StoreLock``, a context manager that holds ``lock:<name>`` (renewed while held; removed only by
its holder), or raises ``errors.Retry`` when it stays busy for ``wait`` seconds.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any

from draftguard.errors import Retry

log = logging.getLogger("draftguard.jobs")


class StoreLock:
    """A lock in the queue's store: ``lock:<name>`` holds its expiry and its holder's token. While held
    it is renewed every third of its ttl, so a long holder (a light check of many configs) keeps it,
    and a holder that died lets it expire; only its holder removes it."""

    def __init__(self, queue: Any, name: str, ttl: float, wait: float):
        self.queue, self.key, self.ttl, self.wait = queue, f"lock:{name}", ttl, wait
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()

    def _value(self) -> bytes:
        return f"{time.time() + self.ttl!r} {self.token}".encode()

    def _held(self) -> tuple[float, str] | None:
        held = self.queue.peek(self.key)
        if held is None:
            return None
        expiry, _, token = held.decode().partition(" ")
        return float(expiry), token

    def __enter__(self) -> "StoreLock":
        deadline = time.monotonic() + self.wait
        pause = 0.01
        while True:
            if self.queue.put_if_empty(self.key, self._value()):
                threading.Thread(target=self._renew, name=f"draftguard-{self.key[:40]}", daemon=True).start()
                return self
            held = self._held()
            if held is not None and held[0] < time.time():
                self.queue.forget(self.key)  # its holder died; the ttl is the proof
                continue
            if time.monotonic() > deadline:
                raise Retry(f"{self.key} is busy", delay=5.0)
            time.sleep(pause)
            pause = min(0.25, pause * 2)

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                held = self._held()
                if held is None or held[1] != self.token:
                    return  # expired and taken (or removed): not ours to renew
                self.queue.put(self.key, self._value())
            except Exception:  # the store is briefly unreachable: the next turn tries again
                log.warning("%s: could not renew it", self.key)

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        held = self._held()
        if held is not None and held[1] == self.token:
            self.queue.forget(self.key)
