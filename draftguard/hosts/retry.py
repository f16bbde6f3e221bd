"""One retry protocol for both hosts: backoff, turning a host's retryable faults into a
``TransientError``, and a bounded retry loop for callers that wait in place (the Action).

In: an exception and the attempt number; a ``delay_of(exc, attempt, base=...)`` function that a
host supplies (``github.retry_delay``, ``hub.hub_retry_delay``), which says how long to wait,
or None when retrying cannot help.
Out: a delay in seconds (``backoff``), a ``TransientError`` raised in place of the host's own error
(``transient_errors``), or the call's result after at most a few tries (``call_with_retries``).

The bot never sleeps in a worker: its queue reschedules a job durably (``errors.Retry``). Only the
Action, which has one job and one comment to write, retries in place with ``call_with_retries``.
"""

from __future__ import annotations

import random
import time
from typing import Callable, Protocol, TypeVar

from draftguard.errors import TransientError
from draftguard.retry_after import retry_after_seconds

T = TypeVar("T")


class DelayOf(Protocol):
    """How long to wait before retrying after ``exc`` at ``attempt`` (1, 2, ...), or None."""

    def __call__(self, exc: BaseException, attempt: int = 1, *, base: float = 2.0) -> float | None: ...


def backoff(attempt: int, base: float = 2.0, cap: float = 120.0) -> float:
    """Exponential backoff with jitter for attempt 1, 2, ...

    Example::

        >>> 2.0 <= backoff(1) <= 3.0, backoff(20) <= 120.0 * 1.5
        (True, True)
    """
    delay = min(cap, base * (2 ** max(0, attempt - 1)))
    return delay * (1 + random.random() * 0.5)


def rate_limit_wait(attempt: int, cap: float, retry_after: str | None = None, reset_at: str | None = None,
                    now: float | None = None) -> float:
    """Seconds a rate-limited host asked us to wait, capped at ``cap``: its ``Retry-After`` (seconds or
    an HTTP date; plus half a second, to land after the window), else its reset time (epoch seconds, GitHub's
    ``x-ratelimit-reset``), else a minute per attempt.

    Example::

        >>> rate_limit_wait(1, 900.0, " 7 "), rate_limit_wait(2, 900.0, reset_at="1030", now=1000.0)
        (7.5, 31.0)
        >>> rate_limit_wait(3, 900.0, "soon"), rate_limit_wait(1, 5.0, "7")
        (180.0, 5.0)
    """
    after, reset = retry_after_seconds(retry_after, now), (reset_at or "").strip()  # seconds or an HTTP date
    if after is not None:
        return min(cap, after + 0.5)
    # isascii too: isdigit() holds for "²", which float() refuses.
    if reset.isascii() and reset.isdigit():
        now = time.time() if now is None else now
        return min(cap, max(1.0, float(reset) - now + 1.0))
    return min(cap, 60.0 * attempt)


class transient_errors:
    """Context manager: a host's retryable error becomes ``error(f"{host} {what}: {status}", delay,
    cause)``, naming the operation, never a URL (it may carry a token) nor the response body.

    Anything ``delay_of`` gives no delay for passes through unchanged, and so does a TransientError.

    Example::

        >>> from draftguard.errors import TransientHubError
        >>> try:
        ...     with transient_errors("read repo", lambda exc, attempt=1, base=2.0: 5.0, TransientHubError, "Hub"):
        ...         raise TimeoutError("slow")
        ... except TransientHubError as exc:
        ...     print(exc, exc.delay, type(exc.cause).__name__)
        Hub read repo: TimeoutError 5.0 TimeoutError
    """

    def __init__(self, what: str, delay_of: DelayOf, error: type[TransientError], host: str,
                 base: float = 2.0):
        self.what, self.delay_of, self.error, self.host, self.base = what, delay_of, error, host, base

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or isinstance(exc, TransientError):
            return False
        delay = self.delay_of(exc, base=self.base)
        if delay is not None:
            status = getattr(exc, "status", None) or getattr(getattr(exc, "response", None), "status_code", None)
            raise self.error(f"{self.host} {self.what}: {status or type(exc).__name__}", delay, exc) from None
        return False


def call_with_retries(call: Callable[[], T], *, delay_of: DelayOf, attempts: int = 3, max_wait: float = 30.0,
                      base: float = 2.0, sleep: Callable[[float], None] = time.sleep) -> T:
    """Run ``call``; on a TransientError, wait and try again, at most ``attempts`` times and
    ``max_wait`` seconds of waiting in all. The delay is asked again of the error's cause at each
    attempt (so backoff grows), else the delay the error carries. Re-raises the last error.

    Raises:
        TransientError: The last attempt's, when every attempt failed or the wait ran out.

    Example::

        >>> from draftguard.errors import TransientGitHubError
        >>> tries = []
        >>> def flaky():
        ...     tries.append(1)
        ...     if len(tries) < 3:
        ...         raise TransientGitHubError("GitHub edit comment: 502", 0.0)
        ...     return "posted"
        >>> call_with_retries(flaky, delay_of=lambda exc, attempt=1, base=2.0: None, sleep=lambda s: None), len(tries)
        ('posted', 3)
    """
    waited = 0.0
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except TransientError as exc:
            delay = delay_of(exc.cause, attempt, base=base) if exc.cause is not None else None
            delay = exc.delay if delay is None else delay
            if attempt == attempts or waited + delay > max_wait:
                raise
            sleep(delay)
            waited += delay
    raise AssertionError("unreachable: the last attempt returns or raises")
