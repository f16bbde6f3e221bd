"""Probes of `draftguard serve` as a real process, as an attacker and as the platforms' own example
payloads would drive it, against fakes that answer as GitHub and the Hub really do (contents over
1 MB without content, symlinks, comments by other users carrying the bot's marker). Each probe of
docs/security.md's table is a test here."""

from __future__ import annotations

import contextlib
import hashlib
import html
import json
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import quote

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("github")

import requests  # noqa: E402

from draftguard.jobs import FAILED, FINISHED, Queue  # noqa: E402
from draftguard.report.comment import MARKER, parse_sticky  # noqa: E402
from tests.fakes.github import FakeGitHub, ServeProcess, Symlink, post_webhook, pr_payload, sign  # noqa: E402
from tests.fakes.hub import FakeHub  # noqa: E402
from tests.test_bot import BASE, BASE_CONFIG, HEAD, HEAD_CONFIG, REPO, SECRET, SETTINGS, TARGET, TOKEN  # noqa: E402
from tests.test_bot import fake_api  # noqa: E402
from tests.test_bot_process import bot_env  # noqa: E402

DATA = Path(__file__).parent / "data" / "webhooks"
HF_TOKEN = "hf_SECRETtoken0123456789abcdefHARD"
HUB_SECRET = "hub-webhook-secret-hardening"
HUB_BOT = "draftguard-bot"
HUB_REPO = "acme/hub-drafter"
SIX_MB = 6 * 1024 * 1024


def padded(text: str, size: int) -> str:
    """A config.json padded with whitespace to ``size`` bytes: still valid JSON, same findings."""
    return text.rstrip("}").rstrip() + "\n" + " " * (size - len(text) - 3) + "\n}"


@dataclass
class World:
    api: FakeGitHub
    hub: FakeHub
    serve: ServeProcess
    queue: Queue

    @property
    def url(self) -> str:
        return self.serve.url

    def post(self, event: str, payload, **kw) -> requests.Response:
        return post_webhook(self.url, event, payload, secret=SECRET, delivery=kw.pop("delivery", str(uuid.uuid4())), **kw)

    def post_hub(self, payload, raw: bytes | None = None) -> requests.Response:
        body = raw if raw is not None else json.dumps(payload).encode()
        return requests.post(f"{self.url}/webhooks/hub", data=body, timeout=10,
                             headers={"Content-Type": "application/json", "X-Webhook-Secret": HUB_SECRET})

    def settle(self, timeout: float = 90.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            jobs = [j for j in self.queue.jobs() if j.queue == "cpu"]  # GPU jobs wait: no GPU worker here
            if all(j.state in FINISHED for j in jobs):
                return
            time.sleep(0.1)
        raise AssertionError([(j.id, j.state, j.result) for j in self.queue.jobs() if j.state not in FINISHED])

    def sticky(self, number: int, repo: str = REPO) -> dict:
        mine = [c for c in self.api.comments_on(repo, number) if c["body"].startswith(MARKER)
                and c["user"] == self.api.bot_login]
        assert len(mine) == 1, [(c["user"], c["body"][:60]) for c in self.api.comments_on(repo, number)]
        return mine[0]

    def metrics(self) -> dict[str, float]:
        out = {}
        for line in requests.get(f"{self.url}/metrics", timeout=5).text.splitlines():
            if line and not line.startswith("#"):
                key, value = line.rsplit(" ", 1)
                out[key] = float(value)
        return out

    def log(self) -> str:
        return Path(self.serve.log.name).read_text()


@contextlib.contextmanager
def open_world(tmp: Path, **extra_env: str):
    """`draftguard serve` against fresh fakes, with ``extra_env`` on top of the bot's environment."""
    api = fake_api()
    api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": SETTINGS})
    hub = FakeHub().start()
    hub.token, hub.user = HF_TOKEN, HUB_BOT
    hub.push("Qwen/Qwen3-27B", {"config.json": json.dumps(TARGET).encode()}, "main")
    hub.push(HUB_REPO, {"drafter/config.json": BASE_CONFIG.encode()}, "main")
    hub.add_org("acme", ["alice", "mona"])
    env = bot_env(api.url)
    env.update(hub.env(str(tmp / "hf-cache")))
    env.update({"HF_TOKEN": HF_TOKEN, "DRAFTGUARD_HUB_WEBHOOK_SECRET": HUB_SECRET,
                "DRAFTGUARD_HEADER_TIMEOUT": "1", "DRAFTGUARD_BODY_TIMEOUT": "2", **extra_env})
    url = f"sqlite:///{tmp}/queue.db"
    # No GPU worker: GPU jobs stay queued, where the tests count them.
    serve = ServeProcess(tmp, env, url, args=("--gpu-workers", "0"))
    try:
        yield World(api, hub, serve, Queue(url))
    finally:
        serve.proc.terminate()
        serve.proc.wait(30)
        api.stop()
        hub.stop()
    log = Path(serve.log.name).read_text()
    assert TOKEN not in log and SECRET not in log and HF_TOKEN not in log and HUB_SECRET not in log


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with open_world(tmp_path_factory.mktemp("hardening")) as opened:
        yield opened


def add_pr(world: World, number: int, head_files: dict, *, author: str = "alice", fork: bool = False,
           head: str | None = None, repo: str = REPO) -> str:
    head = head or hashlib.sha1(f"{repo}#{number}".encode()).hexdigest()
    world.api.set_files(repo, head, head_files)
    world.api.add_pull(repo, number, head=head, base=BASE, author=author,
                       head_repo=f"{author}/fork" if fork else None)
    return head


# --- the platforms' own example payloads --------------------------------------------------------

def _register(world: World, event: str, payload: dict) -> None:
    """Make the fakes hold what an example payload names, so its job can run to a sensible end."""
    repo = (payload.get("repository") or {}).get("full_name")
    if event == "pull_request" and repo:
        pr = payload["pull_request"]
        if repo not in world.api.repos:
            world.api.add_repo(repo)
        world.api.set_files(repo, pr["base"]["sha"], {"README.md": "hi"})
        world.api.set_files(repo, pr["head"]["sha"], {"README.md": "hello"})
        world.api.add_pull(repo, pr["number"], head=pr["head"]["sha"], base=pr["base"]["sha"])


def test_every_official_example_payload_gets_a_2xx_and_no_job_fails(world):
    sent = []
    for path in sorted((DATA / "github").glob("*.json")):
        event = path.name.split(".", 1)[0]
        payload = json.loads(path.read_bytes())
        _register(world, event, payload)
        r = post_webhook(world.url, event, None, secret=SECRET, delivery=str(uuid.uuid4()), raw=path.read_bytes())
        sent.append((path.name, r.status_code, r.json()))
    world.hub.push("gpt2", {"README.md": b"hi"}, "main")
    world.hub.open_pr("gpt2", 19, {"README.md": b"co2"}, author="someone")
    world.hub.push("openai-community/gpt2", {"README.md": b"hi"}, "main")
    world.hub.open_pr("openai-community/gpt2", 19, {"README.md": b"co2"}, author="someone")
    world.hub.push("some-user/some-repo", {"README.md": b"hi"}, "main")
    world.hub.open_pr("some-user/some-repo", 3, {"README.md": b"env"}, author="someone")
    for path in sorted((DATA / "hub").glob("*.json")):
        r = world.post_hub(None, raw=path.read_bytes())
        sent.append((path.name, r.status_code, r.json()))
    assert all(200 <= status < 300 for _, status, _ in sent), [s for s in sent if not 200 <= s[1] < 300]
    by_name = {name: answer for name, _, answer in sent}
    assert by_name["pull_request.opened.payload.json"]["status"] == "queued"
    assert by_name["issue_comment.created.payload.json"]["status"].startswith("ignored")
    assert by_name["check_run.rerequested.payload.json"]["status"] == "ignored: not a draftguard check run"
    assert by_name["discussion.create.legacy-name.json"]["status"] == "queued"  # "gpt2", no namespace
    world.settle()
    failed = [(j.id, j.result) for j in world.queue.jobs() if j.state == FAILED]
    assert failed == []
    legacy = [j for j in world.queue.jobs() if j.repo == "gpt2"]
    assert legacy and all(j.state in FINISHED for j in legacy)
    assert "Traceback" not in world.log()


# --- 1. a file over the size limit is an error, never "nothing to check" -------------------------

def test_a_padded_config_json_fails_the_check_instead_of_passing(world):
    add_pr(world, 31, {"drafter/config.json": padded(HEAD_CONFIG, SIX_MB)})
    assert world.post("pull_request", pr_payload(REPO, 31, world.api.repos[REPO].pulls[31]["head"], BASE)).status_code == 202
    world.settle()
    head = world.api.repos[REPO].pulls[31]["head"]
    light = parse_sticky(world.sticky(31)["body"])["light"]
    assert "not checked" in light and "6.3 MB, over the limit" in light
    run = world.api.runs_for(REPO, head, "draftguard/config")[0]
    assert run["conclusion"] == "failure"


def test_a_2_mb_config_is_read_through_the_blobs_api_and_checked(world):
    head = add_pr(world, 32, {"drafter/config.json": padded(HEAD_CONFIG, 2 * 1024 * 1024)})
    world.post("pull_request", pr_payload(REPO, 32, head, BASE))
    world.settle()
    assert world.api.count("GET", r"/git/blobs/[0-9a-f]{40}$") >= 1
    light = parse_sticky(world.sticky(32)["body"])["light"]
    assert "sliding_window" in light and "not checked" not in light


def test_symlinks_are_followed_into_the_repo_and_refused_out_of_it(world):
    out = add_pr(world, 33, {"drafter/config.json": Symlink("../../../etc/passwd")})
    inside = add_pr(world, 34, {"drafter/config.json": Symlink("../real/config.json"), "real/config.json": HEAD_CONFIG})
    world.post("pull_request", pr_payload(REPO, 33, out, BASE))
    world.post("pull_request", pr_payload(REPO, 34, inside, BASE))
    world.settle()
    assert "a symlink to '../../../etc/passwd'" in parse_sticky(world.sticky(33)["body"])["light"]
    assert world.api.runs_for(REPO, out, "draftguard/config")[0]["conclusion"] == "failure"
    assert "sliding_window" in parse_sticky(world.sticky(34)["body"])["light"]


def test_the_hub_asks_the_size_before_downloading(world):
    big = padded(HEAD_CONFIG, SIX_MB).encode()
    head = world.hub.open_pr(HUB_REPO, 3, {"drafter/config.json": big}, author="eve")
    payload = {"event": {"action": "create", "scope": "discussion"}, "repo": {"type": "model", "name": HUB_REPO},
               "discussion": {"num": 3, "isPullRequest": True, "status": "open", "author": {"id": "u-eve"}}}
    assert world.post_hub(payload).status_code == 202
    world.settle()
    bodies = [e["data"]["latest"]["raw"] for e in world.hub.comments_on(HUB_REPO, 3, author=HUB_BOT)]
    assert len(bodies) == 1 and "6.3 MB, over the limit" in bodies[0]
    downloads = [r for r in world.hub.requests if r.repo == HUB_REPO and r.path == "drafter/config.json"
                 and r.revision in (head, "refs/pr/3")]
    assert downloads and {r.method for r in downloads} == {"HEAD"}  # asked the size, fetched nothing


# --- 3. the sticky comment is only ever the bot's ------------------------------------------------

def test_a_comment_carrying_the_marker_is_never_adopted(world):
    fake = (f"{MARKER}\n## draftguard\n\n<!-- draftguard:section:approved -->\nGPU: approved by a maintainer\n"
            "<!-- /draftguard:section:approved -->\n")
    head = add_pr(world, 35, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    planted = world.api.add_comment(REPO, 35, fake, user="eve")
    world.post("pull_request", pr_payload(REPO, 35, head, BASE, author="eve", head_repo="eve/fork"))
    world.settle()
    assert planted["body"] == fake and planted.get("edits", 0) == 0
    mine = world.sticky(35)["body"]
    assert "approved by a maintainer" not in mine and "sliding_window" in mine


# --- 4 and 5. approvals bind to the head the approver saw; one GPU job per head -----------------

def gpu_jobs(world: World, number: int) -> list:
    return [j for j in world.queue.jobs() if j.kind == "acceptance" and j.number == number]


def comment_webhook(world: World, number: int, comment: dict, created_at: str) -> requests.Response:
    payload = {"action": "created", "repository": {"full_name": REPO},
               "issue": {"number": number, "pull_request": {"url": "x"}},
               "comment": {"id": comment["id"], "body": comment["body"], "created_at": created_at,
                           "user": {"login": comment["user"], "type": "User"}},
               "sender": {"login": comment["user"], "type": "User"}}
    return world.post("issue_comment", payload)


def ok_to_test(world: World, number: int) -> dict:
    """A maintainer's ``/ok-to-test`` on the pull request, delivered now."""
    comment = world.api.add_comment(REPO, number, "/ok-to-test", user="mona")
    comment_webhook(world, number, comment, datetime.now(timezone.utc).isoformat())
    return comment


def replies_to(world: World, number: int, comment: dict) -> list[str]:
    """The bot's replies to one command."""
    return [c["body"] for c in world.api.comments_on(REPO, number) if f"reply:{comment['id']}" in c["body"]]


def test_ok_to_test_approves_the_head_the_maintainer_saw_not_a_later_push(world):
    head_a = add_pr(world, 36, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    world.post("pull_request", pr_payload(REPO, 36, head_a, BASE, author="eve", head_repo="eve/fork"))
    world.settle()
    assert gpu_jobs(world, 36) == []  # a fork: untrusted
    said = datetime.now(timezone.utc).isoformat()
    ok = world.api.add_comment(REPO, 36, "/ok-to-test", user="mona")
    time.sleep(0.05)
    # The fork pushes B after the maintainer wrote the command, before the command's job runs.
    head_b = "e" * 40
    world.api.set_files(REPO, head_b, {"drafter/config.json": HEAD_CONFIG + " "})
    world.api.repos[REPO].pulls[36]["head"] = head_b
    world.post("pull_request", pr_payload(REPO, 36, head_b, BASE, action="synchronize", author="eve",
                                          head_repo="eve/fork"))
    comment_webhook(world, 36, ok, said)
    world.settle()
    assert [j for j in gpu_jobs(world, 36) if j.head_sha == head_b] == []
    replies = replies_to(world, 36, ok)
    assert len(replies) == 1 and "moved to" in replies[0]
    # Approving B explicitly works.
    again = ok_to_test(world, 36)
    world.settle()
    assert [j.head_sha for j in gpu_jobs(world, 36)] == [head_b]


def test_a_first_ok_to_test_binds_to_the_head_the_api_gives_when_the_bot_never_saw_it(world):
    # The pull request was opened before the bot was installed: no delivery, no record of its head.
    head = add_pr(world, 38, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    ok = ok_to_test(world, 38)
    world.settle()
    assert [j.head_sha for j in gpu_jobs(world, 38)] == [head]
    assert not [c for c in world.api.comments_on(REPO, 38) if f"reply:{ok['id']}" in c["body"]]  # no "comment again"


def test_a_first_ok_to_test_is_not_bound_to_a_head_pushed_while_the_bot_waits(world):
    add_pr(world, 39, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    ok = ok_to_test(world, 39)
    deadline = time.time() + 120  # for a worker to take the job, under load
    while not any(j.kind == "comment" and j.number == 39 and "waiting" in (j.result or "") for j in world.queue.jobs()):
        assert time.time() < deadline, [(j.kind, j.state, j.result) for j in world.queue.jobs() if j.number == 39]
        time.sleep(0.05)
    # The fork pushes while the command waits for late announcements, and its webhook is lost.
    pushed = "f" * 40
    world.api.set_files(REPO, pushed, {"drafter/config.json": HEAD_CONFIG + "  "})
    world.api.repos[REPO].pulls[39]["head"] = pushed
    world.settle()
    assert gpu_jobs(world, 39) == []
    replies = replies_to(world, 39, ok)
    assert len(replies) == 1 and "moved to" in replies[0]


def test_reopening_or_replaying_queues_one_gpu_job_per_head(world):
    head = add_pr(world, 37, {"drafter/config.json": HEAD_CONFIG}, author="alice")  # alice can write
    opened = pr_payload(REPO, 37, head, BASE)
    assert world.post("pull_request", opened).status_code == 202
    world.settle()
    for _ in range(3):
        world.post("pull_request", pr_payload(REPO, 37, head, BASE, action="closed"))
        world.post("pull_request", pr_payload(REPO, 37, head, BASE, action="reopened"))
        world.settle()
    assert world.post("pull_request", opened).status_code == 202  # the same signed body, a new delivery id
    world.settle()
    assert len(gpu_jobs(world, 37)) == 1


def test_a_fork_author_reopening_after_ok_to_test_queues_no_second_gpu_job(world):
    # docs/security.md: a fork author may not "queue a second GPU run for a head by reopening". The
    # maintainer's /ok-to-test ran the head's first GPU job under a forced id (":asked:<comment>"), so
    # the reopened pull request's job, trusted by the /ok-to-test mark on the same head, found no job
    # under the head's plain id and queued a second run.
    head = add_pr(world, 71, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    world.post("pull_request", pr_payload(REPO, 71, head, BASE, author="eve", head_repo="eve/fork"))
    world.settle()
    assert gpu_jobs(world, 71) == []  # a fork: untrusted
    ok_to_test(world, 71)
    world.settle()
    assert [j.head_sha for j in gpu_jobs(world, 71)] == [head]
    world.post("pull_request", pr_payload(REPO, 71, head, BASE, action="closed", author="eve", head_repo="eve/fork"))
    world.post("pull_request", pr_payload(REPO, 71, head, BASE, action="reopened", author="eve", head_repo="eve/fork"))
    world.settle()
    assert [j.head_sha for j in gpu_jobs(world, 71)] == [head]


def test_a_push_landing_while_the_light_check_waits_for_the_pull_requests_lock_supersedes_it(world):
    # The light check runs under the pull request's lock; the head it checks is read once the lock is
    # held, never the one read before waiting (a stale head overwrote the newer head's comment and
    # queued a GPU job for a commit that was no longer the head).
    head = add_pr(world, 72, {"drafter/config.json": HEAD_CONFIG}, author="alice")  # alice can write
    # Since issue 32 the job waits for the lock in the queue, not in a worker: it is put back (Busy).
    with world.queue.lock(f"pr:github:{REPO}#72", ttl=60.0, wait=5.0):
        world.post("pull_request", pr_payload(REPO, 72, head, BASE))
        deadline = time.time() + 120  # for a worker to take the job, under load
        while not any(j.kind == "pull_request" and j.number == 72 and "is busy" in (j.result or "")
                      for j in world.queue.jobs()):
            assert time.time() < deadline
            time.sleep(0.05)
        pushed = "7" * 40  # its webhook is still on the way
        world.api.set_files(REPO, pushed, {"drafter/config.json": HEAD_CONFIG + "   "})
        world.api.repos[REPO].pulls[72]["head"] = pushed
    world.settle()
    [job] = [j for j in world.queue.jobs() if j.kind == "pull_request" and j.number == 72]
    assert job.result.startswith("skipped: superseded by 777777777777"), job.result
    assert gpu_jobs(world, 72) == []


# --- 6. no untrusted input is expanded without a bound -------------------------------------------

def test_a_yaml_alias_bomb_in_settings_is_refused_in_milliseconds(world):
    levels = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        prev, name = chr(96 + i), chr(97 + i)
        levels.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    bomb = "\n".join(levels) + "\npaths: [*j]\n"
    assert len(bomb) < 500
    world.api.add_repo("acme/bomb")
    world.api.set_files("acme/bomb", "main", {".draftguard.yml": bomb})
    world.api.set_files("acme/bomb", BASE, {})
    world.api.set_files("acme/bomb", HEAD, {"drafter/config.json": HEAD_CONFIG})
    world.api.add_pull("acme/bomb", 1, head=HEAD, base=BASE)
    started = time.time()
    world.post("pull_request", dict(pr_payload("acme/bomb", 1, HEAD, BASE)))
    world.settle()
    assert time.time() - started < 30 and world.serve.proc.poll() is None
    # As it renders: the comment escapes `*` (R1 of issue 25), which shows as itself.
    assert "aliases (*name) are not allowed" in html.unescape(world.sticky(1, "acme/bomb")["body"])


# --- 7. malformed input is a counted 400, never a 500 --------------------------------------------

def test_deep_nesting_and_infinite_numbers_are_400_and_counted(world):
    before = world.metrics()
    deep = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    infinite = json.dumps(pr_payload(REPO, 7, HEAD, BASE)).replace('"number": 7', '"number": 1e999').encode()
    for raw in (deep, infinite, b'{"number": NaN}'):
        assert world.post("pull_request", None, raw=raw).status_code == 400
        assert world.post_hub(None, raw=raw).status_code == 400
    after = world.metrics()
    key = 'draftguard_webhook_deliveries_total{{source="{}",outcome="malformed"}}'
    assert after[key.format("github")] - before.get(key.format("github"), 0) == 3
    assert after[key.format("hub")] - before.get(key.format("hub"), 0) == 3
    assert world.serve.proc.poll() is None


def test_a_signed_payload_without_a_repository_is_400_at_the_door(world):
    payload = pr_payload(REPO, 7, HEAD, BASE)
    del payload["repository"]
    assert world.post("pull_request", payload).status_code == 400


# --- the door: unauthenticated bytes -------------------------------------------------------------

def _raw_request(world: World, headers: dict[str, str], body: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", world.serve.port), timeout=5)
    lines = ["POST /webhooks/github HTTP/1.1", f"Host: 127.0.0.1:{world.serve.port}"]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def test_a_missing_signature_is_refused_before_the_body_is_sent(world):
    sock = _raw_request(world, {"Content-Type": "application/json", "Content-Length": str(9_000_000),
                                "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "nosig"})
    try:
        answer = sock.recv(4096).decode()  # the body never comes; the answer must not wait for it
    finally:
        sock.close()
    assert answer.startswith("HTTP/1.1 401")


def test_unverified_bodies_in_flight_are_bounded(world):
    chunk = b" " * (1024 * 1024)
    socks, answers = [], []
    try:
        for i in range(6):  # 6 x 8 MB of bodies with forged signatures, none finished
            sock = _raw_request(world, {"Content-Type": "application/json", "Content-Length": str(9_000_000),
                                        "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": f"flood-{i}",
                                        "X-Hub-Signature-256": "sha256=" + "0" * 64})
            socks.append(sock)
            try:
                for _ in range(8):
                    sock.sendall(chunk)
            except OSError:
                pass  # refused and closed mid-body: that is the point
        for sock in socks:
            sock.settimeout(2)
            try:
                answers.append(sock.recv(200).decode(errors="replace"))
            except OSError:
                answers.append("")
    finally:
        for sock in socks:
            sock.close()
    assert any(a.startswith("HTTP/1.1 503") for a in answers), answers
    assert requests.get(f"{world.url}/healthz", timeout=5).ok


def test_slow_connections_are_closed_and_healthz_stays_fast(world):
    socks = []
    try:
        for _ in range(100):  # slowloris: a request line, then nothing
            sock = socket.create_connection(("127.0.0.1", world.serve.port), timeout=5)
            sock.sendall(b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            socks.append(sock)
        started = time.perf_counter()
        assert requests.get(f"{world.url}/healthz", timeout=5).ok
        assert time.perf_counter() - started < 1.0
        time.sleep(1.5)  # past the 1 s header deadline set for this server
        closed = 0
        for sock in socks:
            sock.settimeout(1)
            try:
                closed += sock.recv(1) == b""
            except OSError:
                closed += 1
        assert closed == len(socks)
        # A body that trickles in past its deadline is answered 408.
        sock = _raw_request(world, {"Content-Type": "application/json", "Content-Length": "100",
                                    "X-GitHub-Event": "ping", "X-GitHub-Delivery": "slow-body",
                                    "X-Hub-Signature-256": "sha256=" + "0" * 64}, b"{")
        socks.append(sock)
        sock.settimeout(5)
        assert sock.recv(200).decode().startswith("HTTP/1.1 408")
    finally:
        for sock in socks:
            sock.close()


# --- real clients: form bodies, the Re-run button ------------------------------------------------

def test_form_encoded_webhooks_are_accepted(world):
    head = add_pr(world, 38, {"drafter/config.json": HEAD_CONFIG})
    body = ("payload=" + quote(json.dumps(pr_payload(REPO, 38, head, BASE)))).encode()
    r = requests.post(f"{world.url}/webhooks/github", data=body, timeout=10, headers={
        "Content-Type": "application/x-www-form-urlencoded", "X-GitHub-Event": "pull_request",
        "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": sign(SECRET, body)})
    assert r.status_code == 202, r.text
    world.settle()
    assert "sliding_window" in world.sticky(38)["body"]


def test_the_rerun_button_is_a_recheck_under_the_same_trust_rules(world):
    head = add_pr(world, 39, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    world.post("pull_request", pr_payload(REPO, 39, head, BASE, author="eve", head_repo="eve/fork"))
    world.settle()
    run = world.api.runs_for(REPO, head, "draftguard/config")[0]
    assert run["external_id"] == f"{REPO}#39"

    def rerun(sender: str) -> requests.Response:
        return world.post("check_run", {
            "action": "rerequested", "repository": {"full_name": REPO}, "sender": {"login": sender, "type": "User"},
            "check_run": {"id": run["id"], "name": "draftguard/config", "head_sha": head,
                          "external_id": run["external_id"], "pull_requests": []}})

    assert rerun("eve").status_code == 202
    world.settle()
    assert gpu_jobs(world, 39) == []  # eve cannot write: nothing runs for her
    files_before = world.api.count("GET", r"/pulls/39/files$")
    assert rerun("mona").status_code == 202
    world.settle()
    assert world.api.count("GET", r"/pulls/39/files$") == files_before + 1
    assert len(gpu_jobs(world, 39)) == 1


def test_commands_hidden_in_html_comments_or_quotes_do_nothing(world):
    for body in ("<!--\n/recheck\n-->", "> /ok-to-test", "<!-- /recheck -->"):
        comment = world.api.add_comment(REPO, 7, body, user="mona")
        r = comment_webhook(world, 7, comment, datetime.now(timezone.utc).isoformat())
        assert r.status_code == 200 and r.json()["status"] == "ignored: no command"


# --- settings the bot cannot use are said in the comment -----------------------------------------

@pytest.mark.parametrize("name,settings,said", [
    ("acme/dots", "paths: ['../../orgs/acme']\n", "entries are folders inside the repo"),
    ("acme/huge", "# " + "x" * (300 * 1024) + "\nfail_on: never\n", "over the limit"),
])
def test_unusable_settings_are_said_in_the_comment(world, name, settings, said):
    world.api.add_repo(name)
    world.api.set_files(name, "main", {".draftguard.yml": settings})
    world.api.set_files(name, BASE, {})
    world.api.set_files(name, HEAD, {"drafter/config.json": HEAD_CONFIG})
    world.api.add_pull(name, 1, head=HEAD, base=BASE)
    world.post("pull_request", pr_payload(name, 1, HEAD, BASE))
    world.settle()
    body = world.sticky(1, name)["body"]
    assert said in body and ".draftguard.yml" in body
    assert not any(".." in path for _, path in world.api.requests)


# --- the Hub: /recheck leaves a trace ------------------------------------------------------------

def test_a_hub_recheck_says_it_ran(world):
    head = world.hub.open_pr(HUB_REPO, 4, {"drafter/config.json": HEAD_CONFIG.encode()}, author="alice")
    base = {"repo": {"type": "model", "name": HUB_REPO}}
    world.post_hub(dict(base, event={"action": "create", "scope": "discussion"},
                        discussion={"num": 4, "isPullRequest": True, "status": "open"}))
    world.settle()
    event = world.hub.add_comment(HUB_REPO, 4, "/recheck", author="alice")
    world.post_hub(dict(base, event={"action": "create", "scope": "discussion.comment"},
                        discussion={"num": 4, "isPullRequest": True, "status": "open"},
                        comment={"id": event["id"], "content": "/recheck", "hidden": False,
                                 "author": {"id": "u-alice"}}))
    world.settle()
    bodies = [e["data"]["latest"]["raw"] for e in world.hub.comments_on(HUB_REPO, 4, author=HUB_BOT)]
    assert len(bodies) == 1
    trace = [line for line in bodies[0].splitlines() if "Rechecked at" in line]
    assert len(trace) == 1 and head[:12] in trace[0] and "alice" in trace[0], trace


# --- a repository the token cannot see: one clear line, no traceback, no retries --------------------

def _lines_about(world: World, repo: str) -> list[str]:
    return [line for line in world.log().splitlines() if repo in line]


@pytest.mark.parametrize("repo, fault, status", [("acme/not-installed", None, 404),
                                                 ("acme/no-access", "forbidden", 403)])
def test_a_repo_the_token_cannot_see_fails_its_job_in_one_line(world, repo, fault, status):
    if fault:  # the repo exists, but GitHub refuses this token every read of it
        world.api.add_repo(repo)
        world.api.fail("GET", rf"^/repos/{repo}/", fault, times=100)
    before = len(world.log().splitlines())
    assert world.post("pull_request", pr_payload(repo, 1, "a" * 40, BASE)).status_code == 202
    world.settle()
    jobs = [j for j in world.queue.jobs() if j.repo == repo]
    assert [(j.state, j.attempts) for j in jobs] == [(FAILED, 1)]
    assert jobs[0].result.startswith(f"GitHub answered {status}") and repo in jobs[0].result
    assert jobs[0].result.endswith(". Hint: install the App on the repository, or give the token access")
    assert world.api.count("GET", rf"^/repos/{repo}/pulls/1$") == 1  # asked once, never again
    new_lines = world.log().splitlines()[before:]
    assert "Traceback" not in "\n".join(new_lines)
    failed = [line for line in new_lines if "failed" in line and repo in line]
    assert len(failed) == 1 and f"answered {status}" in failed[0] and "Hint: install the App" in failed[0], new_lines
    world.api.faults.clear()


def test_a_hub_repo_the_token_cannot_see_fails_its_job_in_one_line(world):
    repo = "acme/hub-not-there"
    payload = {"event": {"action": "create", "scope": "discussion"}, "repo": {"type": "model", "name": repo},
               "discussion": {"num": 2, "isPullRequest": True, "status": "open"}}
    before = len(world.log().splitlines())
    assert world.post_hub(payload).status_code == 202
    world.settle()
    jobs = [j for j in world.queue.jobs() if j.repo == repo]
    assert [(j.state, j.attempts) for j in jobs] == [(FAILED, 1)]
    assert jobs[0].result.startswith("Hub answered 404") and repo in jobs[0].result
    assert "Hint: " in jobs[0].result  # the error's hint, in the job's record (listed by /metrics)
    assert "HF_TOKEN" in jobs[0].result.split("Hint: ")[1] and "App" not in jobs[0].result  # the Hub's own fix
    new_lines = world.log().splitlines()[before:]
    assert "Traceback" not in "\n".join(new_lines)
    assert len([line for line in new_lines if "failed" in line and repo in line]) == 1, new_lines


def test_no_probe_left_a_traceback(world):
    assert os.path.exists(world.serve.log.name)
    assert "Traceback" not in world.log()


def test_a_hub_recheck_approves_the_head_the_member_saw_not_a_later_push(world):
    repo = "acme/hub-gpu"
    world.hub.push(repo, {"drafter/config.json": BASE_CONFIG.encode(), ".draftguard.yml": SETTINGS.encode()}, "main")
    world.hub.open_pr(repo, 5, {"drafter/config.json": HEAD_CONFIG.encode()}, author="eve")
    base = {"repo": {"type": "model", "name": repo}}
    world.post_hub(dict(base, event={"action": "create", "scope": "discussion"},
                        discussion={"num": 5, "isPullRequest": True, "status": "open"}))
    world.settle()
    event = world.hub.add_comment(repo, 5, "/recheck", author="alice")  # alice is a member of acme
    time.sleep(0.05)
    # eve pushes after alice wrote the command, and the Hub announces it before the command's job runs.
    pushed = world.hub.push(repo, {"drafter/config.json": (HEAD_CONFIG + " ").encode()}, "refs/pr/5")
    world.post_hub(dict(base, event={"action": "update", "scope": "repo.content"},
                        updatedRefs=[{"ref": "refs/pr/5", "oldSha": "0" * 40, "newSha": pushed}]))
    world.settle()
    world.post_hub(dict(base, event={"action": "create", "scope": "discussion.comment"},
                        discussion={"num": 5, "isPullRequest": True, "status": "open"},
                        comment={"id": event["id"], "content": "/recheck", "hidden": False, "author": {"id": "u-alice"}}))
    world.settle()
    gpu = [j for j in world.queue.jobs() if j.kind == "acceptance" and j.repo == repo]
    assert [j.head_sha for j in gpu] == []
    body = world.hub.comments_on(repo, 5, author=HUB_BOT)[0]["data"]["latest"]["raw"]
    assert "moved to" in parse_sticky(body)["acceptance"]
    # A /recheck written now approves that head.
    again = world.hub.add_comment(repo, 5, "/recheck", author="alice")
    world.post_hub(dict(base, event={"action": "create", "scope": "discussion.comment"},
                        discussion={"num": 5, "isPullRequest": True, "status": "open"},
                        comment={"id": again["id"], "content": "/recheck", "hidden": False, "author": {"id": "u-alice"}}))
    world.settle()
    assert [j.head_sha for j in world.queue.jobs() if j.kind == "acceptance" and j.repo == repo] == [pushed]


def test_a_first_hub_recheck_binds_to_the_head_the_hub_gives_when_the_bot_never_saw_it(world):
    repo = "acme/hub-gpu-older"
    world.hub.push(repo, {"drafter/config.json": BASE_CONFIG.encode(), ".draftguard.yml": SETTINGS.encode()}, "main")
    head = world.hub.open_pr(repo, 6, {"drafter/config.json": HEAD_CONFIG.encode()}, author="eve")
    # The pull request predates the bot: its webhooks never reached it.
    event = world.hub.add_comment(repo, 6, "/recheck", author="alice")  # alice is a member of acme
    world.post_hub({"event": {"action": "create", "scope": "discussion.comment"}, "repo": {"type": "model", "name": repo},
                    "discussion": {"num": 6, "isPullRequest": True, "status": "open"},
                    "comment": {"id": event["id"], "content": "/recheck", "hidden": False, "author": {"id": "u-alice"}}})
    world.settle()
    assert [j.head_sha for j in world.queue.jobs() if j.kind == "acceptance" and j.repo == repo] == [head]
    body = world.hub.comments_on(repo, 6, author=HUB_BOT)[0]["data"]["latest"]["raw"]
    assert "moved to" not in body and "queued" in parse_sticky(body)["acceptance"]


# --- probe-bot: a push landing between the bot's two reads of the head ----------------------------

def push_on_read(world: World, number: int, head: str, nth: int) -> None:
    """The fork pushes ``head`` just before the ``nth`` read of pull request ``number`` is answered:
    between two reads of one job, as a fork racing the bot would."""
    reads = []

    def hook(method: str, path: str) -> None:
        if method == "GET" and path == f"/repos/{REPO}/pulls/{number}":
            reads.append(path)
            if len(reads) == nth:
                world.api.repos[REPO].pulls[number]["head"] = head
                world.api.before_answer.remove(hook)

    world.api.before_answer.append(hook)


def test_ok_to_test_never_approves_a_head_pushed_between_its_check_and_the_light_check(world):
    head_a = add_pr(world, 41, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    world.post("pull_request", pr_payload(REPO, 41, head_a, BASE, author="eve", head_repo="eve/fork"))
    world.settle()
    pushed = "d" * 40
    world.api.set_files(REPO, pushed, {"drafter/config.json": HEAD_CONFIG + "   "})
    # Its reads of the pull: the reaction's lookup, the command's head check (A, known before the
    # command), the light check's (B lands just before it).
    push_on_read(world, 41, pushed, nth=3)
    ok = ok_to_test(world, 41)
    world.settle()
    assert world.api.repos[REPO].pulls[41]["head"] == pushed  # the push landed
    assert [j.head_sha for j in gpu_jobs(world, 41)] == []
    replies = replies_to(world, 41, ok)
    assert len(replies) == 1 and f"moved to `{pushed[:12]}`" in replies[0]


def test_a_hub_recheck_never_approves_a_head_pushed_between_its_check_and_the_light_check(world):
    repo = "acme/hub-gpu-race"
    world.hub.push(repo, {"drafter/config.json": BASE_CONFIG.encode(), ".draftguard.yml": SETTINGS.encode()}, "main")
    world.hub.open_pr(repo, 7, {"drafter/config.json": HEAD_CONFIG.encode()}, author="eve")
    base = {"repo": {"type": "model", "name": repo}}
    world.post_hub(dict(base, event={"action": "create", "scope": "discussion"},
                        discussion={"num": 7, "isPullRequest": True, "status": "open"}))
    world.settle()
    reads, pushed = [], []

    def push_on_second_read(h, method, segs, query, raw, answer, error, authorized) -> bool:
        if method == "GET" and segs[1:3] == repo.split("/") and segs[3:4] == ["revision"] \
                and "/".join(segs[4:]) == "refs/pr/7":
            reads.append(1)
            if len(reads) == 2:  # eve pushes between the command's head check and the light check
                pushed.append(world.hub.push(repo, {"drafter/config.json": (HEAD_CONFIG + "  ").encode()}, "refs/pr/7"))
        return False

    world.hub.routes.append(push_on_second_read)
    try:
        event = world.hub.add_comment(repo, 7, "/recheck", author="alice")  # alice is a member of acme
        world.post_hub(dict(base, event={"action": "create", "scope": "discussion.comment"},
                            discussion={"num": 7, "isPullRequest": True, "status": "open"},
                            comment={"id": event["id"], "content": "/recheck", "hidden": False,
                                     "author": {"id": "u-alice"}}))
        world.settle()
    finally:
        world.hub.routes.remove(push_on_second_read)
    assert pushed, "the push never landed"
    assert [j.head_sha for j in world.queue.jobs() if j.kind == "acceptance" and j.repo == repo] == []
    body = world.hub.comments_on(repo, 7, author=HUB_BOT)[0]["data"]["latest"]["raw"]
    assert "moved to" in parse_sticky(body)["acceptance"]


def test_a_late_first_ok_to_test_still_waits_for_the_announcement_of_a_push_just_before_it_ran(world):
    # The maintainer approved A half a minute ago (the job ran late: a backlog, or a retry after a
    # fault); the fork pushed B just before the job ran, and B's webhook arrives a second after.
    add_pr(world, 42, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    pushed = "c" * 40
    world.api.set_files(REPO, pushed, {"drafter/config.json": HEAD_CONFIG + "    "})
    world.api.repos[REPO].pulls[42]["head"] = pushed
    ok = world.api.add_comment(REPO, 42, "/ok-to-test", user="mona")
    comment_webhook(world, 42, ok, datetime.fromtimestamp(time.time() - 30, timezone.utc).isoformat())
    time.sleep(1.0)
    world.post("pull_request", pr_payload(REPO, 42, pushed, BASE, action="synchronize", author="eve",
                                          head_repo="eve/fork"))
    world.settle()
    assert gpu_jobs(world, 42) == []
    replies = replies_to(world, 42, ok)
    assert len(replies) == 1 and "moved to" in replies[0]


def test_ok_to_test_never_approves_a_head_seen_before_that_was_not_the_head_when_it_was_written(world):
    # A, then B, then A again (a force push back): all announced. The maintainer approves A; the fork
    # force-pushes B again before the command's job runs. B was seen before the command, but the
    # head the maintainer saw was A.
    head_a = add_pr(world, 43, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    world.post("pull_request", pr_payload(REPO, 43, head_a, BASE, author="eve", head_repo="eve/fork"))
    world.settle()
    head_b = "b0" * 20
    world.api.set_files(REPO, head_b, {"drafter/config.json": HEAD_CONFIG + "     "})
    for head in (head_b, head_a):
        time.sleep(0.05)
        world.api.repos[REPO].pulls[43]["head"] = head
        world.post("pull_request", pr_payload(REPO, 43, head, BASE, action="synchronize", author="eve",
                                              head_repo="eve/fork"))
        world.settle()
    time.sleep(0.05)
    said = datetime.now(timezone.utc).isoformat()
    ok = world.api.add_comment(REPO, 43, "/ok-to-test", user="mona")
    world.api.repos[REPO].pulls[43]["head"] = head_b  # its webhook not in yet when the command's job runs
    comment_webhook(world, 43, ok, said)
    world.settle()
    assert [j.head_sha for j in gpu_jobs(world, 43)] == []
    replies = replies_to(world, 43, ok)
    assert len(replies) == 1 and "moved to" in replies[0]
    # Told that the head moved to B, the maintainer approves B, though B's webhook never came.
    again = ok_to_test(world, 43)
    world.settle()
    assert [j.head_sha for j in gpu_jobs(world, 43)] == [head_b]


def test_the_rerun_button_on_an_older_commits_check_run_does_not_approve_the_newer_head(world):
    head_a = add_pr(world, 44, {"drafter/config.json": HEAD_CONFIG}, author="eve", fork=True)
    world.post("pull_request", pr_payload(REPO, 44, head_a, BASE, author="eve", head_repo="eve/fork"))
    world.settle()
    run = world.api.runs_for(REPO, head_a, "draftguard/config")[0]
    head_b = "a1" * 20
    world.api.set_files(REPO, head_b, {"drafter/config.json": HEAD_CONFIG + "      "})
    world.api.repos[REPO].pulls[44]["head"] = head_b
    world.post("pull_request", pr_payload(REPO, 44, head_b, BASE, action="synchronize", author="eve",
                                          head_repo="eve/fork"))
    world.settle()
    # A writer presses "Re-run" on the check run of A, the commit they looked at: B is not theirs to approve.
    world.post("check_run", {
        "action": "rerequested", "repository": {"full_name": REPO}, "sender": {"login": "mona", "type": "User"},
        "check_run": {"id": run["id"], "name": "draftguard/config", "head_sha": head_a,
                      "external_id": run["external_id"], "pull_requests": []}})
    world.settle()
    assert gpu_jobs(world, 44) == []
    assert "moved to" in parse_sticky(world.sticky(44)["body"]).get("acceptance", "") or \
        "GPU tests run only for trusted" in parse_sticky(world.sticky(44)["body"]).get("acceptance", "")
