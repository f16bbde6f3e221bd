"""What each kind of Job carries: one typed payload per (source, kind), stored as the Job's ``data``.

A Job record is JSON that outlives the process that wrote it (a delivery queued before a deploy runs
after it), so a payload reads a record's ``data`` leniently: a key it does not know is dropped (an
older version also wrote ``fork``, ``trigger``, ``ref`` and ``author_id``, which nothing read), and a
missing one takes its default. ``to_data`` writes the payload's own fields only.

In: the fields of one kind of Job; or a Job (its source, kind and ``data``) for ``payload_of``.
Out: ``PullRequest``, ``Command``, ``HubCommand``, ``Acceptance``, ``AuditChunk`` and ``NoData``, each
with ``to_data()`` (the dict a Job stores) and ``from_data(data)``; ``PAYLOADS`` by (source, kind).
Imports nothing of draftguard's.

Example::

    >>> PullRequest.from_data({"author": "alice", "fork": True})  # an older record's extra key
    PullRequest(author='alice')
    >>> Acceptance(drafters=["drafter/config.json"]).to_data()
    {'drafters': ['drafter/config.json']}
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Protocol


class Payload:
    """The two ways between a payload and the ``data`` of a Job record."""

    def to_data(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]  # every payload is a dataclass

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None):
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in (data or {}).items() if k in known})


@dataclass
class NoData(Payload):
    """A Hub pull request's push or discussion event, or a push to a Hub repo's main branch: the Job's
    own fields (repo, number, head and base) say all there is."""


@dataclass
class PullRequest(Payload):
    """A GitHub pull request event: who opened it (a writer's pull request may get the GPU test)."""

    author: str | None = None


@dataclass
class Command(Payload):
    """A command on a GitHub pull request: a comment's (/recheck, /ok-to-test), or a press of the check
    run's Re-run button (``rerequested``: the run's name; ``head_sha``: the commit it was run on, the
    head the person pressing it saw). ``created_at``: when the comment was written."""

    comment_id: int | None = None
    user: str | None = None
    user_type: str | None = None
    commands: list[str] = field(default_factory=list)
    created_at: str | None = None
    rerequested: str | None = None
    head_sha: str | None = None


@dataclass
class HubCommand(Payload):
    """A comment on a Hub pull request that may hold a /recheck: its id; the handler adds when it was
    written (``created_at``), which the approval of the head is judged by."""

    comment_id: str = ""
    created_at: str | None = None


@dataclass
class Acceptance(Payload):
    """An acceptance test on the gpu queue: the drafters' config paths in the pull request."""

    drafters: list[str] = field(default_factory=list)


@dataclass
class AuditChunk(Payload):
    """A chunk of ``draftguard audit --queue``: its repos (``{"repo", "revision"}``), the transformers
    versions, the audit's options, and the previous records of these repos (JSON, by repo key)."""

    refs: list[dict[str, Any]] = field(default_factory=list)
    versions: list[str] = field(default_factory=list)
    full: bool = False
    retries: int = 4
    max_wait: float = 120.0
    fetch_workers: int = 4
    previous: dict[str, dict[str, Any]] = field(default_factory=dict)
    hub_rate: float = 0.0  # Hub requests a second for the whole audit, shared by its workers (0: the Hub's policy)


PAYLOADS: dict[tuple[str, str], type[Payload]] = {
    ("github", "pull_request"): PullRequest, ("github", "comment"): Command, ("github", "acceptance"): Acceptance,
    ("hub", "pull_request"): NoData, ("hub", "branch"): NoData, ("hub", "comment"): HubCommand,
    ("hub", "acceptance"): Acceptance, ("audit", "audit"): AuditChunk,
}


class _JobLike(Protocol):
    source: str
    kind: str
    data: dict[str, Any]


def payload_of(job: _JobLike) -> Payload:
    """The typed payload of a Job (of a record written by this version or an older one). A kind with
    no payload class here raises KeyError."""
    return PAYLOADS[(job.source, job.kind)].from_data(job.data)
