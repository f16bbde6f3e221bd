"""``draftguard audit --queue redis://...``: the repos become jobs on the queue that ``draftguard
worker`` serves, two real worker processes audit them, and the one report equals a local run's.
Real redis-server, real workers, the fake Hub over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.audit_helpers import REPO_ROOT, AuditProcess, audit_command, audit_env, run_audit_process, warning_rules
from tests.fakes.fleet import build_fleet
from tests.fakes.hub import FakeHub
from tests.test_bot_redis import redis_url  # noqa: F401  (a fixture)


def _summary(records: dict[str, dict]) -> dict[str, tuple]:
    return {repo: (r["status"], r["sha"], sorted(warning_rules(r["findings"])), [e["kind"] for e in r["errors"]])
            for repo, r in records.items()}


def test_two_workers_on_redis_audit_the_fleet_into_one_report(tmp_path, redis_url):  # noqa: F811
    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=2, corpus=False)
        repo_list = fleet.list_file(tmp_path / "repos.txt")
        local = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", out=tmp_path / "local")
        caches = [tmp_path / f"worker-{n}-cache" for n in range(2)]  # one each: shows who fetched
        workers = [subprocess.Popen([sys.executable, "-m", "draftguard", "worker", "--queue", "cpu", "--queue-url",
                                     redis_url, "--workers", "2"],
                                    env=audit_env(hub, cache, HF_TOKEN="", GITHUB_TOKEN=""), cwd=REPO_ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                   for cache in caches]
        try:
            queued = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--queue", redis_url,
                                       out=tmp_path / "queued", timeout=300)
        finally:
            for worker in workers:
                worker.terminate()
            errors = [worker.communicate(timeout=30)[1] for worker in workers]
        assert queued.rc == local.rc == 1, queued.stderr
        assert _summary(queued.records) == _summary(local.records)
        assert len(queued.records) == len(fleet.repos)
        assert all("serves `draftguard audit` jobs only" in e for e in errors)
        # Both workers took jobs: each fetched configs into its own cache.
        assert all(list(cache.rglob("config.json")) for cache in caches)
        assert "Traceback" not in queued.stderr


def test_a_queue_that_is_not_redis_is_bad_input(tmp_path):
    with FakeHub() as hub:
        bad = run_audit_process(hub, tmp_path, "--org", "x", "--queue", "sqlite:///q.db")
        assert bad.rc == 2 and "give redis://HOST:PORT/DB" in bad.stderr


def _running_job(queue, timeout: float) -> str:
    """The id of the first audit Job a worker runs (its record says running), waiting up to ``timeout``."""
    from draftguard.jobs import RUNNING

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = [job.id for job in queue.jobs() if job.state == RUNNING]
        if running:
            return running[0]
        time.sleep(0.02)
    raise AssertionError("no audit job started running")


def test_a_worker_machine_killed_mid_chunk_gives_its_chunk_to_another_worker_within_a_minute(tmp_path, redis_url):  # noqa: F811
    """Issue 41: a worker machine that died held its chunk until a 600 s claim expired. Here the whole
    worker (its supervisor and its worker process: one process group, as a machine going away) is
    killed with SIGKILL in the middle of a chunk; no worker is left alive until then, so nothing but
    the claim's expiry can tell. A second worker started after the kill does the chunk, the audit's
    report equals the in-process one, and the delay from the kill to the chunk done is measured."""
    from draftguard.jobs import DONE, RUNNING, Queue

    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=1, corpus=False)
        repo_list = fleet.list_file(tmp_path / "repos.txt")
        local = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", out=tmp_path / "local")
        hub.latency = hub.file_latency = 0.4  # a chunk takes seconds: the kill lands inside one

        def worker(name: str) -> subprocess.Popen:
            return subprocess.Popen([sys.executable, "-m", "draftguard", "worker", "--queue", "cpu", "--queue-url",
                                     redis_url, "--workers", "1"],
                                    env=audit_env(hub, tmp_path / f"{name}-cache", HF_TOKEN="", GITHUB_TOKEN=""),
                                    cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    start_new_session=True)  # its own process group, as its own machine

        doomed = worker("doomed")
        gatherer = subprocess.Popen(audit_command(str(repo_list), "--no-progress", "--queue", redis_url,
                                                  "--out", str(tmp_path / "queued")),
                                    env=audit_env(hub, tmp_path / "gatherer-cache"), cwd=REPO_ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        rescuer = None
        try:
            queue = Queue(redis_url)
            victim = _running_job(queue, timeout=120)
            os.killpg(doomed.pid, signal.SIGKILL)
            killed = time.monotonic()
            doomed.wait(10)
            assert queue.get(victim).state == RUNNING  # killed mid-chunk: its record still says running
            hub.latency = hub.file_latency = 0.0
            rescuer = worker("rescuer")
            while queue.get(victim).state != DONE and time.monotonic() - killed < 120:
                time.sleep(0.1)
            delay = time.monotonic() - killed
            out, err = gatherer.communicate(timeout=300)
        finally:
            for proc in (gatherer, rescuer):
                if proc is not None and proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL) if proc is rescuer else proc.kill()
                    proc.wait(10)
        print(f"\nchunk {victim}: back and done by another worker {delay:.1f} s after its worker was killed")
        assert queue.get(victim).state == DONE and delay < 60, f"{delay:.1f} s"
        assert queue.get(victim).attempts == 2  # the dead worker's attempt, then the rescuer's
        assert gatherer.returncode == local.rc == 1, err
        queued = AuditProcess(gatherer.returncode, out, err, tmp_path / "queued")
        assert _summary(queued.records) == _summary(local.records)
        assert len(queued.records) == len(fleet.repos) and "Traceback" not in err
        # The rescuer fetched the victim's repos: they are in its cache, never the dead worker's alone.
        assert list((tmp_path / "rescuer-cache").rglob("config.json"))


def test_a_hub_rate_that_cannot_be_shared_is_bad_input(tmp_path):
    with FakeHub() as hub:
        alone = run_audit_process(hub, tmp_path, "--org", "x", "--hub-rate", "5")
        negative = run_audit_process(hub, tmp_path, "--org", "x", "--hub-rate", "-1", "--queue", "redis://127.0.0.1:1/0")
        assert alone.rc == 2 and "without --queue" in alone.stderr and "Traceback" not in alone.stderr
        assert negative.rc == 2 and "--hub-rate must be" in negative.stderr


def test_an_audit_killed_while_gathering_resumes_its_jobs_without_queueing_them_twice(tmp_path, redis_url):  # noqa: F811
    """Issue 41: an audit whose gathering process died left its Jobs on the queue, and a new run queued
    every chunk again under a new id. Now the Jobs' ids are a digest of the chunks: the run started
    again finds them, takes those that finished meanwhile, and the report equals the in-process one."""
    from draftguard.jobs import DONE, Queue

    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=1, corpus=False)
        repo_list = fleet.list_file(tmp_path / "repos.txt")
        local = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", out=tmp_path / "local")
        args = [str(repo_list), "--no-progress", "--queue", redis_url]
        first = subprocess.Popen(audit_command(*args, "--out", str(tmp_path / "queued")),
                                 env=audit_env(hub, tmp_path / "first-cache"), cwd=REPO_ROOT,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        queue = Queue(redis_url)
        counts, deadline = [], time.monotonic() + 120
        while time.monotonic() < deadline and (len(counts) < 3 or not counts[-1] == counts[-3] > 0):
            counts.append(sum(1 for _ in queue.jobs()))  # every chunk queued: the count stops growing
            time.sleep(0.3)
        first.kill()  # no worker yet: the audit dies with every chunk on the queue
        first.wait(10)
        chunks = counts[-1]
        worker = subprocess.Popen([sys.executable, "-m", "draftguard", "worker", "--queue", "cpu", "--queue-url",
                                   redis_url, "--workers", "2"],
                                  env=audit_env(hub, tmp_path / "worker-cache", HF_TOKEN="", GITHUB_TOKEN=""),
                                  cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while time.monotonic() < deadline and not any(j.state == DONE for j in queue.jobs()):
                time.sleep(0.1)  # some chunks finish while no audit gathers them
            again = run_audit_process(hub, tmp_path, *args, out=tmp_path / "queued", timeout=300)
        finally:
            worker.terminate()
            worker.wait(30)
        assert again.rc == local.rc == 1, again.stderr
        assert f"resumed: {chunks} of {chunks} chunks were on the queue already" in again.stderr
        assert _summary(again.records) == _summary(local.records)
        ran = list(queue.jobs())
        assert len(ran) == chunks and all(j.state == DONE and j.attempts == 1 for j in ran)  # none twice
        assert all(j.data == {} for j in ran)  # gathered: the chunk's data no longer kept in Redis


def test_workers_on_redis_share_one_hub_rate(tmp_path, redis_url):  # noqa: F811
    """--hub-rate: two worker processes together keep to one rate of Hub requests (a token bucket in
    the queue's Redis), where the same audit in process, unbounded, asks far faster."""
    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=1, corpus=False)
        repo_list = fleet.list_file(tmp_path / "repos.txt")
        hub.requests.clear()
        local = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", out=tmp_path / "local")
        unbounded = [r.at for r in hub.requests]
        workers = [subprocess.Popen([sys.executable, "-m", "draftguard", "worker", "--queue", "cpu", "--queue-url",
                                     redis_url, "--workers", "2"],
                                    env=audit_env(hub, tmp_path / f"worker-{n}-cache", HF_TOKEN="", GITHUB_TOKEN=""),
                                    cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                   for n in range(2)]
        try:
            time.sleep(3)  # the workers ready (transformers imported), so the rate is theirs, not their start's
            hub.requests.clear()
            queued = run_audit_process(hub, tmp_path, str(repo_list), "--no-progress", "--queue", redis_url,
                                       "--hub-rate", "3", out=tmp_path / "queued", timeout=300)
        finally:
            for worker in workers:
                worker.terminate()
                worker.wait(30)
        bounded = sorted(r.at for r in hub.requests)[1:]  # the first: the audit's own reachability probe
        assert queued.rc == local.rc == 1, queued.stderr
        assert _summary(queued.records) == _summary(local.records)
        rate = (len(bounded) - 3) / (bounded[-1] - bounded[0])  # the bucket's first second is a burst of 3
        unbounded_rate = len(unbounded) / (max(unbounded) - min(unbounded))
        print(f"\n{len(bounded)} requests at {rate:.2f}/s with --hub-rate 3; in process, unbounded: {unbounded_rate:.1f}/s")
        assert len(bounded) > 50 and rate <= 3 * 1.1 and unbounded_rate > 2 * 3


def test_a_gatherer_with_no_worker_serving_the_queue_says_so(redis_url, monkeypatch, capsys):  # noqa: F811
    """Before: an audit on a queue no worker served waited in silence, forever."""
    from draftguard.audit import queue as audit_queue
    from draftguard.audit.inputs import RepoRef
    from draftguard.audit.repo import AuditOptions
    from draftguard.jobs import Job, Queue

    monkeypatch.setattr(audit_queue, "STALL_SECONDS", 0.5)
    queue = Queue(redis_url)
    queue.submit(Job(id="audit-x-0", source="audit", kind="audit", repo="o/m", number=0, notify="audit-x"))
    with pytest.raises(TimeoutError):
        audit_queue.gather(queue, "audit-x", {"audit-x-0": [RepoRef("o/m")]},
                           AuditOptions(versions=["x"], host_version="x"), lambda *a: None, timeout=2.5)
    err = capsys.readouterr().err
    assert err.count("no audit chunk finished for 0 s (1 waiting): is a `draftguard worker --queue cpu`") == 1
