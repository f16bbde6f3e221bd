"""`draftguard fix`: the smallest edit to config.json that ends a finding, proven by checking the
edited file again, with every untouched byte kept.

The incident's forms are each a test: the window with no switch (the shipped example), the window
with the switch false beside declared sliding layers, and the window alone. Every fix on the shipped
examples and the real-drafter corpus is checked again here, independently of the fixer, by
``draftguard check`` on a written copy.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from draftguard.check.findings import Finding, Severity
from draftguard.check.run import check as check_targets
from draftguard.cli import main
from draftguard.fix import fix_text, snapshot_checker
from draftguard.fix.proposals import propose
from draftguard.fix.text import Edit, apply_edits
from draftguard.snapshot import BadInput, load_snapshot

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3-swa-drafter"
DRAFTERS = ROOT / "tests" / "data" / "real-drafters"
REAL_CONFIGS = ROOT / "tests" / "data" / "real-configs"
ONE_LINE = '+  "use_sliding_window": true,'


def copy(src: Path, tmp_path: Path, name: str = "case") -> Path:
    dest = tmp_path / name
    shutil.copytree(src, dest)
    return dest


def changed_lines(diff: str) -> list[str]:
    return [line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]


def loud(findings) -> list[tuple[str, str]]:
    return sorted((f.rule, f.key) for f in findings if f.severity.value != "info")


# --- the incident ------------------------------------------------------------------------------------


def test_the_incident_fix_is_the_one_line_a_maintainer_would_write(tmp_path, capsys):
    case = copy(EXAMPLE, tmp_path)
    before = (case / "config.json").read_bytes()
    assert main(["fix", str(case)]) == 1  # a fix is pending: the diff
    out, err = capsys.readouterr()
    assert changed_lines(out) == [ONE_LINE]
    assert out.startswith(f"--- a{case}/config.json\n+++ b{case}/config.json\n")
    assert (case / "config.json").read_bytes() == before  # a diff only, without --write
    assert "DG001 on `sliding_window`, DG005 on `layer_types`" in err
    assert "layers 0-3 are declared sliding_attention" in err and "--prefer off" in err


def test_write_leaves_a_file_the_check_passes_and_every_other_byte_as_it_was(tmp_path, capsys):
    case = copy(EXAMPLE, tmp_path)
    before = (case / "config.json").read_text()
    assert main(["check", str(case)]) == 1
    assert main(["fix", str(case), "--write"]) == 0
    after = (case / "config.json").read_text()
    lines = before.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"use_cache"' in line) + 1  # its sorted place
    assert after == "".join(lines[:at] + ['  "use_sliding_window": true,\n'] + lines[at:])
    capsys.readouterr()
    assert main(["check", str(case)]) == 0
    assert "0 error(s), 0 warning(s), 0 info" in capsys.readouterr().out
    assert main(["fix", str(case)]) == 0  # nothing left to fix: no diff
    assert capsys.readouterr().out == ""


def test_prefer_off_declares_the_layers_full_and_drops_the_window(tmp_path, capsys):
    case = copy(EXAMPLE, tmp_path)
    assert main(["fix", str(case), "--prefer", "off", "--write"]) == 0
    raw = json.loads((case / "config.json").read_text())
    assert raw["layer_types"] == ["full_attention"] * 5 and "sliding_window" not in raw
    assert "use_sliding_window" not in raw
    assert "--prefer off" in capsys.readouterr().err
    assert main(["check", str(case)]) == 0


def _finding(rule: str, key: str, severity: Severity = Severity.ERROR) -> Finding:
    return Finding(rule, severity, key, None, None, "config.json", 1, "")


def test_a_switch_set_false_beside_declared_sliding_layers_is_turned_on():
    # Issue 23's agreement rule reports this form (its rule id may differ); the fix keys off the key.
    raw = {"sliding_window": 2048, "use_sliding_window": False,
           "layer_types": ["sliding_attention"] * 4 + ["full_attention"]}
    for rule, key in [("DG005", "layer_types"), ("DG001", "sliding_window"), ("DG012", "use_sliding_window")]:
        [candidate, *_], _ = propose(_finding(rule, key), raw)
        assert candidate.edits == [Edit("use_sliding_window", True, near="sliding_window")]
        assert "layers 0-3 are declared sliding_attention" in candidate.why


def test_a_window_alone_is_read_as_off_and_prefer_on_turns_it_on():
    raw = {"model_type": "qwen3", "sliding_window": 4096}
    [first, second], why = propose(_finding("DG006", "sliding_window", Severity.WARNING), raw, prefer="off")
    assert first.edits == [Edit("use_sliding_window", False, near="sliding_window")]
    assert second.edits == [Edit("sliding_window", remove=True)]
    # Issue 23 makes the window alone a warning: "off" by default, since no layer is declared sliding.
    [first, _], why = propose(_finding("DG013", "sliding_window", Severity.WARNING), raw)
    assert first.edits == [Edit("use_sliding_window", False, near="sliding_window")] and "not used" in why
    [on], why = propose(_finding("DG013", "sliding_window", Severity.WARNING), raw, prefer="on")
    assert on.edits == [Edit("use_sliding_window", True, near="sliding_window")] and "--prefer on" in why


def test_a_window_no_layer_uses_gets_no_fix_unless_asked():
    # DG113/DG006: which layers were trained to slide is not in the file; quieting it would hide it.
    raw = {"sliding_window": 2048, "max_window_layers": 5, "num_hidden_layers": 5}
    candidates, reason = propose(_finding("DG113", "sliding_window"), raw)
    assert candidates == [] and "which layers slide is not in the file" in reason


def _checker_that_wants(flag: bool):
    """A real engine run with a check that reports an error until `use_sliding_window` is ``flag``:
    the forms issue 23's agreement rule will report, whatever their rule id."""
    def check(text: str) -> list[Finding]:
        raw = json.loads(text)
        if raw.get("use_sliding_window") is flag:
            return []
        return [_finding("DG005", "layer_types")]
    return check


def test_the_engine_flips_a_false_switch_on_its_own_line_only():
    text = ('{\n    "layer_types": ["sliding_attention", "full_attention"],\n    "sliding_window": 8,\n'
            '    "use_sliding_window": false\n}\n')
    outcome = fix_text(text, _checker_that_wants(True))
    assert outcome.after == text.replace("false", "true") and outcome.clean
    assert changed_lines(outcome.diff()) == ['-    "use_sliding_window": false', '+    "use_sliding_window": true']


def test_an_edit_that_does_not_end_its_finding_is_not_kept():
    text = '{"layer_types": ["sliding_attention"], "sliding_window": 8}'

    def never_fixed(text: str) -> list[Finding]:
        return [_finding("DG005", "layer_types")]

    outcome = fix_text(text, never_fixed)
    assert outcome.after == text and not outcome.clean
    assert "does not end it" in outcome.unfixed[0].reason


def test_an_edit_that_brings_a_new_finding_is_not_kept():
    text = '{"layer_types": ["sliding_attention"], "sliding_window": 8}'

    def trades(text: str) -> list[Finding]:
        if "use_sliding_window" in text:
            return [_finding("DG004", "sliding_window", Severity.WARNING)]
        return [_finding("DG005", "layer_types")]

    outcome = fix_text(text, trades)
    assert outcome.after == text
    assert "brings DG004 on `sliding_window`" in outcome.unfixed[0].reason


# --- formatting --------------------------------------------------------------------------------------


def _styles():
    raw = json.loads(EXAMPLE.joinpath("config.json").read_text())
    fixed = {}
    for key, value in raw.items():
        fixed[key] = value
        if key == "use_cache":
            fixed["use_sliding_window"] = True
    return [
        ("tabs", lambda d: json.dumps(d, indent="\t") + "\n"),
        ("four-spaces", lambda d: json.dumps(d, indent=4)),
        ("compact", lambda d: json.dumps(d, separators=(",", ":"))),
        ("one-line", lambda d: json.dumps(d)),
        ("crlf", lambda d: json.dumps(d, indent=2).replace("\n", "\r\n") + "\r\n"),
        ("bom", lambda d: "\ufeff" + json.dumps(d, indent=2) + "\n"),
    ], raw, fixed


@pytest.mark.parametrize("style", [name for name, _ in _styles()[0]])
def test_formatting_is_kept(style, tmp_path, capsys):
    styles, raw, fixed = _styles()
    spell = dict(styles)[style]
    (tmp_path / "config.json").write_bytes(spell(raw).encode())
    assert main(["fix", str(tmp_path), "--write"]) == 0, capsys.readouterr().err
    assert (tmp_path / "config.json").read_bytes() == spell(fixed).encode()


def test_edits_keep_nested_lists_and_remove_members_cleanly():
    text = '{\n  "a": {\n    "ids": [1, 16, 31]\n  },\n  "b": 1,\n  "c": 2\n}'
    assert apply_edits(text, [Edit("a.ids", [0, 15, 30])]) == text.replace("[1, 16, 31]", "[0, 15, 30]")
    assert apply_edits(text, [Edit("c", remove=True)]) == '{\n  "a": {\n    "ids": [1, 16, 31]\n  },\n  "b": 1\n}'
    assert apply_edits(text, [Edit("b", remove=True)]) == '{\n  "a": {\n    "ids": [1, 16, 31]\n  },\n  "c": 2\n}'


# --- healthy files are never changed -----------------------------------------------------------------


def test_real_configs_are_changed_only_where_the_check_finds_something_and_then_recheck_clean(tmp_path):
    fixed = {}
    for folder in sorted(p for p in REAL_CONFIGS.iterdir() if (p / "config.json").is_file()):
        snapshot = load_snapshot(str(folder))
        text = snapshot.files["config.json"].decode("utf-8")
        checker = snapshot_checker(snapshot)
        try:
            before = checker(text)
        except BadInput:  # configs that need remote code or a newer transformers: not checkable
            continue
        outcome = fix_text(text, checker)
        if not loud(before):
            assert not outcome.changed and outcome.clean, folder.name
            continue
        fixed[folder.name] = outcome
        case = copy(folder, tmp_path, folder.name)
        (case / "config.json").write_text(outcome.after)
        after = check_targets([str(case)]).findings
        assert loud(after) == sorted((u.finding.rule, u.finding.key) for u in outcome.unfixed), folder.name
        assert {(f.rule, f.key) for f in after} <= {(f.rule, f.key) for f in before}, folder.name
    # The one drafter among them: an EAGLE-3 head that names no layers (DG114). Without its target
    # the engines' default is unknown, so it is left, saying why.
    # Three flattened copies of composite configs (DG014, tests/test_repo_rules.py says why): moving
    # the language model's keys into text_config is the author's edit, not fix's.
    flat = ["glm-4.1v-9b", "stepfun-ai--step-3.7-flash", "stepfun-ai--step-3.7-flash-fp8"]
    assert sorted(fixed) == flat + ["yuhuili--eagle3-llama3.1-instruct-8b"]
    for name in flat:
        assert not fixed[name].changed and {u.finding.rule for u in fixed[name].unfixed} == {"DG014"}, name
    outcome = fixed["yuhuili--eagle3-llama3.1-instruct-8b"]
    assert not outcome.changed and "give --target" in outcome.unfixed[0].reason


# --- drafters: each fix checked again by `draftguard check` on a written copy -------------------------

# drafter folder -> (target folder, what the fix ends)
DRAFTER_FIXES = {
    "broken/vllm-40727-dflash-ids-plus-one": ("targets/qwen3-8b", {("DG115", "dflash_config.target_layer_ids")}),
    "broken/vllm-40727-eagle3-aux-ids-without-plus-one": ("targets/qwen3-8b", {("DG115", "eagle_aux_hidden_state_layer_ids")}),
    "specforge-llama3-8b-eagle3": ("targets/llama-3.1-8b", {("DG114", "eagle_aux_hidden_state_layer_ids")}),
    "specforge-qwen3-8b-eagle3": ("targets/qwen3-8b", {("DG114", "eagle_aux_hidden_state_layer_ids")}),
    "specforge-gpt-oss-20b-eagle3": ("targets/gpt-oss-20b", {("DG119", "eagle_config.eagle_aux_hidden_state_layer_ids")}),
}


@pytest.mark.parametrize("name", sorted(DRAFTER_FIXES))
def test_drafter_fix_rechecks_clean(name, tmp_path, capsys):
    target, ends = DRAFTER_FIXES[name]
    case = copy(DRAFTERS / name, tmp_path)
    before = check_targets([str(case)], drafter_target=str(DRAFTERS / target)).findings
    assert ends <= set(loud(before))
    assert main(["fix", str(case), "--target", str(DRAFTERS / target), "--write"]) == 0, capsys.readouterr().err
    after = check_targets([str(case)], drafter_target=str(DRAFTERS / target)).findings
    assert loud(after) == []
    assert {(f.rule, f.key) for f in after} <= {(f.rule, f.key) for f in before}
    # Only ids changed in place, and at most one line added: the key, beside its neighbour.
    old_lines, new_lines = ((path / "config.json").read_text().splitlines() for path in (DRAFTERS / name, case))
    shape = [re.sub(r"\d+", "N", line).rstrip(",") for line in old_lines]
    added = [line for line in new_lines if re.sub(r"\d+", "N", line).rstrip(",") not in shape]
    assert len(new_lines) - len(old_lines) == len(added) <= 1
    assert all(next(iter(ends))[1].rsplit(".", 1)[-1] in line for line in added)


def test_the_shifted_dflash_ids_become_the_trainers_list(tmp_path, capsys):
    case = copy(DRAFTERS / "broken" / "vllm-40727-dflash-ids-plus-one", tmp_path)
    assert main(["fix", str(case), "--target", str(DRAFTERS / "targets" / "qwen3-8b")]) == 1  # pending
    out = capsys.readouterr().out
    # The list is one id per line: each id is changed on its own line, the layout kept.
    lines = changed_lines(out)
    assert [line.strip(" -+,") for line in lines if line[0] == "-"] == ["2", "10", "18", "26", "34"]
    assert [line.strip(" -+,") for line in lines if line[0] == "+"] == ["1", "9", "17", "25", "33"]


def test_healthy_drafters_that_state_their_ids_are_never_changed(capsys):
    for name, target in [("specforge-qwen3-8b-dflash", "qwen3-8b"), ("specforge-qwen3-4b-dspark", "qwen3-4b")]:
        assert main(["fix", str(DRAFTERS / name), "--target", str(DRAFTERS / "targets" / target)]) == 0
        assert capsys.readouterr().out == ""
    for example in ("dflash-pair/drafter", "dflash-pair/target"):
        assert main(["fix", str(ROOT / "examples" / example)]) == 0
        assert capsys.readouterr().out == ""


# --- what is left, and bad input ---------------------------------------------------------------------


def test_a_finding_with_no_safe_fix_is_listed_with_its_reason_and_exits_1(tmp_path, capsys):
    case = copy(DRAFTERS / "broken" / "nemo-2461-mask-is-pad", tmp_path)
    assert main(["fix", str(case)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "not fixed: DG116 on `dflash_config.mask_token_id` (error)" in err


def test_bad_input_is_one_line_naming_file_and_line_with_exit_2(tmp_path, capsys):
    (tmp_path / "config.json").write_text('{\n  "model_type": "qwen3",\n  "sliding_window": 2048,,\n}\n')
    assert main(["fix", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{tmp_path}/config.json:3:" in err and "invalid JSON" in err
    assert main(["fix", str(tmp_path / "missing")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["fix", "Qwen/Qwen3-8B"]) == 2
    assert "draftguard fix edits local files" in capsys.readouterr().err


# --- the mask token ----------------------------------------------------------------------------------


def _target_with_a_mask_token(tmp_path: Path) -> Path:
    """Qwen3-8B's real config.json, with a tokenizer_config.json whose added tokens hold a reserved
    mask token (written here: Qwen3's own tokenizer has none, so without it there is no fix)."""
    target = tmp_path / "target"
    target.mkdir()
    shutil.copy(DRAFTERS / "targets" / "qwen3-8b" / "config.json", target / "config.json")
    (target / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {
        "151643": {"content": "<|endoftext|>", "special": True},
        "151645": {"content": "<|im_end|>", "special": True},
        "151669": {"content": "<|mask|>", "special": True}}}))
    return target


def test_a_mask_token_the_target_uses_becomes_the_one_it_reserves(tmp_path, capsys):
    case = copy(DRAFTERS / "broken" / "nemo-2461-mask-is-target-eos", tmp_path)
    target = _target_with_a_mask_token(tmp_path)
    assert main(["fix", str(case), "--target", str(target), "--write"]) == 0, capsys.readouterr().err
    assert json.loads((case / "config.json").read_text())["dflash_config"]["mask_token_id"] == 151669
    assert "reserves '<|mask|>' (id 151669)" in capsys.readouterr().err
    assert loud(check_targets([str(case)], drafter_target=str(target)).findings) == []


def test_without_a_reserved_mask_token_the_mask_is_left_with_the_reason(tmp_path, capsys):
    case = copy(DRAFTERS / "broken" / "nemo-2461-mask-is-target-eos", tmp_path)
    assert main(["fix", str(case), "--target", str(DRAFTERS / "targets" / "qwen3-8b")]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "reserves no mask token" in err


# --- DG003 and DG004: the fixes their messages name (issue 34's fourth look) --------------------------


def test_an_injected_head_dim_the_file_contradicts_gets_the_head_dim_the_file_implies(tmp_path, capsys):
    # Before: "no known fix" and exit 1. The file's hidden_size / num_attention_heads is 64; Qwen3Config's
    # default is 128.
    raw = {"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 2,
           "num_key_value_heads": 8, "vocab_size": 1000}
    case = tmp_path / "case"
    case.mkdir()
    (case / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    assert "DG003" in {f.rule for f in check_targets([str(case)]).findings}
    assert main(["fix", str(case)]) == 1
    out, err = capsys.readouterr()
    assert main(["fix", str(case), "--write"]) == 0
    assert changed_lines(out) == ['+  "head_dim": 64,']
    assert "fixed DG003 on `head_dim`" in err and "if the weights were trained with 128" in err
    assert loud(check_targets([str(case)]).findings) == []


def test_an_injected_window_is_stated_as_the_window_the_model_runs_with(tmp_path, capsys):
    raw = {"model_type": "qwen3", "hidden_size": 1024, "head_dim": 64, "num_attention_heads": 16,
           "num_hidden_layers": 4, "use_sliding_window": True, "max_window_layers": 2}
    case = tmp_path / "case"
    case.mkdir()
    (case / "config.json").write_text(json.dumps(raw, indent=2) + "\n")
    assert "DG004" in {f.rule for f in check_targets([str(case)]).findings}
    assert main(["fix", str(case)]) == 1
    out, err = capsys.readouterr()
    assert main(["fix", str(case), "--write"]) == 0
    assert changed_lines(out) == ['+  "sliding_window": 4096,']
    assert out.index('"use_sliding_window": true') < out.index('"sliding_window": 4096')
    assert "fixed DG004 on `sliding_window`" in err and "another window" in err
    after = check_targets([str(case)])
    assert loud(after.findings) == [] and [a.effective for a in after.targets[0].attention][2:] == ["sliding(4096)"] * 2
