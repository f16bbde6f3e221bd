"""scripts/new_releases.py, which the scheduled engine-releases workflow runs first: the releases on the
index that draftguard has no data for, read from a fake index's JSON API on loopback (PyPI's shape)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from draftguard.check.engines.specs import known, newest

ROOT = Path(__file__).resolve().parents[1]


def _files(day: str, yanked: bool = False) -> list[dict]:
    return [{"filename": "x.whl", "upload_time_iso_8601": f"{day}T10:00:00Z", "yanked": yanked}]


@pytest.fixture()
def index():
    newest_vllm, newest_sglang = newest("vllm"), newest("sglang")
    pages = {
        "vllm": {"releases": {newest_vllm: _files("2026-11-16"), "99.0.0": _files("2026-12-01"),
                              "99.1.0rc1": _files("2026-12-02"), "99.2.0": _files("2026-12-03", yanked=True),
                              "99.3.0": [], "0.0.1": _files("2020-01-01")}},
        "sglang": {"releases": {newest_sglang: _files("2026-11-20")}},
        "transformers": {"releases": {"5.24.0": _files("2026-11-20"), "99.0.0": _files("2026-12-01")}},
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            name = self.path.strip("/").split("/")[1]
            body = json.dumps(pages[name]).encode() if name in pages else b"{}"
            self.send_response(200 if name in pages else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "new_releases.py"), *args], capture_output=True,
                          text=True, timeout=60)


def test_new_releases_are_the_ones_past_the_newest_known(index):
    done = run("--index", index, "--format", "json")
    assert done.returncode == 1, done.stderr
    found = {(r["package"], r["version"]) for r in json.loads(done.stdout)}
    # older than known, a pre-release, yanked-only and file-less releases are left out
    assert found == {("vllm", "99.0.0"), ("transformers", "99.0.0")}
    assert "0.0.1" not in done.stdout and newest("vllm") in known()["vllm"]
    pre = json.loads(run("--index", index, "--format", "json", "--pre").stdout)
    assert ("vllm", "99.1.0rc1") in {(r["package"], r["version"]) for r in pre}


def test_nothing_new_exits_0_and_an_index_out_of_reach_exits_2(index):
    done = run("--index", index, "--package", "sglang")
    assert done.returncode == 0 and "no new release of sglang" in done.stdout
    down = run("--index", "http://127.0.0.1:9")
    assert down.returncode == 2 and "could not be read" in down.stderr and "Traceback" not in down.stderr
