"""The bot's scheduling, black-box against the fake GitHub on loopback (issue 32): a job whose pull
request is busy goes back to the queue instead of holding a worker (B3), each press of the Re-run
button reruns the GPU test, one at a time per head (B5), and one person's commands on one pull
request are limited per hour, answered once (on every host: the limit is in the one flow)."""

from __future__ import annotations

import json
import threading
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("github")

from draftguard.bot.flow import ACCEPTANCE_CHECK  # noqa: E402
from draftguard.report.comment import MARKER  # noqa: E402
from tests.fakes import acceptance_result  # noqa: E402
from tests.fakes import fake_hub  # noqa: E402,F401  (a fixture: drafter targets come from a fake Hub)
from tests.fakes.github import comment_payload, pr_payload  # noqa: E402
from tests.test_bot import BASE, BASE_CONFIG, HEAD, HEAD2, HEAD_CONFIG, REPO, SETTINGS, TARGET, Bot  # noqa: E402

OTHER = "zeta/other-model"


def test_a_busy_pull_request_does_not_hold_a_worker_while_another_repos_pr_waits(tmp_path):
    """B3: one fork's two pushes held both workers (one checking, one waiting up to 60 s for the PR's
    lock), and another repo's PR got its comment 46-70 s late. Before: B's comment came once A's slow
    check ended (> 10 s); now within a few seconds, while A's second push waits in the queue."""
    slow, reading = 12.0, threading.Event()
    with Bot(tmp_path, consumers={"cpu": 2, "gpu": 0}, timeout=30.0) as bot:
        api = bot.api
        api.add_repo(OTHER)
        for ref in ("main", BASE):
            api.set_files(OTHER, ref, {"config.json": BASE_CONFIG})
        api.set_files(OTHER, HEAD, {"config.json": HEAD_CONFIG})
        api.add_pull(OTHER, 1, head=HEAD, base=BASE, author="carol")

        def hold_a(method: str, path: str) -> None:  # A's first check is slow (a big config, a slow host)
            if path.endswith(f"/repos/{REPO}/pulls/7/files") and not reading.is_set():
                reading.set()
                time.sleep(slow)

        api.before_answer.append(hold_a)
        started = time.monotonic()
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="a1")
        assert reading.wait(15)
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE, action="synchronize"), delivery="a2")
        time.sleep(1.0)  # a2 is taken by the second worker, which finds A busy
        posted = time.monotonic()
        bot.post("pull_request", pr_payload(OTHER, 1, HEAD, BASE), delivery="b1")
        while not [c for c in api.comments_on(OTHER, 1) if c["body"].startswith(MARKER)]:
            assert time.monotonic() - posted < 8.0, [(j.id, j.state, j.result) for j in bot.queue.jobs()]
            time.sleep(0.1)
        assert time.monotonic() - started < slow  # A's first check still holds its lock
        assert bot.queue.get("a1").state == "running"
        bot.settle(60)
        assert bot.queue.get("a2").attempts == 1  # waiting for the lock was not an attempt
        bot.sticky()  # A has one sticky comment


def rerun(bot: Bot, run: dict, sender: str = "mona"):
    return bot.post("check_run", {
        "action": "rerequested", "repository": {"full_name": REPO}, "sender": {"login": sender, "type": "User"},
        "check_run": {"id": run["id"], "name": run["name"], "head_sha": run["head_sha"],
                      "external_id": run["external_id"], "pull_requests": []}})


def test_each_press_of_the_rerun_button_reruns_the_gpu_test_one_at_a_time(tmp_path, fake_hub):
    """B5: the job id was the check run's name, so the button reran the GPU test once per head and
    never again. Before: 2 runs for 3 presses; now each press reruns (3 + the head's own run)."""
    fake_hub.add("Qwen/Qwen3-27B", {"config.json": json.dumps(TARGET).encode()})
    runs, gate = [], threading.Event()

    def runner(job, host, settings):
        runs.append(job.id)
        if len(runs) == 4:
            gate.wait(20)  # this rerun is still running when the next press comes
        return acceptance_result()

    gate.set()
    with Bot(tmp_path, acceptance_runner=runner) as bot:
        bot.api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": SETTINGS})
        bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE))  # alice can write: the head's own run
        bot.settle()
        assert len(runs) == 1
        run = bot.api.runs_for(REPO, HEAD, ACCEPTANCE_CHECK)[0]
        for presses in (2, 3):
            assert rerun(bot, run).status_code == 202
            bot.settle()
            assert len(runs) == presses, runs
        # One at a time per head: a press while a rerun is running joins it.
        gate.clear()
        rerun(bot, run)
        deadline = time.time() + 20
        while len(runs) < 4 and time.time() < deadline:
            time.sleep(0.05)
        rerun(bot, run)
        time.sleep(1.5)
        gate.set()
        bot.settle()
        assert len(runs) == 4, runs
        assert len(set(runs)) == 4  # each rerun its own job
        assert bot.api.runs_for(REPO, HEAD, ACCEPTANCE_CHECK)[0]["conclusion"] == "success"


def test_commands_are_limited_per_pull_request_and_author_and_answered_once(tmp_path, monkeypatch):
    """A stranger's /recheck got a reply on GitHub (and a forced check on the Hub) each time, as often
    as they commented. Now: 2 per hour here; the third gets one note, the fourth nothing."""
    monkeypatch.setenv("DRAFTGUARD_COMMANDS_PER_HOUR", "2")
    with Bot(tmp_path) as bot:
        for n in range(4):
            c = bot.api.add_comment(REPO, 7, "/recheck", user="eve")
            assert bot.post("issue_comment", comment_payload(REPO, 7, c)).status_code == 202
            bot.settle()
        replies = [x["body"] for x in bot.api.comments_on(REPO, 7) if x["user"] == "draftguard[bot]"]
        assert len(replies) == 3, replies  # two "write access" answers, then one note
        assert sum("write access" in r for r in replies) == 2
        assert "run 2 commands on this pull request" in replies[2] and "@eve" in replies[2]
        # Someone else on the same pull request has their own count.
        c = bot.api.add_comment(REPO, 7, "/recheck", user="mona")
        bot.post("issue_comment", comment_payload(REPO, 7, c))
        bot.settle()
        assert bot.api.count("GET", r"/pulls/7/files$") == 1
        assert len([j for j in bot.queue.jobs() if (j.result or "").startswith("skipped: eve ran")]) == 2


def test_a_strangers_rechecks_on_the_hub_are_limited_the_same_way(monkeypatch, tmp_path):
    """On the Hub anyone's /recheck ran a forced light check, as often as they commented: the same
    limit, in the same flow. Before: 3 checks for 3 comments; now 2, then one note."""
    from tests.test_bot_hub import BROKEN_CONFIG, REPO as HUB_REPO
    from tests.test_bot_hub import Bot as HubBot
    from tests.test_bot_hub import comment_payload as hub_comment, discussion_payload

    monkeypatch.setenv("DRAFTGUARD_COMMANDS_PER_HOUR", "2")
    with HubBot(monkeypatch, tmp_path) as bot:
        bot.hub.open_pr(HUB_REPO, 3, {"drafter/config.json": BROKEN_CONFIG}, author="eve")
        bot.post(discussion_payload(3))
        bot.settle()
        for n in range(4):
            c = bot.hub.add_comment(HUB_REPO, 3, "/recheck", author="eve")
            assert bot.post(hub_comment(3, c)).status_code == 202
            bot.settle()
        results = sorted(j.result for j in bot.queue.jobs() if j.kind == "comment")
        assert sum(r.startswith("done") for r in results) == 2, results
        assert sum(r.startswith("skipped: eve ran") for r in results) == 2, results
        notes = [c for c in bot.bot_comments() if "commands on this pull request" in c["data"]["latest"]["raw"]]
        assert len(notes) == 1 and "@eve" in notes[0]["data"]["latest"]["raw"]


def test_commands_on_one_pull_request_are_limited_whoever_runs_them(monkeypatch, tmp_path):
    """Issue 40: on the Hub anyone may /recheck, and each new account had its own 6 an hour, so one
    person with many accounts forced checks without end. Now everyone's commands on one pull request
    count together too: 3 here; the fourth gets one note, the fifth nothing. Before: 5 checks."""
    from tests.test_bot_hub import BROKEN_CONFIG, REPO as HUB_REPO
    from tests.test_bot_hub import Bot as HubBot
    from tests.test_bot_hub import comment_payload as hub_comment, discussion_payload

    monkeypatch.setenv("DRAFTGUARD_COMMANDS_PER_PR_HOUR", "3")
    with HubBot(monkeypatch, tmp_path) as bot:
        bot.hub.open_pr(HUB_REPO, 3, {"drafter/config.json": BROKEN_CONFIG}, author="eve")
        bot.post(discussion_payload(3))
        bot.settle()
        for n in range(5):
            c = bot.hub.add_comment(HUB_REPO, 3, "/recheck", author=f"sock{n}")  # a new account each time
            assert bot.post(hub_comment(3, c)).status_code == 202
            bot.settle()
        results = sorted(j.result for j in bot.queue.jobs() if j.kind == "comment")
        assert sum(r.startswith("done") for r in results) == 3, results
        assert sum("commands on this pull request within the hour (limit 3, everyone's)" in r for r in results) == 2
        notes = [c for c in bot.bot_comments() if "run on this pull request" in c["data"]["latest"]["raw"]]
        assert len(notes) == 1 and "@sock3" in notes[0]["data"]["latest"]["raw"]
