"""The Hub request budget shared by the audit's workers (retry_after.SharedBudget), on a real
redis-server, with real httpx2 requests (huggingface_hub's client) and responses: a rate shared by two processes' gates, a
Retry-After or an exhausted RateLimit that one worker receives holding the other's requests, and the
rate the Hub's RateLimit-Policy states adopted. Before (issue 41): each worker process honoured only
the waits its own requests were told, and nothing bounded the whole audit's rate."""

from __future__ import annotations

import threading
import time

import pytest

redis = pytest.importorskip("redis")
httpx = pytest.importorskip("httpx2")  # huggingface_hub's HTTP client

from draftguard.retry_after import Gate, SharedBudget  # noqa: E402
from tests.test_bot_redis import redis_url  # noqa: E402,F401  (a real redis-server on loopback)

HUB = "https://hub.example/api/models/o/m"


def _gate(url: str, rate: float = 0.0) -> Gate:
    """One worker's gate: its own Redis connection, as another machine would have."""
    gate = Gate(cap=30.0)
    gate.shared = SharedBudget(redis.Redis.from_url(url), rate)
    return gate


def _answer(status: int, **headers: str) -> httpx.Response:
    return httpx.Response(status, headers=headers, request=httpx.Request("GET", HUB))


def test_two_workers_share_one_rate(redis_url):  # noqa: F811
    gates = [_gate(redis_url, rate=20.0) for _ in range(2)]
    started = time.monotonic()

    def ask(gate: Gate) -> None:
        for _ in range(30):
            gate.hold(httpx.Request("GET", HUB))

    threads = [threading.Thread(target=ask, args=(g,)) for g in gates]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.monotonic() - started
    # 60 requests at 20 a second with a burst of 20: 40 wait their turn, 2 s; alone each gate would take 0.5 s.
    assert 1.8 < took < 6, took
    assert sum(g.shared.waited for g in gates) > 1.0
    other = _gate(redis_url)  # another host's bucket is its own
    started = time.monotonic()
    for _ in range(50):
        other.hold(httpx.Request("GET", "https://cdn.example/x"))
    assert time.monotonic() - started < 1.0


def test_a_retry_after_one_worker_gets_holds_every_worker(redis_url):  # noqa: F811
    told, other = _gate(redis_url), _gate(redis_url)
    told.note(_answer(429, **{"Retry-After": "2"}))
    started = time.monotonic()
    other.hold(httpx.Request("GET", HUB))
    assert 1.5 < time.monotonic() - started < 4
    started = time.monotonic()
    other.hold(httpx.Request("GET", HUB))  # the wait is over: no more holding
    assert time.monotonic() - started < 0.5


def test_an_exhausted_ratelimit_holds_every_worker_until_its_reset(redis_url):  # noqa: F811
    told, other = _gate(redis_url), _gate(redis_url)
    told.note(_answer(200, RateLimit='"api";r=5;t=30'))  # requests left: nothing to wait
    started = time.monotonic()
    other.hold(httpx.Request("GET", HUB))
    assert time.monotonic() - started < 0.5
    told.note(_answer(200, RateLimit='"api";r=0;t=1'))  # none left: until the window resets
    started = time.monotonic()
    other.hold(httpx.Request("GET", HUB))
    assert 0.7 < time.monotonic() - started < 3


def test_the_hubs_stated_policy_becomes_the_shared_rate(redis_url):  # noqa: F811
    told, other = _gate(redis_url), _gate(redis_url)  # no rate given: the Hub's policy sets it
    told.note(_answer(200, RateLimit='"api";r=99;t=10', **{"RateLimit-Policy": '"fixed window";"api";q=50;w=5'}))
    started = time.monotonic()
    for _ in range(20):  # 10 a second, a burst of 10: the last 10 wait about a second
        other.hold(httpx.Request("GET", HUB))
    assert 0.8 < time.monotonic() - started < 4


def test_a_budget_that_cannot_reach_redis_leaves_the_worker_its_own_gate():
    gate = Gate(cap=30.0)
    gate.shared = SharedBudget(redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2), rate=1.0)
    gate.hold(httpx.Request("GET", HUB))  # finds Redis out of reach (after the client's own retries)
    started = time.monotonic()
    for _ in range(3):  # then goes on alone for a while, without asking Redis each time
        gate.hold(httpx.Request("GET", HUB))
    gate.note(_answer(429, **{"Retry-After": "1"}))
    assert time.monotonic() - started < 0.5
    gate.hold(httpx.Request("GET", HUB))  # its own gate still holds what it was told
    assert time.monotonic() - started >= 0.9
