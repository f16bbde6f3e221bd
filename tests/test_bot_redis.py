"""The Redis queue path, against a real redis-server that the test starts on a free loopback port,
with `draftguard worker` processes consuming the cpu and gpu queues."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest

pytest.importorskip("starlette")
pytest.importorskip("huey")
pytest.importorskip("redis")

from draftguard.jobs import DONE, RUNNING, Job, Queue  # noqa: E402
from draftguard.report.comment import parse_sticky  # noqa: E402
from tests.fakes.github import free_port, pr_payload  # noqa: E402
from tests.test_bot import BASE, BASE_CONFIG, HEAD, REPO, SETTINGS, Bot  # noqa: E402
from tests.test_bot_process import bot_env  # noqa: E402

REDIS = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(
    REDIS is None, reason="redis-server is not installed (Debian: apt-get install -y redis-server)"
)


@pytest.fixture
def redis_url(tmp_path):
    import redis

    port = free_port()
    proc = subprocess.Popen(
        [REDIS, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save", "",
         "--appendonly", "no", "--protected-mode", "yes"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    client = redis.Redis(host="127.0.0.1", port=port)
    deadline = time.time() + 60  # redis-server's start, under load
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if time.time() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)


def test_redis_queue_dedupes_and_recovers_by_lease(redis_url):
    q = Queue(redis_url)
    job = Job(id="r1", source="github", kind="pull_request", repo=REPO, number=1)
    assert q.submit(job) and not q.submit(job)
    assert q.pending_ids() == {"r1"}
    # Jobs that a dead worker left behind: a running one whose lease expired, and a fresh one that
    # another live worker may be running right now.
    stale = Job(id="r2", source="github", kind="pull_request", repo=REPO, number=2, state=RUNNING)
    live = Job(id="r3", source="github", kind="pull_request", repo=REPO, number=3, state=RUNNING)
    for j in (stale, live):
        q.add(j)
    stale.updated = time.time() - 10_000
    q.store.put_data("job:r2", stale.to_bytes())
    assert q.recover(lease=True) == ["r2"]
    assert q.pending_ids() == {"r1", "r2"}
    # The same, periodically, as `draftguard worker` runs it: a worker that died later is covered too.
    dead = Job(id="r5", source="github", kind="pull_request", repo=REPO, number=5, state=RUNNING)
    dead.updated = time.time() - 10_000
    q.add(dead)
    stop = q.start_recovery(interval=0.1)
    try:
        deadline = time.time() + 5
        while "r5" not in q.pending_ids():
            assert time.time() < deadline, "periodic recovery did not queue the dead worker's job"
            time.sleep(0.05)
    finally:
        stop.set()
    # Finished records stay a week (they dedupe redeliveries), then go.
    old = Job(id="r4", source="github", kind="pull_request", repo=REPO, number=4, state=DONE)
    old.finished = time.time() - 8 * 24 * 3600
    q.add(old)
    assert q.prune() == 1 and q.get("r4") is None and q.get("r1") is not None


def test_workers_on_redis_process_webhooks_and_gpu_work_waits_for_a_gpu_worker(tmp_path, redis_url):
    with Bot(tmp_path, queue_url=redis_url, consumers={}, acceptance_runner=None) as bot:
        bot.api.set_files(REPO, "main", {"drafter/config.json": BASE_CONFIG, ".draftguard.yml": SETTINGS})
        env = bot_env(bot.api.url)
        log = open(tmp_path / "worker.log", "w")
        cpu = subprocess.Popen([sys.executable, "-m", "draftguard", "worker", "--queue", "cpu", "--queue-url", redis_url],
                               env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            assert bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="w1").status_code == 202
            assert bot.post("pull_request", pr_payload(REPO, 7, HEAD, BASE), delivery="w1").status_code == 200
            assert bot.queue.wait_idle(60, ids=["w1"]), open(log.name).read()[-2000:]
            assert bot.queue.get("w1").state == DONE
            light = parse_sticky(bot.sticky()["body"])["light"]
            assert "**new**" in light and "sliding_window" in light
            # alice can write, so the drafter's acceptance test is queued, on the gpu queue only.
            time.sleep(1.5)
            gpu = bot.queue.get(f"gpu:github:{REPO}#7@{HEAD}")  # one GPU job per head
            assert gpu is not None and gpu.state == "queued" and bot.queue.hueys["gpu"].pending_count() == 1
            assert bot.queue.hueys["cpu"].pending_count() == 0
        finally:
            cpu.send_signal(signal.SIGINT)
            cpu.wait(20)
        out = open(log.name).read()
        assert "Traceback" not in out
        for secret in (env["GITHUB_TOKEN"], env["DRAFTGUARD_GITHUB_WEBHOOK_SECRET"]):
            assert secret not in out


def test_a_slow_job_is_never_handed_to_a_second_worker_while_its_worker_lives(redis_url, monkeypatch):
    # R11 of issue 25: after the lease a slow job was queued again, and a second worker was held by
    # the same input. Two queues on one Redis stand for two worker machines; the lease is shortened.
    import threading

    import draftguard.jobs as jobs

    monkeypatch.setitem(jobs.LEASE_SECONDS, "cpu", 1.0)
    runs: list[str] = []
    first, second = Queue(redis_url), Queue(redis_url)

    def slow(job, queue):
        runs.append(job.id)
        time.sleep(3.5)
        return "done"

    first.handlers["github"] = second.handlers["github"] = slow
    job = Job(id="slow-1", source="github", kind="pull_request", repo=REPO, number=1)
    first.add(job)
    worker = threading.Thread(target=first.run, args=(job.id,))
    worker.start()
    time.sleep(2.5)  # past the lease
    assert first.get(job.id).state == RUNNING
    assert "slow-1" not in second.recover(lease=True)
    assert second.run(job.id) is None and runs == ["slow-1"]  # the claim is still held
    worker.join(10)
    assert first.get(job.id).state == DONE and runs == ["slow-1"]
