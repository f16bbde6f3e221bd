"""`draftguard check` with no TARGET checks the repository it stands in (issue 42): every model
config.json git lists (tracked or not, .gitignore honoured), under `paths:` and less `exclude:`
of .draftguard.yml, and its `launch:` files; a folder of model folders stands for the models in it.
Before, both were exit 2 ("check needs a TARGET", "no config.json in this folder")."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from draftguard.cli import main

ROOT = Path(__file__).resolve().parents[1]
INCIDENT = ROOT / "examples" / "qwen3-swa-drafter" / "config.json"  # two errors
HEALTHY = ROOT / "tests" / "data" / "healthy" / "qwen3-8b.json"
DRAFTER = ROOT / "tests" / "data" / "real-drafters" / "medusa-vicuna-7b-v1.3" / "config.json"  # no model_type


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A model repository: two models, a drafter, a tool's config.json, an ignored copy."""
    top = tmp_path / "repo"
    for folder, source in [("models/broken", INCIDENT), ("models/fine", HEALTHY), ("drafters/medusa", DRAFTER),
                           ("build/stale", INCIDENT)]:
        (top / folder).mkdir(parents=True)
        shutil.copy(source, top / folder / "config.json")
    (top / "tools").mkdir()
    (top / "tools" / "config.json").write_text('{"indent": 2, "line_length": 100}\n')
    (top / ".gitignore").write_text("build/\n")
    subprocess.run(["git", "init", "-q", str(top)], check=True)
    subprocess.run(["git", "-C", str(top), "add", "models", ".gitignore"], check=True)  # drafters/ left untracked
    return top


def checked(capsys, *argv: str) -> tuple[int, list[str]]:
    code = main(["check", "--format", "json", "--fail-on", "error", *argv])
    out = capsys.readouterr().out
    return code, sorted(t["file"] for t in json.loads(out)["targets"]) if out else []


def test_no_target_checks_every_model_config_of_the_repository(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    code, files = checked(capsys)
    assert code == 1  # the broken model's errors
    assert files == ["drafters/medusa/config.json", "models/broken/config.json", "models/fine/config.json"]


def test_from_a_subfolder_it_is_still_the_whole_repository(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo / "models" / "fine")
    code, files = checked(capsys)
    assert code == 1 and files == ["../../drafters/medusa/config.json", "../broken/config.json", "config.json"]


def test_paths_and_exclude_in_the_settings_narrow_it(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    (repo / ".draftguard.yml").write_text("paths: [models]\n")
    assert checked(capsys) == (1, ["models/broken/config.json", "models/fine/config.json"])
    (repo / ".draftguard.yml").write_text("paths: [models]\nexclude: [models/broken]\n")
    assert checked(capsys) == (0, ["models/fine/config.json"])
    (repo / ".draftguard.yml").write_text("exclude: ['**/broken', drafters]\n")
    assert checked(capsys) == (0, ["models/fine/config.json"])
    (repo / ".draftguard.yml").write_text("exclude: models\n")
    assert main(["check"]) == 2
    assert ".draftguard.yml:1: `exclude` must be list" in capsys.readouterr().err


def test_a_folder_of_model_folders_checks_each_model(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    assert checked(capsys, "models") == (1, ["models/broken/config.json", "models/fine/config.json"])
    (repo / ".draftguard.yml").write_text("exclude: [models/broken]\n")
    assert checked(capsys, "models") == (0, ["models/fine/config.json"])


def test_no_model_anywhere_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "config.json").write_text('{"indent": 2}\n')
    monkeypatch.chdir(tmp_path)
    assert main(["check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no model config.json in" in err and "TARGET" in err
    assert main(["check", "tools"]) == 2  # a folder with none below it: the check says so, as before


def test_the_launch_files_of_the_settings_are_checked_beside_the_models(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo)
    (repo / "serve.sh").write_text("vllm serve models/fine --max-model-len 4096\n")
    (repo / ".draftguard.yml").write_text("paths: [models/fine]\nlaunch: [serve.sh]\n")
    assert checked(capsys) == (0, ["models/fine/config.json", "serve.sh"])
