"""A cold light-check job of the GitHub Action, from installing the action to the comment posted.

Each round does what action.yml does on a fresh runner, timed phase by phase:
  1. install uv with pip into a scratch folder (``pip install --target DIR uv==X``),
  2. ``uv venv`` and ``uv pip install -c constraints.txt "<action>[action]"`` (the base install plus
     PyGithub; no torch),
  3. ``draftguard action`` on a pull request event: a git checkout whose head changes a config.json,
     the light check of head and base, annotations, step summary, outputs, and the sticky comment
     posted to a fake GitHub API on loopback.
Package caches (pip's and uv's) are warmed by one untimed install first: the target is "with the
package cache warm". Asserts that torch is not installed in the action's environment.

Baselines, in the same run:
  - the install as the lead first wrote it, ``python -m venv`` + ``pip install -c constraints.txt``
    (pip cache warm), timed ``--pip-rounds`` times: what uv saves;
  - in the same environment, warm: a bare ``draftguard check`` of the head config against
    ``draftguard action`` (which checks head and base and posts the comment).

    python bench/bench_action.py [--rounds 3] [--pip-rounds 1]
"""

from __future__ import annotations

import argparse
import json
import re
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.github import FakeGitHub  # noqa: E402

TOKEN = "ghp_benchtoken0123456789"
REPO = "acme/drafter"
TARGET_SECONDS = 30.0
UV_VERSION = re.search(r"UV_VERSION: (\S+)", (ROOT / "action.yml").read_text()).group(1)


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def make_checkout(tmp: Path) -> tuple[Path, str, str]:
    work = tmp / "work"
    work.mkdir()
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@example.com", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@example.com")
    drafter = json.loads((ROOT / "examples/qwen3-swa-drafter/config.json").read_text())
    (work / "drafter").mkdir()
    (work / "drafter/config.json").write_text(json.dumps(dict(drafter, use_sliding_window=True), indent=2))
    sh(["git", "init", "-q", "-b", "main"], cwd=work)
    sh(["git", "add", "-A"], cwd=work)
    sh(["git", "commit", "-q", "-m", "base"], cwd=work, env=env)
    base = sh(["git", "rev-parse", "HEAD"], cwd=work).stdout.strip()
    (work / "drafter/config.json").write_text(json.dumps(drafter, indent=2))
    sh(["git", "commit", "-q", "-am", "head"], cwd=work, env=env)
    head = sh(["git", "rev-parse", "HEAD"], cwd=work).stdout.strip()
    return work, base, head


def install(venv: Path, tools: Path) -> tuple[float, float]:
    """As action.yml does: pip installs uv into a scratch folder, uv makes the venv and installs."""
    started = time.perf_counter()
    sh([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--target", str(tools),
        f"uv=={UV_VERSION}"])
    got_uv = time.perf_counter()
    uv = str(tools / "bin/uv")
    sh([uv, "venv", "--quiet", "--python", sys.executable, str(venv)])
    sh([uv, "pip", "install", "--quiet", "--python", str(venv / "bin/python"), "-c", str(ROOT / "constraints.txt"),
        f"{ROOT}[action]"])
    return got_uv - started, time.perf_counter() - got_uv


def install_pip(venv: Path) -> float:
    """The baseline: a venv with its own pip, ``pip install -c constraints.txt``."""
    started = time.perf_counter()
    sh([sys.executable, "-m", "venv", str(venv)])
    sh([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
        "-c", str(ROOT / "constraints.txt"), f"{ROOT}[action]"])
    return time.perf_counter() - started


def run_job(venv: Path, work: Path, base: str, head: str, api: FakeGitHub, tmp: Path, number: int) -> float:
    api.add_pull(REPO, number, head=head, base=base, changed=[])
    event = tmp / f"event-{number}.json"
    event.write_text(json.dumps({
        "action": "opened", "number": number, "repository": {"full_name": REPO},
        "pull_request": {"number": number, "head": {"sha": head, "repo": {"full_name": REPO}},
                         "base": {"sha": base, "ref": "main", "repo": {"full_name": REPO}}}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "INPUT_", "VIRTUAL_ENV", "PYTHON"))}
    env.update({
        "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event),
        "GITHUB_REPOSITORY": REPO,
        "GITHUB_API_URL": api.url, "GITHUB_STEP_SUMMARY": str(tmp / "summary.md"),
        "GITHUB_OUTPUT": str(tmp / "output.txt"), "GITHUB_SHA": head, "GITHUB_BASE_REF": "main",
        "RUNNER_TEMP": str(tmp), "HF_HUB_OFFLINE": "1",
        "INPUT_MODE": "check", "INPUT_COMMENT": "true", "INPUT_GITHUB_TOKEN": TOKEN,
    })
    started = time.perf_counter()
    done = subprocess.run([str(venv / "bin/draftguard"), "action"], cwd=work, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 1 or len(api.comments_on(REPO, number)) != 1:
        raise SystemExit(f"the job did not fail on the drafter's findings and comment once: rc={done.returncode}\n"
                         f"{done.stdout}\n{done.stderr}")
    return elapsed


def baseline_check(venv: Path, work: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run([str(venv / "bin/draftguard"), "check", "drafter/config.json", "--format", "json"],
                          cwd=work, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    if done.returncode not in (0, 1):
        raise SystemExit(f"draftguard check failed: {done.stderr}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pip-rounds", type=int, default=1, help="rounds of the pip baseline install (0: skip)")
    args = parser.parse_args()
    api = FakeGitHub(token=TOKEN).start()
    api.add_repo(REPO)
    tmp_root = Path(tempfile.mkdtemp(prefix="draftguard-bench-action-"))
    try:
        work, base, head = make_checkout(tmp_root)
        print("warming the package caches (untimed installs) ...", flush=True)
        install(tmp_root / "warm", tmp_root / "warm-tools")
        if args.pip_rounds:
            install_pip(tmp_root / "warm-pip")
        for d in ("warm", "warm-tools", "warm-pip"):
            shutil.rmtree(tmp_root / d, ignore_errors=True)
        rows = []
        for i in range(args.rounds):
            venv, tools = tmp_root / f"venv-{i}", tmp_root / f"tools-{i}"
            t_uv, t_install = install(venv, tools)
            has_torch = subprocess.run([str(venv / "bin/python"), "-c",
                                        "import importlib.util,sys; sys.exit(importlib.util.find_spec('torch') is not None)"]
                                       ).returncode != 0
            if has_torch:
                raise SystemExit("torch was installed into the action's environment")
            t_job = run_job(venv, work, base, head, api, tmp_root, 100 + 2 * i)
            # Both warm (modules compiled by the first run), so the ratio compares the work, not compiling.
            t_base = baseline_check(venv, work)
            t_warm = run_job(venv, work, base, head, api, tmp_root, 101 + 2 * i)
            total = t_uv + t_install + t_job
            rows.append((t_uv, t_install, t_job, total, t_base, t_warm))
            print(f"round {i + 1}: pip install uv {t_uv:.1f} s, uv venv + install {t_install:.1f} s, action to comment "
                  f"{t_job:.1f} s (cold), total {total:.1f} s; warm: action {t_warm:.1f} s, bare check {t_base:.1f} s",
                  flush=True)
            shutil.rmtree(venv)
            shutil.rmtree(tools)
        pip_times = []
        for i in range(args.pip_rounds):
            pip_times.append(install_pip(tmp_root / "pip-venv"))
            shutil.rmtree(tmp_root / "pip-venv")
            print(f"pip baseline {i + 1}: python -m venv + pip install -c constraints.txt: {pip_times[-1]:.1f} s", flush=True)
        med = [statistics.median(col) for col in zip(*rows)]
        install_s = med[0] + med[1]
        print()
        print(f"cold light-check job (median of {args.rounds}, package caches warm, no torch installed):")
        print(f"  pip install uv {med[0]:.1f} s + uv venv/install {med[1]:.1f} s + draftguard action {med[2]:.1f} s "
              f"= {med[3]:.1f} s (target <= {TARGET_SECONDS:.0f} s: {'met' if med[3] <= TARGET_SECONDS else 'MISSED'})")
        if pip_times:
            pip_s = statistics.median(pip_times)
            print(f"  install baseline, pip: {pip_s:.1f} s against {install_s:.1f} s with uv ({pip_s / install_s:.1f}x); "
                  f"the job with pip would take {pip_s + med[2]:.1f} s")
        print(f"  warm, same environment: bare `draftguard check` {med[4]:.1f} s; `draftguard action` (head and base, "
              f"comment posted) {med[5]:.1f} s = {med[5] / med[4]:.2f}x the bare check")
    finally:
        api.stop()
        shutil.rmtree(tmp_root, ignore_errors=True)


if __name__ == "__main__":
    main()
