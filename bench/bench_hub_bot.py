"""Hub bot: webhook latency, coalescing, Hub faults and kill -9, against ``draftguard serve`` on loopback.

1. Load: ``--rate`` Hub webhooks per second for ``--seconds`` (default 20/s for 10 s; the Hub allows
   1,000 triggers a day per webhook, so this is far above real traffic). Each PR gets its
   ``discussion`` create and its ``refs/pr/N`` update, as the Hub sends them. Reports time to
   answer (p50/p99/max, from each request's scheduled send time) against a baseline in the same run:
   a bare Starlette endpoint under uvicorn that answers 202 without checking the secret, parsing,
   or queueing. Then every job must finish, with one sticky comment per PR. The fake Hub, the
   server and the baseline each run in their own process.
2. Burst: ``--burst`` pushes to one PR within a second, each announced by its webhook. Counts the
   checks run, comment writes and Hub API requests, against the same pushes sent one at a time,
   each waited for (the baseline: no coalescing possible). The ratio is what coalescing saves.
3. Faults: a share of all Hub API requests fails with 500/502/503/429 (half of the failed writes
   are stored first, their answer lost). Every job must finish, with one sticky per PR.
4. Crash: ``kill -9`` the server while jobs are queued and running, restart it; every job must
   finish and each PR must have exactly one sticky comment.

Usage::

    python bench/bench_hub_bot.py                 # all four, about 2 minutes on 2 cores
    python bench/bench_hub_bot.py --only burst --burst 20
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import loopback  # bench/loopback.py: sys.path[0] is this folder when run as a script
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

TOKEN = "hf_benchTOKEN000000000000000000"
SECRET = "bench-hub-webhook-secret"
REPO = "acme/drafter"
BOT = "draftguard-bot"


def configs() -> tuple[bytes, bytes]:
    with open(os.path.join(ROOT, "examples/qwen3-swa-drafter/config.json"), encoding="utf-8") as fh:
        drafter = json.load(fh)
    return (json.dumps(dict(drafter, use_sliding_window=True), indent=2).encode(),
            json.dumps(drafter, indent=2).encode())


def new_hub(prs: int):
    from tests.fakes.hub import FakeHub

    base, broken = configs()
    hub = FakeHub().start()
    hub.token, hub.user = TOKEN, BOT
    hub.push(REPO, {"README.md": b"hi", "drafter/config.json": base}, "main")
    heads = {n: hub.open_pr(REPO, n, {"README.md": b"hi", "drafter/config.json": broken}, author="alice")
             for n in range(1, prs + 1)}
    return hub, heads


def run_fake_hub(args: argparse.Namespace) -> None:
    hub, heads = new_hub(args.prs)
    with open(args.url_file, "w") as fh:
        json.dump({"url": hub.endpoint, "heads": heads}, fh)
    threading.Event().wait()


def run_bare(args: argparse.Namespace) -> None:
    loopback.run_bare("/webhooks/hub", args.port)


def serve(tmp: str, endpoint: str, queue_url: str, log_name: str) -> tuple[subprocess.Popen, str]:
    port = loopback.free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "DRAFTGUARD_", "HF_"))}
    env.update({"HF_ENDPOINT": endpoint, "HF_TOKEN": TOKEN, "HF_HUB_CACHE": os.path.join(tmp, "hf-cache"),
                "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                "DRAFTGUARD_HUB_WEBHOOK_SECRET": SECRET, "DRAFTGUARD_RETRY_BASE": "0.3"})
    log = open(os.path.join(tmp, log_name), "w")
    proc = subprocess.Popen([sys.executable, "-m", "draftguard", "serve", "--port", str(port), "--queue", queue_url,
                             "--workers", "2"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    loopback.wait_http(f"{url}/healthz", proc)
    return proc, url


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    proc.send_signal(sig)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def payloads(n: int, head: str) -> list[dict]:
    from tests.test_bot_hub import content_payload, discussion_payload

    return [discussion_payload(n), content_payload(f"refs/pr/{n}", head)]


def send_all(url: str, bodies: list[dict], rate: float) -> list[dict]:
    """Send at ``rate`` per second; each result has the status and the latency from the request's
    scheduled send time, so a stall cannot hide."""
    import requests

    local = threading.local()
    results: list[dict] = []
    lock = threading.Lock()

    def send(body: bytes, scheduled: float) -> None:
        session = getattr(local, "session", None) or requests.Session()
        local.session = session
        try:
            status = session.post(f"{url}/webhooks/hub", data=body, timeout=10,
                                  headers={"Content-Type": "application/json", "X-Webhook-Secret": SECRET}).status_code
        except requests.RequestException as exc:
            status = type(exc).__name__
        with lock:
            results.append({"status": status, "latency": time.perf_counter() - scheduled})

    start = time.perf_counter() + 0.2
    with ThreadPoolExecutor(max_workers=16) as pool:
        for i, payload in enumerate(bodies):
            scheduled = start + i / rate
            delay = scheduled - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            pool.submit(send, json.dumps(payload).encode(), scheduled)
    return results


def quantiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000  # noqa: E731
    return {"p50_ms": round(pick(0.5), 2), "p99_ms": round(pick(0.99), 2), "max_ms": round(ordered[-1] * 1000, 2)}


def wait_jobs(queue_url: str, timeout: float) -> dict:
    from draftguard.jobs import FINISHED, Queue

    queue = Queue(queue_url)
    deadline = time.time() + timeout
    while time.time() < deadline:
        jobs = list(queue.jobs())
        if jobs and all(j.state in FINISHED for j in jobs):
            break
        time.sleep(0.2)
    jobs = list(queue.jobs())
    states: dict[str, int] = {}
    for j in jobs:
        states[j.state] = states.get(j.state, 0) + 1
    return {"jobs": len(jobs), "states": states, "max_attempts": max((j.attempts for j in jobs), default=0),
            "unfinished": sum(1 for j in jobs if j.state not in FINISHED)}


def stickies(endpoint: str, prs: list[int]) -> dict[int, int]:
    from huggingface_hub import HfApi

    from draftguard.report.comment import is_sticky

    api = HfApi(endpoint=endpoint, token=TOKEN)
    out = {}
    for n in prs:
        events = api.get_discussion_details(REPO, n).events
        out[n] = sum(1 for e in events if e.type == "comment" and e.author == BOT and is_sticky(e.content))
    return out


# --- scenarios -----------------------------------------------------------------------------------

def scenario_load(tmp: str, rate: float, seconds: float) -> dict:
    n_prs = int(rate * seconds) // 2
    url_file = os.path.join(tmp, "fake.json")
    fake = subprocess.Popen([sys.executable, __file__, "--fake-hub", "--url-file", url_file, "--prs", str(n_prs)],
                            cwd=ROOT)
    port = loopback.free_port()
    bare = subprocess.Popen([sys.executable, __file__, "--bare", "--port", str(port)], cwd=ROOT)
    try:
        deadline = time.time() + 60
        while not (os.path.exists(url_file) and os.path.getsize(url_file)):
            if time.time() > deadline or fake.poll() is not None:
                raise RuntimeError("the fake Hub did not start")
            time.sleep(0.05)
        info = json.load(open(url_file))
        bare_url = f"http://127.0.0.1:{port}"
        loopback.wait_http(f"{bare_url}/healthz", bare)
        queue_url = f"sqlite:///{tmp}/load.db"
        bot, bot_url = serve(tmp, info["url"], queue_url, "load.log")
        try:
            bodies = [p for n in range(1, n_prs + 1) for p in payloads(n, info["heads"][str(n)])]
            send_all(bare_url, bodies[:20], rate)  # warm both
            baseline = send_all(bare_url, bodies, rate)
            started = time.perf_counter()
            results = send_all(bot_url, bodies, rate)
            jobs = wait_jobs(queue_url, 300)
            drained = time.perf_counter() - started
            counts = stickies(info["url"], list(range(1, n_prs + 1)))
        finally:
            stop(bot)
    finally:
        for p in (fake, bare):
            p.kill()
            p.wait()
    out = {
        "deliveries": len(bodies), "prs": n_prs, "rate_per_s": rate,
        "bot": quantiles([r["latency"] for r in results]),
        "baseline": quantiles([r["latency"] for r in baseline]),
        "statuses": {str(s): sum(1 for r in results if r["status"] == s) for s in {r["status"] for r in results}},
        "jobs": jobs, "drained_s": round(drained, 1),
        "prs_with_one_sticky": sum(1 for c in counts.values() if c == 1),
    }
    out["p50_ratio_bot_over_baseline"] = round(out["bot"]["p50_ms"] / max(out["baseline"]["p50_ms"], 1e-9), 2)
    out["p99_ratio_bot_over_baseline"] = round(out["bot"]["p99_ms"] / max(out["baseline"]["p99_ms"], 1e-9), 2)
    return out


def scenario_burst(tmp: str, burst: int) -> dict:
    from tests.test_bot_hub import content_payload

    base, broken = configs()
    out = {}
    for mode in ("coalesced", "one_at_a_time"):
        hub, _ = new_hub(1)
        queue_url = f"sqlite:///{tmp}/burst-{mode}.db"
        bot, url = serve(tmp, hub.endpoint, queue_url, f"burst-{mode}.log")
        try:
            before = len(hub.requests)
            for i in range(burst):
                head = hub.push(REPO, {"README.md": b"hi", "drafter/config.json": broken + b" " * (i + 1)}, "refs/pr/1")
                send_all(url, [content_payload("refs/pr/1", head)], rate=1000)
                if mode == "one_at_a_time":
                    wait_jobs(queue_url, 60)
            jobs = wait_jobs(queue_url, 120)
            api = [r for r in hub.requests[before:] if r.repo == "api"]
            out[mode] = {
                "checks_run": jobs["states"].get("done", 0), "jobs": jobs["jobs"],
                "comment_writes": sum(1 for r in api if r.method == "POST"),
                "hub_requests": len(hub.requests) - before,
                "one_sticky": stickies(hub.endpoint, [1])[1] == 1,
            }
        finally:
            stop(bot)
            hub.stop()
    out["hub_requests_ratio"] = round(out["coalesced"]["hub_requests"] / max(1, out["one_at_a_time"]["hub_requests"]), 2)
    out["checks_ratio"] = round(out["coalesced"]["checks_run"] / max(1, out["one_at_a_time"]["checks_run"]), 2)
    return out


def scenario_faults(tmp: str, prs: int, fault_rate: float) -> dict:
    hub, heads = new_hub(prs)
    queue_url = f"sqlite:///{tmp}/faults.db"
    bot, url = serve(tmp, hub.endpoint, queue_url, "faults.log")
    try:
        hub.fault_rate = fault_rate
        bodies = [p for n in range(1, prs + 1) for p in payloads(n, heads[n])]
        statuses = [r["status"] for r in send_all(url, bodies, rate=20)]
        jobs = wait_jobs(queue_url, 600)
        hub.fault_rate = 0.0
        api = [r for r in hub.requests if r.repo == "api"]
        counts = stickies(hub.endpoint, list(range(1, prs + 1)))
    finally:
        stop(bot)
        hub.stop()
    return {"prs": prs, "fault_rate": fault_rate, "accepted": sum(1 for s in statuses if s in (200, 202)),
            "api_requests": len(api), "failed_requests": sum(1 for r in api if r.status >= 500 or r.status == 429),
            "jobs": jobs, "prs_with_one_sticky": sum(1 for c in counts.values() if c == 1)}


def scenario_crash(tmp: str, prs: int) -> dict:
    hub, heads = new_hub(prs)
    hub.latency = 0.05
    queue_url = f"sqlite:///{tmp}/crash.db"
    bot, url = serve(tmp, hub.endpoint, queue_url, "crash-1.log")
    from draftguard.jobs import FINISHED, Queue

    try:
        bodies = [p for n in range(1, prs + 1) for p in payloads(n, heads[n])]
        send_all(url, bodies, rate=100)
        deadline = time.time() + 30
        while sum(1 for n in heads if hub.comments_on(REPO, n, author=BOT)) < 3 and time.time() < deadline:
            time.sleep(0.02)  # kill once some PRs have their comment and others wait or run
    finally:
        bot.send_signal(signal.SIGKILL)
        bot.wait()
    posted_at_kill = sum(1 for n in heads if hub.comments_on(REPO, n, author=BOT))
    at_kill = sum(1 for j in Queue(queue_url).jobs() if j.state not in FINISHED)
    bot, url = serve(tmp, hub.endpoint, queue_url, "crash-2.log")
    try:
        hub.latency = 0.0
        jobs = wait_jobs(queue_url, 300)
        counts = stickies(hub.endpoint, list(range(1, prs + 1)))
    finally:
        stop(bot)
        hub.stop()
    return {"prs": prs, "unfinished_at_kill": at_kill, "prs_commented_at_kill": posted_at_kill, "jobs": jobs,
            "prs_with_one_sticky": sum(1 for c in counts.values() if c == 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=("load", "burst", "faults", "crash"))
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--prs", type=int, default=30)
    parser.add_argument("--fault-rate", type=float, default=0.1)
    parser.add_argument("--fake-hub", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url-file", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_hub:
        run_fake_hub(args)
        return 0
    if args.bare:
        run_bare(args)
        return 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-hub-") as tmp:
        if args.only in (None, "load"):
            results["load"] = scenario_load(tmp, args.rate, args.seconds)
        if args.only in (None, "burst"):
            results["burst"] = scenario_burst(tmp, args.burst)
        if args.only in (None, "faults"):
            results["faults"] = scenario_faults(tmp, args.prs, args.fault_rate)
        if args.only in (None, "crash"):
            results["crash"] = scenario_crash(tmp, args.prs)
    print(json.dumps(results, indent=2))
    ok = all(r.get("jobs", {}).get("unfinished", 0) == 0 for r in results.values())
    ok = ok and all(r.get("prs_with_one_sticky", r.get("prs", 0)) == r.get("prs", 0) for r in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
