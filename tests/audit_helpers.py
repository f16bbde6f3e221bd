"""Running ``draftguard audit`` as a real process against the fake Hub, for the audit tests and the
benchmark: the fleet, the command line, and reading back what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.fakes.hub import FakeHub

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass
class AuditProcess:
    """One finished audit: exit code, output, and the records of audit.jsonl by repo."""

    rc: int
    stdout: str
    stderr: str
    out: Path

    @property
    def records(self) -> dict[str, dict]:
        records = {}
        for line in (self.out / "audit.jsonl").read_text().splitlines():
            data = json.loads(line)
            records[data["repo"]] = data
        return records


def audit_env(hub: FakeHub, cache: Path, **extra: str) -> dict[str, str]:
    """The environment of an audit process talking to ``hub``: its own HF cache, one-second
    timeouts (so a stalled answer is a timeout, quickly), no token unless given."""
    env = {**os.environ, **hub.env(str(cache)), "HF_HUB_ETAG_TIMEOUT": "1", "HF_HUB_DOWNLOAD_TIMEOUT": "1",
           "PYTHONPATH": str(REPO_ROOT)}
    env.update(extra)
    return env


def audit_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "draftguard", "audit", *args]


def run_audit_process(hub: FakeHub, tmp: Path, *args: str, out: Path | None = None, timeout: float = 600,
                      **env: str) -> AuditProcess:
    out = out or tmp / "out"
    done = subprocess.run(audit_command(*args, "--out", str(out)), env=audit_env(hub, tmp / "hf-cache", **env),
                          capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    return AuditProcess(done.returncode, done.stdout, done.stderr, out)


def warning_rules(findings: list[dict]) -> set[str]:
    return {f["rule"] for f in findings if f["severity"] in ("error", "warning")}
