"""The Hub bot end to end: Hub webhooks over HTTP to the real app (uvicorn on loopback), the SQLite
huey queue with in-process workers, and huggingface_hub's HfApi talking to a fake Hub on loopback."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")

from draftguard.bot.app import build_from_env  # noqa: E402
from draftguard.bot.github_events import github_route  # noqa: E402
from draftguard.bot.hub_events import hub_route  # noqa: E402
from draftguard.bot.hub_events import jobs_from_hub  # noqa: E402
from draftguard.bot.hub_handler import HubHandler  # noqa: E402
from draftguard.jobs import DONE, SKIPPED, Queue  # noqa: E402
from draftguard.bot.webhooks import create_app  # noqa: E402
from draftguard.hosts.github import BotConfigError, GitHubConfig  # noqa: E402
from draftguard.hosts.hub import HubConfig  # noqa: E402
from draftguard.report.comment import MARKER, parse_sticky  # noqa: E402
from tests.fakes.github import BotServer, ServeProcess  # noqa: E402
from tests.fakes.fleet import QWEN35_MTP, real_repo_files  # noqa: E402
from tests.fakes.hub import FakeHub, use_fake_hub  # noqa: E402
from tests.fakes import acceptance_result as _result  # noqa: E402

TOKEN = "hf_SECRETtoken0123456789abcdefXYZ"
SECRET = "hub-webhook-secret-value-42"
REPO = "acme/drafter"
BOT = "draftguard-bot"

with open("examples/qwen3-swa-drafter/config.json", encoding="utf-8") as fh:
    DRAFTER = json.load(fh)
# main carries a working drafter; the PR drops use_sliding_window, so the Qwen3Config gate takes the
# window away (two new findings); a later commit on the PR puts it back.
BASE_CONFIG = json.dumps(dict(DRAFTER, use_sliding_window=True), indent=2).encode()
BROKEN_CONFIG = json.dumps(DRAFTER, indent=2).encode()
FIXED_CONFIG = json.dumps(dict(DRAFTER, use_sliding_window=True, max_position_embeddings=65536), indent=2).encode()
SETTINGS = b"target: Qwen/Qwen3-27B\nmin_acceptance_length: 3.0\nfail_on: error\n"


# --- Hub webhook payloads (version 3, as huggingface_hub's WebhookPayload models them) ------------

def _base(scope: str, action: str) -> dict:
    return {
        "event": {"action": action, "scope": scope},
        "repo": {"type": "model", "name": REPO, "id": "r-1", "private": False, "owner": {"id": "o-acme"},
                 "url": {"web": f"https://hf.co/{REPO}", "api": f"https://hf.co/api/models/{REPO}"},
                 "headSha": "f" * 40},  # main's head: the bot must not take it for a PR head
        "webhook": {"id": "w-1", "version": 3},
    }


def content_payload(ref: str, new: str | None, old: str | None = "0" * 40) -> dict:
    return dict(_base("repo.content", "update"), updatedRefs=[{"ref": ref, "oldSha": old, "newSha": new}])


def _discussion(num: int, status: str = "open") -> dict:
    return {"id": f"d-{num}", "num": num, "author": {"id": "u-1"}, "title": "Update config",
            "url": {"web": f"https://hf.co/{REPO}/discussions/{num}"}, "isPullRequest": True,
            "status": status, "changes": {"base": "refs/heads/main"}, "pinned": False}


def discussion_payload(num: int, action: str = "create", status: str = "open") -> dict:
    return dict(_base("discussion", action), discussion=_discussion(num, status))


def comment_payload(num: int, event: dict, action: str = "create") -> dict:
    return dict(_base("discussion.comment", action), discussion=_discussion(num), comment={
        "id": event["id"], "author": {"id": f"u-{event['author']['name']}"}, "hidden": False,
        "content": event["data"]["latest"]["raw"], "url": {"web": f"https://hf.co/{REPO}/discussions/{num}"},
    })


class Bot:
    """A fake Hub, a queue and the served app, wired as ``draftguard serve`` wires them."""

    def __init__(self, monkeypatch, tmp_path, *, consumers=None, acceptance_runner=None, settings=None):
        self.hub = FakeHub().start()
        use_fake_hub(monkeypatch, self.hub, str(tmp_path / "hf-cache"))
        self.hub.token, self.hub.user = TOKEN, BOT
        main = {"README.md": b"hi", "drafter/config.json": BASE_CONFIG, "drafter/model.safetensors": b"W" * 64}
        if settings:
            main[".draftguard.yml"] = settings
        self.main = self.hub.push(REPO, main, "main")
        self.hub.add_org("acme", ["alice", "mona"])
        self.config = HubConfig(endpoint=self.hub.endpoint, token=TOKEN, webhook_secret=SECRET, retry_base=0.2,
                                secrets=[TOKEN, SECRET])
        self.queue = Queue(f"sqlite:///{tmp_path}/queue.db")
        self.queue.handlers["hub"] = HubHandler(self.config, acceptance_runner=acceptance_runner)
        self.app = create_app(self.queue, [github_route(None), hub_route(SECRET)],
                              consumers={"cpu": 2, "gpu": 1} if consumers is None else consumers)
        self.server = BotServer(self.app)

    def __enter__(self) -> "Bot":
        self.server.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.server.__exit__(*exc)
        self.hub.stop()

    def post(self, payload=None, *, secret: str | None = SECRET, raw: bytes | None = None):
        import requests

        headers = {"Content-Type": "application/json"}
        if secret is not None:
            headers["X-Webhook-Secret"] = secret
        body = raw if raw is not None else json.dumps(payload).encode()
        return requests.post(f"{self.server.url}/webhooks/hub", data=body, headers=headers, timeout=10)

    def settle(self, timeout=30.0):
        assert self.queue.wait_idle(timeout), [(j.id, j.state, j.result) for j in self.queue.jobs()]

    def bot_comments(self, num=3):
        return self.hub.comments_on(REPO, num, author=BOT)

    def sticky(self, num=3):
        stickies = [c for c in self.bot_comments(num) if c["data"]["latest"]["raw"].startswith(MARKER)]
        assert len(stickies) == 1, [c["data"]["latest"]["raw"][:80] for c in self.bot_comments(num)]
        return stickies[0]

    def sections(self, num=3):
        return parse_sticky(self.sticky(num)["data"]["latest"]["raw"])


@pytest.fixture
def bot(monkeypatch, tmp_path):
    with Bot(monkeypatch, tmp_path) as b:
        yield b


def test_payloads_are_what_huggingface_hub_models():
    from huggingface_hub import WebhookPayload

    for payload in (content_payload("refs/pr/3", "a" * 40), discussion_payload(3),
                    comment_payload(3, {"id": "c1", "author": {"name": "x"}, "data": {"latest": {"raw": "/recheck"}}})):
        WebhookPayload.model_validate(payload)
    # A PR's new head comes from updatedRefs, never from repo.headSha (main's head).
    jobs, _ = jobs_from_hub(content_payload("refs/pr/3", "a" * 40))
    assert [j.head_sha for j in jobs] == ["a" * 40]
    assert jobs_from_hub(content_payload("refs/pr/3", None))[0] == []  # a deleted ref
    assert jobs_from_hub(content_payload("refs/heads/dev", "a" * 40))[1].startswith("ignored")


def test_a_missing_or_wrong_secret_is_refused_and_queues_nothing(bot):
    payload = discussion_payload(3)
    assert bot.post(payload, secret=None).status_code == 401
    assert bot.post(payload, secret="").status_code == 401
    assert bot.post(payload, secret="hub-webhook-secret-value-43").status_code == 403
    assert bot.post(payload, secret=SECRET[:-1]).status_code == 403
    assert bot.post(payload, secret="x" * 1000).status_code == 403
    assert list(bot.queue.jobs()) == []
    assert not [r for r in bot.hub.requests if r.repo == "api"]
    import requests

    metrics = requests.get(f"{bot.server.url}/metrics", timeout=5).text
    assert 'draftguard_webhook_deliveries_total{source="hub",outcome="bad_signature"} 5' in metrics


def test_oversized_malformed_and_ignored_bodies(bot):
    assert bot.post(raw=b"{" + b" " * (10 * 1024 * 1024) + b"}").status_code == 413
    assert bot.post(raw=b"{not json").status_code == 400
    assert bot.post(raw=b"[1, 2]").status_code == 400
    assert bot.post({"event": {"scope": "discussion"}}).status_code == 400  # no repo
    assert bot.post(dict(_base("discussion", "create"), discussion={"num": "three"})).status_code == 400
    assert bot.post(dict(_base("repo.content", "update"), updatedRefs="main")).status_code == 400
    ignored = [
        dict(_base("repo.config", "update")),
        discussion_payload(3, status="merged"),
        dict(discussion_payload(3), discussion=dict(_discussion(3), isPullRequest=False)),
        content_payload("refs/heads/dev", "a" * 40),
    ]
    for payload in ignored:
        resp = bot.post(payload)
        assert resp.status_code == 200 and resp.json()["status"].startswith("ignored"), resp.json()
    assert list(bot.queue.jobs()) == []


def test_a_pr_opened_gets_one_sticky_comment_with_its_new_findings(bot):
    head = bot.hub.open_pr(REPO, 3, {"README.md": b"hi", "drafter/config.json": BROKEN_CONFIG}, author="eve")
    started = time.perf_counter()
    resp = bot.post(discussion_payload(3))
    assert resp.status_code == 202 and time.perf_counter() - started < 2.0
    # The same PR's refs/pr/3 update arrives beside it: the head was checked already.
    assert bot.post(content_payload("refs/pr/3", head)).status_code == 202
    bot.settle()
    states = sorted((j.kind, j.state, (j.result or "").split(":")[0]) for j in bot.queue.jobs())
    assert [s[1] for s in states].count(DONE) == 1 and [s[1] for s in states].count(SKIPPED) == 1, states
    light = bot.sections()["light"]
    rows = [line for line in light.splitlines() if line.startswith("| :")]
    assert rows and all("**new**" in r for r in rows)
    assert {"sliding_window", "layer_types"} <= {r.split("<code>")[1].split("</code>")[0] for r in rows}
    assert head[:12] in light and bot.main[:12] in light
    assert len(bot.bot_comments()) == 1
    assert bot.hub.api_count("POST", r"/comment$") == 1
    # Config files were read at the PR head through the resolve endpoint; of a safetensors file only its
    # 8-byte length, by a range request (main's 64-byte file has no header to read), never the weights.
    shards = [r for r in bot.hub.requests if (r.path or "").endswith(".safetensors")]
    assert all(r.method == "GET" and r.range == "bytes=0-7" and r.status in (206, 404) for r in shards)
    assert any(r.status == 206 for r in shards)
    # The webhook's secret is not what authenticates the bot: its HF_TOKEN is.
    assert all(e["author"]["name"] == BOT for e in bot.bot_comments())


def test_new_commits_on_a_pr_edit_the_sticky_in_place(bot):
    bot.hub.open_pr(REPO, 3, {"drafter/config.json": BROKEN_CONFIG}, author="alice")
    bot.post(discussion_payload(3))
    bot.settle()
    first = bot.sticky()
    assert "**new**" in bot.sections()["light"]
    head2 = bot.hub.push(REPO, {"drafter/config.json": FIXED_CONFIG}, "refs/pr/3")
    assert bot.post(content_payload("refs/pr/3", head2, old=first["id"][:40])).status_code == 202
    bot.settle()
    second = bot.sticky()
    assert second["id"] == first["id"] and second["data"]["numEdits"] == 1
    light = bot.sections()["light"]
    assert head2[:12] in light and "**new**" not in light and ":white_check_mark: passes" in light
    assert bot.hub.api_count("POST", r"/comment$") == 1
    assert bot.hub.api_count("POST", r"/comment/[0-9a-f]+/edit$") == 1
    # A redelivery of the same push is one job; a PR title edit (discussion update) checks nothing new.
    assert bot.post(content_payload("refs/pr/3", head2, old=first["id"][:40])).json()["status"] == "duplicate"
    bot.post(discussion_payload(3, action="update"))
    bot.settle()
    assert bot.hub.api_count("POST", r"/comment/[0-9a-f]+/edit$") == 1


def test_a_push_that_takes_the_model_files_out_clears_the_old_findings(bot):
    # Issue 25: the Hub's own copy of the flow skipped such a push and left the old findings up in
    # the discussion; the one flow (bot/flow.py) clears them on every host, as GitHub's copy did.
    main = {"README.md": b"hi", "drafter/config.json": BASE_CONFIG, "drafter/model.safetensors": b"W" * 64}
    bot.hub.open_pr(REPO, 3, dict(main, **{"drafter/config.json": BROKEN_CONFIG}), author="alice")
    bot.post(discussion_payload(3))
    bot.settle()
    assert "**new**" in bot.sections()["light"]
    head2 = bot.hub.push(REPO, dict(main, **{"README.md": b"only the model card now"}), "refs/pr/3")
    bot.post(content_payload("refs/pr/3", head2))
    bot.settle()
    light = bot.sections()["light"]
    assert "no longer changes a model file" in light and head2[:12] in light and "**new**" not in light
    assert len(bot.bot_comments()) == 1


def test_a_burst_of_pushes_coalesces_to_one_check_of_the_newest_head(monkeypatch, tmp_path):
    with Bot(monkeypatch, tmp_path, consumers={}) as bot:
        bot.hub.open_pr(REPO, 3, {"drafter/config.json": BROKEN_CONFIG}, author="alice")
        heads = [bot.hub.push(REPO, {"drafter/config.json": c}, "refs/pr/3")
                 for c in (BROKEN_CONFIG + b" ", BROKEN_CONFIG + b"  ", FIXED_CONFIG)]
        payloads = [discussion_payload(3)] + [content_payload("refs/pr/3", h) for h in heads]
        answers = [bot.post(p).status_code for p in payloads] + [bot.post(payloads[-1]).status_code]
        assert answers == [202, 202, 202, 202, 200]  # the redelivered last push is a duplicate
        bot.queue.start_consumers({"cpu": 2})
        bot.settle()
        jobs = list(bot.queue.jobs())
        done = [j for j in jobs if j.state == DONE]
        assert len(jobs) == 4 and len(done) == 1, [(j.id, j.state, j.result) for j in jobs]
        assert all(j.state == SKIPPED for j in jobs if j not in done)
        assert sum("superseded" in (j.result or "") for j in jobs) == 2
        assert heads[-1][:12] in bot.sections()["light"]
        assert bot.hub.api_count("POST", r"/comment$") == 1
        assert bot.hub.api_count("POST", r"/comment/[0-9a-f]+/edit$") == 0


def test_recheck_runs_the_gpu_test_only_for_owner_or_org_members(monkeypatch, tmp_path):
    calls = []

    def runner(job, client, settings):
        calls.append((job.queue, job.head_sha, settings.target))
        return _result()

    with Bot(monkeypatch, tmp_path, acceptance_runner=runner, settings=SETTINGS) as bot:
        # The PR's own settings would turn checks off; only main's count.
        head = bot.hub.open_pr(REPO, 3, {"drafter/config.json": BROKEN_CONFIG, ".draftguard.yml": b"fail_on: never\n"},
                               author="eve")
        bot.post(discussion_payload(3))
        bot.settle()
        acceptance = bot.sections()["acceptance"]
        assert "skipped" in acceptance and "eve" in acceptance and "/recheck" in acceptance
        assert ":x: fails" in bot.sections()["light"] and calls == []

        # A stranger's /recheck: the light check runs again, the GPU test does not, and the note says why.
        c = bot.hub.add_comment(REPO, 3, "please\n/recheck\n", author="eve")
        assert bot.post(comment_payload(3, c)).status_code == 202
        bot.settle()
        acceptance = bot.sections()["acceptance"]
        assert "/recheck by @&#8203;eve" in acceptance and "acme organization" in acceptance
        assert calls == [] and bot.queue.get(f"hub:{REPO}#3:comment:{c['id']}").state == DONE

        # A member's /recheck runs the GPU test on the PR head.
        c = bot.hub.add_comment(REPO, 3, "/recheck", author="mona")
        bot.post(comment_payload(3, c))
        bot.settle()
        assert calls == [("gpu", head, "Qwen/Qwen3-27B")]
        sections = bot.sections()
        assert "**pass**" in sections["acceptance"] and "τ = **3.40**" in sections["acceptance"]
        assert "light" in sections  # the GPU job kept the light section
        assert len(bot.bot_comments()) == 1

        # A command quoted in a code block does nothing.
        c = bot.hub.add_comment(REPO, 3, "type\n```\n/recheck\n```", author="mona")
        assert bot.post(comment_payload(3, c)).json()["status"] == "ignored: no command"


def test_the_repo_owner_may_recheck_on_a_user_namespace(monkeypatch, tmp_path):
    calls = []
    with Bot(monkeypatch, tmp_path, acceptance_runner=lambda j, c, s: calls.append(j.id) or _result(),
             settings=SETTINGS) as bot:
        bot.hub.orgs.pop("acme")  # acme is a user here, not an organization
        bot.hub.open_pr(REPO, 3, {"drafter/config.json": BROKEN_CONFIG}, author="mona")
        c = bot.hub.add_comment(REPO, 3, "/recheck", author="mona")
        bot.post(comment_payload(3, c))
        bot.settle()
        assert calls == [] and "mona is not acme" in bot.sections()["acceptance"]
        c = bot.hub.add_comment(REPO, 3, "/recheck", author="acme")
        bot.post(comment_payload(3, c))
        bot.settle()
        assert len(calls) == 1 and "**pass**" in bot.sections()["acceptance"]


def test_the_bots_own_comments_never_trigger_it(bot):
    bot.hub.open_pr(REPO, 3, {"drafter/config.json": BROKEN_CONFIG}, author="alice")
    bot.post(discussion_payload(3))
    bot.settle()
    # The Hub announces the bot's own sticky comment (and its edits) back to the webhook.
    sticky = bot.sticky()
    assert bot.post(comment_payload(3, sticky)).json()["status"] == "ignored: the bot's own comment"
    assert bot.post(comment_payload(3, sticky, action="update")).json()["status"].startswith("ignored")
    # A comment by the bot's account without a marker (say, quoted help) is recognised by its author.
    own = bot.hub.add_comment(REPO, 3, "/recheck", author=BOT)
    assert bot.post(comment_payload(3, own)).status_code == 202
    bot.settle()
    assert bot.queue.get(f"hub:{REPO}#3:comment:{own['id']}").result == "skipped: the bot's own comment"
    assert len(bot.bot_comments()) == 2 and bot.hub.api_count("POST", r"/comment") == 1
    # Someone pasting the marker does not become the sticky comment.
    bot.hub.add_comment(REPO, 3, MARKER + "\nfake", author="eve")
    c = bot.hub.add_comment(REPO, 3, "/recheck", author="alice")
    bot.post(comment_payload(3, c))
    bot.settle()
    assert bot.sticky()["id"] == sticky["id"] and bot.hub.api_count("POST", r"/comment$") == 1


def test_faults_are_retried_and_nothing_is_posted_twice(bot, caplog):
    caplog.set_level(logging.DEBUG)
    hub = bot.hub
    bot.hub.open_pr(REPO, 3, {"drafter/config.json": BROKEN_CONFIG}, author="alice")
    hub.fail("GET", r"/discussions/3$", 429, retry_after=1)
    hub.fail("GET", r"/revision/", 503, times=2)
    hub.fail("POST", r"/discussions/3/comment$", 500, apply=True)  # stored, but the answer is lost
    bot.post(discussion_payload(3))
    bot.settle(timeout=60)
    job = next(iter(bot.queue.jobs()))
    assert job.state == DONE, job.result
    assert job.attempts >= 4
    assert all(f.times == 0 for f in hub.faults)
    bot.sticky()  # exactly one: its POST was stored and answered 500; the retry found it by its marker
    assert hub.api_count("POST", r"/comment$") == 1 == hub.api_count("POST", r"/comment$", status=500)
    assert len(bot.bot_comments()) == 1
    assert "retry" in caplog.text
    for secret in (TOKEN, SECRET):
        assert secret not in caplog.text
        assert all(secret not in e["data"]["latest"]["raw"] for e in hub.comments_on(REPO, 3))
        assert all(secret not in j.to_bytes().decode() for j in bot.queue.jobs())


def test_a_push_to_main_checks_the_changed_config(bot):
    new = bot.hub.push(REPO, {"README.md": b"hi", "drafter/config.json": BROKEN_CONFIG}, "main")
    assert bot.post(content_payload("refs/heads/main", new, old=bot.main)).status_code == 202
    bot.settle()
    readme = bot.hub.push(REPO, {"README.md": b"hello", "drafter/config.json": BROKEN_CONFIG}, "main")
    assert bot.post(content_payload("refs/heads/main", readme, old=new)).status_code == 202
    bot.settle()
    # A push announced after main moved on is left to the newer push's own job.
    assert bot.post(content_payload("refs/heads/main", "e" * 40, old=readme)).status_code == 202
    bot.settle()
    by_head = {j.head_sha: j for j in bot.queue.jobs()}
    assert by_head[new].state == DONE and "fails" in by_head[new].result
    assert by_head[readme].result == "skipped: no model files changed"
    assert by_head["e" * 40].result == f"skipped: superseded by {readme[:12]}"
    # A force push: the old head is gone from the Hub, so every watched file at the new head counts.
    forced = bot.hub.push(REPO, {"drafter/config.json": BROKEN_CONFIG}, "main")
    assert bot.post(content_payload("refs/heads/main", forced, old="d" * 40)).status_code == 202
    bot.settle()
    assert "fails" in bot.queue.get(f"hub:{REPO}@main:{forced}").result
    assert not [r for r in bot.hub.requests if r.repo == "api" and r.method == "POST"]


def test_serve_wires_the_hub_route_from_the_environment(tmp_path):
    env = {"DRAFTGUARD_HUB_WEBHOOK_SECRET": SECRET, "HF_TOKEN": TOKEN, "HF_ENDPOINT": "http://127.0.0.1:9/"}
    app = build_from_env(f"sqlite:///{tmp_path}/q.db", consumers=None, env=env)
    assert "/webhooks/hub" in {r.path for r in app.routes}
    assert set(app.state.queue.handlers) == {"hub"}
    assert app.state.queue.handlers["hub"].config.endpoint == "http://127.0.0.1:9"
    assert TOKEN not in repr(app.state.queue.handlers["hub"].config)
    with pytest.raises(BotConfigError, match="HF_TOKEN"):
        build_from_env(f"sqlite:///{tmp_path}/q2.db", consumers=None, env={"DRAFTGUARD_HUB_WEBHOOK_SECRET": SECRET})


# --- `draftguard serve` as a real process ----------------------------------------------------------

def hub_env(hub: FakeHub, cache) -> dict[str, str]:
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DRAFTGUARD_", "HF_"))}
    env.update(hub.env(str(cache)))
    env.update({"HF_TOKEN": TOKEN, "DRAFTGUARD_HUB_WEBHOOK_SECRET": SECRET, "DRAFTGUARD_RETRY_BASE": "0.2"})
    return env


class Serve(ServeProcess):
    def post(self, payload):
        import requests

        return requests.post(f"{self.url}/webhooks/hub", json=payload, headers={"X-Webhook-Secret": SECRET}, timeout=10)


def test_a_request_cut_off_mid_body_never_reaches_the_fake_hub():
    """A client killed while sending a POST's body (the kill -9 test below did it once in a fresh-clone run):
    the Hub stores nothing and answers nothing; the fake recorded it as a 400 "invalid JSON" POST, which the
    kill -9 test then counted as a second post."""
    import socket

    with FakeHub() as hub:
        hub.token, hub.user = TOKEN, BOT
        hub.push(REPO, {"drafter/config.json": BASE_CONFIG}, "main")
        hub.open_pr(REPO, 20, {"drafter/config.json": BROKEN_CONFIG}, author="alice")
        body = json.dumps({"comment": "a whole comment"}).encode()
        with socket.create_connection(hub._server.server_address[:2], timeout=5) as sock:
            sock.sendall(f"POST /api/models/{REPO}/discussions/20/comment HTTP/1.1\r\nHost: x\r\n"
                         f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:7])
            sock.shutdown(socket.SHUT_WR)
            assert sock.recv(100) == b""  # nothing answered
        time.sleep(0.2)
        assert hub.api_count("POST", r"/comment$") == 0 and hub.comments_on(REPO, 20, author=BOT) == []


def test_kill_9_with_hub_jobs_queued_and_running_loses_nothing_and_posts_once(tmp_path):
    import signal

    from draftguard.jobs import FINISHED, RUNNING

    prs = list(range(20, 26))
    with FakeHub() as hub:
        hub.token, hub.user = TOKEN, BOT
        hub.push(REPO, {"drafter/config.json": BASE_CONFIG}, "main")
        for n in prs:
            hub.open_pr(REPO, n, {"drafter/config.json": BROKEN_CONFIG}, author="alice")
        hub.latency = 0.1  # each job makes ~10 API calls: about a second in flight
        url = f"sqlite:///{tmp_path}/queue.db"
        env = hub_env(hub, tmp_path / "hf-cache")
        first = Serve(tmp_path, env, url)
        try:
            for n in prs:
                assert first.post(discussion_payload(n)).status_code == 202
            queue = Queue(url)
            deadline = time.time() + 240  # the workers' start: over a minute beside CI's vLLM pass; that it happens is the point
            while not any(j.state == RUNNING for j in queue.jobs()) or not any(
                    hub.comments_on(REPO, n, author=BOT) for n in prs):
                assert time.time() < deadline, "no job started"
                time.sleep(0.02)
        finally:
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait()
        states = [j.state for j in queue.jobs()]
        assert len(states) == len(prs) and any(s not in FINISHED for s in states), states

        second = Serve(tmp_path, env, url)
        try:
            hub.latency = 0.0
            assert queue.wait_idle(60), [(j.id, j.state, j.result) for j in queue.jobs()]
            assert all(j.state == DONE for j in queue.jobs()), [(j.id, j.state, j.result) for j in queue.jobs()]
            for n in prs:
                assert len(hub.comments_on(REPO, n, author=BOT)) == 1, n
            assert hub.api_count("POST", r"/comment$") == len(prs)
        finally:
            second.proc.send_signal(signal.SIGTERM)
            second.proc.wait(30)
    log = open(second.log.name).read() + open(first.log.name).read()
    assert "recovered" in log
    assert TOKEN not in log and SECRET not in log


def test_a_job_killed_after_its_check_runs_again_to_done_and_another_delivery_is_skipped(bot):
    """The once-flaky kill -9 test: a job killed after it marked its head checked, before its record
    said done, was then skipped by its own mark ("already checked") on recovery. Its own mark is no
    reason to skip; another job's for the same head still is. Fails before (skipped)."""
    from draftguard.jobs import QUEUED, Job

    bot.hub.open_pr(REPO, 3, {"drafter/config.json": BROKEN_CONFIG}, author="alice")
    assert bot.post(discussion_payload(3)).status_code == 202
    bot.settle()
    [job] = bot.queue.jobs()
    assert job.state == DONE, job.result
    job.state, job.result = QUEUED, None  # as recovery finds it after the kill
    bot.queue.save(job)
    bot.queue.enqueue(job)
    bot.settle()
    again = bot.queue.get(job.id)
    assert again.state == DONE, again.result
    bot.sticky()  # still one sticky comment: the rerun edited it
    other = Job(id=job.id + ":again", source=job.source, kind=job.kind, repo=job.repo, number=job.number,
                data=job.data)
    assert bot.queue.submit(other)
    bot.settle()
    assert bot.queue.get(other.id).result.endswith("already checked"), bot.queue.get(other.id).result


def test_serve_and_worker_refuse_a_hub_setup_without_a_token_in_one_line(tmp_path):
    import subprocess
    import sys

    with FakeHub() as hub:
        env = hub_env(hub, tmp_path / "hf-cache")
    del env["HF_TOKEN"]
    for args in (["serve", "--queue", f"sqlite:///{tmp_path}/q.db"], ["worker", "--queue-url", f"sqlite:///{tmp_path}/q.db"]):
        done = subprocess.run([sys.executable, "-m", "draftguard", *args], env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 2 and "HF_TOKEN" in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
        assert SECRET not in done.stderr + done.stdout


def test_the_transformers_matrix_section_appears_when_configured(monkeypatch, tmp_path):
    # 4.52.4 is the version tests/test_matrix.py installs once into the shared cache
    # ($DRAFTGUARD_CACHE_DIR, else ~/.cache/draftguard); the installed one needs no environment.
    from draftguard.check import resolver

    installed = resolver.transformers_version()
    settings = f"transformers: ['4.52.4', '{installed}']\n".encode()
    with Bot(monkeypatch, tmp_path, settings=settings) as bot:
        bot.hub.open_pr(REPO, 3, {"README.md": b"hi", "drafter/config.json": BROKEN_CONFIG}, author="eve")
        bot.post(discussion_payload(3))
        bot.settle(timeout=120)
        sections = bot.sections()
        assert list(sections) == ["light", "matrix"]
        matrix = sections["matrix"]
        assert matrix.startswith("### transformers matrix") and "Not run" not in matrix, matrix
        # The drafter's window is kept by 4.52.4 and dropped by the installed version's Qwen3Config gate.
        row = next(line for line in matrix.splitlines() if line.startswith("| sliding_window |"))
        assert row.split("|")[3:5] == [" <code>2048</code> ", " <code>null</code> "], matrix


def test_the_settings_engines_add_what_the_engines_serve_to_the_hub_comment(monkeypatch, tmp_path):
    """The Hub bot reads ``engines:`` from the default branch as the GitHub bot does (one check entry)."""
    mistral = (Path(__file__).resolve().parent / "data" / "healthy" / "mistral-7b-v0.1.json").read_bytes()
    with Bot(monkeypatch, tmp_path, settings=b"engines: [sglang==0.5.23]\n") as bot:
        bot.hub.open_pr(REPO, 4, {"README.md": b"hi", "mistral/config.json": mistral}, author="eve")
        bot.post(discussion_payload(4))
        bot.settle()
        sections = bot.sections(4)
        assert "DG201" in sections["light"]  # SGLang serves Mistral's sliding window as full attention
        assert sections["engines"].startswith("### What the engines serve")
        [row] = [line for line in sections["engines"].splitlines() if line.startswith("| SGLang 0.5.23")]
        assert "full at layers 0-31" in row


def test_settings_come_from_main_even_when_the_pr_targets_another_branch(monkeypatch, tmp_path):
    # Issue 32: a Hub pull request may target any branch; the bot read .draftguard.yml from that
    # branch, so a PR against an old branch whose settings say `fail_on: never` passed its own breakage.
    with Bot(monkeypatch, tmp_path, settings=SETTINGS) as bot:
        bot.hub.push(REPO, {"README.md": b"hi", "drafter/config.json": BASE_CONFIG,
                            ".draftguard.yml": b"fail_on: never\n"}, "lax")
        bot.hub.open_pr(REPO, 3, {"drafter/config.json": BROKEN_CONFIG}, author="eve", base="lax")
        assert bot.post(discussion_payload(3)).status_code == 202
        bot.settle()
        light = bot.sections()["light"]
        assert ":x: fails" in light, light
        # The findings are new against the branch the PR targets (its base), not against main.
        assert bot.hub.head_of(REPO, "lax")[:12] in light


# --- the repo beside config.json (issue 41): the Hub bot reads what the repo rules need ------------------

REPOS = Path(__file__).parent / "data" / "real-repos"
REAP = REPOS / "bryce-hoehn--qwen3.5-18b-reap-a3b-coding"  # Qwen3.5 MoE, one MTP layer declared
REFLECTION = REPOS / "mattshumer--reflection-llama-3.1-70b"  # Llama 3.1: turns end with <|eot_id|> (128009)


def _with_mtp(index: bytes) -> bytes:
    # main as a Qwen3.5 checkpoint ships it: the published REAP index dropped these, as the PR below does.
    data = json.loads(index)
    data["weight_map"].update({name: "model-00007-of-00007.safetensors" for name in QWEN35_MTP})
    return json.dumps(data, indent=2).encode()


def _light_rules(bot, num):
    light = bot.sections(num)["light"]
    return light, {r.split("DG")[1][:3] for r in light.splitlines() if r.startswith("| :") and "DG" in r}


def test_a_hub_pr_that_drops_the_mtp_weights_gets_dg404(monkeypatch, tmp_path):
    with Bot(monkeypatch, tmp_path) as bot:
        healthy = real_repo_files(REAP, **{"model.safetensors.index.json": _with_mtp((REAP / "model.safetensors.index.json")
                                                                          .read_bytes())})
        bot.hub.push(REPO, healthy, "main")
        # PR 3: the re-export as published, without the MTP layer's tensors; PR 4 changes the sampling only.
        bot.hub.open_pr(REPO, 3, real_repo_files(REAP), author="eve")
        gen = json.loads(healthy["generation_config.json"])
        bot.hub.open_pr(REPO, 4, dict(healthy, **{"generation_config.json": json.dumps(dict(gen, top_k=40)).encode()}),
                        author="eve")
        bot.post(discussion_payload(3))
        bot.post(discussion_payload(4))
        bot.settle()
        light, rules = _light_rules(bot, 3)
        assert "404" in rules and "**new**" in light, light
        assert "mtp_num_hidden_layers" in light and "model.safetensors.index.json" in light
        light4, rules4 = _light_rules(bot, 4)
        assert "404" not in rules4 and "**new**" not in light4, light4
        # The index was asked for at both heads and main (a copy already fetched comes from the cache),
        # through the resolve endpoint; weights never.
        assert len({r.revision for r in bot.hub.requests_for(REPO, "model.safetensors.index.json")}) == 3
        assert not [r for r in bot.hub.requests if (r.path or "").endswith(".safetensors")]


def test_a_hub_pr_that_drops_the_turn_end_stop_token_gets_dg408(monkeypatch, tmp_path):
    with Bot(monkeypatch, tmp_path) as bot:
        bot.hub.push(REPO, real_repo_files(REFLECTION), "main")
        gen = json.loads((REFLECTION / "generation_config.json").read_bytes())
        assert gen["eos_token_id"] == [128001, 128009]
        dropped = json.dumps(dict(gen, eos_token_id=[128001]), indent=2).encode()  # <|eot_id|> gone
        bot.hub.open_pr(REPO, 3, real_repo_files(REFLECTION, **{"generation_config.json": dropped}), author="eve")
        kept = json.dumps(dict(gen, temperature=0.7), indent=2).encode()
        bot.hub.open_pr(REPO, 4, real_repo_files(REFLECTION, **{"generation_config.json": kept}), author="eve")
        bot.post(discussion_payload(3))
        bot.post(discussion_payload(4))
        bot.settle()
        light, rules = _light_rules(bot, 3)
        assert "408" in rules and "**new**" in light, light
        assert "<code>&lt;&#124;eot_id&#124;&gt;</code> (id 128009)" in light  # the markdown-escaped token
        light4, rules4 = _light_rules(bot, 4)
        assert "408" not in rules4 and "**new**" not in light4, light4


def test_a_hub_pr_that_changes_only_the_chat_template_file_is_checked(monkeypatch, tmp_path):
    # The stop-token rules read chat_template.jinja before tokenizer_config.json's template: a PR that
    # adds or edits it changes what they judge, so it is a watched file (before: "no model files changed").
    with Bot(monkeypatch, tmp_path) as bot:
        files = real_repo_files(REFLECTION)
        bot.hub.push(REPO, files, "main")
        template = json.loads(files["tokenizer_config.json"])["chat_template"]
        bot.hub.open_pr(REPO, 3, dict(files, **{"chat_template.jinja": template.encode()}), author="eve")
        bot.post(discussion_payload(3))
        bot.settle()
        assert [j.result.split(":")[0] for j in bot.queue.jobs()] != ["skipped"]
        light, rules = _light_rules(bot, 3)
        assert "**new**" not in light and not rules & {"408", "409"}, light
        assert [r.method for r in bot.hub.requests_for(REPO, "chat_template.jinja") if r.status == 200]
