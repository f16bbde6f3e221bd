"""No process that parses a stranger's files starts with a secret in its environment (issue 40): a
process with threads, as `serve`'s workers are, checks a config through the real bounded path; the
check's child, the forkserver it forks from and multiprocessing's resource tracker are read through
/proc/<pid>/environ, as anyone on the host could."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SECRETS = {"HF_TOKEN": "hf_ENVprobeHFtoken0123456789", "GITHUB_TOKEN": "ghs_ENVprobeGitHubToken0123",
           "DRAFTGUARD_GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----ENVprobeKey",
           "DRAFTGUARD_GITHUB_WEBHOOK_SECRET": "ENVprobeGitHubWebhookSecret",
           "DRAFTGUARD_HUB_WEBHOOK_SECRET": "ENVprobeHubWebhookSecret",
           "DRAFTGUARD_QUEUE_URL": "redis://:ENVprobeRedisPassword@127.0.0.1:6399/0"}
SCRIPT = """
import json, os, sys, threading
from multiprocessing import forkserver, resource_tracker
threading.Thread(target=threading.Event().wait, daemon=True).start()  # a worker's other threads
from draftguard import bounded
from draftguard.check.run import check
from draftguard.snapshot import load_snapshot
report = check([load_snapshot(sys.argv[1])])
child = bounded._THREAD.child
pids = {"check child": child.proc.pid, "forkserver": forkserver._forkserver._forkserver_pid,
        "resource tracker": resource_tracker._resource_tracker._pid}
environ = {name: open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace") for name, pid in pids.items()}
seen = child.run(os.getenv, "HF_TOKEN")
print(json.dumps({"errors": [e.message for e in report.errors], "environ": environ, "child_sees": seen}))
"""


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_the_check_child_its_forkserver_and_the_resource_tracker_start_without_secrets():
    env = {**os.environ, **SECRETS, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "examples/qwen3-swa-drafter")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["errors"] == []  # the check ran
    assert answer["child_sees"] is None
    for name, environ in answer["environ"].items():
        assert environ and "PATH=" in environ, name  # the file was read
        for key, value in SECRETS.items():
            assert value not in environ, (name, key)
