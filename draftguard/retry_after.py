"""Retry-After, read as HTTP says (delay-seconds or an HTTP date), and a gate that holds a host's
requests until the time a 429 or 503 asked for. Shared by the Hub reader (``hub_access``, which puts
the gate on huggingface_hub's client) and the hosts' retries (``hosts.retry``).

In: a ``Retry-After`` header's value; httpx-style requests and responses (``url.host``,
``status_code``, ``headers``).
Out: seconds to wait (``retry_after_seconds``); ``Gate.hold`` sleeps until the host's time.
"""

from __future__ import annotations

import threading
import time
from typing import Any


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: delay-seconds or an HTTP date; None otherwise.

    Example::

        >>> retry_after_seconds(" 7 "), retry_after_seconds("Thu, 01 Jan 1970 00:00:30 GMT", now=10.0)
        (7.0, 20.0)
        >>> retry_after_seconds("soon"), retry_after_seconds("\u00b2")
        (None, None)
    """
    value = (value or "").strip()
    if value.isascii() and value.isdigit():
        return float(value)
    from email.utils import parsedate_to_datetime  # email: only a dated Retry-After reads it
    try:
        when = parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


class Gate:
    """Per host: the monotonic time before which no request goes out."""

    def __init__(self, cap: float):
        self.cap, self.until, self.lock = cap, {}, threading.Lock()

    def hold(self, request: Any) -> None:
        with self.lock:
            wait = self.until.get(request.url.host, 0.0) - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def note(self, response: Any) -> None:
        if response.status_code not in (429, 503):
            return
        wait = retry_after_seconds(response.headers.get("retry-after"))
        if wait is not None:
            with self.lock:
                host = response.request.url.host
                self.until[host] = max(self.until.get(host, 0.0), time.monotonic() + min(wait, self.cap))
