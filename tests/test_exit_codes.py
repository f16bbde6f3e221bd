"""Every exit code the README and docs/ document, one test per code, for `check` and `fix` (and the
small commands): each run as users run it, in a real process with this checkout first on the path.

0 nothing at or above --fail-on (fix: nothing left and nothing pending); 1 something is (fix: a
finding left with no safe fix, or a fix pending in diff mode); 2 bad input or usage, one line, no
traceback; 3 a bug, here an exception raised from inside a dependency (a transformers whose import
fails), in one line naming DRAFTGUARD_DEBUG.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3-swa-drafter"
HEALTHY = ROOT / "tests" / "data" / "healthy" / "qwen3-8b.json"
COMPOSE = ROOT / "tests" / "data" / "launch" / "docker-compose.yml"


def run(*args: str, cwd: Path = ROOT, path: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAFTGUARD_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path, str(ROOT)) if p)
    return subprocess.run([sys.executable, "-m", "draftguard", *args], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=180)


@pytest.fixture()
def healthy(tmp_path: Path) -> Path:
    folder = tmp_path / "healthy"
    folder.mkdir()
    shutil.copy(HEALTHY, folder / "config.json")
    return folder


@pytest.fixture()
def incident(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EXAMPLE, tmp_path / "incident"))


@pytest.fixture()
def broken_transformers(tmp_path: Path) -> str:
    """A folder whose ``transformers`` fails to import: what a broken install does, met in a real process."""
    package = tmp_path / "broken" / "transformers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('raise RuntimeError("a broken transformers install")\n')
    return str(package.parent)


def one_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


# --- check -------------------------------------------------------------------------------------------


def test_check_exits_0_when_nothing_is_at_or_above_fail_on(healthy):
    done = run("check", str(healthy))
    assert done.returncode == 0, done.stderr


def test_check_exits_1_when_a_finding_is_at_or_above_fail_on(incident):
    done = run("check", str(incident))
    assert done.returncode == 1 and "DG001" in done.stdout


def test_check_exits_2_for_bad_input_in_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen3",,}')
    done = run("check", str(tmp_path), "--format", "json")
    assert done.returncode == 2 and "invalid JSON" in one_line(done)
    done = run("check", "--fail-on", "sometimes", str(tmp_path))  # usage
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_check_exits_3_for_a_bug_in_one_line(healthy, broken_transformers):
    done = run("check", str(healthy), path=broken_transformers)
    assert done.returncode == 3
    assert "internal error (RuntimeError: a broken transformers install)" in one_line(done)
    assert "DRAFTGUARD_DEBUG=1" in done.stderr


# --- fix ---------------------------------------------------------------------------------------------


def test_fix_exits_0_when_nothing_is_left_or_pending(healthy, incident):
    done = run("fix", str(healthy))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr
    assert run("fix", str(incident), "--write").returncode == 0  # fixed in place: nothing left
    done = run("fix", str(incident))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


def test_fix_diff_mode_exits_1_while_a_fix_is_pending(incident):
    # Before (issue 42): exit 0 with the diff on stdout, so `draftguard fix` in CI passed a broken file.
    done = run("fix", str(incident))
    assert done.returncode == 1 and '+  "use_sliding_window": true,' in done.stdout


def test_fix_exits_1_listing_each_unfixable_launch_finding(tmp_path):
    # Before (issue 42): nothing printed, exit 0, while `check` fails the same file.
    assert run("check", "--launch-file", str(COMPOSE.relative_to(ROOT))).returncode == 1
    done = run("fix", "--launch-file", str(COMPOSE.relative_to(ROOT)))
    assert done.returncode == 1 and done.stdout == ""
    [line] = [line for line in done.stderr.splitlines() if ": not fixed:" in line]
    assert line.startswith("tests/data/launch/docker-compose.yml:17: not fixed: DG300 on `--speculative-config` "
                           "(error): no known fix")


def test_fix_exits_2_for_bad_input_in_one_line(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "qwen3",,}')
    done = run("fix", str(tmp_path))
    assert done.returncode == 2 and "invalid JSON" in one_line(done)
    done = run("fix", "--launch-file", str(tmp_path / "missing.sh"))
    assert done.returncode == 2 and "missing.sh" in one_line(done)


def test_fix_exits_3_for_a_bug_in_one_line(incident, broken_transformers):
    done = run("fix", str(incident), path=broken_transformers)
    assert done.returncode == 3 and "internal error" in one_line(done)


def test_fix_honours_ignore_as_check_does(incident):
    # Before (issue 42): `fix` fixed (and exited on) findings .draftguard.yml's `ignore:` silences.
    (incident / ".draftguard.yml").write_text(
        "ignore:\n"
        "  - {rule: DG001, key: sliding_window, reason: the window is off on purpose}\n"
        "  - {rule: sliding-layer-runs-full, reason: the window is off on purpose}\n")
    assert run("check", str(incident)).returncode == 0
    done = run("fix", str(incident))
    assert (done.returncode, done.stdout) == (0, ""), done.stderr


# --- the small commands ------------------------------------------------------------------------------


def test_explain_and_settings_check_exit_0_or_2(tmp_path):
    assert run("explain", "DG005").returncode == 0
    done = run("explain", "DG999")
    assert done.returncode == 2 and "DG999" in one_line(done)
    (tmp_path / ".draftguard.yml").write_text("fail_on: error\n")
    assert run("settings", "check", str(tmp_path / ".draftguard.yml")).returncode == 0
    (tmp_path / ".draftguard.yml").write_text("fial_on: error\n")
    done = run("settings", "check", str(tmp_path / ".draftguard.yml"))
    assert done.returncode == 2 and ".draftguard.yml:1" in one_line(done)
