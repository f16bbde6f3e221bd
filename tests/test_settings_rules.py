"""`.draftguard.yml`'s `rules:` and `ignore:`: applied once in check.run for every surface, shown in the
output, and read by the CLI from the checked files' repository, as the Action reads it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from draftguard.check.run import check
from draftguard.cli import main
from draftguard.settings import parse_settings
from draftguard.snapshot import BadInput

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3-swa-drafter"  # DG001 on sliding_window, DG005 on layer_types

SETTINGS = """\
fail_on: warning
rules:
  DG005: warning
ignore:
  - rule: DG001
    path: "drafters/*/config.json"
    key: sliding_window
    reason: trained without the window; kept for reference
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository holding the example drafter at drafters/a and the settings at its root."""
    shutil.copytree(EXAMPLE, tmp_path / "drafters" / "a")
    (tmp_path / ".draftguard.yml").write_text(SETTINGS)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


def test_rules_and_ignore_change_the_report_and_say_where(repo):
    settings = parse_settings(SETTINGS)
    report = check([str(repo / "drafters" / "a")], settings=settings, settings_root=str(repo))
    assert [(f.rule, f.severity.value) for f in report.findings] == [("DG005", "warning")]
    assert report.silenced == [
        "1 finding silenced by .draftguard.yml:5 (DG001 on `sliding_window`): trained without the window; kept for reference",
        "1 finding of DG005 set to warning by .draftguard.yml:3",
    ]
    assert report.to_json()["silenced"] == report.silenced


def test_off_by_id_or_name_and_an_ignore_elsewhere_silences_nothing(repo):
    off = parse_settings("rules:\n  sliding-layer-runs-full: off\n  DG001: false\n")
    report = check([str(repo / "drafters" / "a")], settings=off, settings_root=str(repo))
    assert report.findings == []
    assert report.silenced == ["1 finding silenced by .draftguard.yml:3 (DG001 value-overridden: off)",
                               "1 finding silenced by .draftguard.yml:2 (DG005 sliding-layer-runs-full: off)"]
    elsewhere = parse_settings("ignore:\n  - {rule: DG001, path: 'other/*', reason: not here}\n")
    report = check([str(repo / "drafters" / "a")], settings=elsewhere, settings_root=str(repo))
    assert {f.rule for f in report.findings} == {"DG001", "DG005"} and report.silenced == []


@pytest.mark.parametrize("text, message", [
    ("ignore:\n  - rule: DG001\n    key: sliding_window\n", ".draftguard.yml:2: an `ignore` entry needs a `reason`"),
    ("ignore:\n  - {rule: DG001, reason: x, file: a}\n", "unknown key `file` in an `ignore` entry"),
    ("rules:\n  DG005: loud\n", ".draftguard.yml:2: `rules` maps a rule id or name to one of off, info, warning, error"),
])
def test_malformed_rule_settings_name_their_line(text, message):
    with pytest.raises(BadInput) as caught:
        parse_settings(text)
    assert message in str(caught.value)


def test_a_rule_that_does_not_exist_is_bad_input_before_any_work(repo):
    with pytest.raises(BadInput, match=r"\.draftguard\.yml:2: `ignore`: no rule `DG0001`; did you mean `DG001`\?"):
        check([str(repo / "drafters" / "a")], settings=parse_settings("ignore:\n  - rule: DG0001\n    reason: x\n"))


def test_the_cli_reads_the_repositorys_settings_from_any_folder(repo, capsys, monkeypatch, tmp_path_factory):
    # Run from elsewhere: every key comes from the checked files' repository, fail_on included.
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    target = str(repo / "drafters" / "a")
    assert main(["check", target]) == 1  # fail_on: warning, and DG005 is a warning now
    out = capsys.readouterr().out
    assert "1 finding silenced by" in out and ".draftguard.yml:5" in out and "1 warning(s)" in out.replace("\n", " ")
    assert main(["check", target, "--fail-on", "error"]) == 0  # the flag wins over the file
    capsys.readouterr()
    assert main(["check", target, "--format", "json"]) == 1
    captured = capsys.readouterr()
    assert len(json.loads(captured.out)["silenced"]) == 2 and "silenced by" in captured.err


def test_the_cli_reads_engines_from_the_same_file(repo, capsys, monkeypatch, tmp_path_factory):
    (repo / ".draftguard.yml").write_text("engines: [vllm==0.32.0]\n")
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    main(["check", str(repo / "drafters" / "a"), "--format", "json", "--fail-on", "never"])
    out = json.loads(capsys.readouterr().out)
    assert out["targets"][0].get("engines"), "engines: from the repository's settings were not read"


def test_settings_are_never_read_above_the_git_root(repo, tmp_path, capsys, monkeypatch):
    inner = repo / "drafters" / "a"
    (inner / ".git").mkdir()  # a repository of its own: the outer file is not its settings
    monkeypatch.chdir(tmp_path)
    assert main(["check", str(inner)]) == 1
    assert "silenced" not in capsys.readouterr().out
