"""``draftguard audit --queue redis://...``: the repos become jobs on the queue that ``draftguard
worker`` serves, two real worker processes audit them, and the one report equals a local run's.
Real redis-server, real workers, the fake Hub over HTTP."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.audit_helpers import REPO_ROOT, audit_env, run_audit_process, warning_rules
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
