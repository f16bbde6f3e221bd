"""The pre-commit hook (.pre-commit-hooks.yaml), run for real with `pre-commit try-repo`: pre-commit
installs this repository into a virtualenv with pip (from PyPI, or the machine's pip configuration)
and runs the hook on a model repository's changed files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from draftguard.cli import changed_targets

ROOT = Path(__file__).resolve().parents[1]
HOOKS = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())


def test_the_hook_is_declared_for_the_model_files_the_check_reads():
    [hook] = HOOKS
    assert hook["id"] == "draftguard" and hook["language"] == "python"
    assert hook["entry"] == "draftguard check --files"
    import re

    files = re.compile(hook["files"])
    for path in ("config.json", "drafters/a/config.json", "m/generation_config.json", "tokenizer_config.json",
                 "m/model.safetensors.index.json", ".draftguard.yml"):
        assert files.search(path), path
    for path in ("package.json", "myconfig.json", "config.json.bak", "tsconfig.json"):
        assert not files.search(path), path


def test_changed_files_stand_for_the_config_beside_them(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "lonely").mkdir()
    got = changed_targets([str(tmp_path / "m" / "generation_config.json"), str(tmp_path / "m" / "config.json"),
                           str(tmp_path / "lonely" / "tokenizer_config.json")])
    assert got == [str(tmp_path / "m" / "config.json")]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


def test_pre_commit_try_repo_passes_a_good_config_and_fails_a_bad_one(tmp_path):
    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which("pre-commit")
    if pre_commit is None:
        pytest.skip("pre-commit is not installed (it comes with the `test` extra)")
    repo = tmp_path / "model-repo"
    (repo / "good").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "data" / "healthy" / "qwen3-8b.json", repo / "good" / "config.json")
    shutil.copytree(ROOT / "examples" / "qwen3-swa-drafter", repo / "bad")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home"), "PYTHONPATH": ""}

    def try_repo(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run([pre_commit, "try-repo", str(ROOT), "draftguard", "--files", *files], cwd=repo,
                              env=env, capture_output=True, text=True, timeout=1200)

    good = try_repo("good/config.json")
    if good.returncode != 0 and ("Could not find a version" in good.stdout + good.stderr
                                 or "No matching distribution" in good.stdout + good.stderr):
        pytest.skip("pre-commit could not install the hook's dependencies (no PyPI and no cache): "
                    + (good.stdout + good.stderr)[-300:])
    assert good.returncode == 0, good.stdout + good.stderr
    assert "draftguard (model configs)" in good.stdout and "Passed" in good.stdout
    bad = try_repo("bad/config.json", "good/config.json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Failed" in bad.stdout and "DG001" in bad.stdout and "DG005" in bad.stdout
