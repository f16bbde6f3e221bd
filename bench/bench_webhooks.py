"""Webhook bot reliability: load, kill -9, and GitHub faults, on loopback.

Three processes, so that no measurement shares an interpreter lock with another: the fake GitHub
API, the server under test (`draftguard serve`, SQLite queue, its worker processes), and this load
generator.

1. Load: ``--rate`` signed pull_request webhooks per second for ``--seconds`` (default 200/s for
   10 s), GitHub-sized bodies (~25 KB), 5% of them redeliveries. Reports time to 202 (p50/p99/max,
   measured from each request's scheduled send time, so a stall cannot hide) against two baselines in
   the same run: a bare Starlette endpoint under uvicorn that answers 202 without verifying,
   recording or queueing anything, and ``serve --worker-type thread`` (the jobs in worker threads
   of the server's interpreter, the model before issue 32). The RSS of the serve process is sampled
   before the load, right after it and once every job is done (memory flat under load). Then waits for every job and checks that none was lost and each
   was processed once (one attempt, one file listing per delivery).
2. Crash: webhooks for PRs that touch config.json; ``kill -9`` the server while jobs are queued and
   running; restart it; every accepted job must complete, and each PR must have exactly one sticky
   comment and each head one check run.
3. Faults: the fake answers 502, 403 rate limit, 429 Retry-After, timeouts, and writes whose answer is
   lost, on a fraction of all requests. Every job must finish with nothing posted twice.
4. Door: unauthenticated load. The server's peak memory while 50 connections each send a 9 MB body
   without a signature, and again with a forged one (goal: under +100 MB over its idle memory);
   /healthz latency while 500 connections trickle their headers, against /healthz on an idle
   server in the same run, and how many of those connections are still open after 12 s.

Usage::

    python bench/bench_webhooks.py                 # all four, about 2.5 minutes on 2 cores
    python bench/bench_webhooks.py --only load --rate 200 --seconds 10

On a shared machine, other work's CPU shows up as webhook latency in both the bot and the baseline;
as root the run raises its own priority (``--nice -10``, inherited by the three processes).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import loopback  # bench/loopback.py: sys.path[0] is this folder when run as a script
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TOKEN = "ghp_benchTOKEN000000000000000000"
SECRET = "bench-webhook-secret"
REPO = "acme/drafter"
BASE = "b" * 40


def head_of(n: int) -> str:
    return f"{n:040x}"


# --- the fake API and the baseline, each in its own process ----------------------------------------

def run_fake_api(args: argparse.Namespace) -> None:
    from tests.fakes.github import FakeGitHub

    with open(os.path.join(ROOT, "examples/qwen3-swa-drafter/config.json"), encoding="utf-8") as fh:
        drafter = json.load(fh)
    base_config = json.dumps(dict(drafter, use_sliding_window=True), indent=2)
    head_config = json.dumps(drafter, indent=2)
    api = FakeGitHub(token=TOKEN, hold_seconds=3.0).start()
    api.add_repo(REPO)
    base_files = {"README.md": "hello", "drafter/config.json": base_config}
    api.set_files(REPO, "main", base_files)
    api.set_files(REPO, BASE, base_files)
    for n in range(1, args.prs + 1):
        touches_config = n % args.config_every == 0
        head = dict(base_files, **({"drafter/config.json": head_config} if touches_config else {"README.md": f"v{n}"}))
        api.set_files(REPO, head_of(n), head)
        api.add_pull(REPO, n, head=head_of(n), base=BASE, author="alice")
    api.set_permission(REPO, "alice", "write")
    if args.fault_rate:
        api.random_faults = (args.fault_rate, ["502", "rate_limit", "retry_after", "timeout", "apply_then_timeout"])
    with open(args.url_file, "w") as fh:
        fh.write(api.url)
    threading.Event().wait()


def run_bare(args: argparse.Namespace) -> None:
    loopback.run_bare("/webhooks/github", args.port)


class FakeAPI:
    def __init__(self, tmp: str, prs: int, config_every: int, fault_rate: float = 0.0):
        url_file = os.path.join(tmp, f"fake-{uuid.uuid4().hex}.url")
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--fake-api", "--url-file", url_file, "--prs", str(prs),
             "--config-every", str(config_every), "--fault-rate", str(fault_rate)], cwd=ROOT)
        deadline = time.time() + 60
        while not (os.path.exists(url_file) and open(url_file).read()):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("fake API did not start")
            time.sleep(0.05)
        self.url = open(url_file).read()

    def state(self) -> dict:
        import requests

        return requests.get(f"{self.url}/_fake/state", timeout=30).json()

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def serve(tmp: str, api_url: str, queue_url: str, log_name: str,
          worker_type: str = "process") -> tuple[subprocess.Popen, str]:
    port = loopback.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DRAFTGUARD_"))}
    env.update({"GITHUB_API_URL": api_url, "GITHUB_TOKEN": TOKEN, "DRAFTGUARD_GITHUB_WEBHOOK_SECRET": SECRET,
                "DRAFTGUARD_GITHUB_WRITE_INTERVAL": "0", "DRAFTGUARD_RETRY_BASE": "0.5",
                "DRAFTGUARD_GITHUB_TIMEOUT": "2"})
    log = open(os.path.join(tmp, log_name), "w")
    proc = subprocess.Popen([sys.executable, "-m", "draftguard", "serve", "--port", str(port), "--queue", queue_url,
                             "--workers", "2", "--worker-type", worker_type], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    loopback.wait_http(f"{url}/healthz", proc)
    return proc, url


def payload(n: int, padding: int = 25_000) -> bytes:
    from tests.fakes.github import pr_payload

    body = pr_payload(REPO, n, head_of(n), BASE, action="synchronize")
    body["pull_request"]["body"] = "x" * padding  # GitHub PR payloads run 20-30 KB
    return json.dumps(body).encode()


def load(url: str, deliveries: list[tuple[str, int]], rate: float, stop_at: float | None = None,
         connections: int = 32) -> list[dict]:
    """Send deliveries at ``rate`` per second over keep-alive connections (asyncio, raw HTTP/1.1, all
    bodies signed beforehand, so the generator spends little CPU). Each result has the status and the
    latency from the request's scheduled send time. Stops sending after ``stop_at`` seconds."""
    import asyncio
    from urllib.parse import urlsplit

    from tests.fakes.github import sign

    host, port = urlsplit(url).hostname, urlsplit(url).port
    bodies = {n: payload(n) for _, n in deliveries}
    requests_bytes = []
    for delivery, n in deliveries:
        body = bodies[n]
        head = (f"POST /webhooks/github HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
                f"X-GitHub-Event: pull_request\r\nX-GitHub-Delivery: {delivery}\r\n"
                f"X-Hub-Signature-256: {sign(SECRET, body)}\r\nContent-Length: {len(body)}\r\n\r\n")
        requests_bytes.append(head.encode() + body)
    results: list[dict] = []

    async def connection(queue: asyncio.Queue) -> None:
        reader = writer = None
        while True:
            item = await queue.get()
            if item is None:
                break
            i, scheduled = item
            delivery, n = deliveries[i]
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(host, port)
                writer.write(requests_bytes[i])
                await writer.drain()
                status_line = await asyncio.wait_for(reader.readline(), 10)
                if not status_line:
                    raise ConnectionError("closed")
                length = 0
                while True:
                    line = await reader.readline()
                    if line in (b"\r\n", b""):
                        break
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                status: object = int(status_line.split()[1])
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ConnectionError) as exc:
                status, writer = type(exc).__name__, None
            results.append({"i": i, "delivery": delivery, "pr": n, "status": status,
                            "latency": time.perf_counter() - scheduled})
        if writer is not None:
            writer.close()

    async def run() -> None:
        queue: asyncio.Queue = asyncio.Queue()
        workers = [asyncio.create_task(connection(queue)) for _ in range(connections)]
        start = time.perf_counter() + 0.2
        for i in range(len(deliveries)):
            when = start + i / rate
            if stop_at is not None and when - start > stop_at:
                break
            pause = when - time.perf_counter()
            if pause > 0:
                await asyncio.sleep(pause)
            queue.put_nowait((i, when))
        for _ in workers:
            queue.put_nowait(None)
        await asyncio.gather(*workers)

    asyncio.run(run())
    return results


def quantiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return {"p50_ms": pick(0.5) * 1000, "p99_ms": pick(0.99) * 1000, "max_ms": ordered[-1] * 1000,
            "mean_ms": statistics.mean(ordered) * 1000}


def wait_jobs(queue_url: str, expected: int, timeout: float) -> tuple[bool, float, dict]:
    from draftguard.jobs import FINISHED, Queue

    queue = Queue(queue_url)
    start = time.time()
    while time.time() - start < timeout:
        jobs = list(queue.jobs())
        if len(jobs) >= expected and all(j.state in FINISHED for j in jobs):
            return True, time.time() - start, queue.counts()
        time.sleep(0.25)
    return False, time.time() - start, queue.counts()


# --- scenarios -----------------------------------------------------------------------------------

def scenario_load(tmp: str, rate: float, seconds: float) -> dict:
    """The load, against the bare endpoint, then ``serve`` with its workers in processes (the default)
    and with worker threads in its own interpreter (the model before issue 32), each with a fresh fake
    API, in this one run: the p99 ratio of the two is the figure, whatever else loads the machine."""
    total = int(rate * seconds)
    deliveries: list[tuple[str, int]] = []
    for i in range(total):
        if i % 20 == 19:  # a redelivery of an earlier delivery, same id
            deliveries.append(deliveries[i - 7])
        else:
            deliveries.append((f"load-{i}", i + 1))
    unique = {d for d, _ in deliveries}
    out: dict = {"rate": rate, "seconds": seconds, "sent": len(deliveries), "unique": len(unique)}
    port = loopback.free_port()
    bare = subprocess.Popen([sys.executable, __file__, "--bare", "--port", str(port)], cwd=ROOT)
    try:
        loopback.wait_http(f"http://127.0.0.1:{port}/healthz", bare)
        base = load(f"http://127.0.0.1:{port}", [(f"b-{d}", n) for d, n in deliveries], rate)
    finally:
        bare.kill()
        bare.wait()
    out["baseline"] = quantiles([r["latency"] for r in base])
    for key, worker_type in (("bot", "process"), ("bot_threads", "thread")):
        out[key] = load_bot(tmp, deliveries, unique, total, rate, worker_type)
    out["p99_ratio_bot_over_baseline"] = out["bot"]["p99_ms"] / max(out["baseline"]["p99_ms"], 1e-9)
    out["p99_ratio_process_over_threads"] = round(out["bot"]["p99_ms"] / max(out["bot_threads"]["p99_ms"], 1e-9), 3)
    return out


def load_bot(tmp: str, deliveries: list[tuple[str, int]], unique: set, prs: int, rate: float,
             worker_type: str) -> dict:
    """One ``serve`` (``--worker-type``) under the load: time to 202, what the jobs did, and the RSS of
    the serve process itself before the load, right after it, and once every job is done."""
    api = FakeAPI(tmp, prs=prs, config_every=10)
    out: dict = {"worker_type": worker_type}
    try:
        queue_url = f"sqlite:///{tmp}/load-{worker_type}.db"
        proc, url = serve(tmp, api.url, queue_url, f"load-{worker_type}.log", worker_type)
        try:
            time.sleep(2.0)  # workers started and warm
            rss = {"before_mb": round(rss_mb(proc.pid), 1)}
            results = load(url, deliveries, rate)
            rss["after_load_mb"] = round(rss_mb(proc.pid), 1)
            out.update(quantiles([r["latency"] for r in results]))
            statuses: dict = {}
            for r in results:
                statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
            out["statuses"] = statuses
            ok, waited, counts = wait_jobs(queue_url, len(unique), timeout=600)
            rss["after_drain_mb"] = round(rss_mb(proc.pid), 1)
            out["serve_rss"] = rss
            out["drained_s"], out["job_states"] = round(waited, 1), counts
            from draftguard.jobs import Queue

            jobs = list(Queue(queue_url).jobs())
            state = api.state()
            listings: dict = {}
            for method, path in state["requests"]:
                if method == "GET" and path.endswith("/files"):
                    listings[path] = listings.get(path, 0) + 1
            out["lost"] = len(unique - {j.id for j in jobs})
            out["processed_more_than_once"] = sum(1 for j in jobs if j.attempts != 1) + sum(
                1 for v in listings.values() if v != 1)
            out["stickies_per_config_pr_max"] = max(
                (sum(1 for c in state["comments"] if c["sticky"] and c["issue"] == n)
                 for n in range(10, prs + 1, 10)), default=0)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    finally:
        api.stop()
    return out


def scenario_crash(tmp: str, prs: int = 120, rate: float = 100.0, kill_after: float = 2.0) -> dict:
    api = FakeAPI(tmp, prs=prs, config_every=1)
    queue_url = f"sqlite:///{tmp}/crash.db"
    out: dict = {"prs": prs}
    try:
        proc, url = serve(tmp, api.url, queue_url, "crash-1.log")
        deliveries = [(f"crash-{n}", n) for n in range(1, prs + 1)]
        results: list[dict] = []
        sender = threading.Thread(target=lambda: results.extend(load(url, deliveries, rate)))
        sender.start()
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at = time.time()
        sender.join()
        from draftguard.jobs import FINISHED, Queue

        accepted = {r["delivery"] for r in results if r["status"] == 202}
        jobs = {j.id: j for j in Queue(queue_url).jobs()}
        out["accepted_before_kill"] = len(accepted)
        out["refused_after_kill"] = sum(1 for r in results if r["status"] != 202)
        out["unfinished_at_kill"] = sum(1 for j in jobs.values() if j.state not in FINISHED)
        out["running_at_kill"] = sum(1 for j in jobs.values() if j.state == "running")
        out["accepted_without_record"] = len(accepted - set(jobs))
        proc, url = serve(tmp, api.url, queue_url, "crash-2.log")
        try:
            ok, waited, counts = wait_jobs(queue_url, len(jobs), timeout=300)
            out["recovered_in_s"] = round(time.time() - killed_at, 1)
            out["job_states"] = counts
            state = api.state()
            done = {j.id for j in Queue(queue_url).jobs() if j.state == "done"}
            out["accepted_not_done"] = len(accepted - done)
            per_pr = {}
            for c in state["comments"]:
                if c["sticky"]:
                    per_pr[c["issue"]] = per_pr.get(c["issue"], 0) + 1
            accepted_prs = {int(d.split("-")[1]) for d in accepted}
            out["prs_without_exactly_one_sticky"] = sum(1 for n in accepted_prs if per_pr.get(n) != 1)
            runs: dict = {}
            for r in state["check_runs"]:
                runs[r["head_sha"]] = runs.get(r["head_sha"], 0) + 1
            out["heads_with_duplicate_check_runs"] = sum(1 for v in runs.values() if v > 1)
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    finally:
        api.stop()
    return out


def scenario_faults(tmp: str, prs: int = 100, rate: float = 50.0, fault_rate: float = 0.03) -> dict:
    api = FakeAPI(tmp, prs=prs, config_every=1, fault_rate=fault_rate)
    queue_url = f"sqlite:///{tmp}/faults.db"
    out: dict = {"prs": prs, "fault_rate": fault_rate}
    try:
        proc, url = serve(tmp, api.url, queue_url, "faults.log")
        try:
            results = load(url, [(f"fault-{n}", n) for n in range(1, prs + 1)], rate)
            out["accepted"] = sum(1 for r in results if r["status"] == 202)
            ok, waited, counts = wait_jobs(queue_url, prs, timeout=600)
            out["drained_s"], out["job_states"] = round(waited, 1), counts
            from draftguard.jobs import Queue

            jobs = list(Queue(queue_url).jobs())
            out["retried_jobs"] = sum(1 for j in jobs if j.attempts > 1)
            out["attempts_total"] = sum(j.attempts for j in jobs)
            out["attempts_max"] = max((j.attempts for j in jobs), default=0)
            state = api.state()
            per_pr: dict = {}
            for c in state["comments"]:
                if c["sticky"]:
                    per_pr[c["issue"]] = per_pr.get(c["issue"], 0) + 1
            out["prs_without_exactly_one_sticky"] = sum(1 for n in range(1, prs + 1) if per_pr.get(n) != 1)
            runs: dict = {}
            for r in state["check_runs"]:
                runs[r["head_sha"]] = runs.get(r["head_sha"], 0) + 1
            out["heads_with_duplicate_check_runs"] = sum(1 for v in runs.values() if v > 1)
            out["requests"] = len(state["requests"])
            log = open(os.path.join(tmp, "faults.log")).read()
            out["secret_in_log"] = TOKEN in log or SECRET in log
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    finally:
        api.stop()
    return out


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _raw(port: int, headers: dict[str, str], timeout: float = 30.0):
    import socket

    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    lines = ["POST /webhooks/github HTTP/1.1", f"Host: 127.0.0.1:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock


def flood(port: int, pid: int, n: int, size: int, signature: str | None) -> dict:
    """``n`` connections at once, each sending a ``size``-byte body without a valid signature; the
    server's peak RSS while they run, and how they were answered."""
    chunk = b" " * (256 * 1024)
    answers: dict[str, int] = {}
    lock = threading.Lock()
    start = threading.Barrier(n + 1)

    def one(i: int) -> None:
        headers = {"Content-Type": "application/json", "Content-Length": str(size), "X-GitHub-Event": "pull_request",
                   "X-GitHub-Delivery": f"flood-{i}"}
        if signature is not None:
            headers["X-Hub-Signature-256"] = signature
        answer = "error"
        try:
            start.wait()
            sock = _raw(port, headers)
            try:
                sent = 0
                while sent < size:
                    sock.sendall(chunk[: min(len(chunk), size - sent)])
                    sent += len(chunk)
            except OSError:
                pass  # refused and closed mid-body
            try:
                answer = sock.recv(64).decode(errors="replace").split("\r\n")[0][9:12] or "closed"
            except OSError:
                answer = "closed"
            sock.close()
        finally:
            with lock:
                answers[answer] = answers.get(answer, 0) + 1

    before = rss_mb(pid)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    start.wait()
    peak = before
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_mb(pid))
        time.sleep(0.02)
    return {"connections": n, "body_mb": round(size / 1e6, 1), "rss_before_mb": round(before, 1),
            "rss_peak_mb": round(peak, 1), "rss_growth_mb": round(peak - before, 1), "answers": answers}


def healthz_latency(url: str, n: int = 40) -> dict:
    import requests

    latencies = []
    with requests.Session() as session:
        for _ in range(n):
            started = time.perf_counter()
            session.get(f"{url}/healthz", timeout=10).raise_for_status()
            latencies.append(time.perf_counter() - started)
            time.sleep(0.05)
    return quantiles(latencies)


def scenario_door(tmp: str, slow: int = 500) -> dict:
    """Unauthenticated load at the door: memory under 50 bodies of 9 MB each (no signature, and a
    forged one), and /healthz latency while ``slow`` connections trickle their headers."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    api = FakeAPI(tmp, prs=1, config_every=1)
    out: dict = {}
    try:
        proc, url = serve(tmp, api.url, f"sqlite:///{tmp}/door.db", "door.log")
        port = int(url.rsplit(":", 1)[1])
        try:
            out["memory_no_signature"] = flood(port, proc.pid, 50, 9_000_000, None)
            out["memory_forged_signature"] = flood(port, proc.pid, 50, 9_000_000, "sha256=" + "0" * 64)
            out["healthz_idle"] = healthz_latency(url)
            socks = []
            for _ in range(slow):
                sock = __import__("socket").create_connection(("127.0.0.1", port), timeout=30)
                sock.sendall(b"POST /webhooks/github HTTP/1.1\r\nHost: x\r\n")
                socks.append(sock)
            out["healthz_during_slow_connections"] = healthz_latency(url)
            out["slow_connections"] = slow
            time.sleep(12)  # past the 10 s header deadline
            still_open = 0
            for sock in socks:
                sock.settimeout(0.2)
                try:
                    still_open += sock.recv(1) != b""
                except OSError:
                    still_open += 1  # no answer and not closed
                sock.close()
            out["slow_connections_open_after_12s"] = still_open
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    finally:
        api.stop()
    out["healthz_p99_ratio_slow_over_idle"] = round(
        out["healthz_during_slow_connections"]["p99_ms"] / max(out["healthz_idle"]["p99_ms"], 1e-9), 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["load", "crash", "faults", "door"])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--json-out")
    parser.add_argument("--nice", type=int, default=-10 if hasattr(os, "geteuid") and os.geteuid() == 0 else 0,
                        help="niceness for this run and its processes (default -10 as root): on a shared "
                        "machine, other jobs' CPU would otherwise show up as webhook latency")
    parser.add_argument("--fake-api", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url-file", help=argparse.SUPPRESS)
    parser.add_argument("--prs", type=int, default=100, help=argparse.SUPPRESS)
    parser.add_argument("--config-every", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--fault-rate", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_api:
        run_fake_api(args)
        return 0
    if args.bare:
        run_bare(args)
        return 0
    if args.nice:
        os.nice(args.nice)
    results: dict = {"machine": {"cpus": os.cpu_count(), "load_average_before": os.getloadavg(), "nice": args.nice}}
    with tempfile.TemporaryDirectory(prefix="bench-webhooks-") as tmp:
        if args.only in (None, "load"):
            results["load"] = scenario_load(tmp, args.rate, args.seconds)
            print(json.dumps({"load": results["load"]}, indent=2), flush=True)
        if args.only in (None, "crash"):
            results["crash"] = scenario_crash(tmp)
            print(json.dumps({"crash": results["crash"]}, indent=2), flush=True)
        if args.only in (None, "faults"):
            results["faults"] = scenario_faults(tmp)
            print(json.dumps({"faults": results["faults"]}, indent=2), flush=True)
        if args.only in (None, "door"):
            results["door"] = scenario_door(tmp)
            print(json.dumps({"door": results["door"]}, indent=2), flush=True)
    if args.json_out:
        with open(args.json_out, "w") as fh:
            json.dump(results, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
