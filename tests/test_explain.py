"""`draftguard explain RULE`: each rule's section of docs/rules.md, from the copy the package ships."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from draftguard.check.findings import RULES
from draftguard.check.rule_docs import explain, rule_sections, rules_markdown
from draftguard.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_rules_doc_is_docs_rules_md():
    # draftguard/data/rules.md is a link to docs/rules.md: one source, which the wheel carries as a file.
    assert rules_markdown() == (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert (ROOT / "draftguard" / "data" / "rules.md").is_symlink()


@pytest.mark.parametrize("rule_id", sorted(RULES))
def test_every_rule_explains_itself_from_its_section(rule_id, capsys):
    assert main(["explain", rule_id.lower()]) == 0
    out = capsys.readouterr().out
    rule = RULES[rule_id]
    assert out.startswith(f"### {rule_id} {rule.name} ({rule.severity.value})")
    assert rule_sections()[rule_id] in out
    assert "### " not in out.split("\n", 1)[1]  # only this rule's section, not the next one's


def test_the_incidents_rule_says_what_why_and_the_fix(capsys):
    assert main(["explain", "DG005"]) == 0
    out = capsys.readouterr().out
    assert "1.1%" in out and "Fix:" in out and "docs/rules.md#dg005-sliding-layer-runs-full-error" in out


def test_a_rule_is_found_by_its_name_and_a_shared_name_shows_each_rule():
    assert explain("value-overridden").startswith("### DG001 value-overridden (error)")
    shared = re.findall(r"^### (DG\d{3})", explain("engine-refuses"), re.M)
    assert shared == sorted(r.id for r in RULES.values() if r.name == "engine-refuses") and len(shared) == 2


@pytest.mark.parametrize("query, near", [("DG0055", "DG005"), ("value-overriden", "DG001 value-overridden"),
                                         ("sliding-layers-run-full", "DG005 sliding-layer-runs-full")])
def test_an_unknown_rule_is_exit_2_with_the_nearest(query, near, capsys):
    assert main(["explain", query]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"no rule `{query}`" in err and near in err


@pytest.mark.parametrize("query, near", [("DG07", "did you mean DG007?"), ("dg5", "did you mean DG005?"),
                                         ("DG999", "(rules: DG001-")])
def test_an_id_missing_its_zero_padding_gets_its_own_id_never_a_neighbour(query, near, capsys):
    # Before (issue 42): DG07 -> "did you mean DG407?" (difflib's tie broken alphabetically), DG999 -> DG409.
    assert main(["explain", query]) == 2
    err = capsys.readouterr().err
    assert near in err and "did you mean DG4" not in err


def test_a_settings_rule_missing_its_zero_padding_gets_its_own_id(tmp_path, capsys):
    (tmp_path / "s.yml").write_text("rules:\n  DG07: off\n")
    assert main(["settings", "check", str(tmp_path / "s.yml")]) == 2
    assert "s.yml:2: `rules`: no rule `DG07`; did you mean `DG007`?" in capsys.readouterr().err


def test_explain_runs_as_a_command():
    done = subprocess.run([sys.executable, "-m", "draftguard", "explain", "DG012"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("### DG012 switch-left-out (warning)")


def test_the_readmes_explain_commands_run_as_written(capsys):
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## `draftguard explain`, pre-commit")[1].split("```bash\n")[1].split("```")[0]
    commands = re.findall(r"draftguard (explain [\w-]+)", block)
    assert commands == ["explain DG005", "explain sliding-layer-runs-full"]
    for command in commands:
        assert main(command.split()) == 0
        assert capsys.readouterr().out.startswith("### DG005 sliding-layer-runs-full (error)")
