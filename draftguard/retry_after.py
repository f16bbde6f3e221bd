"""Retry-After, read as HTTP says (delay-seconds or an HTTP date), and a gate that holds a host's
requests until the time a 429 or 503 asked for. Shared by the Hub reader (``hub_access``, which puts
the gate on huggingface_hub's client) and the hosts' retries (``hosts.retry``).

``SharedBudget`` extends a gate across processes and machines (the audit's workers on one Redis): a
host's requests draw from one token bucket in Redis (``rate`` requests a second, or the rate the
host's own ``RateLimit-Policy`` states, ``q`` requests per ``w`` seconds), and a ``Retry-After``, or a
``RateLimit`` header saying no request is left (``r=0;t=55``), that one worker receives holds every
worker's requests to that host until then. Times are the Redis server's, so machines' clocks need
not agree.

In: a ``Retry-After`` header's value; httpx-style (httpx2: huggingface_hub's client) requests and responses (``url.host``,
``status_code``, ``headers``); for ``SharedBudget``, a redis-py client and a rate.
Out: seconds to wait (``retry_after_seconds``); ``Gate.hold`` sleeps until the host's time (and,
shared, until the bucket has a token for it).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import Any

log = logging.getLogger("draftguard.retry_after")


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


_RATELIMIT = re.compile(r'"\w+"\s*;\s*r\s*=\s*(\d+)\s*;\s*t\s*=\s*(\d+)')
_POLICY = re.compile(r"q\s*=\s*(\d+).*?w\s*=\s*(\d+)")


def rate_limit(headers: Any) -> tuple[int | None, float | None, float | None]:
    """What the IETF draft's ``RateLimit`` and ``RateLimit-Policy`` headers say, as the Hub sends them:
    requests left, seconds until the window resets, and the policy's rate (requests a second).

    Example::

        >>> rate_limit({"ratelimit": '"api";r=0;t=55', "ratelimit-policy": '"fixed window";"api";q=500;w=300'})
        (0, 55.0, 1.6666666666666667)
        >>> rate_limit({})
        (None, None, None)
    """
    left = reset = rate = None
    found = _RATELIMIT.search(headers.get("ratelimit") or "")
    if found:
        left, reset = int(found.group(1)), float(found.group(2))
    policy = _POLICY.search(headers.get("ratelimit-policy") or "")
    if policy and int(policy.group(2)) > 0:
        rate = int(policy.group(1)) / int(policy.group(2))
    return left, reset, rate


class Gate:
    """Per host: the monotonic time before which no request goes out; with ``shared`` (a
    ``SharedBudget``), also the budget every process on the same Redis shares."""

    def __init__(self, cap: float):
        self.cap, self.until, self.lock = cap, {}, threading.Lock()
        self.shared: SharedBudget | None = None

    def hold(self, request: Any) -> None:
        with self.lock:
            wait = self.until.get(request.url.host, 0.0) - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if self.shared is not None:
            self.shared.take(request.url.host, self.cap)

    def note(self, response: Any) -> None:
        if self.shared is not None:
            self.shared.note(response, self.cap)
        if response.status_code not in (429, 503):
            return
        wait = retry_after_seconds(response.headers.get("retry-after"))
        if wait is not None:
            with self.lock:
                host = response.request.url.host
                self.until[host] = max(self.until.get(host, 0.0), time.monotonic() + min(wait, self.cap))


# One token of a host's bucket, in the Redis server's time. KEYS[1]: the host's hash (until, rate,
# tokens, at); ARGV[1]: the rate asked for (requests a second; 0: the host's stated policy, or none).
# Returns the seconds to wait before asking again (0: go), as a string (Redis truncates Lua numbers).
TAKE_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local held = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
if held > now then return tostring(held - now) end
local rate = tonumber(ARGV[1])
if rate <= 0 then rate = tonumber(redis.call('HGET', KEYS[1], 'rate') or '0') end
if rate <= 0 then return '0' end
local burst = math.max(1, rate)
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens') or tostring(burst))
local at = tonumber(redis.call('HGET', KEYS[1], 'at') or tostring(now))
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
if tokens >= 1 then
  redis.call('HSET', KEYS[1], 'tokens', tostring(tokens - 1), 'at', tostring(now))
  return '0'
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
return tostring((1 - tokens) / rate)
"""
# Hold a host until ARGV[1] seconds from now (the later of this and what it holds), and keep the rate
# its policy states (ARGV[2], 0: none stated). The hash expires a day after its last use.
HOLD_LUA = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local wait = tonumber(ARGV[1])
if wait > 0 then
  local held = tonumber(redis.call('HGET', KEYS[1], 'until') or '0')
  if now + wait > held then redis.call('HSET', KEYS[1], 'until', tostring(now + wait)) end
end
if tonumber(ARGV[2]) > 0 then redis.call('HSET', KEYS[1], 'rate', ARGV[2]) end
redis.call('EXPIRE', KEYS[1], 86400)
return 1
"""


class SharedBudget:
    """A host's request budget shared by every process on one Redis: a token bucket (``rate``
    requests a second; 0: the rate the host's ``RateLimit-Policy`` states, or no limit but the host's
    waits) and the time before which no request goes out, set by any process's 429 or 503
    ``Retry-After`` or a ``RateLimit`` header with no request left. When Redis cannot be reached the
    process goes on with its own gate alone for ``PAUSE`` seconds before asking Redis again (said
    once in the log), so each request does not pay the client's connection retries."""

    PREFIX = "draftguard:hub-budget:"
    PAUSE = 30.0

    def __init__(self, conn: Any, rate: float = 0.0):
        self.conn, self.rate = conn, max(0.0, float(rate))
        self.waited = 0.0  # seconds this process's requests waited on the shared budget
        self._lock, self._warned, self._down_until = threading.Lock(), False, 0.0

    def _trouble(self) -> None:
        self._down_until = time.monotonic() + self.PAUSE
        if not self._warned:
            self._warned = True
            log.warning("the shared request budget in Redis cannot be reached; this worker keeps its own")

    def _down(self) -> bool:
        return time.monotonic() < self._down_until

    def take(self, host: str, cap: float) -> None:
        """Wait (at most ``cap`` seconds at a time) until the host's budget lets a request go."""
        while not self._down():
            try:
                wait = float(self.conn.eval(TAKE_LUA, 1, self.PREFIX + host, repr(self.rate)))
            except Exception:
                self._trouble()
                return
            if wait <= 0:
                return
            wait = min(wait, cap)
            with self._lock:
                self.waited += wait
            time.sleep(wait)

    def note(self, response: Any, cap: float) -> None:
        """Tell every process what this answer says of the host's budget."""
        headers, wait = response.headers, 0.0
        if response.status_code in (429, 503):
            wait = retry_after_seconds(headers.get("retry-after")) or 0.0
        left, reset, policy_rate = rate_limit(headers)
        if left == 0 and reset is not None:
            wait = max(wait, reset)
        policy_rate = policy_rate or 0.0
        if (wait <= 0 and policy_rate <= 0) or self._down():
            return
        try:
            self.conn.eval(HOLD_LUA, 1, self.PREFIX + response.request.url.host, repr(min(wait, cap)),
                           repr(policy_rate))
        except Exception:
            self._trouble()
