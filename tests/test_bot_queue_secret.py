"""`serve --workers N` on a Redis queue with a password (issue 40, B6): the workers it starts get the
queue's URL through their environment, never on their command line, which anyone on the host reads
(/proc/<pid>/cmdline, ps). A real `draftguard serve` against a real redis-server --requirepass."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("redis")
pytest.importorskip("huey")

from tests.fakes.github import free_port  # noqa: E402
from tests.test_bot_process import bot_env  # noqa: E402
from tests.test_bot_redis import REDIS  # noqa: E402

PASSWORD = "B6probeRedisPassw0rd"
ROOT = Path(__file__).resolve().parent.parent


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


def talks_to(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP connection to ``port`` on loopback."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[2].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                return True
    return False


@pytest.mark.skipif(REDIS is None, reason="redis-server is not installed")
def test_serve_gives_its_workers_the_queue_password_outside_their_command_line(tmp_path):
    import redis

    port = free_port()
    server = subprocess.Popen([REDIS, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--save",
                               "", "--appendonly", "no", "--requirepass", PASSWORD],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port, password=PASSWORD)
    serve = None
    try:
        deadline = time.time() + 60  # redis-server's start, under load
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                assert time.time() < deadline
                time.sleep(0.05)
        env = {**bot_env("http://127.0.0.1:9"), "PYTHONPATH": str(ROOT),
               "DRAFTGUARD_QUEUE": f"redis://:{PASSWORD}@127.0.0.1:{port}/0"}  # the operator's way to give it
        serve = subprocess.Popen([sys.executable, "-m", "draftguard", "serve", "--port", str(free_port()),
                                  "--workers", "2"], env=env, cwd=tmp_path,
                                 stdout=subprocess.DEVNULL, stderr=open(tmp_path / "serve.log", "w"))
        deadline = time.time() + 60
        workers: list[int] = []
        while time.time() < deadline:  # the workers started and reached the queue with the password
            workers = [p for p in children(serve.pid) if b"worker" in Path(f"/proc/{p}/cmdline").read_bytes()]
            connected = [p for p in workers if talks_to(p, port)]
            if workers and connected:
                break
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
            time.sleep(0.2)
        assert workers and connected, (tmp_path / "serve.log").read_text()[-2000:]
        for pid in workers:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            assert b"draftguard" in cmdline and PASSWORD.encode() not in cmdline, cmdline
    finally:
        if serve is not None:
            serve.send_signal(signal.SIGTERM)
            try:
                serve.wait(20)
            except subprocess.TimeoutExpired:
                serve.kill()
        server.send_signal(signal.SIGTERM)
        server.wait(10)
