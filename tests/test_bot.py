"""The GitHub bot end to end: signed webhooks over HTTP to the real app (uvicorn on loopback), the
SQLite huey queue with in-process workers, and PyGithub talking to a fake GitHub REST API."""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("github")

from draftguard.bot.github_events import github_route  # noqa: E402
from draftguard.bot.github_handler import ACCEPTANCE_CHECK, CONFIG_CHECK, GitHubHandler  # noqa: E402
from draftguard.jobs import DONE, FAILED, SKIPPED, Job, Queue  # noqa: E402
from draftguard.bot.webhooks import create_app  # noqa: E402
from draftguard.hosts.github import GitHubConfig  # noqa: E402
from draftguard.report.comment import MARKER, parse_sticky  # noqa: E402
from draftguard.snapshot import key_lines  # noqa: E402
from tests.fakes import fake_hub  # noqa: E402,F401  (a fixture: drafter targets come from a fake Hub)
from tests.fakes import acceptance_result as _result  # noqa: E402
from tests.fakes.github import (  # noqa: E402
    BotServer,
    FakeGitHub,
    comment_payload,
    post_webhook,
    pr_payload,
)

TOKEN = "ghp_SECRETtoken0123456789abcdef"
SECRET = "whsec-very-secret-value-42"
REPO = "acme/drafter"
BASE, HEAD, HEAD2 = "b" * 40, "c" * 40, "d" * 40

with open("examples/qwen3-swa-drafter/config.json", encoding="utf-8") as fh:
    DRAFTER = json.load(fh)
# The base already has two findings (a rope_scaling that disagrees with rope_parameters); the head
# drops use_sliding_window, so the Qwen3Config gate takes the window away: two new findings.
BASE_CONFIG = json.dumps(dict(DRAFTER, use_sliding_window=True, rope_scaling={"rope_type": "linear", "factor": 2.0}), indent=2)
HEAD_CONFIG = json.dumps(dict(DRAFTER, rope_scaling={"rope_type": "linear", "factor": 2.0}), indent=2)
FIXED_CONFIG = json.dumps(dict(DRAFTER, use_sliding_window=True), indent=2)


def light_findings(text: str):
    """What the light check finds in a config, to compare the bot's output with (not hard-coded)."""
    from draftguard.check import resolver
    from draftguard.check.light import check_snapshot
    from draftguard.snapshot import Snapshot

    resolver.hide_torch()
    snap = Snapshot(source="t", revision=None, files={"config.json": text.encode()},
                    display={"config.json": "drafter/config.json"})
    return check_snapshot(snap).findings


def fake_api() -> FakeGitHub:
    api = FakeGitHub(token=TOKEN, hold_seconds=2.5).start()
    api.add_repo(REPO)
    api.set_files(REPO, "main", {"README.md": "hi", "drafter/config.json": BASE_CONFIG})
    api.set_files(REPO, BASE, {"README.md": "hi", "drafter/config.json": BASE_CONFIG})
    api.set_files(REPO, HEAD, {"README.md": "hi", "drafter/config.json": HEAD_CONFIG})
    api.set_files(REPO, HEAD2, {"README.md": "hi", "drafter/config.json": FIXED_CONFIG})
    api.add_pull(REPO, 7, head=HEAD, base=BASE, author="alice")
    api.set_permission(REPO, "alice", "write")
    api.set_permission(REPO, "mona", "maintain")
    api.set_permission(REPO, "eve", "read")
    return api


class Bot:
    """A fake GitHub, a queue and the served app, wired as ``draftguard serve`` wires them."""

    def __init__(self, tmp_path, *, acceptance_runner=None, consumers=None, queue_url=None, **config):
        self.api = fake_api()
        self.config = GitHubConfig(api_url=self.api.url, token=TOKEN, webhook_secret=SECRET, timeout=config.pop("timeout", 1.0),
                                   write_interval=0, retry_base=0.2, **config)
        self.config.secrets = [TOKEN, SECRET]
        self.queue = Queue(queue_url or f"sqlite:///{tmp_path}/queue.db")
        self.queue.handlers["github"] = GitHubHandler(self.config, acceptance_runner=acceptance_runner)
        self.app = create_app(self.queue, [github_route(SECRET)], consumers={"cpu": 2, "gpu": 1} if consumers is None else consumers)
        self.server = BotServer(self.app)

    def __enter__(self) -> "Bot":
        self.server.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.server.__exit__(*exc)
        self.api.stop()

    def post(self, event, payload, delivery=None, **kw):
        return post_webhook(self.server.url, event, payload, secret=SECRET, delivery=delivery or str(uuid.uuid4()), **kw)

    def settle(self, timeout=30.0):
        assert self.queue.wait_idle(timeout), [(j.id, j.state, j.result) for j in self.queue.jobs()]

    def sticky(self, number=7):
        stickies = [c for c in self.api.comments_on(REPO, number) if c["body"].startswith(MARKER)]
        assert len(stickies) == 1, [c["body"][:80] for c in self.api.comments_on(REPO, number)]
        return stickies[0]


@pytest.fixture
def bot(tmp_path):
    with Bot(tmp_path) as b:
        yield b


def test_unsigned_or_forged_webhooks_get_401_and_queue_nothing(bot):
    payload = pr_payload(REPO, 7, HEAD, BASE)
    assert bot.post("pull_request", payload, signature="").status_code == 401
    assert post_webhook(bot.server.url, "pull_request", payload, secret=None, delivery="x1").status_code == 401
    assert bot.post("pull_request", payload, signature="sha256=" + "0" * 64).status_code == 401
    forged = post_webhook(bot.server.url, "pull_request", payload, secret="not-the-secret", delivery="x2")
    assert forged.status_code == 401
    assert list(bot.queue.jobs()) == []
    assert bot.api.requests == []


def test_oversized_and_malformed_bodies(bot):
    big = b"{" + b" " * (10 * 1024 * 1024) + b"}"
    assert bot.post("pull_request", None, raw=big).status_code == 413
    assert bot.post("pull_request", None, raw=b"{not json").status_code == 400
    assert bot.post("pull_request", None, raw=b"[1, 2]").status_code == 400
    assert bot.post("pull_request", {"action": "opened", "repository": {"full_name": REPO}, "pull_request": {}}).status_code == 400
    assert bot.post("ping", {"zen": "hi"}).status_code == 200
    assert list(bot.queue.jobs()) == []


def test_pull_request_gets_one_sticky_comment_and_a_check_run_with_annotations(bot):
    started = time.perf_counter()
    resp = bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="d-1")
    assert resp.status_code == 202 and resp.json()["job"] == "d-1"
    assert time.perf_counter() - started < 2.0
    bot.settle()
    job = bot.queue.get("d-1")
    assert job.state == DONE, job.result

    body = bot.sticky()["body"]
    light = parse_sticky(body)["light"]
    head, base = light_findings(HEAD_CONFIG), light_findings(BASE_CONFIG)
    new_keys = {f.key for f in head} - {f.key for f in base}
    assert {"sliding_window", "layer_types"} <= new_keys and len(base) >= 1
    rows = [line for line in light.splitlines() if line.startswith("| :")]
    assert len(rows) == len(head)
    # New findings (what the head introduced) come first and are marked; the base's are not.
    n = len(new_keys)
    assert all("**new**" in r for r in rows[:n]) and not any("**new**" in r for r in rows[n:])
    assert new_keys == {r.split("<code>")[1].split("</code>")[0] for r in rows[:n]}
    assert f"{n} new in this pull request" in light

    runs = bot.api.runs_for(REPO, HEAD, CONFIG_CHECK)
    assert len(runs) == 1 and runs[0]["conclusion"] == "failure" and runs[0]["status"] == "completed"
    lines = key_lines(HEAD_CONFIG)
    got = {(a["path"], a["start_line"], a["annotation_level"]) for a in runs[0]["annotations"]}
    assert ("drafter/config.json", lines["sliding_window"], "failure") in got
    assert ("drafter/config.json", lines["layer_types"], "failure") in got
    assert len(runs[0]["annotations"]) == len(head)
    # Settings were looked for on the default branch, never at the head.
    assert bot.api.count("GET", r"/contents/\.draftguard\.yml$") >= 1


def test_a_redelivery_is_answered_200_and_processed_once(bot):
    payload = pr_payload(REPO, 7, HEAD, BASE)
    assert bot.post("pull_request", payload, delivery="same").status_code == 202
    again = bot.post("pull_request", payload, delivery="same")
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    bot.settle()
    assert bot.post("pull_request", payload, delivery="same").status_code == 200
    bot.settle()
    assert [j.id for j in bot.queue.jobs()] == ["same"]
    assert bot.queue.get("same").attempts == 1
    assert bot.api.count("POST", r"/issues/7/comments$") == 1
    assert bot.api.count("POST", r"/check-runs$") == 1


def test_the_sticky_comment_is_edited_in_place_on_every_push(bot):
    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE))
    bot.settle()
    first = bot.sticky()
    bot.api.add_pull(REPO, 7, head=HEAD2, base=BASE)
    bot.post("pull_request", pr_payload(REPO, 7, HEAD2, BASE, action="synchronize"))
    bot.settle()
    second = bot.sticky()
    assert second["id"] == first["id"] and second.get("edits") == 1
    light = parse_sticky(second["body"])["light"]
    assert HEAD2[:12] in light and "**new**" not in light
    assert bot.api.count("POST", r"/issues/7/comments$") == 1
    assert bot.api.runs_for(REPO, HEAD2, CONFIG_CHECK)[0]["conclusion"] == "success"  # the fix removed them all


def test_a_push_that_takes_the_model_files_out_clears_the_old_findings(bot):
    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE))
    bot.settle()
    readme_only = "e" * 40
    bot.api.set_files(REPO, readme_only, {"README.md": "new words", "drafter/config.json": BASE_CONFIG})
    bot.api.add_pull(REPO, 7, head=readme_only, base=BASE)
    bot.post("pull_request", pr_payload(REPO, 7, readme_only, BASE, action="synchronize"))
    bot.settle()
    light = parse_sticky(bot.sticky()["body"])["light"]
    assert "no longer changes a model file" in light and "**new**" not in light
    # A PR that never touched one gets no comment at all.
    bot.api.add_pull(REPO, 9, head=readme_only, base=BASE)
    bot.post("pull_request", pr_payload(REPO, 9, readme_only, BASE), delivery="never")
    bot.settle()
    assert bot.queue.get("never").result == "skipped: no model files changed" and not bot.api.comments_on(REPO, 9)


def test_a_stale_push_is_skipped(bot):
    bot.api.add_pull(REPO, 7, head=HEAD2, base=BASE)  # the PR moved on before the job ran
    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE, action="synchronize"), delivery="old")
    bot.settle()
    assert bot.queue.get("old").state == SKIPPED and "superseded" in bot.queue.get("old").result
    assert bot.api.comments_on(REPO, 7) == []


def test_recheck_from_a_writer_runs_again_and_reacts(bot):
    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE))
    bot.settle()
    edits_before = bot.api.count("PATCH", r"/issues/comments/\d+$")
    c = bot.api.add_comment(REPO, 7, "Rerun please\n\n/recheck\n", user="mona")
    assert bot.post("issue_comment", comment_payload(REPO, 7, c)).status_code == 202
    bot.settle()
    reactions = {r["content"] for r in bot.api.reactions if r["comment"] == c["id"]}
    assert reactions == {"eyes", "+1"}
    assert bot.api.count("GET", r"/pulls/7/files$") == 2
    bot.sticky()  # still exactly one
    assert bot.api.count("PATCH", r"/issues/comments/\d+$") == edits_before  # same result, no edit needed
    assert len(bot.api.runs_for(REPO, HEAD, CONFIG_CHECK)) == 1


def test_recheck_from_a_stranger_gets_one_polite_reply_and_runs_nothing(bot):
    c = bot.api.add_comment(REPO, 7, "/recheck", user="eve")
    assert bot.post("issue_comment", comment_payload(REPO, 7, c)).status_code == 202
    bot.settle()
    # The same comment redelivered with a new id (a GitHub "redeliver" keeps ids; a second App does not).
    assert bot.post("issue_comment", comment_payload(REPO, 7, c)).status_code == 202
    bot.settle()
    replies = [x for x in bot.api.comments_on(REPO, 7) if x["user"] == "draftguard[bot]"]
    assert len(replies) == 1 and "write access" in replies[0]["body"] and "@eve" in replies[0]["body"]
    assert not bot.api.reactions and not bot.api.check_runs
    assert bot.api.count("GET", r"/pulls/7/files$") == 0
    assert all(j.state == SKIPPED for j in bot.queue.jobs())


def test_commands_in_code_blocks_and_from_bots_are_ignored(bot):
    c = bot.api.add_comment(REPO, 7, "To rerun, type:\n```\n/recheck\n```\nor `/recheck`", user="mona")
    assert bot.post("issue_comment", comment_payload(REPO, 7, c)).json()["status"] == "ignored: no command"
    b = bot.api.add_comment(REPO, 7, "/recheck", user="some-ci[bot]", user_type="Bot")
    assert bot.post("issue_comment", comment_payload(REPO, 7, b)).json()["status"] == "ignored: comment from a bot"
    assert list(bot.queue.jobs()) == []


def test_faults_are_retried_and_nothing_is_posted_twice(bot, caplog):
    caplog.set_level(logging.DEBUG)
    logging.getLogger("github").setLevel(logging.WARNING)  # as configure_logging leaves it
    api = bot.api
    api.fail("GET", r"/pulls/7/files$", "rate_limit")
    api.fail("GET", r"/contents/drafter/config\.json$", "502", times=2)
    api.fail("POST", r"/issues/7/comments$", "apply_then_timeout")  # created, but the answer is lost
    api.fail("POST", r"/check-runs$", "retry_after")
    api.fail("GET", r"/pulls/7$", "timeout")
    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="faulty")
    bot.settle(timeout=60)
    job = bot.queue.get("faulty")
    assert job.state == DONE, job.result
    assert job.attempts >= 5
    assert all(f.times == 0 for f in api.faults)
    bot.sticky()  # exactly one, although its first POST was applied and then timed out
    assert len(api.runs_for(REPO, HEAD, CONFIG_CHECK)) == 1
    assert len(api.runs_for(REPO, HEAD, CONFIG_CHECK)[0]["annotations"]) == len(light_findings(HEAD_CONFIG))
    assert "retry" in caplog.text
    _assert_no_secret(bot, caplog.text)


def _assert_no_secret(bot, log_text):
    for secret in (TOKEN, SECRET, *bot.api.installation_tokens):
        assert secret not in log_text
        for c in bot.api.comments.values():
            assert secret not in c["body"]
        for r in bot.api.check_runs.values():
            assert secret not in json.dumps(r)
        for j in bot.queue.jobs():
            assert secret not in j.to_bytes().decode()


def test_without_the_right_to_write_check_runs_the_comment_still_carries_the_result(bot, caplog):
    caplog.set_level(logging.WARNING)
    bot.api.fail("POST", r"/check-runs$", "forbidden", times=5)
    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="pat")
    bot.settle()
    assert bot.queue.get("pat").state == DONE and bot.queue.get("pat").attempts == 1
    assert "**new**" in parse_sticky(bot.sticky()["body"])["light"]
    assert not bot.api.check_runs and "check runs need a GitHub App" in caplog.text


def test_a_job_that_keeps_failing_gives_up_and_says_why(bot):
    bot.api.fail("GET", r"/pulls/7$", "502", times=100)
    import draftguard.jobs as jobs

    old, jobs.MAX_ATTEMPTS = jobs.MAX_ATTEMPTS, 3
    try:
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="doomed")
        bot.settle(timeout=30)
    finally:
        jobs.MAX_ATTEMPTS = old
    job = bot.queue.get("doomed")
    assert job.state == FAILED and job.attempts == 3 and "502" in job.result


def test_metrics_and_health(bot):
    import requests

    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="m1")
    bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="m1")
    bot.post("pull_request", {}, signature="sha256=00")
    bot.settle()
    assert requests.get(f"{bot.server.url}/healthz", timeout=5).json() == {"ok": True, "queue": "sqlite"}
    text = requests.get(f"{bot.server.url}/metrics", timeout=5).text
    assert 'draftguard_webhook_deliveries_total{source="github",outcome="queued"} 1' in text
    assert 'draftguard_webhook_deliveries_total{source="github",outcome="duplicate"} 1' in text
    assert 'draftguard_webhook_deliveries_total{source="github",outcome="bad_signature"} 1' in text
    assert 'draftguard_jobs{state="done"} 1' in text
    assert "draftguard_job_latency_seconds_count 1" in text


# --- trust and the GPU queue -----------------------------------------------------------------------

SETTINGS = "target: Qwen/Qwen3-27B\nmin_acceptance_length: 3.0\nfail_on: error\n"
# The drafter reads target layers [1, 16, 31, 46, 61] of a 64-layer target with hidden size 5120.
TARGET = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120, "num_hidden_layers": 64,
          "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 25600,
          "vocab_size": 248320, "max_position_embeddings": 262144}


def test_fork_prs_wait_for_ok_to_test_and_settings_come_from_the_default_branch(tmp_path, fake_hub):
    fake_hub.add("Qwen/Qwen3-27B", {"config.json": json.dumps(TARGET).encode()})
    calls = []

    def runner(job, client, settings):
        calls.append((job.queue, job.head_sha, settings.target))
        return _result()

    with Bot(tmp_path, acceptance_runner=runner) as bot:
        api = bot.api
        api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": SETTINGS})
        # The fork's head carries its own settings that would turn the check off; they must not count.
        api.set_files(REPO, HEAD, {"drafter/config.json": HEAD_CONFIG, ".draftguard.yml": "fail_on: never\n"})
        api.add_pull(REPO, 8, head=HEAD, base=BASE, author="eve", head_repo="eve/drafter")
        bot.post("pull_request", pr_payload(REPO, 8, HEAD, BASE, author="eve", head_repo="eve/drafter"))
        bot.settle()
        sections = parse_sticky(bot.sticky(8)["body"])
        assert "skipped" in sections["acceptance"] and "/ok-to-test" in sections["acceptance"]
        assert calls == [] and not api.runs_for(REPO, HEAD, ACCEPTANCE_CHECK)
        assert api.runs_for(REPO, HEAD, CONFIG_CHECK)[0]["conclusion"] == "failure"  # fail_on from main

        c = api.add_comment(REPO, 8, "/ok-to-test", user="mona")
        bot.post("issue_comment", comment_payload(REPO, 8, c))
        bot.settle()
        assert calls == [("gpu", HEAD, "Qwen/Qwen3-27B")]
        acceptance = parse_sticky(bot.sticky(8)["body"])["acceptance"]
        assert "**pass**" in acceptance and "τ = **3.40**" in acceptance
        assert acceptance.count("█") > 0 and "| 1 | 1.000 |" in acceptance  # positions are 1-based
        run = api.runs_for(REPO, HEAD, ACCEPTANCE_CHECK)
        assert len(run) == 1 and run[0]["conclusion"] == "success"
        assert "light" in parse_sticky(bot.sticky(8)["body"])  # the GPU job kept the light section


def test_gpu_jobs_only_reach_gpu_workers(tmp_path, fake_hub):
    fake_hub.add("Qwen/Qwen3-27B", {"config.json": json.dumps(TARGET).encode()})
    with Bot(tmp_path, acceptance_runner=lambda job, client, settings: _result(), consumers={"cpu": 1}) as bot:
        bot.api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": SETTINGS})
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="p1")  # alice can write: trusted
        assert bot.queue.wait_idle(30, ids=["p1"])
        time.sleep(1.0)
        gpu = bot.queue.get(f"gpu:github:{REPO}#7@{HEAD}")  # one GPU job per head
        assert gpu is not None and gpu.queue == "gpu" and gpu.state == "queued"
        assert bot.queue.hueys["gpu"].pending_count() == 1
        assert "queued" in parse_sticky(bot.sticky()["body"])["acceptance"]
        bot.queue.start_consumers({"gpu": 1})
        bot.settle()
        assert bot.queue.get(f"gpu:github:{REPO}#7@{HEAD}")  # one GPU job per head.state == DONE
        assert "**pass**" in parse_sticky(bot.sticky()["body"])["acceptance"]


def test_drafter_rules_run_against_the_target_the_default_branch_names(tmp_path, fake_hub):
    small = dict(TARGET, num_hidden_layers=48)  # the drafter's layer 61 does not exist in this target
    fake_hub.add("Qwen/Qwen3-27B", {"config.json": json.dumps(small).encode()})
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": "target: Qwen/Qwen3-27B\n"})
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE))
        bot.settle()
        light = parse_sticky(bot.sticky()["body"])["light"]
        rows = [line for line in light.splitlines() if "target_layer_ids" in line and line.startswith("| :")]
        assert rows, light
        # The base reads the same layers of the same target: that finding is not new.
        assert not any("**new**" in r for r in rows)
        assert "skipped" not in light


def test_the_transformers_matrix_section_appears_when_configured(tmp_path):
    from draftguard.check import resolver

    installed = resolver.transformers_version()  # needs no environment: no network in the test
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": f"transformers: ['{installed}']\n"})
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE))
        bot.settle()
        sections = parse_sticky(bot.sticky()["body"])
        assert sections["matrix"].startswith("### transformers matrix")
        assert f"no resolved value differs between transformers {installed}" in sections["matrix"]
        assert list(sections) == ["light", "matrix"]


def test_the_settings_engines_add_what_the_engines_serve_to_the_sticky_comment(tmp_path):
    """The bot reads ``engines:`` from the default branch's .draftguard.yml, as the CLI and the Action
    do: the engine findings join the light section, and the engine table is its own section, after
    the matrix, as in the Action's summary (before, the bot ignored the key and said nothing about
    the engines)."""
    mistral = (Path(__file__).resolve().parent / "data" / "healthy" / "mistral-7b-v0.1.json").read_text()
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, "main", {"README.md": "hi", ".draftguard.yml": "engines: [vllm==0.32.0, sglang==0.5.23]\n"})
        bot.api.set_files(REPO, HEAD, {"README.md": "hi", "mistral/config.json": mistral})
        bot.api.add_pull(REPO, 7, head=HEAD, base=BASE)
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="e1")
        bot.settle()
        assert bot.queue.get("e1").state == DONE, bot.queue.get("e1").result
        sections = parse_sticky(bot.sticky()["body"])
        assert "DG201" in sections["light"]  # SGLang serves Mistral's sliding window as full attention
        engines = sections["engines"]
        assert "matrix" not in sections and engines.startswith("### What the engines serve") and "<code>mistral/config.json</code>" in engines
        [sglang] = [line for line in engines.splitlines() if line.startswith("| SGLang 0.5.23 (light tier)")]
        assert "full at layers 0-31" in sglang
        assert any(line.startswith("| vLLM 0.32.0") and "sliding(4096) at layers 0-31" in line
                   for line in engines.splitlines())


def test_unreadable_settings_engines_are_a_note_not_a_failure(tmp_path):
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": "engines: [vllm==0.1]\n"})
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="e2")
        bot.settle()
        assert bot.queue.get("e2").state == DONE, bot.queue.get("e2").result
        sections = parse_sticky(bot.sticky()["body"])
        assert ".draftguard.yml on the default branch" in sections["light"] and "vLLM 0.1 is not one" in sections["light"]
        assert list(sections) == ["light"]


def test_a_target_that_cannot_be_fetched_is_a_note_not_a_failure(tmp_path, fake_hub):
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": "target: acme/missing\n"})
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="nf")
        bot.settle()
        assert bot.queue.get("nf").state == DONE
        light = parse_sticky(bot.sticky()["body"])["light"]
        assert "drafter rules for <code>drafter/config.json</code> skipped" in light


def test_app_auth_uses_installation_tokens_and_never_logs_them(tmp_path, caplog):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    caplog.set_level(logging.DEBUG)
    logging.getLogger("github").setLevel(logging.WARNING)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    with Bot(tmp_path, app_id="12345", private_key=pem) as bot:
        bot.config.token = None
        bot.config.secrets.append(pem)
        bot.api.app_public_key = public
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE, installation=99), delivery="app-1")
        bot.settle()
        assert bot.queue.get("app-1").state == DONE, bot.queue.get("app-1").result
        assert bot.api.count("POST", r"^/app/installations/99/access_tokens$") >= 1
        assert bot.api.installation_tokens
        bot.sticky()
        _assert_no_secret(bot, caplog.text)
        assert "PRIVATE KEY" not in caplog.text


def _speculators_drafter(verifier: str) -> str:
    layers = {k: v for k, v in DRAFTER.items() if k not in ("architectures", "dflash_config", "block_size", "num_target_layers")}
    return json.dumps({"architectures": ["DFlashSpeculator"], "speculators_model_type": "dflash",
                       "model_type": "speculators", "transformer_layer_config": layers,
                       "aux_hidden_state_layer_ids": [2, 17, 32, 47, 62], "block_size": 16, "mask_token_id": 151669,
                       "speculators_config": {"algorithm": "dflash", "verifier": {"name_or_path": verifier}}}, indent=2)


@pytest.mark.parametrize("relative", [False, True], ids=["absolute-path", "hub-shaped-local-folder"])
def test_a_verifier_naming_a_path_on_the_bot_host_is_never_read(tmp_path, fake_hub, monkeypatch, relative):
    # A folder on the bot's host whose config would make drafter rules fire and quote it.
    secret = tmp_path / "acme" / "secretmodel"
    secret.mkdir(parents=True)
    (secret / "config.json").write_text(json.dumps(dict(TARGET, num_hidden_layers=7, hidden_size=777)))
    if relative:
        monkeypatch.chdir(tmp_path)  # "acme/secretmodel" is both a folder here and shaped like a Hub id
    verifier = "acme/secretmodel" if relative else str(secret)
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, HEAD, {"drafter/config.json": _speculators_drafter(verifier)})
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="lp")
        bot.settle()
        assert bot.queue.get("lp").state == DONE
        light = parse_sticky(bot.sticky()["body"])["light"]
        assert "drafter rules for <code>drafter/config.json</code> skipped" in light
        assert ("not a Hub repo id" in light) if not relative else ("404" in light or "not found" in light.lower())
        assert "777" not in light and "secretmodel/config.json" not in light
        assert not any(f.startswith("DG1") for f in _rule_ids(light)), light


def _rule_ids(light: str) -> set[str]:
    import re

    return set(re.findall(r"\bDG\d{3}\b", light))


def test_a_traceback_carrying_a_token_is_scrubbed_from_the_log(tmp_path, capsys):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    from draftguard.bot.app import configure_logging
    from draftguard.hosts.github import connect
    from draftguard.jobs import Job

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    api = fake_api()
    api.app_public_key = key.public_key().public_bytes(serialization.Encoding.PEM,
                                                       serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        config = GitHubConfig(api_url=api.url, app_id="12345", private_key=pem, timeout=1.0)
        connect(config, 99)  # mints an installation token, which the logs must scrub too
        [minted] = api.installation_tokens
        configure_logging([TOKEN, SECRET, pem])
        queue = Queue(f"sqlite:///{tmp_path}/queue.db")

        def handler(job, queue):
            raise RuntimeError(f"GET failed: Authorization: token {TOKEN} / installation token {minted}")

        queue.handlers["github"] = handler
        queue.add(Job(id="boom", source="github", kind="pull_request", repo=REPO, number=7))
        queue.run("boom")
        stored = queue.get("boom").result  # the job record keeps the error; it must be scrubbed too
        assert "RuntimeError: GET failed" in stored and TOKEN not in stored and minted not in stored
    finally:
        for h in set(root.handlers) - set(before):
            root.removeHandler(h)
        api.stop()
    err = capsys.readouterr().err
    assert "job boom failed" in err and "Traceback" in err and "RuntimeError: GET failed" in err
    assert TOKEN not in err and minted not in err


def test_a_job_of_an_unknown_kind_fails_in_one_line_naming_the_kind(tmp_path, caplog):
    # A record written by another draftguard version (or by hand): each handler's HANDLERS table
    # is the whole list of kinds it runs, and anything else fails the job clearly, once.
    from draftguard.bot.hub_handler import HubHandler
    from draftguard.hosts.hub import HubConfig

    queue = Queue(f"sqlite:///{tmp_path}/q.db")
    queue.handlers["github"] = GitHubHandler(GitHubConfig(token=TOKEN, api_url="http://127.0.0.1:9"))
    queue.handlers["hub"] = HubHandler(HubConfig(token="hf_x", endpoint="http://127.0.0.1:9"))
    assert set(GitHubHandler.HANDLERS) == {"pull_request", "comment", "acceptance"}
    for source in ("github", "hub"):
        queue.submit(Job(id=f"{source}-odd", source=source, kind="rebase", repo=REPO, number=1))
        with caplog.at_level(logging.INFO, logger="draftguard.jobs"):  # the queue's own logger: it is below bot/
            assert queue.run(f"{source}-odd") is None  # no retry
        job = queue.get(f"{source}-odd")
        assert (job.state, job.attempts) == (FAILED, 1)
        assert f"no {source} handler for job kind 'rebase'" in job.result and "comment" in job.result
    records = [r for r in caplog.records if "rebase" in r.getMessage()]
    assert len(records) == 2 and all(r.exc_info is None and r.levelno == logging.WARNING for r in records)
    assert {r.name for r in records} == {"draftguard.jobs"}


def test_both_host_clients_are_pull_request_sources():
    # The shared review reads files only through PullRequestSource: both hosts' clients are one.
    import inspect

    from github import Auth, Github

    from draftguard.hosts.github import PullRequestClient
    from draftguard.hosts.hub import HubConfig, HubPullRequestClient
    from draftguard.pr_verdict import PullRequestSource

    gh = Github(auth=Auth.Token(TOKEN), base_url="http://127.0.0.1:9")
    clients = [PullRequestClient(gh, REPO, 1), HubPullRequestClient(HubConfig(endpoint="http://127.0.0.1:9"), REPO, 1)]
    for client in clients:
        assert isinstance(client, PullRequestSource) and client.repo_name == REPO
        assert list(inspect.signature(client.read_file).parameters) == ["path", "ref", "max_bytes"]
    assert not isinstance(object(), PullRequestSource)


def test_a_pull_request_of_many_configs_gets_at_most_50_annotations_and_a_count_of_the_rest(bot):
    # Issue 32: a pull request touching 100 configs put 301 annotations on one check run (GitHub
    # takes 50 a request and its page shows few); the cap keeps the errors, the text counts the rest.
    new = "9" * 40
    files = {f"m{i:02d}/config.json": HEAD_CONFIG for i in range(30)}
    bot.api.set_files(REPO, new, {**bot.api.repos[REPO].commits[BASE], **files})
    bot.api.add_pull(REPO, 9, head=new, base=BASE)
    assert bot.post("pull_request", pr_payload(REPO, 9, new, BASE)).status_code == 202
    bot.settle()
    [run] = bot.api.runs_for(REPO, new, CONFIG_CHECK)
    total = 30 * len(light_findings(HEAD_CONFIG))
    assert total > 50
    assert len(run["annotations"]) == 50
    errors = sum(1 for f in light_findings(HEAD_CONFIG) if f.severity.value == "error") * 30
    assert [a["annotation_level"] for a in run["annotations"]] == ["failure"] * min(50, errors) + \
        [a["annotation_level"] for a in run["annotations"]][min(50, errors):]
    assert f"and {total - 50} more in the sticky comment" in run["output"]["text"]


def test_a_pull_request_that_breaks_the_settings_gets_the_settings_check_message(tmp_path):
    # Issue 35: the head's .draftguard.yml is checked as `draftguard settings check` checks it (the
    # same line, key and nearest key), and fails the check; the settings used stay the default branch's.
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": "fail_on: error\n"})
        bot.api.set_files(REPO, HEAD, {"drafter/config.json": BASE_CONFIG,
                                       ".draftguard.yml": "fail_on: error\nfial_on: never\n"})
        bot.api.add_pull(REPO, 7, head=HEAD, base=BASE)
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="s1")
        bot.settle()
        light = parse_sticky(bot.sticky()["body"])["light"]
        assert ".draftguard.yml:2: unknown key &#96;fial_on&#96;; did you mean &#96;fail_on&#96;?" in light, light
        assert bot.api.runs_for(REPO, HEAD, CONFIG_CHECK)[-1]["conclusion"] == "failure"


_VLLM_MODELS = Path(__file__).resolve().parent / "fixtures" / "vllm-models"
# A deployment repo: the compose file takes its model folders from the .env beside it.
_COMPOSE = """services:
  vllm:
    image: vllm/vllm-openai:v0.32.0
    volumes:
      - ${MODELS}/target:/models/target
      - ${MODELS}/drafter:/models/drafter
    command: >
      /models/target --max-model-len 128
      --speculative-config '{"method": "dflash", "model": "/models/drafter", "num_speculative_tokens": 3}'
"""


def test_a_pull_request_that_breaks_a_launch_file_gets_its_findings_on_the_flag_line_and_then_fixed(tmp_path):
    """The bot checks the launch files the default branch's `launch:` globs list, as the Action does:
    read over the API with the .env and model folders they name, findings on the launch file's line,
    compared with the base (before, the bot read only config.json files and skipped this PR)."""
    deploy = {".draftguard.yml": "launch: ['deploy/*.yml']\n", "deploy/.env": "MODELS=./models\n",
              **{f"deploy/models/{m}/config.json": (_VLLM_MODELS / m / "config.json").read_text()
                 for m in ("target", "drafter")}}
    healthy, broken = {**deploy, "deploy/docker-compose.yml": _COMPOSE}, dict(deploy)
    broken["deploy/docker-compose.yml"] = _COMPOSE.replace('"dflash"', '"eagle3"')
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, "main", healthy)
        bot.api.set_files(REPO, BASE, healthy)
        bot.api.set_files(REPO, HEAD, broken)
        bot.api.set_files(REPO, HEAD2, healthy | {"deploy/docker-compose.yml": "# fixed\n" + _COMPOSE})
        bot.api.add_pull(REPO, 7, head=HEAD, base=BASE)
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="l1")
        bot.settle()
        assert bot.queue.get("l1").state == DONE, bot.queue.get("l1").result
        light = parse_sticky(bot.sticky()["body"])["light"]
        rows = [line for line in light.splitlines() if "DG300" in line]
        assert rows and all("**new**" in r and "deploy/docker-compose.yml" in r for r in rows), light
        assert "2 new in this pull request" in light and "draftguard-launch-" not in light
        [run] = bot.api.runs_for(REPO, HEAD, CONFIG_CHECK)
        assert run["conclusion"] == "failure"
        got = {(a["path"], a["start_line"], a["annotation_level"]) for a in run["annotations"]}
        assert ("deploy/docker-compose.yml", 9, "failure") in got, run["annotations"]
        # The launch folder and its models were read at the head and the base, never past the budget.
        assert bot.api.count("GET", r"/contents/deploy/\.env") >= 2

        bot.api.add_pull(REPO, 7, head=HEAD2, base=BASE)
        bot.post("pull_request", pr_payload(REPO, 7, HEAD2, BASE, action="synchronize"), delivery="l2")
        bot.settle()
        assert bot.queue.get("l2").state == DONE, bot.queue.get("l2").result
        light = parse_sticky(bot.sticky()["body"])["light"]
        assert "DG300" not in light and "DG304" not in light and HEAD2[:12] in light, light
        assert bot.api.runs_for(REPO, HEAD2, CONFIG_CHECK)[0]["conclusion"] == "success"


def test_a_launch_files_env_that_links_out_of_the_repo_is_an_error_on_the_launch_file(tmp_path):
    from tests.fakes.github import Symlink

    deploy = {".draftguard.yml": "launch: ['deploy/*.yml']\n", "deploy/.env": "MODELS=./models\n",
              **{f"deploy/models/{m}/config.json": (_VLLM_MODELS / m / "config.json").read_text()
                 for m in ("target", "drafter")}, "deploy/docker-compose.yml": _COMPOSE}
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, "main", deploy)
        bot.api.set_files(REPO, BASE, deploy)
        bot.api.set_files(REPO, HEAD, {**deploy, "deploy/.env": Symlink("/proc/self/environ"),
                                       "deploy/docker-compose.yml": "# moved\n" + _COMPOSE})
        bot.api.add_pull(REPO, 7, head=HEAD, base=BASE)
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="l3")
        bot.settle()
        assert bot.queue.get("l3").state == DONE, bot.queue.get("l3").result
        light = parse_sticky(bot.sticky()["body"])["light"]
        assert "deploy/.env" in light and "symlink" in light and TOKEN not in light, light
        assert bot.api.runs_for(REPO, HEAD, CONFIG_CHECK)[0]["conclusion"] == "failure"


def test_a_pull_request_that_drops_the_turn_end_stop_token_gets_dg408_on_generation_config(tmp_path):
    # Issue 41: the repo rules read generation_config.json and tokenizer_config.json beside the config,
    # over the API at the head and the base. The real Reflection Llama 3.1 repo ends turns with
    # <|eot_id|> (128009); the head drops it from generation_config.json's eos_token_id.
    real = Path(__file__).parent / "data" / "real-repos" / "mattshumer--reflection-llama-3.1-70b"
    files = {f"model/{p.name}": p.read_bytes() for p in real.iterdir() if p.name != "SOURCE"}
    gen = json.loads(files["model/generation_config.json"])
    dropped = json.dumps(dict(gen, eos_token_id=[128001]), indent=2).encode()
    with Bot(tmp_path) as bot:
        bot.api.set_files(REPO, "main", files)
        bot.api.set_files(REPO, BASE, files)
        bot.api.set_files(REPO, HEAD, dict(files, **{"model/generation_config.json": dropped}))
        bot.api.set_files(REPO, HEAD2, dict(files, **{"model/generation_config.json": json.dumps(
            dict(gen, temperature=0.7), indent=2).encode()}))
        bot.api.add_pull(REPO, 7, head=HEAD, base=BASE)
        bot.api.add_pull(REPO, 8, head=HEAD2, base=BASE)
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="g1")
        bot.post("pull_request", pr_payload(REPO, 8, HEAD2, BASE), delivery="g2")
        bot.settle()
        light = parse_sticky(bot.sticky(7)["body"])["light"]
        new = [r for r in light.splitlines() if r.startswith("| :") and "**new**" in r]
        assert len(new) == 1 and "DG408" in new[0] and "<code>model/generation_config.json</code>" in new[0], light
        run = bot.api.runs_for(REPO, HEAD, CONFIG_CHECK)[-1]
        assert run["conclusion"] == "failure"
        assert ("model/generation_config.json", "failure") in {(a["path"], a["annotation_level"])
                                                               for a in run["annotations"]}
        light8 = parse_sticky(bot.sticky(8)["body"])["light"]
        assert "DG408" not in _rule_ids(light8) and "**new**" not in light8, light8
