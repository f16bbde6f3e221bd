"""A new host is a small change: a third host, written here in about 60 lines against
``hosts/base.PullRequestHost``, gets the whole pull-request flow (``bot/flow.py``) unchanged: the light
check with settings from the default branch (never the pull request's own), the sticky comment
edited in place, trust, one GPU job per head, a command that approves only the head it was judged
on, and the acceptance section. Nothing of GitHub's or the Hub's handler is copied.

The queue is real (SQLite); the host keeps its repository in memory, as a forge's API would answer.
The drafter's target is read from a fake Hub on loopback (no network).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("huey")

from draftguard.bot.flow import PullRequestFlow  # noqa: E402
from draftguard.hosts.base import CommandCall, PullRequestHost, Trust  # noqa: E402
from draftguard.jobs import Job, Queue, Retry  # noqa: E402
from draftguard.report.comment import parse_sticky  # noqa: E402
from draftguard.markers import is_sticky  # noqa: E402
from tests.fakes.hub import FakeHub, use_fake_hub  # noqa: E402
from tests.fakes import acceptance_result as _result  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DRAFTER = json.loads((ROOT / "examples/qwen3-swa-drafter/config.json").read_text())
GOOD = json.dumps(dict(DRAFTER, use_sliding_window=True), indent=2).encode()
BROKEN = json.dumps(DRAFTER, indent=2).encode()  # the incident: the window gate left out
FIXED = json.dumps(dict(DRAFTER, use_sliding_window=True, max_position_embeddings=65536), indent=2).encode()
SETTINGS = b"target: Qwen/Qwen3-27B\nmin_acceptance_length: 3.0\n"


class Forge:
    """A forge's repository and pull request, in memory: commits by sha, branches, comments."""

    def __init__(self):
        self.commits = {"c0": {"drafter/config.json": GOOD, ".draftguard.yml": SETTINGS}}
        self.branches = {"main": "c0"}
        self.pr_head, self.author, self.comments = "c0", "eve", []
        self.maintainers = {"mona"}

    def push(self, sha: str, files: dict[str, bytes]) -> str:
        self.commits[sha] = dict(self.commits[self.pr_head], **files)
        self.pr_head = sha
        return sha


class ForgePullRequest:
    """The whole of a new host's side of the flow."""

    source, label = "forge", "the Forge"
    strangers_may_recheck = False
    announces_heads_twice = False
    trust_hint = "GPU tests run only for maintainers' pull requests"

    def __init__(self, forge: Forge, job: Job):
        self.forge, self.job, self.repo_name, self.number = forge, job, job.repo, job.number

    def closed(self): return None
    def head(self): return self.forge.pr_head
    def base(self): return self.forge.branches["main"]
    def default_branch(self): return "main"

    def changed_files(self, base, head):
        old, new = self.forge.commits[base], self.forge.commits[head]
        return [(p, "modified") for p in sorted(new) if old.get(p) != new[p]]

    def read_file(self, path, ref, max_bytes=5 * 2**20):
        return self.forge.commits[self.forge.branches.get(ref, ref)].get(path)

    def download_folder(self, folder, ref, dest):
        return dest

    def find_sticky(self):
        return next((c for c in self.forge.comments if c["by"] == "bot" and is_sticky(c["body"])), None)

    def upsert_sticky(self, render):
        found = self.find_sticky()
        if found is None:
            found = {"by": "bot", "body": None}
            self.forge.comments.append(found)
        found["body"] = render(found["body"])

    def reply_once(self, comment_id, body):
        self.forge.comments.append({"by": "bot", "body": body, "to": comment_id})

    def command(self):
        return CommandCall(by=self.job.data["user"], commands=self.job.data["commands"], comment_id=self.job.data["id"])

    def may_command(self, call):
        return Trust(call.by in self.forge.maintainers, f"@{call.by} maintains it" if call.by in self.forge.maintainers
                     else f"@{call.by} is not a maintainer")

    def author_trust(self):
        return Trust(self.forge.author in self.forge.maintainers, f"@{self.forge.author} opened it")


class ForgeHandler(PullRequestFlow):
    def __init__(self, forge: Forge, runner):
        config = type("ForgeConfig", (), {"retry_base": 0.1, "secrets": []})()
        super().__init__(config, label="Forge", retry_delay=lambda exc, attempt=1, base=2.0: None,
                         refusal=None, acceptance_runner=runner)
        self.forge = forge

    def host_for(self, job):
        return ForgePullRequest(self.forge, job)


def test_a_third_host_in_sixty_lines_gets_the_whole_flow(monkeypatch, tmp_path):
    assert isinstance(ForgePullRequest(Forge(), Job(id="x", source="forge", kind="pull_request", repo="a/b",
                                                     number=1)), PullRequestHost)
    hub = FakeHub().start()
    try:
        use_fake_hub(monkeypatch, hub, str(tmp_path / "hf-cache"))
        forge, ran = Forge(), []
        queue = Queue(f"sqlite:///{tmp_path}/queue.db")
        queue.handlers["forge"] = ForgeHandler(forge, lambda job, host, settings: ran.append(job.head_sha) or _result())

        def deliver(kind: str, **data) -> Job:
            job = Job(id=f"d{len(queue.counts()) + time.time()}", source="forge", kind=kind, repo="acme/drafter",
                      number=7, head_sha=forge.pr_head if kind == "pull_request" else None, data=data)
            queue.submit(job)
            assert queue.run(job.id) is None
            return queue.get(job.id)

        # A stranger's pull request breaks the drafter and turns the checks off in its own settings.
        forge.push("c1", {"drafter/config.json": BROKEN, ".draftguard.yml": b"fail_on: never\n"})
        done = deliver("pull_request")
        assert done.state == "done" and done.result.startswith("done: ") and "2 new" in done.result, done.result
        assert "fails" in parse_sticky(forge.comments[0]["body"])["light"]  # main's settings, not the PR's
        sections = parse_sticky(forge.comments[0]["body"])
        assert "sliding_window" in sections["light"] and "**new**" in sections["light"]
        assert "skipped" in sections["acceptance"] and "@&#8203;eve opened it" in sections["acceptance"]
        assert "GPU tests run only for maintainers" in sections["acceptance"] and ran == []

        # A stranger may not command: answered once, nothing runs.
        deliver("comment", user="eve", commands=["recheck"], id=1)
        assert forge.comments[-1]["to"] == 1 and "write access" in forge.comments[-1]["body"] and ran == []

        # A maintainer's /recheck approves the head they saw: one GPU job, run, its section written.
        time.sleep(0.01)
        deliver("comment", user="mona", commands=["recheck"], id=2)
        gpu = [j for j in queue.jobs() if j.kind == "acceptance"]
        assert [(j.head_sha, j.queue) for j in gpu] == [("c1", "gpu")]
        assert queue.run(gpu[0].id) is None and ran == ["c1"]
        sections = parse_sticky(forge.comments[0]["body"])
        assert "**pass**" in sections["acceptance"] and "sliding_window" in sections["light"]
        assert len([c for c in forge.comments if is_sticky(c["body"])]) == 1  # one sticky, edited in place

        # A push after the approval: checked, and its GPU job waits for a new approval.
        forge.push("c2", {"drafter/config.json": FIXED})
        deliver("pull_request")
        sections = parse_sticky(forge.comments[0]["body"])
        assert "passes" in sections["light"] and "c2" in sections["light"]
        assert "skipped" in sections["acceptance"] and "@&#8203;eve opened it" in sections["acceptance"]
        assert [j.head_sha for j in queue.jobs() if j.kind == "acceptance"] == ["c1"]
    finally:
        hub.stop()


def _forge_queue(tmp_path, monkeypatch, forge, runner, host_class=ForgePullRequest):
    hub = FakeHub().start()
    use_fake_hub(monkeypatch, hub, str(tmp_path / "hf-cache"))
    queue = Queue(f"sqlite:///{tmp_path}/queue.db")
    handler = ForgeHandler(forge, runner)
    handler.host_for = lambda job: host_class(forge, job)
    queue.handlers["forge"] = handler

    def deliver(kind: str, **data) -> Job:
        job = Job(id=f"d{time.time()!r}", source="forge", kind=kind, repo="acme/drafter", number=7,
                  head_sha=forge.pr_head if kind == "pull_request" else None, data=data)
        queue.submit(job)
        queue.run(job.id)
        return queue.get(job.id)
    return hub, queue, deliver


def test_a_refusal_later_never_hides_the_result_of_the_heads_gpu_run(monkeypatch, tmp_path):
    # Review of issue 25's flow (F5): a replayed delivery (or a reopen) of a stranger's pull request,
    # whose head a maintainer had approved and whose GPU run passed, wrote "skipped" over the result.
    forge, ran = Forge(), []
    hub, queue, deliver = _forge_queue(tmp_path, monkeypatch, forge, lambda job, host, s: ran.append(1) or _result())
    try:
        forge.push("c1", {"drafter/config.json": BROKEN})
        deliver("pull_request")
        time.sleep(0.01)
        deliver("comment", user="mona", commands=["recheck"], id=2)
        [gpu] = [j for j in queue.jobs() if j.kind == "acceptance"]
        queue.run(gpu.id)
        assert "**pass**" in parse_sticky(forge.comments[0]["body"])["acceptance"]
        assert deliver("pull_request").state == "done"  # the same head, delivered again
        assert "**pass**" in parse_sticky(forge.comments[0]["body"])["acceptance"] and ran == [1]
    finally:
        hub.stop()


class FlakyForgePullRequest(ForgePullRequest):
    """Its first write of a finished acceptance section fails as a busy lock or a 5xx would."""

    failed: list = []

    def upsert_sticky(self, render):
        body = render(None)
        if "**pass**" in body and not self.failed:
            self.failed.append(1)
            raise Retry("the host answered 502", delay=0.01)
        return super().upsert_sticky(render)


def test_a_gpu_runs_result_that_could_not_be_written_is_written_on_retry_not_run_again(monkeypatch, tmp_path):
    # Review of issue 25's flow (F3): a retry after the run ran the whole GPU test again.
    forge, ran = Forge(), []
    hub, queue, deliver = _forge_queue(tmp_path, monkeypatch, forge, lambda job, host, s: ran.append(1) or _result(),
                                       host_class=FlakyForgePullRequest)
    try:
        forge.maintainers.add("eve")  # eve's own pull request is trusted: its check queues the GPU job
        forge.push("c1", {"drafter/config.json": BROKEN})
        deliver("pull_request")
        [gpu] = [j for j in queue.jobs() if j.kind == "acceptance"]
        assert queue.run(gpu.id) is not None and FlakyForgePullRequest.failed == [1]  # a retry, after the run
        assert queue.run(gpu.id) is None and queue.get(gpu.id).state == "done"
        assert ran == [1] and "**pass**" in parse_sticky(forge.comments[0]["body"])["acceptance"]
    finally:
        hub.stop()
