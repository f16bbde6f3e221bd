"""Typed Job payloads (draftguard/payloads.py): each kind of Job carries its payload's fields and
nothing else, and a record written by an older version still reads.

Before, ``Job.data`` was an untyped bag: four keys (``fork``, ``trigger``, ``ref``, ``author_id``)
were written and never read."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

pytest.importorskip("huey")  # the bot's routes import the queue's module; huey is the `bot` extra

from draftguard.bot.github_events import job_from_github  # noqa: E402
from draftguard.bot.hub_events import jobs_from_hub  # noqa: E402
from draftguard.jobs import Job  # noqa: E402
from draftguard.payloads import (PAYLOADS, AuditChunk, Command, HubCommand, NoData, PullRequest,  # noqa: E402
                                 payload_of)
from tests.fakes.github import comment_payload, pr_payload  # noqa: E402

HEAD, BASE = "a" * 40, "b" * 40


def _hub(scope: str, action: str, **extra) -> dict:
    return {"event": {"action": action, "scope": scope}, "repo": {"type": "model", "name": "acme/m"}, **extra}


_DISCUSSION = {"num": 3, "isPullRequest": True, "status": "open"}


def _jobs() -> list[Job]:
    """One Job of every kind the webhook routes make, from payloads shaped as GitHub's and the Hub's."""
    github = [
        job_from_github("pull_request", "d-1", pr_payload("acme/m", 1, HEAD, BASE, head_repo="eve/m"))[0],
        job_from_github("issue_comment", "d-2", comment_payload("acme/m", 1, {"id": 7, "body": "/recheck",
                                                                             "user": "bob"}))[0],
        job_from_github("check_run", "d-3", {
            "action": "rerequested", "repository": {"full_name": "acme/m"}, "sender": {"login": "bob", "type": "User"},
            "check_run": {"name": "draftguard/config", "head_sha": HEAD, "pull_requests": [{"number": 1}]}})[0],
    ]
    hub = (jobs_from_hub(_hub("repo.content", "update", updatedRefs=[
               {"ref": "refs/pr/3", "oldSha": None, "newSha": HEAD},
               {"ref": "refs/heads/main", "oldSha": BASE, "newSha": HEAD}]))[0]
           + jobs_from_hub(_hub("discussion", "create", discussion=_DISCUSSION))[0]
           + jobs_from_hub(_hub("discussion.comment", "create", discussion=_DISCUSSION, comment={
               "id": "c-1", "author": {"id": "u-1"}, "hidden": False, "content": "/recheck"}))[0])
    return github + hub


def test_every_job_a_route_makes_carries_its_payloads_fields_only():
    jobs = _jobs()
    assert [(j.source, j.kind) for j in jobs] == [
        ("github", "pull_request"), ("github", "comment"), ("github", "comment"),
        ("hub", "pull_request"), ("hub", "branch"), ("hub", "pull_request"), ("hub", "comment")]
    for job in jobs:
        payload = PAYLOADS[(job.source, job.kind)]
        assert set(job.data) <= {f.name for f in fields(payload)}, (job.kind, job.data)
        assert payload_of(job).to_data() == payload.from_data(job.data).to_data()
    assert payload_of(jobs[0]) == PullRequest(author="alice")
    assert payload_of(jobs[1]) == Command(comment_id=7, user="bob", user_type="User", commands=["recheck"])
    assert payload_of(jobs[2]).rerequested == "draftguard/config" and payload_of(jobs[2]).head_sha == HEAD
    assert payload_of(jobs[6]) == HubCommand(comment_id="c-1")
    assert all(payload_of(j) == NoData() for j in jobs[3:6])


@pytest.mark.parametrize("source, kind, data, expected", [
    ("github", "pull_request", {"author": "alice", "fork": True}, PullRequest(author="alice")),
    ("hub", "pull_request", {"trigger": "push"}, NoData()),
    ("hub", "branch", {"ref": "refs/heads/main"}, NoData()),
    ("hub", "comment", {"comment_id": "c-1", "author_id": "u-1", "created_at": "2026-01-01T00:00:00"},
     HubCommand(comment_id="c-1", created_at="2026-01-01T00:00:00")),
    ("audit", "audit", {"refs": [{"repo": "acme/m", "revision": None}], "versions": ["5.24.0"]},
     AuditChunk(refs=[{"repo": "acme/m", "revision": None}], versions=["5.24.0"])),
])
def test_a_record_written_by_an_older_version_still_reads(source, kind, data, expected):
    """Records outlive a deploy: the keys nothing read are dropped, missing ones take their defaults."""
    record = json.dumps({"id": "d-9", "source": source, "kind": kind, "repo": "acme/m", "number": 3,
                         "data": data}).encode()
    job = Job.from_bytes(record)
    assert payload_of(job) == expected
    assert set(payload_of(job).to_data()) == {f.name for f in fields(expected)}
