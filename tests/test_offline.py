"""No Hub reachable: `draftguard check`, `accept` and `audit`, run as real processes against a loopback
port nothing listens on (HF_HUB_OFFLINE off), each print one line and exit 2 at once, instead of
huggingface_hub's five retries (about 23 s, two log lines each). A name that cannot be a Hub repo id
is refused before any request.

Time is judged against a baseline in the same run: the same command refused for a bad name (the same
imports, no network). The gap is what the dead Hub costs; the absolute bound is loose for a loaded
machine, and the figures are printed (pytest -s) for the closing note.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.hub import FakeHub

REPO_ROOT = Path(__file__).resolve().parents[1]
GAP = 5.0  # seconds a dead Hub may cost over the same command refused without a request
LOOSE = 20.0  # the whole command, on a loaded machine (the goal is < 10 s; before: 25-29 s)


def _dead_endpoint() -> str:
    """A loopback port that refuses connections: bound, then closed."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _env(endpoint: str, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_OFFLINE", "HF_HUB_OFFLINE")}
    env.update({"HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0", "HF_HUB_CACHE": str(cache), "HF_TOKEN": "",
                "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONPATH": str(REPO_ROOT)})
    return env


def _run(env: dict[str, str], *args: str, cwd: Path = REPO_ROOT) -> tuple[int, list[str], float]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "draftguard", *args], env=env, capture_output=True, text=True,
                          timeout=120, cwd=cwd)
    took = time.perf_counter() - started
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()], took


@pytest.fixture(scope="module")
def dead(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("offline")
    return _env(_dead_endpoint(), tmp / "hf-cache"), tmp


@pytest.mark.parametrize("args, refused", [
    (("check", "Qwen/Qwen3-8B"), ("check", "acme/a--b")),
    (("accept", "--target", "Qwen/Qwen3-8B", "--drafter", "z-lab/Qwen3-8B-DFlash"),
     ("accept", "--target", "Qwen/Qwen3-8B", "--drafter", "nope")),
    (("audit", "--org", "X", "--no-progress"), ("audit", "--org", "a/b", "--no-progress")),
], ids=["check", "accept", "audit"])
def test_an_unreachable_hub_is_one_line_and_exit_2_at_once(dead, args, refused):
    env, tmp = dead
    rc, lines, took = _run(env, *args, cwd=tmp)
    base_rc, base_lines, baseline = _run(env, *refused, cwd=tmp)
    print(f"\n{' '.join(args)}: {took:.1f} s (the same command refused without a request: {baseline:.1f} s)")
    assert rc == 2, lines
    assert len(lines) == 1, lines
    [line] = lines
    assert line.startswith("draftguard: the Hub at http://127.0.0.1:") and "cannot be reached" in line, line
    assert "connection refused" in line and "Traceback" not in line
    # The fix is the error's hint, on the same line (every surface shows an error's hint).
    fix = "Hint: check the network or HF_ENDPOINT"
    assert line.endswith(fix if args[0] == "audit" else fix + ", or set HF_HUB_OFFLINE=1 to work from the local cache")
    assert base_rc == 2 and len(base_lines) == 1
    assert took - baseline < GAP, (took, baseline)
    assert took < LOOSE


def test_an_audit_of_a_list_file_against_an_unreachable_hub_is_one_line(dead):
    env, tmp = dead
    repos = tmp / "repos.txt"
    repos.write_text("acme/a\nacme/b\n")
    rc, lines, took = _run(env, "audit", str(repos), "--no-progress", "--out", str(tmp / "out"), cwd=tmp)
    assert rc == 2 and len(lines) == 1, lines
    assert "cannot be reached" in lines[0] and "nothing was checked" in lines[0]
    assert took < LOOSE


def test_a_local_drafter_whose_target_is_on_an_unreachable_hub_is_one_line_at_once(dead):
    env, tmp = dead
    drafter = REPO_ROOT / "examples" / "qwen3-swa-drafter"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "draftguard", "check", str(drafter), "--target", "Qwen/Qwen3-8B",
                           "--format", "json"], env=env, capture_output=True, text=True, timeout=120, cwd=tmp)
    took = time.perf_counter() - started
    print(f"\nlocal drafter, --target on a dead Hub: {took:.1f} s")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, lines
    assert "Qwen/Qwen3-8B@main/config.json: the Hub cannot be reached" in lines[0]
    assert json.loads(done.stdout)["errors"][0]["source"] == str(drafter)  # the report still comes
    assert took < LOOSE


@pytest.mark.parametrize("endpoint", ["dead", "http://draftguard-no-such-host.invalid"], ids=["refused", "no-dns"])
def test_a_target_from_the_settings_on_an_unreachable_hub_is_named_with_its_file_and_line(dead, tmp_path, endpoint):
    # Issue 42: `target:` of .draftguard.yml went past the one question to the Hub (five retries,
    # 25-50 s of log lines) and was then blamed on --target, which nobody passed.
    env, _ = dead
    if endpoint != "dead":
        env = {**env, "HF_ENDPOINT": endpoint}
    repo = tmp_path / "model-repo"
    (repo / ".git").mkdir(parents=True)  # the settings' root: a repository
    shutil.copytree(REPO_ROOT / "examples" / "qwen3-swa-drafter", repo / "drafter")
    (repo / ".draftguard.yml").write_text("# the drafter's target\nfail_on: error\ntarget: Qwen/Qwen3-8B\n")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "draftguard", "check", "drafter", "--format", "json"], env=env,
                          capture_output=True, text=True, timeout=120, cwd=repo)
    took = time.perf_counter() - started
    print(f"\nlocal drafter, settings target on a dead Hub ({endpoint}): {took:.1f} s")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, lines
    assert "Retrying" not in done.stderr
    assert lines[0].startswith("draftguard: target from `target:` of .draftguard.yml line 3: Qwen/Qwen3-8B@main"), lines
    assert "--target" not in lines[0].split("(or pass")[0]
    assert took < LOOSE


def test_an_audit_in_offline_mode_is_refused_in_one_line(tmp_path):
    """Before: every repo failed as unreachable, was retried with backoff, and the run ended green."""
    with FakeHub() as hub:
        repos = tmp_path / "repos.txt"
        repos.write_text("acme/a\nacme/b\n")
        env = {**_env(hub.endpoint, tmp_path / "hf-cache"), "HF_HUB_OFFLINE": "1"}
        rc, lines, _ = _run(env, "audit", str(repos), "--no-progress", "--out", str(tmp_path / "out"), cwd=tmp_path)
        assert rc == 2 and len(lines) == 1, lines
        assert "offline mode" in lines[0] and "nothing was checked" in lines[0]
        assert hub.requests == []


def test_a_stopped_fake_hub_is_out_of_reach_too(tmp_path):
    """The Hub that answered a moment ago and went away (its keep-alive connections dropped)."""
    hub = FakeHub({"acme/tiny": {"main": {"config.json": b'{"model_type": "qwen3"}'}}}).start()
    endpoint = hub.endpoint
    hub.stop()
    rc, lines, _ = _run(_env(endpoint, tmp_path / "hf-cache"), "check", "acme/tiny", cwd=tmp_path)
    assert rc == 2 and len(lines) == 1 and "cannot be reached" in lines[0], lines


@pytest.mark.parametrize("args, said", [
    (("check", "acme/a--b"), "acme/a--b: not a folder, and not a Hub repo id for the target"),
    (("check", "acme/x", "--target", "acme/..t"), "acme/..t: not a folder, and not a Hub repo id for the target"),
    (("accept", "--target", "acme/t", "--drafter", "nope"), "nope: not a folder, and not a Hub repo id for the drafter"),
    (("accept", "--target=-bad/t", "--drafter", "acme/d"), "-bad/t: not a folder, and not a Hub repo id"),
    (("audit", "--org", "a/b", "--no-progress"), "--org 'a/b': not a Hub user or organization name"),
])
def test_a_name_that_cannot_be_a_repo_id_is_refused_before_any_request(tmp_path, args, said):
    with FakeHub() as hub:
        rc, lines, _ = _run(_env(hub.endpoint, tmp_path / "hf-cache"), *args, cwd=tmp_path)
        assert rc == 2 and len(lines) == 1, lines
        assert said in lines[0]
        assert hub.requests == []  # not even the probe


# --- the one reading of the Hub's errors, on real answers of the fake Hub -------------------------------

from tests.fakes import fake_hub  # noqa: E402,F401  (a fixture)
from tests.fakes.hub import Fault  # noqa: E402
from tests.fakes import raised as _raised  # noqa: E402


def test_hub_problem_reads_each_failure_the_hub_gives(fake_hub):
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url

    from draftguard.hub_access import hub_problem

    fake_hub.add("acme/open", {"config.json": b"{}"})
    fake_hub.add("acme/gated", {"config.json": b"{}"})
    fake_hub.gated.add("acme/gated")
    api = HfApi(endpoint=fake_hub.endpoint)

    def head(repo: str, name: str = "config.json", revision: str = "main", timeout: float = 10):
        return lambda: get_hf_file_metadata(hf_hub_url(repo, name, revision=revision, endpoint=fake_hub.endpoint),
                                            timeout=timeout)

    fake_hub.fail("GET", r"^/api/models/acme/open/revision/main$", 429, retry_after=7)
    limited = hub_problem(_raised(lambda: api.model_info("acme/open", revision="main")))
    assert (limited.kind, limited.status, limited.wait, limited.transient) == ("rate-limited", 429, 7.0, True)
    assert "wait 7 s" in limited.message and "\n" not in limited.message

    fake_hub.fail("GET", r"^/api/models/acme/open/revision/main$", 401)
    assert hub_problem(_raised(lambda: api.model_info("acme/open", revision="main"))).kind == "denied"
    fake_hub.fail("GET", r"^/api/models/acme/open/revision/main$", 503)
    assert hub_problem(_raised(lambda: api.model_info("acme/open", revision="main"))).kind == "server-error"
    assert hub_problem(_raised(head("acme/gated"))).kind == "gated"
    assert hub_problem(_raised(head("acme/nowhere"))).kind == "not-found"
    assert hub_problem(_raised(head("acme/open", revision="nope"))).kind == "revision-not-found"
    assert hub_problem(_raised(head("acme/open", "missing.json"))).kind == "entry-not-found"

    fake_hub.file_faults.append(Fault("*", r"^/acme/open/resolve/.*/config\.json$", 504, 1, hang=2.0))
    assert hub_problem(_raised(head("acme/open", timeout=0.5))).kind == "timeout"

    endpoint = fake_hub.endpoint
    fake_hub.stop()
    gone = hub_problem(_raised(lambda: HfApi(endpoint=endpoint).model_info("acme/open", revision="main")))
    assert gone.kind == "unreachable" and gone.message == "the Hub cannot be reached (connection refused)"
