"""The text view (`--format text`, the default): every finding json has, causes before their
symptoms, wording that fits each rule, and bad input named as a reader would name it."""

from __future__ import annotations

import io
import json
from pathlib import Path

from draftguard.check.findings import Finding, Report, Severity, TargetResult
from draftguard.cli import main
from draftguard.report.terminal import render_text

ROOT = Path(__file__).resolve().parents[1]
SWA = ROOT / "examples" / "qwen3-swa-drafter"
PAIR = ROOT / "examples" / "dflash-pair" / "drafter"


def text_and_json(capsys, target: Path) -> tuple[str, dict]:
    main(["check", str(target), "--fail-on", "never", "--format", "json"])
    data = json.loads(capsys.readouterr().out)
    main(["check", str(target), "--fail-on", "never"])
    return capsys.readouterr().out, data


def blocks(text: str) -> dict[str, str]:
    """Each finding's printed block, by rule id (a block starts at its severity line)."""
    out: dict[str, str] = {}
    rule = None
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 2 and words[0] in ("error", "warning", "info") and words[1].startswith("DG"):
            rule = words[1]
            out[rule] = ""
        elif rule and line.startswith("          "):
            out[rule] += line.strip() + " "
        else:
            rule = None
    return out


def test_every_finding_json_has_is_in_the_text_view(capsys):
    # The DG100 finding is filed against the drafter's .draftguard.yml, not its config.json.
    text, data = text_and_json(capsys, PAIR)
    rules = {f["rule"] for f in data["findings"]}
    assert "DG100" in rules
    assert rules <= set(blocks(text))
    # The location may wrap at the terminal's width (a long checkout path): read the block's words.
    assert ".draftguard.yml:1" in "".join(blocks(text)["DG100"].split())


def test_a_finding_no_target_owns_is_shown_under_its_own_file():
    stray = Finding("DG100", Severity.INFO, "target", "a", "b", "elsewhere/.draftguard.yml", 1, "named elsewhere")
    target = TargetResult("x", "x/config.json", None, "qwen3", "Qwen3Config", findings=[stray])
    out = io.StringIO()
    render_text(Report("5.24.0", targets=[target]), out)
    assert "elsewhere/.draftguard.yml" in out.getvalue() and "named elsewhere" in out.getvalue()


def test_the_cause_is_printed_before_the_symptom_that_refers_to_it(capsys):
    text, data = text_and_json(capsys, SWA)
    # json keeps the report's order (errors by line): the symptom's line 19 comes first there.
    assert [f["rule"] for f in data["findings"]][:2] == ["DG005", "DG001"]
    assert text.index("DG001 value-overridden") < text.index("DG005 sliding-layer-runs-full")
    flat = " ".join(text.split())  # rich wraps messages at the console's width, between any two words
    assert flat.index("DG001 value-overridden") < flat.index("see the `sliding_window` finding")


def test_file_to_model_code_only_on_rules_about_config_values(capsys):
    text, _ = text_and_json(capsys, PAIR)
    found = blocks(text)
    for rule in ("DG100", "DG124", "DG117"):
        assert "file -> model code" not in found[rule], found[rule]
    text, _ = text_and_json(capsys, SWA)
    assert "file -> model code: 2048 -> null" in blocks(text)["DG001"]


def test_an_empty_file_is_called_empty(tmp_path, capsys):
    (tmp_path / "config.json").write_text("")
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "empty file" in err and "Expecting value" not in err
    assert str(tmp_path / "config.json") in err


def test_a_folder_without_config_names_the_folder(tmp_path, capsys):
    (tmp_path / "README.md").write_text("no config here\n")
    assert main(["check", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: no config.json in this folder" in err
    assert str(tmp_path / "config.json") not in err


def _attention_block(text: str) -> list[str]:
    """The lines of the per-engine effective-attention block, one per engine (wrapped lines joined)."""
    lines = text.splitlines()
    start = lines.index("  effective attention, by what serves it")
    out: list[str] = []
    for line in lines[start + 1:]:
        if not line.startswith("    "):
            break
        if line.startswith("     ") and out:  # a wrapped continuation: more spaces than a label's indent
            out[-1] += " " + line.strip()
        else:
            out.append(" ".join(line.split()))
    return out


def test_each_engine_gets_an_effective_attention_line_beside_transformers(capsys, monkeypatch):
    monkeypatch.delenv("DRAFTGUARD_VLLM_PYTHON", raising=False)
    mistral = ROOT / "tests" / "data" / "healthy" / "mistral-7b-v0.1.json"
    main(["check", str(mistral), "--engine", "sglang==0.5.23", "--fail-on", "never"])
    lines = _attention_block(capsys.readouterr().out)
    assert lines[0].startswith("transformers ") and lines[0].endswith("sliding(4096) at layers 0-31")
    assert lines[1:] == ["SGLang 0.5.23 (light tier) full at layers 0-31"]  # SGLang drops the window
    main(["check", str(mistral), "--engine", "sglang==0.5.23", "--format", "json", "--fail-on", "never"])
    [view] = json.loads(capsys.readouterr().out)["targets"][0]["engines"]
    assert view["engine"] == "SGLang 0.5.23" and view["windows"] == [None] * 32
    # The incident: transformers runs full attention, each vLLM runner and SGLang refuse, in their words.
    main(["check", str(SWA), "--engine", "vllm==0.32.0,sglang==0.5.23", "--fail-on", "never"])
    lines = _attention_block(capsys.readouterr().out)
    assert lines[0].endswith("full at layers 0-4") and len(lines) == 4
    assert lines[1].startswith("vLLM 0.32.0, V1 runner (light tier) refuses to serve it:")
    assert "mixed sliding/full dflash drafts" in lines[1]
    assert lines[2].startswith("vLLM 0.32.0, V2 runner") and "requires a window size" in lines[2]
    assert lines[3].startswith("SGLang 0.5.23") and "require config.sliding_window" in lines[3]


def test_without_engines_no_engine_attention_block(capsys):
    main(["check", str(SWA), "--fail-on", "never"])
    assert "by what serves it" not in capsys.readouterr().out


def test_the_sticky_comment_puts_the_cause_first_and_no_value_column_on_drafter_rules():
    # The markdown the bots and the Action post reads in the same order as the text view (issue 26).
    from draftguard.check.run import check as check_targets
    from draftguard.report.comment import render_light_section

    examples = Path(__file__).resolve().parent.parent / "examples"
    body = render_light_section(check_targets([str(examples / "qwen3-swa-drafter")]), fail_on="error")
    assert body.index("DG001 value-overridden") < body.index("DG005 sliding-layer-runs-full")
    body = render_light_section(check_targets([str(examples / "dflash-pair" / "drafter")]), fail_on="error")
    rows = [line for line in body.splitlines() if line.startswith("| :") and " DG1" in line]
    assert rows, body  # the pair's drafter has drafter findings (DG100, DG117, DG124)
    for row in rows:
        assert row.split(" | ")[5].strip() == "", row  # the config.json → model code column is empty


def test_a_log_gets_no_trailing_spaces(tmp_path):
    # Before (issue 42): rich padded every drawn line to 80 columns, so a CI log carried trailing spaces.
    import os
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("FORCE_COLOR", None)
    done = subprocess.run([sys.executable, "-m", "draftguard", "check", str(SWA), "--fail-on", "never"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and "DG005" in done.stdout
    padded = [line for line in done.stdout.splitlines() if line != line.rstrip()]
    assert padded == []
    buf = io.StringIO()  # the same for any stream that is not a terminal
    report = Report(transformers_version="5.24.0")
    render_text(report, buf)
    assert buf.getvalue() == "0 error(s), 0 warning(s), 0 info in 0 config(s) (transformers 5.24.0)\n"


def test_a_log_keeps_each_long_path_on_one_line(tmp_path):
    # Before: rich wrapped at 80 columns in a log too, so a path longer than the width was cut in two
    # ("drafters\n/a/config.json", ".draftgu\nard.yml:3"): neither grep nor a click found it, and
    # test_settings_rules failed under pytest-xdist's longer temporary folders.
    deep = tmp_path / ("a-folder-whose-name-alone-is-longer-than-half-of-the-eighty-columns" * 2) / "drafter"
    deep.mkdir(parents=True)
    for name in ("config.json",):
        (deep / name).write_text((SWA / name).read_text())
    buf = io.StringIO()
    from draftguard.check.run import check
    render_text(check([str(deep)]), buf)
    assert str(deep / "config.json") in buf.getvalue().splitlines()[0]
    assert "DG005" in buf.getvalue()
