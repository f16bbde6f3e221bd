"""Benchmark of the audit's gatherer on the Redis queue: its CPU per second of waiting, with 1k and with
100k audit Jobs pending, the same stream of Jobs finishing in both.

Run:  python bench/bench_gatherer.py [--small 1000] [--large 100000] [--seconds 10] [--rate 50]

A real redis-server (started here) holds ``--small`` then ``--large`` pending audit Job records. A
feeder thread finishes ``--rate`` of them a second, as workers would (record, result, the run's
channel told); the gatherer (draftguard/audit/queue.py ``gather``) waits for them for ``--seconds``,
in a thread whose CPU time (``time.thread_time``) is measured, with the redis-server's CPU time
(/proc) and the commands it served in the same time (the feeder's included, the same in every run).
The baseline, in the same run, is the gatherer before issue 41: it read every pending Job's record
every 0.1 s (kept here as ``poll_gather``). Figures: per wall second, the gatherer's CPU seconds, the
Redis server's CPU seconds and commands, at each queue length, and the ratio large/small (1.0: the
cost does not grow with the queue).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_audit import redis_server  # noqa: E402
from draftguard.audit.queue import _result_key, gather  # noqa: E402
from draftguard.audit.repo import AuditOptions  # noqa: E402
from draftguard.jobs import DONE, FINISHED, Job, Queue  # noqa: E402

CHANNEL = "audit-bench"


def poll_gather(queue: Queue, channel: str, pending: dict, options: AuditOptions, take, *, timeout: float) -> None:
    """The gatherer before issue 41 (its loop as it was): every 0.1 s, read every pending Job."""
    deadline = time.monotonic() + timeout
    while pending:
        for job_id in list(pending):
            job = queue.get(job_id)
            if job is None or job.state not in FINISHED:
                continue
            pending.pop(job_id)
            raw = queue.peek(_result_key(job_id))
            for data, skipped in json.loads(raw)["records"]:
                take(data, skipped)
            queue.forget(_result_key(job_id))
        if pending:
            if time.monotonic() > deadline:
                raise TimeoutError
            time.sleep(0.1)


def fill(queue: Queue, count: int) -> dict[str, list]:
    """``count`` pending audit Job records, written in pipelined batches (the same HSETNX ``Queue.add``
    sends one at a time)."""
    conn, key = queue.store.conn, queue.store.result_key
    pending = {}
    for start in range(0, count, 5000):
        pipe = conn.pipeline(transaction=False)
        for n in range(start, min(count, start + 5000)):
            job = Job(id=f"audit-bench-{n}", source="audit", kind="audit", repo=f"o/m{n}", number=n, notify=CHANNEL)
            pipe.hsetnx(key, f"job:{job.id}", job.to_bytes())
            pending[job.id] = []
        pipe.execute()
    return pending


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used, from /proc."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(url: str, count: int, seconds: float, rate: float, gatherer, server: int) -> tuple[float, float, float]:
    """Per wall second of ``gatherer`` waiting on ``count`` pending Jobs: its CPU seconds, the Redis
    server's CPU seconds, and the commands the server served."""
    queue = Queue(url)
    queue.store.conn.flushdb()
    pending = fill(queue, count)
    worker = Queue(url)
    ids = list(pending)
    stop = threading.Event()

    def feed() -> None:  # finishes Jobs as the workers would: result stored, record finished, channel told
        n = 0
        while not stop.wait(1 / rate) and n < len(ids):
            job = worker.get(ids[n])
            worker.put(_result_key(job.id), b'{"records": [], "version_problems": {}}')
            worker._finish(job, DONE, "audited 0 repos")
            n += 1

    cpu = [0.0]

    def run() -> None:
        start = time.thread_time()
        options = AuditOptions(versions=["x"], host_version="x")
        try:
            gatherer(queue, CHANNEL, pending, options, lambda *a: None, timeout=seconds)
        except TimeoutError:
            pass
        cpu[0] = time.thread_time() - start

    commands = queue.store.conn.info("stats")["total_commands_processed"]
    redis_cpu = server_cpu(server)
    feeder = threading.Thread(target=feed)
    feeder.start()
    began = time.monotonic()
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    wall = time.monotonic() - began
    stop.set()
    feeder.join()
    redis_cpu = server_cpu(server) - redis_cpu
    commands = queue.store.conn.info("stats")["total_commands_processed"] - commands
    return cpu[0] / wall, redis_cpu / wall, commands / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=50.0, help="Jobs finished a second")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    server = redis_server(work)
    if server is None:
        sys.exit("redis-server is not installed")
    proc, url = server
    try:
        rows = []
        for name, gatherer in (("blocking pop (now)", gather), ("poll every job (before)", poll_gather)):
            small = measure(url, args.small, args.seconds, args.rate, gatherer, proc.pid)
            large = measure(url, args.large, args.seconds, args.rate, gatherer, proc.pid)
            rows.append((name, small, large))
        print(f"per second of gathering, {args.rate:.0f} jobs finishing a second, {args.seconds:.0f} s each")
        print(f"| gatherer | figure | {args.small:,} pending | {args.large:,} pending | ratio |")
        print("|---|---|---|---|---|")
        for name, small, large in rows:
            for n, (what, fmt) in enumerate((("gatherer CPU s", "{:.4f}"), ("redis-server CPU s", "{:.4f}"),
                                             ("Redis commands", "{:,.0f}"))):
                ratio = large[n] / small[n] if small[n] else float("nan")
                print(f"| {name} | {what} | {fmt.format(small[n])} | {fmt.format(large[n])} | x{ratio:.2f} |")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
