"""Benchmark of `draftguard audit` against the fake Hub's fleet, with latency added to every request.

Run:  python bench/bench_audit.py [--copies 24] [--latency 0.05] [--skip-queue] [--skip-versions]

Each figure is a fresh `draftguard audit` process (cold HF cache, --full) on the fleet of
tests/fakes/fleet.py (copies x 13 real configs + drafters + seeded faults; 346 repos by default),
served on loopback with ``--latency`` seconds added to every request, files and API alike:

- repos per minute with one transformers version, against a baseline in the same run: the same audit
  with --concurrency 1 (one repo at a time), and `draftguard check` run per repo, as one would
  without the audit (a sample, extrapolated);
- bytes fetched per repo (response bodies the fake Hub sent), for config-only repos and for drafters
  (which also read safetensors headers, their .draftguard.yml and their target);
- the files beside config.json the repo rules read (issue 41): bytes per repo over the whole fleet and
  repos/min, against the same audit reading config.json alone (``DRAFTGUARD_AUDIT_REPO_BYTES=0``);
- the cost of each extra transformers version: the same audit under two versions (4.52.4 + the
  installed one) against one, in seconds per extra version and per repo;
- the speedup of 2 worker processes over 1 on the Redis queue (needs redis-server);
- a rerun with nothing changed against its own first run (the baseline): bytes and requests, and how
  many repos were asked anything, for a Hub listing (``--search /``: the fake's listing of every
  repo) and for a list file (goal: under 10% of the first run's bytes; no request for an unchanged
  listed repo).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.fleet import build_fleet  # noqa: E402
from tests.fakes.hub import FakeHub  # noqa: E402

OLD = "4.52.4"


CPU: list[float] = [0.0]  # CPU seconds (user + system) of the last audit process and its children


def audit(hub: FakeHub, work: Path, *args: str, env: dict | None = None) -> float:
    """Wall seconds of one fresh audit process with a cold cache (its CPU seconds go to ``CPU``);
    exits on an unexpected failure."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    took = _audit(hub, work, *args, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[0] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took


def _audit(hub: FakeHub, work: Path, *args: str, env: dict | None = None) -> float:
    cache = Path(tempfile.mkdtemp(dir=work))
    run_env = {**os.environ, **hub.env(str(cache)), "PYTHONPATH": str(ROOT), **(env or {})}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "draftguard", "audit", *args, "--no-progress", "--full",
                           "--fail-on", "never", "--out", str(cache / "out")],
                          env=run_env, capture_output=True, text=True, cwd=ROOT)
    took = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"audit failed ({done.returncode}): {' '.join(args)}\n{done.stderr[-3000:]}")
    return took


def check_per_repo(hub: FakeHub, work: Path, repos: list[str]) -> float:
    """Seconds for `draftguard check REPO`, one process per repo, as without the audit."""
    env = {**os.environ, **hub.env(str(Path(tempfile.mkdtemp(dir=work)))), "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    for repo in repos:
        subprocess.run([sys.executable, "-m", "draftguard", "check", repo, "--format", "json"], env=env,
                       capture_output=True, text=True, cwd=ROOT)
    return time.perf_counter() - started


def fetched_bytes(hub: FakeHub, repos: list[str], drafters: bool) -> float:
    """Mean response bytes per repo (its own requests; a drafter's target's are shared and added
    once per drafter, as an audit of one drafter would fetch them)."""
    picked = [r for r in repos if r.endswith("pair-drafter") == drafters]
    own = sum(r.sent for r in hub.requests if r.repo in set(picked))
    own += sum(r.sent for r in hub.requests if r.repo == "api" and any(p in (r.path or "") for p in picked))
    if drafters:
        target = sum(r.sent for r in hub.requests if r.repo == "fleet-targets/pair-target")
        return (own + target * len(picked)) / len(picked)
    return own / len(picked)


def rerun_figures(hub: FakeHub, work: Path, *selection: str) -> str:
    """A first audit and a rerun with nothing changed, in the same folder and cache: their requests
    and bytes, and the repos the rerun asked anything."""
    cache, out = Path(tempfile.mkdtemp(dir=work)), Path(tempfile.mkdtemp(dir=work)) / "out"
    env = {**os.environ, **hub.env(str(cache)), "PYTHONPATH": str(ROOT)}
    runs = []
    for _ in range(2):
        start = len(hub.requests)
        subprocess.run([sys.executable, "-m", "draftguard", "audit", *selection, "--no-progress", "--fail-on",
                        "never", "--out", str(out)], env=env, capture_output=True, text=True, cwd=ROOT)
        runs.append(hub.requests[start:])
    first, again = runs
    asked = {r.repo for r in again if r.repo not in (None, "api")} | {
        "/".join(r.path.split("/")[3:5]) for r in again if r.repo == "api" and r.path.startswith("/api/models/")}
    sent = [sum(r.sent for r in run) for run in runs]
    return (f"{len(first)} requests, {sent[0] / 1024:.0f} KB first; rerun {len(again)} requests, "
            f"{sent[1] / 1024:.1f} KB = {100 * sent[1] / sent[0]:.1f}% of the first run's bytes, "
            f"{len(asked)} repos asked anything")


def redis_server(work: Path) -> tuple[subprocess.Popen, str] | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(work)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc, f"redis://127.0.0.1:{port}/0"


def queued(hub: FakeHub, work: Path, repo_list: Path, url: str, workers: int) -> tuple[float, float]:
    """Wall seconds of the queued audit, and CPU seconds its worker processes used (with warm-up)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = _queued(hub, work, repo_list, url, workers)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _queued(hub: FakeHub, work: Path, repo_list: Path, url: str, workers: int) -> float:
    env = {**os.environ, **hub.env(str(Path(tempfile.mkdtemp(dir=work)))), "PYTHONPATH": str(ROOT), "HF_TOKEN": "",
           "GITHUB_TOKEN": ""}
    procs = [subprocess.Popen([sys.executable, "-m", "draftguard", "worker", "--queue", "cpu", "--queue-url", url,
                               "--workers", "4"], env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(workers)]
    time.sleep(10)  # let the workers import transformers before the clock starts
    try:
        return audit(hub, work, str(repo_list), "--queue", url)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=None, help="default: enough for over 300 repos")
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--check-sample", type=int, default=8)
    parser.add_argument("--skip-queue", action="store_true")
    parser.add_argument("--skip-versions", action="store_true")
    parser.add_argument("--skip-baselines", action="store_true", help="no --concurrency 1 and per-repo check runs")
    parser.add_argument("--skip-rerun", action="store_true", help="no first-run-and-rerun byte figures")
    parser.add_argument("--only-rerun", action="store_true", help="the rerun figures alone")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    with FakeHub() as hub:
        fleet = build_fleet(hub, copies=args.copies)
        repo_list = fleet.list_file(work / "repos.txt")
        n = len(fleet.repos)
        hub.latency = hub.file_latency = args.latency
        print(f"fleet: {n} repos; {args.latency * 1000:.0f} ms added to every request; load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

        if not args.skip_rerun:
            print(f"rerun with nothing changed, a Hub listing: {rerun_figures(hub, work, '--search', '/')}")
            print(f"rerun with nothing changed, a list file:   {rerun_figures(hub, work, str(repo_list))}")
            if args.only_rerun:
                shutil.rmtree(work, ignore_errors=True)
                return
        hub.requests.clear()
        one = audit(hub, work, str(repo_list))
        one_cpu = CPU[0]
        per_config = fetched_bytes(hub, fleet.repos, drafters=False)
        per_drafter = fetched_bytes(hub, fleet.repos, drafters=True)
        print(f"one version, --concurrency 8: {one:.1f} s = {n / one * 60:.0f} repos/min (goal >= 300), "
              f"{one_cpu:.1f} CPU-s")
        # Issue 41: the files beside config.json (generation and tokenizer configs, the index, a header by
        # range reads), against the same audit reading config.json alone (DRAFTGUARD_AUDIT_REPO_BYTES=0).
        beside = sorted(set(fleet.controls) | {r for r, rules in fleet.faults.items() if rules & {"DG404", "DG408"}})
        all_bytes = sum(r.sent for r in hub.requests) / n
        beside_bytes = sum(r.sent for r in hub.requests if r.repo in set(beside)) / max(1, len(beside))
        hub.requests.clear()
        alone = audit(hub, work, str(repo_list), env={"DRAFTGUARD_AUDIT_REPO_BYTES": "0"})
        alone_bytes = sum(r.sent for r in hub.requests) / n
        print(f"  the repo beside config.json: {all_bytes / 1024:.1f} KB per repo over all {n} (goal <= 64 KB; "
              f"{len(beside)} repos with those files: {beside_bytes / 1024:.1f} KB each), {one:.2f} s = "
              f"{n / one * 60:.0f} repos/min; against config.json alone in the same run: {alone_bytes / 1024:.1f} KB "
              f"per repo, {alone:.2f} s = {n / alone * 60:.0f} repos/min (x{all_bytes / alone_bytes:.2f} bytes, "
              f"x{one / alone:.2f} time)")
        if not args.skip_baselines:
            sequential = audit(hub, work, str(repo_list), "--concurrency", "1")
            sample = list(fleet.clean)[: args.check_sample]
            check_each = check_per_repo(hub, work, sample) / len(sample) * n
            print(f"  baseline --concurrency 1:     {sequential:.1f} s = {n / sequential * 60:.0f} repos/min "
                  f"(x{sequential / one:.1f} slower)")
            print(f"  baseline `draftguard check` per repo ({len(sample)} sampled): {check_each:.0f} s for {n} = "
                  f"{n / check_each * 60:.0f} repos/min (x{check_each / one:.0f} slower)")
        print(f"bytes fetched per repo: {per_config / 1024:.1f} KB config-only (goal <= 64 KB), "
              f"{per_drafter / 1024:.1f} KB per drafter (headers, .draftguard.yml, target config and tokenizer)")

        if not args.skip_versions:
            from draftguard.check import environments

            host = environments.host_transformers_version()
            environments.ensure_env(OLD)  # installed once before timing
            two = audit(hub, work, str(repo_list), "--transformers", f"{OLD},{host}")
            two_cpu = CPU[0]
            # Wall time mixes two schedules (one repo per task with one version; chunks of 64 fetched
            # 8 at a time with several), so the CPU seconds are the figure for what a version costs.
            print(f"two versions ({OLD},{host}): {two:.1f} s wall (x{two / one:.2f} the one-version audit); "
                  f"{two_cpu:.1f} CPU-s, so the extra version costs {two_cpu - one_cpu:.1f} CPU-s "
                  f"({(two_cpu - one_cpu) / n * 1000:.0f} CPU-ms per repo)")

        if not args.skip_queue:
            server = redis_server(work)
            if server is None:
                print("queue: redis-server is not installed; skipped")
            else:
                proc, url = server
                try:
                    w1, cpu1 = queued(hub, work, repo_list, url, 1)
                    w2, cpu2 = queued(hub, work, repo_list, url, 2)
                finally:
                    proc.terminate()
                print(f"Redis queue: 1 worker {w1:.1f} s ({n / w1 * 60:.0f} repos/min), 2 workers {w2:.1f} s "
                      f"({n / w2 * 60:.0f} repos/min): speedup x{w1 / w2:.2f}; CPU of all processes "
                      f"{cpu1:.0f} s and {cpu2:.0f} s ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
