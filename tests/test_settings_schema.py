"""The settings file checked: the JSON Schema the package ships (and docs/ publishes) is made from
Settings, so a new key cannot be left out of it; `draftguard settings check` names the line and the
key a typo most likely meant; docs/settings.md documents every key."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from draftguard.cli import main
from draftguard.settings import INTERNAL, Settings, settings_schema

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "draftguard" / "data" / "draftguard.schema.json"
PUBLISHED = ROOT / "docs" / "draftguard.schema.json"


def test_the_shipped_and_published_schemas_are_the_one_settings_makes():
    # Regenerate both with: draftguard settings schema > draftguard/data/draftguard.schema.json (and docs/)
    made = settings_schema()
    assert json.loads(SHIPPED.read_text()) == made, "draftguard/data/draftguard.schema.json is stale"
    assert PUBLISHED.read_text() == SHIPPED.read_text(), "docs/draftguard.schema.json differs from the package's"


def test_the_schema_covers_exactly_the_fields_of_settings():
    keys = {f.name for f in fields(Settings)} - set(INTERNAL)
    schema = json.loads(SHIPPED.read_text())
    assert set(schema["properties"]) == keys and schema["additionalProperties"] is False
    assert all(schema["properties"][k]["description"] for k in keys), "a key without its line of help (settings.HELP)"


def test_every_key_is_documented_in_docs_settings_md():
    doc = (ROOT / "docs" / "settings.md").read_text()
    for f in fields(Settings):
        if f.name not in INTERNAL:
            assert f"| `{f.name}` |" in doc, f"{f.name} missing from docs/settings.md"


def test_the_schema_accepts_what_the_parser_accepts_and_refuses_a_typo():
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SHIPPED.read_text())
    good = yaml.safe_load((ROOT / "docs" / "settings.md").read_text().split("```yaml\n")[1].split("```")[0])
    jsonschema.validate(good, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"fial_on": "never"}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"ignore": [{"rule": "DG001"}]}, schema)  # a reason is required


@pytest.mark.parametrize("text, message", [
    ("fail_on: error\nfial_on: never\n", "bad.yml:2: unknown key `fial_on`; did you mean `fail_on`?"),
    ("transformers: 5.24.0\n", "bad.yml:1: `transformers` must be list, got str '5.24.0'"),
    ("ignore:\n  - {rule: DG001, reasn: x}\n", "bad.yml:2: unknown key `reasn` in an `ignore` entry; did you mean `reason`?"),
    ("rules:\n  DG001: warning\n  swich-left-out: off\n", "bad.yml:3: `rules`: no rule `swich-left-out`; did you mean `switch-left-out`?"),
    ("engines: [vlm==0.32.0]\n", "bad.yml"),
    # Before issue 42 each was valid, the last value winning: a gate silently relaxed.
    ("fail_on: error\ntransformers: [5.24.0]\nfail_on: never\n", "bad.yml:3: duplicate key `fail_on` (first on line 1)"),
    ("rules:\n  DG005: error\n  DG005: off\n", "bad.yml:3: duplicate key `DG005` (first on line 2)"),
    ("ignore:\n  - {rule: DG001, reason: a, reason: b}\n", "bad.yml:2: duplicate key `reason` (first on line 2)"),
])
def test_settings_check_is_exit_2_naming_the_line_and_the_nearest_key(tmp_path, capsys, text, message):
    (tmp_path / "bad.yml").write_text(text)
    assert main(["settings", "check", str(tmp_path / "bad.yml")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_settings_check_finds_the_repository_file(tmp_path, capsys, monkeypatch):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".draftguard.yml").write_text("fail_on: warning\nrules: {DG012: off}\n")
    (tmp_path / "drafter").mkdir()
    monkeypatch.chdir(tmp_path / "drafter")
    assert main(["settings", "check"]) == 0
    assert "valid (2 keys: fail_on, rules)" in capsys.readouterr().out


def test_the_readmes_settings_example_is_valid_settings():
    from draftguard.check.policy import validate
    from draftguard.settings import parse_settings

    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Settings: `.draftguard.yml`")[1].split("```yaml\n")[1].split("```")[0]
    settings = parse_settings(block)
    validate(settings)
    assert settings.rules == {"DG012": "off", "DG005": "warning"} and settings.ignore[0].reason
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(yaml.safe_load(block), json.loads(SHIPPED.read_text()))


def test_check_refuses_settings_with_a_duplicate_key(tmp_path, capsys):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".draftguard.yml").write_text("fail_on: error\nfail_on: never\n")
    (tmp_path / "config.json").write_text((Path(__file__).parent / "data/healthy/qwen3-8b.json").read_text())
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert ".draftguard.yml:2: duplicate key `fail_on` (first on line 1)" in err and err.count("\n") == 1
