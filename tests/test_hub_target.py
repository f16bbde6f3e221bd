"""`draftguard check owner/name` against a fake Hub on loopback, through the real huggingface_hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.hub import FakeHub

ROOT = Path(__file__).resolve().parents[1]
BROKEN = (ROOT / "examples" / "qwen3-swa-drafter" / "config.json").read_bytes()
FIXED = json.dumps({**json.loads(BROKEN), "use_sliding_window": True}, indent=2).encode()
TOKEN = "hf_fake_secret_do_not_print_0123456789"


@pytest.fixture
def hub():
    with FakeHub({"acme/drafter": {"main": {"config.json": BROKEN}, "fixed": {"config.json": FIXED}}}) as fake:
        yield fake


def check(hub: FakeHub | None, cache: Path, *args: str, offline: bool = False) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAFTGUARD_", "HF_"))}
    if hub is not None:
        env.update(hub.env(str(cache)))
    else:  # the fake is gone: point at a closed port with the same cache
        env.update({"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HUB_CACHE": str(cache)})
    env["HF_TOKEN"] = TOKEN
    env["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "draftguard", "check", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def test_hub_repo_is_checked_at_a_revision(hub, tmp_path):
    broken = check(hub, tmp_path, "acme/drafter", "--format", "json")
    assert broken.returncode == 1, broken.stderr
    out = json.loads(broken.stdout)
    [finding] = [f for f in out["findings"] if f["key"] == "sliding_window"]
    assert finding["file"] == "acme/drafter@main/config.json" and finding["line"] == 37

    fixed = check(hub, tmp_path, "acme/drafter", "--revision", "fixed", "--format", "json")
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["summary"]["error"] == 0


def test_cached_repo_is_checked_offline(hub, tmp_path):
    assert check(hub, tmp_path, "acme/drafter").returncode == 1
    hub.stop()
    for offline in (True, False):  # explicit offline mode, and a Hub that no longer answers
        again = check(None, tmp_path, "acme/drafter", "--format", "json", offline=offline)
        assert again.returncode == 1, again.stderr
        assert json.loads(again.stdout)["summary"]["error"] == 2


def test_offline_with_nothing_cached_is_a_clear_error(tmp_path):
    proc = check(None, tmp_path, "acme/drafter", offline=True)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "cannot be reached" in proc.stderr and "not in the local cache" in proc.stderr


@pytest.mark.parametrize(
    "args, expected",
    [
        (("acme/missing",), "repo not found on the Hub"),
        (("acme/drafter", "--revision", "nope"), "revision 'nope' not found"),
    ],
)
def test_hub_errors_are_bad_input(hub, tmp_path, args, expected):
    proc = check(hub, tmp_path, *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert expected in proc.stderr


def test_rate_limit_is_reported_and_the_token_never_printed(hub, tmp_path):
    hub.status[("acme/drafter", "config.json")] = 429
    proc = check(hub, tmp_path, "acme/drafter", "--format", "json")
    assert proc.returncode == 2
    assert "HTTP 429" in proc.stderr and "rate limited" in proc.stderr
    assert TOKEN not in proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["errors"][0]["source"] == "acme/drafter"
