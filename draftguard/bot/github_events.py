"""GitHub's webhook route for the edge (``bot/webhooks.py``): the signature check and the payload's Jobs.

In: a delivery's headers (``X-Hub-Signature-256``, ``X-GitHub-Event``, ``X-GitHub-Delivery``) and its
body.
Out: ``github_route`` -> the ``WebhookRoute``, which raises ``WebhookRefused`` (401) for a delivery
that is not GitHub's, else gives the Job ``job_from_github`` makes of it (pure: payload in, Job or a
reason out, so the decisions are testable without a server). No I/O, no web framework.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Mapping

from draftguard.bot.commands import RECHECK, parse_commands
from draftguard.jobs import Job
from draftguard.payloads import Command, PullRequest
from draftguard.bot.webhooks import PayloadError, WebhookRefused, WebhookRoute

SIGNATURE_HEADER = "x-hub-signature-256"
PR_ACTIONS = ("opened", "synchronize", "reopened")
CHECK_PREFIX = "draftguard/"  # our check runs: draftguard/config, draftguard/acceptance


def _repo_name(payload: Mapping[str, Any]) -> str:
    """``repository.full_name`` of a payload that asks for work; PayloadError (400) without one."""
    repo = payload.get("repository")
    name = repo.get("full_name") if isinstance(repo, dict) else None
    if not isinstance(name, str) or name.count("/") != 1 or ".." in name or not all(name.split("/")):
        raise PayloadError("malformed payload: no repository.full_name")
    return name


def _number(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
        raise PayloadError(f"malformed payload: {what} is not a pull request number")
    return value


def _installation(payload: Mapping[str, Any]) -> int | None:
    value = (payload.get("installation") or {}).get("id") if isinstance(payload.get("installation"), dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _sha(value: Any) -> str | None:
    return value if isinstance(value, str) and 7 <= len(value) <= 64 and value.isalnum() else None


def job_from_github(event: str, delivery: str, payload: Mapping[str, Any]) -> tuple[Job | None, str]:
    """The Job a webhook asks for, or None with the reason it is ignored. A payload that asks for work
    but lacks what the work needs (a repository, a pull request number) raises PayloadError.

    Raises:
        PayloadError: The payload asks for work but lacks what it needs (answered 400).

    Example::

        >>> job, why = job_from_github("ping", "d1", {"zen": "..."})
        >>> job, why
        (None, 'ignored: ping')
    """
    action = payload.get("action")
    if event == "pull_request":
        if action not in PR_ACTIONS:
            return None, f"ignored: pull_request {action}"
        repo = _repo_name(payload)
        pr = payload.get("pull_request")
        if not isinstance(pr, dict):
            raise PayloadError("malformed payload: no pull_request")
        head, base = pr.get("head") or {}, pr.get("base") or {}
        return Job(
            id=delivery, source="github", kind="pull_request", repo=repo, number=_number(pr.get("number"), "number"),
            head_sha=_sha(head.get("sha")), base_sha=_sha(base.get("sha")), installation_id=_installation(payload),
            data=PullRequest(author=(pr.get("user") or {}).get("login")).to_data(),
        ), "queued"
    if event == "issue_comment":
        issue = payload.get("issue") or {}
        comment = payload.get("comment") or {}
        if action != "created" or not isinstance(issue, dict) or not issue.get("pull_request"):
            return None, f"ignored: issue_comment {action} on an issue"
        if not isinstance(comment, dict):
            raise PayloadError("malformed payload: no comment")
        user = comment.get("user") or {}
        if user.get("type") == "Bot":
            return None, "ignored: comment from a bot"
        body = comment.get("body")
        commands = parse_commands(body if isinstance(body, str) else None)
        if not commands:
            return None, "ignored: no command"
        return Job(
            id=delivery, source="github", kind="comment", repo=_repo_name(payload),
            number=_number(issue.get("number"), "issue.number"), installation_id=_installation(payload),
            data=Command(comment_id=comment.get("id"), user=user.get("login"), user_type=user.get("type"),
                         commands=commands, created_at=comment.get("created_at")).to_data(),
        ), "queued"
    if event == "check_run":
        run = payload.get("check_run") or {}
        if action != "rerequested":
            return None, f"ignored: check_run {action}"
        if not isinstance(run, dict) or not str(run.get("name") or "").startswith(CHECK_PREFIX):
            return None, "ignored: not a draftguard check run"
        repo = _repo_name(payload)
        number = _check_run_pull(run, repo)
        if number is None:
            return None, "ignored: the check run names no pull request"
        sender = payload.get("sender") or {}
        # The "Re-run" button: a /recheck by whoever pressed it, under the same rules as a comment.
        return Job(
            id=delivery, source="github", kind="comment", repo=repo, number=number,
            installation_id=_installation(payload),
            data=Command(comment_id=None, user=sender.get("login"), user_type=sender.get("type"),
                         commands=[RECHECK], rerequested=run.get("name"),
                         # The commit whose check run was re-run: the head the person pressing it saw.
                         head_sha=_sha(run.get("head_sha"))).to_data(),
        ), "queued"
    return None, f"ignored: {event}"


def _check_run_pull(run: Mapping[str, Any], repo: str) -> int | None:
    """The pull request a check run belongs to: its ``pull_requests`` (empty for forks), else the
    ``external_id`` the bot set when it created the run (``owner/name#N``)."""
    for pr in run.get("pull_requests") or []:
        if isinstance(pr, dict) and isinstance(pr.get("number"), int):
            return _number(pr["number"], "check_run.pull_requests[].number")
    external = run.get("external_id")
    if isinstance(external, str) and external.startswith(f"{repo}#") and external[len(repo) + 1:].isdigit():
        return _number(int(external[len(repo) + 1:]), "check_run.external_id")
    return None


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
