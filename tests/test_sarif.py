"""`draftguard check --format sarif`: SARIF 2.1.0 as GitHub code scanning reads it, validated against
the official schema (tests/data/sarif, with its SOURCE note)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from draftguard.check.findings import RULES
from draftguard.cli import main

jsonschema = pytest.importorskip("jsonschema", reason="jsonschema comes with the `test` extra")

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "tests" / "data" / "sarif" / "sarif-schema-2.1.0.json").read_text())


def _sarif(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["check", *argv, "--format", "sarif"])
    return code, json.loads(capsys.readouterr().out)


def test_the_incident_as_sarif_is_valid_and_points_at_the_lines(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, log = _sarif(capsys, "examples/qwen3-swa-drafter")
    assert code == 1
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    [run] = log["runs"]
    driver = run["tool"]["driver"]
    assert log["version"] == "2.1.0" and driver["name"] == "draftguard"
    assert [r["id"] for r in driver["rules"]] == list(RULES)
    rule = driver["rules"][list(RULES).index("DG005")]
    assert rule["defaultConfiguration"]["level"] == "error" and "Fix:" in rule["help"]["markdown"]
    assert rule["helpUri"].endswith("/docs/rules.md#dg005-sliding-layer-runs-full-error")
    lines = {key: n for n, key in enumerate((ROOT / "examples/qwen3-swa-drafter/config.json").read_text().splitlines(), 1)}
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert set(by_rule) == {"DG001", "DG005"}
    dg001 = by_rule["DG001"]
    location = dg001["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == "examples/qwen3-swa-drafter/config.json"
    assert location["region"]["startLine"] == next(n for k, n in lines.items() if '"sliding_window"' in k)
    assert dg001["level"] == "error" and driver["rules"][dg001["ruleIndex"]]["id"] == "DG001"
    assert dg001["partialFingerprints"]["draftguardFinding/v1"]


def test_paths_are_relative_to_the_repository_root_from_any_folder(tmp_path, capsys, monkeypatch):
    shutil.copytree(ROOT / "examples" / "qwen3-swa-drafter", tmp_path / "models" / "a")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".draftguard.yml").write_text("rules: {DG005: warning}\n")
    monkeypatch.chdir(tmp_path / "models")
    _, log = _sarif(capsys, "a")
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    results = log["runs"][0]["results"]
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {"models/a/config.json"}
    assert {r["ruleId"]: r["level"] for r in results} == {"DG001": "error", "DG005": "warning"}
    [silenced] = log["runs"][0]["properties"]["silenced"]
    assert silenced.startswith("1 finding of DG005 set to warning by ") and silenced.endswith(".draftguard.yml:1")


def test_without_settings_paths_are_still_from_the_git_root(tmp_path, capsys, monkeypatch):
    shutil.copytree(ROOT / "examples" / "qwen3-swa-drafter", tmp_path / "models" / "a")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    monkeypatch.chdir(tmp_path / "models" / "a")
    _, log = _sarif(capsys, ".")
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in log["runs"][0]["results"]}
    assert uris == {"models/a/config.json"}


def test_a_file_that_cannot_be_checked_is_a_notification(tmp_path, capsys, monkeypatch):
    (tmp_path / "config.json").write_text("{not json")
    monkeypatch.chdir(tmp_path)
    code, log = _sarif(capsys, "config.json")
    assert code == 2
    jsonschema.Draft4Validator(SCHEMA).validate(log)
    [invocation] = log["runs"][0]["invocations"]
    assert invocation["executionSuccessful"] is False
    assert "invalid JSON" in invocation["toolExecutionNotifications"][0]["message"]["text"]
