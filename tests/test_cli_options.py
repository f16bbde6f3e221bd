"""The options a linter's user expects (issue 42): `draftguard rules`, `check --select/--ignore`,
`--config FILE`, `--statistics`, `--output-file` and `--sarif-level`, each as a user runs it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from draftguard.check.findings import RULES
from draftguard.check.rule_docs import rule_sections
from draftguard.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3-swa-drafter"  # DG001 and DG005, both errors
HEALTHY = ROOT / "tests" / "data" / "healthy" / "qwen3-8b.json"  # two info findings, nothing louder


def check(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


# --- draftguard rules --------------------------------------------------------------------------------


def test_rules_lists_every_rule_with_its_name_level_and_summary(capsys):
    assert main(["rules"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(RULES)
    dg005 = lines[list(RULES).index("DG005")].split(None, 3)
    assert dg005 == ["DG005", "sliding-layer-runs-full", "error", RULES["DG005"].summary]


def test_rules_as_json_is_the_rule_table_docs_rules_md_documents(capsys):
    assert main(["rules", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == list(RULES)
    assert all(set(r) == {"id", "name", "level", "summary"} for r in rows)
    sections = rule_sections()
    for row in rows:  # each row is the heading of its section in docs/rules.md
        assert sections[row["id"]].startswith(f"### {row['id']} {row['name']} ({row['level']})"), row


# --- --select / --ignore -----------------------------------------------------------------------------


@pytest.mark.parametrize("argv, rules, code", [
    (["--select", "DG005"], {"DG005"}, 1),
    (["--select", "value-overridden"], {"DG001"}, 1),
    (["--select", "DG00"], {"DG001", "DG005"}, 1),  # a prefix
    (["--select", "DG3"], set(), 0),  # launch rules only: the config's findings are left out
    (["--ignore", "DG001,sliding-layer-runs-full"], set(), 0),
    (["--select", "DG0", "--ignore", "DG001"], {"DG005"}, 1),
])
def test_select_and_ignore_take_ids_names_and_prefixes(capsys, argv, rules, code):
    got, out, _ = check(capsys, str(EXAMPLE), "--format", "json", *argv)
    assert got == code
    assert {f["rule"] for f in json.loads(out)["findings"]} == rules


def test_select_and_ignore_say_what_they_left_out(capsys):
    code, out, _ = check(capsys, str(EXAMPLE), "--ignore", "DG0")
    assert code == 0 and "2 findings left out by --ignore" in out


@pytest.mark.parametrize("argv, message", [
    (["--select", "DG07"], "--select: no rule `DG07`; did you mean DG007?"),
    (["--ignore", "value-overriden"], "--ignore: no rule `value-overriden`; did you mean DG001 value-overridden?"),
    (["--select", "DG9"], "--select: no rule `DG9`"),
])
def test_a_selector_that_names_no_rule_is_exit_2_in_one_line(capsys, argv, message):
    code, out, err = check(capsys, str(EXAMPLE), *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err, err


# --- --config FILE -----------------------------------------------------------------------------------


def test_config_runs_under_a_settings_file_other_than_the_repositorys(tmp_path, capsys):
    case = Path(shutil.copytree(EXAMPLE, tmp_path / "repo" / "drafter"))
    (tmp_path / "repo" / ".git").mkdir()
    (tmp_path / "repo" / ".draftguard.yml").write_text("fail_on: error\n")
    assert check(capsys, str(case))[0] == 1
    other = tmp_path / "elsewhere" / "strict.yml"
    other.parent.mkdir()
    other.write_text("rules: {DG001: warning, DG005: warning}\nfail_on: error\n")
    code, out, err = check(capsys, str(case), "--config", str(other), "--format", "json")
    assert code == 0 and {f["severity"] for f in json.loads(out)["findings"]} == {"warning"}
    assert f"set to warning by {other}:1" in err
    code, out, err = check(capsys, str(case), "--config", str(tmp_path / "missing.yml"))
    assert code == 2 and "--config" in err and "missing.yml: no such file" in err
    other.write_text("fail_on: error\nfail_on: never\n")
    code, _, err = check(capsys, str(case), "--config", str(other))
    assert code == 2 and "strict.yml:2: duplicate key `fail_on`" in err


def test_fix_takes_config_too(tmp_path, capsys):
    case = Path(shutil.copytree(EXAMPLE, tmp_path / "drafter"))
    settings = tmp_path / "settings.yml"
    settings.write_text("rules: {DG001: off, DG005: off}\n")
    assert main(["fix", str(case), "--config", str(settings)]) == 0
    assert capsys.readouterr().out == ""


# --- --statistics, --output-file ---------------------------------------------------------------------


def test_statistics_counts_each_rule(capsys):
    code, out, _ = check(capsys, str(EXAMPLE), "--statistics")
    assert code == 1
    assert out == "1  DG001  value-overridden  (error)\n1  DG005  sliding-layer-runs-full  (error)\n"
    code, out, _ = check(capsys, str(EXAMPLE), "--statistics", "--format", "json")
    assert json.loads(out) == [{"rule": "DG001", "name": "value-overridden", "level": "error", "count": 1},
                               {"rule": "DG005", "name": "sliding-layer-runs-full", "level": "error", "count": 1}]
    code, out, err = check(capsys, str(EXAMPLE), "--statistics", "--format", "sarif")
    assert code == 2 and "--statistics prints text or json" in err


def test_output_file_takes_the_report_and_stdout_stays_empty(tmp_path, capsys):
    target = tmp_path / "report.json"
    code, out, _ = check(capsys, str(EXAMPLE), "--format", "json", "--output-file", str(target))
    assert code == 1 and out == ""
    assert json.loads(target.read_text())["summary"] == {"error": 2, "warning": 0, "info": 0}
    code, out, _ = check(capsys, str(EXAMPLE), "--output-file", str(tmp_path / "report.txt"))
    assert code == 1 and out == "" and "DG005" in (tmp_path / "report.txt").read_text()
    code, out, err = check(capsys, str(EXAMPLE), "--output-file", str(tmp_path / "no" / "such" / "r.json"))
    assert code == 2 and err.count("\n") == 1 and "--output-file" in err


# --- --sarif-level -----------------------------------------------------------------------------------


def test_sarif_carries_info_notes_only_when_asked(tmp_path, capsys):
    (tmp_path / "config.json").write_text(HEALTHY.read_text())
    code, out, _ = check(capsys, str(tmp_path), "--format", "sarif")
    assert code == 0 and json.loads(out)["runs"][0]["results"] == []  # before issue 42: two notes
    code, out, _ = check(capsys, str(tmp_path), "--format", "sarif", "--sarif-level", "info")
    assert {r["level"] for r in json.loads(out)["runs"][0]["results"]} == {"note"}
    code, out, _ = check(capsys, str(EXAMPLE), "--format", "sarif", "--sarif-level", "error")
    assert {r["ruleId"] for r in json.loads(out)["runs"][0]["results"]} == {"DG001", "DG005"}


@pytest.mark.parametrize("module", ["draftguard", "draftguard.cli"])
def test_both_module_forms_run_the_command_and_pass_its_exit_code(module, tmp_path):
    """`python -m draftguard.cli` used to import the module and exit 0 having done nothing."""
    import subprocess
    import sys

    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    run = subprocess.run([sys.executable, "-m", module, "check", str(bad)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert run.returncode == 2 and "config.json" in run.stderr, (run.returncode, run.stderr)
