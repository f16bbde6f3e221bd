"""The README's audit demo: ``python -m tests.fakes.fleet -- COMMAND`` from the base install (no
pytest), with the fake Hub up for exactly as long as COMMAND runs, and a port it cannot have
reported at once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run the module as `python -m tests.fakes.fleet` does, in a process where pytest cannot be imported.
NO_PYTEST = ("import runpy, sys; sys.modules['pytest'] = None; sys.argv = ['fleet'] + sys.argv[1:]; "
             "runpy.run_module('tests.fakes.fleet', run_name='__main__', alter_sys=True)")

# The command run against the fleet: lists its models over HTTP and exits 5, so the test sees that
# the fleet was up, that HF_ENDPOINT pointed at it, and that the command's exit code comes back.
CHILD = ("import json, os, sys, urllib.request; "
         "models = json.load(urllib.request.urlopen(os.environ['HF_ENDPOINT'] + '/api/models', timeout=10)); "
         "print(len(models), os.environ['HF_HUB_CACHE']); sys.exit(5)")


def fleet(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run([sys.executable, "-c", NO_PYTEST, *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_fleet_serves_a_command_without_pytest():
    done = fleet("--", sys.executable, "-c", CHILD)
    assert done.returncode == 5, done.stderr
    count, cache = done.stdout.split()
    assert int(count) >= 300
    assert not Path(cache).exists()  # the fresh cache went with the server
    assert "fake Hub with" in done.stderr


def test_a_port_it_cannot_have_is_one_line_and_exit_2_at_once():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = fleet("--port", str(port), "--", sys.executable, "-c", "raise SystemExit(0)")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert f"127.0.0.1:{port}" in line and "Traceback" not in done.stderr
    assert time.monotonic() - started < 30  # refused before the fleet is built, not after a timeout


def test_the_readme_demo_runs_the_audit_through_the_fleet_not_beside_it():
    """No server left in the background to die unseen: each demo line is one `fleet -- audit` command,
    on a list file that is shipped."""
    readme = (ROOT / "README.md").read_text()
    block = readme[readme.index("## Audit a fleet"):readme.index("## Acceptance test")]
    lines = [line.split("#")[0].strip() for line in block.split("```bash")[1].split("```")[0].splitlines()]
    lines = [line for line in lines if line]
    assert lines and all(line.startswith("python -m tests.fakes.fleet -- draftguard audit ") for line in lines)
    for line in lines:
        assert (ROOT / line.split()[6]).is_file(), line
    assert "&" not in block.split("```bash")[1].split("```")[0]
