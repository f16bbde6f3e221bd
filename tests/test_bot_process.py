"""`draftguard serve` as a real process: configuration errors, and kill -9 with jobs queued and running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import requests

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("github")

from draftguard.jobs import FINISHED, RUNNING, Queue  # noqa: E402
from draftguard.report.comment import MARKER  # noqa: E402
from tests.fakes.github import ServeProcess, post_webhook, pr_payload  # noqa: E402
from tests.test_bot import BASE, HEAD, REPO, SECRET, TOKEN, fake_api  # noqa: E402


def bot_env(api_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DRAFTGUARD_"))}
    env.update({
        "GITHUB_API_URL": api_url, "GITHUB_TOKEN": TOKEN, "DRAFTGUARD_GITHUB_WEBHOOK_SECRET": SECRET,
        "DRAFTGUARD_GITHUB_WRITE_INTERVAL": "0", "DRAFTGUARD_RETRY_BASE": "0.2", "DRAFTGUARD_GITHUB_TIMEOUT": "5",
        "HF_HUB_OFFLINE": "1",  # a drafter's target is never fetched from the real Hub in tests
    })
    return env


def run_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "draftguard", *args], env=env, capture_output=True, text=True, timeout=60)


def test_serve_refuses_bad_configuration_in_one_line(tmp_path):
    env = bot_env("http://127.0.0.1:9")
    del env["DRAFTGUARD_GITHUB_WEBHOOK_SECRET"]
    done = run_cli("serve", "--queue", f"sqlite:///{tmp_path}/q.db", env=env)
    assert done.returncode == 2 and "DRAFTGUARD_GITHUB_WEBHOOK_SECRET" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1

    done = run_cli("serve", "--queue", "postgres://db/1", env=bot_env("http://127.0.0.1:9"))
    assert done.returncode == 2 and "sqlite:///FILE" in done.stderr and "Traceback" not in done.stderr

    env = bot_env("http://127.0.0.1:9")
    del env["GITHUB_TOKEN"]
    env["DRAFTGUARD_GITHUB_APP_ID"] = "1"
    done = run_cli("serve", "--queue", f"sqlite:///{tmp_path}/q.db", env=env)
    assert done.returncode == 2 and "DRAFTGUARD_GITHUB_PRIVATE_KEY" in done.stderr
    for out in (done.stdout, done.stderr):
        assert TOKEN not in out and SECRET not in out


class Serve(ServeProcess):
    def __init__(self, tmp_path, api_url: str, queue_url: str):
        super().__init__(tmp_path, bot_env(api_url), queue_url)

def test_a_request_cut_off_mid_body_never_reaches_the_fake_api():
    """As tests/test_bot_hub.py's twin: a POST whose sender dies mid-body is neither stored nor answered nor
    counted, so the kill -9 test below counts only the posts GitHub would have received."""
    import socket
    from urllib.parse import urlsplit

    api = fake_api()
    api.add_pull(REPO, 20, head=HEAD, base=BASE)
    where = urlsplit(api.url)
    body = b'{"body": "a whole comment"}'
    with socket.create_connection((where.hostname, where.port), timeout=5) as sock:
        sock.sendall(f"POST /repos/{REPO}/issues/20/comments HTTP/1.1\r\nHost: x\r\nAuthorization: token {TOKEN}\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body[:5])
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(100) == b""  # nothing answered
    time.sleep(0.2)
    assert api.count("POST", r"/comments$") == 0


def test_kill_9_with_jobs_queued_and_running_loses_nothing_and_posts_once(tmp_path):
    api = fake_api()
    prs = list(range(20, 28))
    for n in prs:
        api.add_pull(REPO, n, head=HEAD, base=BASE)
    api.latency = 0.15  # each job makes ~10 calls: about 1.5 s in flight
    url = f"sqlite:///{tmp_path}/queue.db"
    first = Serve(tmp_path, api.url, url)
    try:
        for n in prs:
            r = post_webhook(first.url, "pull_request", pr_payload(REPO, n, HEAD, BASE), secret=SECRET, delivery=f"k-{n}")
            assert r.status_code == 202
        queue = Queue(url)
        # The wait is for the workers to start, import the check and take a job: seconds alone, over a
        # minute beside CI's other pass on two cores (stop 49: 30 s ran out). What is asserted is that it
        # happens, not how fast.
        deadline = time.time() + 240
        while not any(j.state == RUNNING for j in queue.jobs()) or not api.comments:
            assert time.time() < deadline, ("no job started", [(j.id, j.state) for j in queue.jobs()], len(api.comments))
            time.sleep(0.02)
    finally:
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait()
    states = [j.state for j in queue.jobs()]
    assert len(states) == len(prs)
    assert any(s not in FINISHED for s in states), states  # some were cut off or never started

    second = Serve(tmp_path, api.url, url)
    try:
        api.latency = 0.0
        assert queue.wait_idle(60), [(j.id, j.state, j.result) for j in queue.jobs()]
        assert all(j.state == "done" for j in queue.jobs()), [(j.id, j.state, j.result) for j in queue.jobs()]
        for n in prs:
            stickies = [c for c in api.comments_on(REPO, n) if c["body"].startswith(MARKER)]
            assert len(stickies) == 1, (n, len(stickies))
        runs = api.runs_for(REPO, HEAD, "draftguard/config")
        assert len(runs) == 1  # one head sha shared by every PR: one check run, updated in place
    finally:
        second.proc.send_signal(signal.SIGTERM)
        second.proc.wait(30)
        api.stop()
    log = open(second.log.name).read() + open(first.log.name).read()
    assert "recovered" in log
    assert TOKEN not in log and SECRET not in log


def worker_marks(queue: Queue) -> dict[int, str]:
    """The job each process worker runs now, by its pid (``worker:<pid>`` in the store)."""
    out = {}
    for key, value in queue.store.result_items().items():
        key = key.decode() if isinstance(key, bytes) else key
        if key.startswith("worker:"):
            out[int(key.split(":", 1)[1])] = bytes(value).decode()
    return out


def test_a_job_that_kills_its_worker_twice_is_failed_and_serve_answers_throughout(tmp_path):
    """Issue 32: the workers ran in serve's own interpreter, so a check killed for memory took serve
    down, and recovery queued the same job again, for ever. Now each job runs in a worker process: a
    kill -9 of it (what the OOM killer sends) leaves serve answering, the job runs again once, and the
    second kill fails it with the reason; the next pull request is checked by a fresh worker."""
    api = fake_api()
    api.add_pull(REPO, 31, head=HEAD, base=BASE)

    def slow(method: str, path: str) -> None:  # PR 7's check takes long enough to be killed in
        if path.endswith(f"/repos/{REPO}/pulls/7/files"):
            time.sleep(2.0)

    api.before_answer.append(slow)
    url = f"sqlite:///{tmp_path}/queue.db"
    serve = Serve(tmp_path, api.url, url)
    queue = Queue(url)
    killed = []
    try:
        assert post_webhook(serve.url, "pull_request", pr_payload(REPO, 7, HEAD, BASE), secret=SECRET,
                            delivery="oom-1").status_code == 202
        deadline = time.time() + 60
        while len(killed) < 2:
            assert time.time() < deadline, (killed, [(j.id, j.state, j.result) for j in queue.jobs()])
            for pid, job_id in worker_marks(queue).items():
                if job_id == "oom-1" and pid not in killed:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                    assert requests.get(f"{serve.url}/healthz", timeout=2).ok  # serve answers at once
            time.sleep(0.05)
        assert queue.wait_idle(30, ids=["oom-1"])
        job = queue.get("oom-1")
        assert job.state == "failed" and job.deaths == 2 and "died under it 2 times" in job.result
        assert "SIGKILL" in job.result
        assert serve.proc.poll() is None
        # The workers were restarted: the next pull request is checked.
        post_webhook(serve.url, "pull_request", pr_payload(REPO, 31, HEAD, BASE), secret=SECRET, delivery="next")
        assert queue.wait_idle(60, ids=["next"]) and queue.get("next").state == "done"
        assert [c for c in api.comments_on(REPO, 31) if c["body"].startswith(MARKER)]
        # /metrics reads the jobs' latencies from the store: none ran in serve's own process.
        text = requests.get(f"{serve.url}/metrics", timeout=5).text
        assert "draftguard_job_latency_seconds_count 2" in text and 'draftguard_jobs{state="failed"} 1' in text
        family = descendants(serve.proc.pid)
        assert len(family) >= 4  # a cpu and a gpu consumer, each with its scheduler and workers
    finally:
        serve.proc.send_signal(signal.SIGKILL)  # even killed, serve leaves no worker behind
        serve.proc.wait(30)
        api.stop()
    deadline = time.time() + 10
    while [pid for pid in family if alive(pid)]:
        assert time.time() < deadline, [pid for pid in family if alive(pid)]
        time.sleep(0.1)


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        here = todo.pop()
        for task in os.listdir(f"/proc/{here}/task"):
            with open(f"/proc/{here}/task/{task}/children") as fh:
                kids = [int(k) for k in fh.read().split()]
            out += kids
            todo += kids
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False
