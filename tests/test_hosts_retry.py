"""How long each host's rate limit makes us wait, read from the hosts' own exception objects (PyGithub's
GithubException, huggingface_hub's HfHubHTTPError): both go through hosts.retry.rate_limit_wait."""

from __future__ import annotations

import pytest

pytest.importorskip("github")

import httpx2  # noqa: E402
from github import GithubException, RateLimitExceededException  # noqa: E402
from huggingface_hub.errors import HfHubHTTPError  # noqa: E402

from draftguard.hosts.github import retry_delay  # noqa: E402
from draftguard.hosts.hub import hub_retry_delay  # noqa: E402


def _hub_error(status: int, headers: dict[str, str | bytes]) -> HfHubHTTPError:
    response = httpx2.Response(status, headers=headers, request=httpx2.Request("GET", "http://127.0.0.1:9/api"))
    return HfHubHTTPError(f"{status}", response=response)


def test_github_waits_what_retry_after_or_the_reset_time_says():
    assert retry_delay(RateLimitExceededException(403, {"message": "rate limit"}, {"Retry-After": "7"})) == 7.5
    reset = GithubException(403, {"message": "API rate limit exceeded"},
                            {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1030"})
    assert retry_delay(reset, now=1000.0) == 31.0
    assert retry_delay(GithubException(429, {}, {}), attempt=2) == 120.0
    assert retry_delay(GithubException(429, {}, {"Retry-After": "7200"})) == 900.0  # capped
    assert retry_delay(GithubException(404, {"message": "Not Found"}, {})) is None


def test_the_hub_waits_what_retry_after_says_else_a_minute_per_attempt():
    assert hub_retry_delay(_hub_error(429, {"Retry-After": "7"})) == 7.5
    assert hub_retry_delay(_hub_error(429, {}), attempt=3) == 180.0
    assert hub_retry_delay(_hub_error(429, {"Retry-After": "7200"}), cap=60.0) == 60.0
    assert hub_retry_delay(_hub_error(404, {})) is None


def test_a_retry_after_of_digits_that_are_not_ascii_waits_the_default_instead_of_crashing():
    # str.isdigit() holds for "²" and "¹" (a latin-1 header byte decodes to them), but float() refuses
    # them: the retry check raised ValueError inside the worker's error handling.
    assert hub_retry_delay(_hub_error(429, {"Retry-After": b"\xb2"}), attempt=1) == 60.0
    limited = GithubException(403, {"message": "API rate limit exceeded"},
                              {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "\u00b9\u00b2"})
    assert retry_delay(limited, attempt=2) == 120.0


def test_a_retry_after_given_as_an_http_date_is_honoured_by_both_hosts():
    # Issue 32: only delay-seconds were read; a date (RFC 9110 allows both) waited a minute per
    # attempt instead, or (inside huggingface_hub) not at all.
    from email.utils import formatdate
    import time

    when = formatdate(time.time() + 30, usegmt=True)
    assert 28.0 <= hub_retry_delay(_hub_error(429, {"Retry-After": when})) <= 31.0
    assert 28.0 <= retry_delay(GithubException(429, {}, {"Retry-After": when})) <= 31.0
    assert hub_retry_delay(_hub_error(429, {"Retry-After": formatdate(time.time() - 60, usegmt=True)})) == 0.5
