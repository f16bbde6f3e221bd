"""The Hub's webhook events: Hub webhook payloads in, Jobs for the shared queue out (``hub_handler``
runs them: one sticky comment per Hub PR).

``jobs_from_hub`` is pure (payload in, Jobs or a reason out). The Hub webhook payload (version 3,
as huggingface_hub's ``WebhookPayload`` models it) has ``event.scope`` and ``event.action``, ``repo``,
``discussion``, ``comment`` and ``updatedRefs``. What counts:

- ``repo.content``: each of ``updatedRefs`` (ref, oldSha, newSha). ``refs/pr/N`` is new commits on
  pull request N; ``refs/heads/main`` is a push to main. ``repo.headSha`` is never used: the
  client's own payload model drops it, and it is main's head, not a PR's.
- ``discussion`` (a pull request created or updated while open or draft): check ``refs/pr/N``
  against its target branch.
- ``discussion.comment`` created on a pull request, with ``/recheck`` alone on a line. The GPU test
  reruns only for the repo's owner or members of the owning org; others get the light check and a
  note why no GPU run happened. The bot's own comments (they carry its hidden markers, and it checks
  the author) never trigger it.

The Hub sends no delivery id, so a Job id names what it is about: ``hub:{repo}#{N}@{sha}`` for a
PR head, ``...:comment:{id}`` for a comment. A redelivery, or the same head announced twice, is one
Job. Bursts coalesce: a job whose head is no longer the PR's head is skipped (the newest wins), and a
head already checked is not checked again unless someone asks with ``/recheck``. The Hub allows
1,000 webhook triggers a day per webhook, so the bot answers each in milliseconds and runs at most
one check per PR head.

In: a delivery's ``X-Webhook-Secret`` header and its JSON payload.
Out: ``hub_route`` -> the ``WebhookRoute`` (401 missing secret, 403 wrong one, ``HubPayloadError`` for
a payload it cannot use); ``jobs_from_hub`` -> (the list of ``Job``, the reason).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any, Mapping

from draftguard.bot.commands import RECHECK, parse_commands
from draftguard.jobs import Job
from draftguard.bot.webhooks import WebhookRefused, WebhookRoute
from draftguard.errors import HubPayloadError
from draftguard.hosts.hub import OPEN_STATES
from draftguard.markers import PREFIX
from draftguard.payloads import HubCommand

log = logging.getLogger("draftguard.bot")

PR_REF_PREFIX = "refs/pr/"
MAIN_REF = "refs/heads/main"
# Hidden markers the bot writes into its comments (the sticky one, replies) all start with this.
BOT_MARKER = PREFIX

def _obj(value: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise HubPayloadError(f"{what} is missing or not an object")
    return value


def _pr_number(ref: str) -> int | None:
    if ref.startswith(PR_REF_PREFIX) and ref[len(PR_REF_PREFIX):].isdigit():
        return int(ref[len(PR_REF_PREFIX):])
    return None


def _valid_repo_id(name: str) -> bool:
    """A Hub repo id: ``namespace/name``, or a legacy name without a namespace (``gpt2``).

    Example::

        >>> [_valid_repo_id(n) for n in ("acme/m", "gpt2", "a/b/c", "../x", "")]
        [True, True, False, False, False]
    """
    parts = name.split("/")
    return 1 <= len(parts) <= 2 and all(p and p not in (".", "..") and len(p) <= 96 and
                                        all(c.isalnum() or c in "-_." for c in p) for p in parts)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def jobs_from_hub(payload: Mapping[str, Any]) -> tuple[list[Job], str]:
    """The Jobs a Hub webhook asks for (none, with the reason, when it asks for nothing).

    Example::

        >>> p = {"event": {"scope": "repo.content", "action": "update"},
        ...      "repo": {"type": "model", "name": "acme/m"},
        ...      "updatedRefs": [{"ref": "refs/pr/3", "oldSha": "a" * 40, "newSha": "b" * 40}]}
        >>> jobs, why = jobs_from_hub(p)
        >>> [(j.id, j.kind, j.number) for j in jobs], why
        ([('hub:acme/m#3@bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb', 'pull_request', 3)], 'queued')
    """
    event = _obj(payload.get("event"), "event")
    repo = _obj(payload.get("repo"), "repo")
    scope, action = event.get("scope"), event.get("action")
    name = repo.get("name")
    if not isinstance(scope, str) or not isinstance(name, str) or not _valid_repo_id(name):
        raise HubPayloadError("event.scope or repo.name is missing")
    if repo.get("type", "model") != "model":
        return [], f"ignored: {repo.get('type')} repo"
    if scope == "repo.content":
        jobs = []
        refs = payload.get("updatedRefs") or []
        if not isinstance(refs, list):
            raise HubPayloadError("updatedRefs is not a list")
        for ref in refs:
            ref = _obj(ref, "updatedRefs[]")
            new, old, name_ = ref.get("newSha"), ref.get("oldSha"), ref.get("ref")
            if not isinstance(name_, str) or not new:
                continue  # a deleted ref: nothing to check
            number = _pr_number(name_)
            if number is not None:
                jobs.append(Job(id=f"hub:{name}#{number}@{new}", source="hub", kind="pull_request", repo=name,
                                number=number, head_sha=new))
            elif name_ == MAIN_REF:
                jobs.append(Job(id=f"hub:{name}@main:{new}", source="hub", kind="branch", repo=name, number=0,
                                head_sha=new, base_sha=old or None))
        return jobs, "queued" if jobs else "ignored: no pull request or main ref updated"
    if scope not in ("discussion", "discussion.comment"):
        return [], f"ignored: {scope}"
    discussion = _obj(payload.get("discussion"), "discussion")
    number = discussion.get("num")
    if not isinstance(number, int) or number <= 0:
        raise HubPayloadError("discussion.num is missing")
    if not discussion.get("isPullRequest"):
        return [], "ignored: a discussion, not a pull request"
    if discussion.get("status") not in OPEN_STATES:
        return [], f"ignored: pull request {discussion.get('status')}"
    if scope == "discussion":
        if action not in ("create", "update"):
            return [], f"ignored: discussion {action}"
        # No head in this payload: the id dedupes redeliveries, the handler dedupes heads.
        return [Job(id=f"hub:{name}#{number}:discussion:{_digest([action, discussion])}", source="hub",
                    kind="pull_request", repo=name, number=number)], "queued"
    comment = _obj(payload.get("comment"), "comment")
    if action != "create":
        return [], f"ignored: comment {action}"
    if comment.get("hidden"):
        return [], "ignored: hidden comment"
    content = comment.get("content")
    if isinstance(content, str) and BOT_MARKER in content:
        return [], "ignored: the bot's own comment"
    commands = parse_commands(content) if isinstance(content, str) else None
    if commands is not None and RECHECK not in commands:
        return [], "ignored: no command"
    comment_id = comment.get("id")
    if not isinstance(comment_id, str) or not comment_id:
        raise HubPayloadError("comment.id is missing")
    _obj(comment.get("author"), "comment.author")  # a comment without its author is not the Hub's
    return [Job(id=f"hub:{name}#{number}:comment:{comment_id}", source="hub", kind="comment", repo=name,
                number=number, data=HubCommand(comment_id=comment_id).to_data())], "queued"


# --- the webhook route ---------------------------------------------------------------------------

def hub_route(secret: str, path: str = "/webhooks/hub") -> WebhookRoute:
    """``POST /webhooks/hub`` for the edge: the Hub sends the webhook's secret verbatim in
    ``X-Webhook-Secret`` (no signature over the body), so it is compared in constant time before the
    body is read: missing is 401, wrong 403. 202 once queued.

    Example::

        >>> hub_route("s").path, hub_route("s").many
        ('/webhooks/hub', True)
    """
    expected = secret.encode()

    def admit(headers: Mapping[str, str]) -> None:
        given = headers.get("x-webhook-secret")
        if not given:
            raise WebhookRefused(401, "missing X-Webhook-Secret")
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), expected):
            raise WebhookRefused(403, "wrong X-Webhook-Secret")

    return WebhookRoute(path, "hub", to_jobs=lambda headers, payload: jobs_from_hub(payload), admit=admit,
                        many=True)

