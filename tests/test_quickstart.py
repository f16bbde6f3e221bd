"""README Quickstart command 1 under a Python older than the package supports: one line, before pip.

pip's own answer on 3.9 is a ResolutionImpossible screen. No 3.9 is installed here, so a fake
``python3`` on PATH runs the guard's code in this interpreter with ``sys.version_info`` set to what it
claims, and records any other call (``-m venv``) instead of running it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def readme_command_1() -> str:
    """The line after ``# 1.`` in the Quickstart block, as a user copies it (scripts/test_pythons.sh
    reads it the same way)."""
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("## Quickstart")
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("# 1."))
    return lines[first + 1]


def fake_python(bin_dir: Path, version: tuple[int, int, int], log: Path) -> None:
    claimed = ".".join(map(str, version))
    patch = (f"import sys; sys.version_info = {version + ('final', 0)!r}; sys.version = '{claimed} (fake)'; "
             "exec(compile(sys.argv[1], '<string>', 'exec'))")
    script = bin_dir / "python3"
    script.write_text(f'#!/bin/sh\nif [ "$1" = "-c" ]; then exec {sys.executable} -c "{patch}" "$2"; fi\n'
                      f'echo "python3 $*" >> {log}\nexit 3\n')
    script.chmod(0o755)


def run_with(version: tuple[int, int, int], tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    fake_python(bin_dir, version, log)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    run = subprocess.run(["bash", "-c", readme_command_1()], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=60)
    return run, log


def test_python_3_9_gets_one_line_and_no_venv_or_pip(tmp_path):
    run, log = run_with((3, 9, 18), tmp_path)
    assert run.returncode == 1
    assert run.stderr.splitlines() == ["draftguard needs Python 3.10+; this python3 is 3.9.18"]
    assert not log.exists() and not (tmp_path / ".venv").exists()


@pytest.mark.parametrize("version", [(3, 10, 0), (3, 13, 1)])
def test_a_supported_python_passes_the_guard_on_to_the_venv(tmp_path, version):
    run, log = run_with(version, tmp_path)
    assert run.returncode == 3 and run.stderr == ""  # the fake's venv stub stopped the chain
    assert log.read_text().splitlines() == ["python3 -m venv .venv"]


def test_the_pythons_script_still_recognises_command_1():
    """scripts/test_pythons.sh rewrites command 1 per interpreter; with no interpreter to run it only
    checks the command's shape (exit 1 with "changed shape" when it no longer matches)."""
    run = subprocess.run(["bash", "scripts/test_pythons.sh"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "DRAFTGUARD_PYTHONS": "9.99"}, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "Python 9.99: not on this machine, skipped" in run.stdout
