"""GitHub's webhook route for the edge (``bot/webhooks.py``): the signature check and the payload's Jobs.

In: a delivery's headers (``X-Hub-Signature-256``, ``X-GitHub-Event``, ``X-GitHub-Delivery``) and its
body. Out: ``WebhookRefused`` for a delivery that is not GitHub's, else the Job ``job_from_github``
makes of it. Pure: no I/O, no web framework.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Mapping

from draftguard.bot.jobs import Job
from draftguard.bot.pipeline import job_from_github
from draftguard.bot.webhooks import WebhookRefused, WebhookRoute

SIGNATURE_HEADER = "x-hub-signature-256"


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """Check GitHub's ``X-Hub-Signature-256`` (HMAC-SHA256 of the raw body), in constant time.

    Example::

        >>> sig = "sha256=" + hmac.new(b"s3cret", b"{}", hashlib.sha256).hexdigest()
        >>> verify_signature("s3cret", b"{}", sig), verify_signature("s3cret", b"{ }", sig)
        (True, False)
    """
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().encode())


def github_route(secret: str | None, path: str = "/webhooks/github") -> WebhookRoute:
    """``POST /webhooks/github``: signed with the webhook's secret (401 otherwise, and always 401
    without a secret; a delivery with no signature header is refused before its body is read), one
    Job per delivery id. GitHub sends JSON, or for repo webhooks set so, a form with ``payload=``.

    Example::

        >>> github_route("s").path, github_route("s").delivery_header
        ('/webhooks/github', 'x-github-delivery')
    """

    def admit(headers: Mapping[str, str]) -> None:
        # Refused before a byte of the body is read: no secret configured, or no signature sent.
        if not secret or not (headers.get(SIGNATURE_HEADER) or "").startswith("sha256="):
            raise WebhookRefused(401, "missing or invalid signature")

    def verify(headers: Mapping[str, str], body: bytes) -> None:
        if not secret or not verify_signature(secret, body, headers.get(SIGNATURE_HEADER)):
            raise WebhookRefused(401, "missing or invalid signature")

    def to_jobs(headers: Mapping[str, str], payload: dict[str, Any]) -> tuple[list[Job] | None, str]:
        job, reason = job_from_github(headers.get("x-github-event", "").strip(),
                                      headers.get("x-github-delivery", "").strip(), payload)
        return ([job] if job is not None else None), reason

    return WebhookRoute(path, "github", to_jobs=to_jobs, admit=admit, verify=verify, delivery_header="x-github-delivery")
