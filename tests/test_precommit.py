"""The pre-commit hook (.pre-commit-hooks.yaml), run for real with `pre-commit try-repo`: pre-commit
installs this repository into a virtualenv with pip (from PyPI, or the machine's pip configuration)
and runs the hook on a model repository's changed files."""

from __future__ import annotations

import os
import re
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


def _constraints() -> dict[str, list[str]]:
    """constraints.txt's pins by package name (a name pinned per Python version has several lines)."""
    pins: dict[str, list[str]] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pins.setdefault(re.split(r"[=<>;\s]", line, maxsplit=1)[0].lower().replace("_", "-"), []).append(line)
    return pins


def test_the_hooks_environment_is_pinned_to_constraints():
    # Issue 42: the hook ran transformers 5.25.0 while CI ran 5.24.0; the hook now installs the pins.
    [hook] = HOOKS
    deps = hook["additional_dependencies"]
    pins = _constraints()
    by_name: dict[str, list[str]] = {}
    for dep in deps:
        by_name.setdefault(re.split(r"[=<>;\s]", dep, maxsplit=1)[0].lower().replace("_", "-"), []).append(dep)
    # Every base dependency of the package (and what transformers loads models' files with) is pinned...
    block = (ROOT / "pyproject.toml").read_text().split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
    base = {d.lower().replace("_", "-") for d in re.findall(r'^\s*"([A-Za-z0-9_.-]+)', block, re.M)}
    assert {"transformers", "huggingface-hub", "pyyaml"} <= base, base
    assert base | {"tokenizers", "safetensors"} <= set(by_name), sorted(base - set(by_name))
    # ...to exactly constraints.txt's line(s) for it, Python markers included.
    for name, lines in by_name.items():
        assert sorted(lines) == sorted(pins[name]), name


def _readme_pre_commit_config() -> str:
    readme = (ROOT / "README.md").read_text()
    [block] = [b.split("```", 1)[0] for b in readme.split("```yaml\n")[1:] if "hooks: [{id: draftguard}]" in b]
    return block


def test_the_readmes_snippet_runs_in_a_model_repository(tmp_path):
    # The README's .pre-commit-config.yaml, pasted into a model repository with the clone's path and a
    # commit of it filled in, run by pre-commit as a maintainer runs it: the hook installs (with the
    # pinned transformers), passes a healthy config and fails the incident's drafter config.
    pre_commit = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which("pre-commit")
    if pre_commit is None:
        pytest.skip("pre-commit is not installed (it comes with the `test` extra)")
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout: the snippet pins a commit of the clone")
    config = _readme_pre_commit_config()
    assert "/path/to/draftguard" in config and "rev: <" in config, config
    config = re.sub(r"rev: <[^>]*>", f"rev: {head.stdout.strip()}", config.replace("/path/to/draftguard", str(ROOT)))
    repo = tmp_path / "model-repo"
    (repo / "good").mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "data" / "healthy" / "qwen3-8b.json", repo / "good" / "config.json")
    shutil.copytree(ROOT / "examples" / "qwen3-swa-drafter", repo / "bad")
    (repo / ".pre-commit-config.yaml").write_text(config)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    home = tmp_path / "pre-commit-home"
    env = {**os.environ, "PRE_COMMIT_HOME": str(home), "PYTHONPATH": ""}

    def run(*files: str) -> subprocess.CompletedProcess:
        return subprocess.run([pre_commit, "run", "--files", *files], cwd=repo, env=env, capture_output=True,
                              text=True, timeout=1200)

    good = run("good/config.json")
    if good.returncode != 0 and ("Could not find a version" in good.stdout + good.stderr
                                 or "No matching distribution" in good.stdout + good.stderr):
        pytest.skip("pre-commit could not install the hook's dependencies (no PyPI and no cache): "
                    + (good.stdout + good.stderr)[-300:])
    assert good.returncode == 0, good.stdout + good.stderr
    assert "draftguard (model configs)" in good.stdout and "Passed" in good.stdout
    bad = run("bad/config.json", "good/config.json")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "Failed" in bad.stdout and "DG001" in bad.stdout and "DG005" in bad.stdout
    # The hook's own environment runs constraints.txt's transformers, not the newest on PyPI.
    [python] = home.glob("repo*/py_env-*/bin/python")
    got = subprocess.run([str(python), "-c", "import transformers; print(transformers.__version__)"],
                         capture_output=True, text=True, check=True).stdout.strip()
    want = [line for line in _constraints()["transformers"]
            if (sys.version_info >= (3, 11)) == (">=" in line)][0].split(";")[0].split("==")[1]
    assert got == want
