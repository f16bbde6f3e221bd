"""The fidelity engine against each mechanism in DESIGN.md, on configs written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers

from draftguard.check.fidelity import judge_config
from draftguard.check.findings import ABSENT
from draftguard.check.light import check_snapshot
from draftguard.check.resolver import resolve
from draftguard.snapshot import BadInput, load_snapshot

HEALTHY = sorted((Path(__file__).parent / "data" / "healthy").glob("*.json"))


def check(tmp_path: Path, raw: dict):
    (tmp_path / "config.json").write_text(json.dumps(raw, indent=2))
    return check_snapshot(load_snapshot(str(tmp_path)))


def by_key(result, key):
    return [f for f in result.findings if f.key == key]


def line_of(tmp_path: Path, key: str) -> int:
    """The line json.dumps(indent=2) put a top-level key on, found by reading the file."""
    for number, text in enumerate((tmp_path / "config.json").read_text().splitlines(), start=1):
        if text.startswith(f'  "{key}":'):
            return number
    raise AssertionError(key)


def qwen3(**extra):
    raw = {"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 1, "head_dim": 64,
           "num_hidden_layers": 4, "vocab_size": 48}
    raw.update(extra)
    return raw


SLIDING = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]


@pytest.mark.parametrize("path", HEALTHY, ids=[p.stem for p in HEALTHY])
def test_healthy_configs_of_several_families_raise_no_error_or_warning(path):
    result = check_snapshot(load_snapshot(str(path)))
    loud = [f"{f.rule} {f.key}: {f.message}" for f in result.findings if f.severity.value != "info"]
    assert loud == []


def test_qwen3_gate_drops_window_without_use_sliding_window(tmp_path):
    result = check(tmp_path, qwen3(layer_types=SLIDING, sliding_window=2048))
    [dropped] = by_key(result, "sliding_window")
    assert (dropped.rule, dropped.severity.value) == ("DG001", "error")
    assert (dropped.raw, dropped.resolved) == (2048, None)
    assert dropped.line == line_of(tmp_path, "sliding_window")
    # The message names the transformers that resolved it (5.20.2 on Python 3.10, 5.24.0 on 3.11+).
    assert "use_sliding_window" in dropped.message and f"transformers {transformers.__version__}" in dropped.message
    assert '"use_sliding_window": true' in dropped.message  # the fix
    [lost] = by_key(result, "layer_types")
    assert lost.rule == "DG005" and "layers 0-1, 3" in lost.message
    assert [(a.declared, a.effective) for a in result.attention] == [
        ("sliding(2048)", "full"), ("sliding(2048)", "full"), ("full", "full"), ("sliding(2048)", "full")]


def test_qwen3_with_use_sliding_window_keeps_the_window(tmp_path):
    result = check(tmp_path, qwen3(layer_types=SLIDING, sliding_window=2048, use_sliding_window=True))
    assert result.findings == []
    assert [a.effective for a in result.attention] == ["sliding(2048)", "sliding(2048)", "full", "sliding(2048)"]


def test_sliding_layers_without_any_window_key_are_reported(tmp_path):
    result = check(tmp_path, qwen3(layer_types=SLIDING))
    [lost] = by_key(result, "layer_types")
    assert lost.rule == "DG005"
    assert result.attention[0].declared == "sliding(?)"


def test_derived_layer_types_leave_a_small_drafter_all_full(tmp_path):
    # 5 layers, max_window_layers 5: no index reaches the threshold, so no layer slides.
    raw = qwen3(num_hidden_layers=5, use_sliding_window=True, sliding_window=2048, max_window_layers=5)
    result = check(tmp_path, raw)
    [unused] = [f for f in result.findings if f.rule == "DG006"]
    assert unused.severity.value == "warning" and unused.key == "sliding_window"
    assert "max_window_layers (5)" in unused.message
    assert [a.effective for a in result.attention] == ["full"] * 5


def test_use_sliding_window_without_window_injects_4096(tmp_path):
    result = check(tmp_path, qwen3(use_sliding_window=True, max_window_layers=2))
    [injected] = [f for f in result.findings if f.rule == "DG004"]
    assert injected.severity.value == "warning"
    assert (injected.raw, injected.resolved) == (ABSENT, 4096)
    assert injected.line == line_of(tmp_path, "use_sliding_window")
    assert [a.effective for a in result.attention] == ["full", "full", "sliding(4096)", "sliding(4096)"]


def test_qwen25_vestigial_window_with_use_sliding_window_false_is_intended(tmp_path):
    raw = {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2,
           "use_sliding_window": False, "sliding_window": 131072, "max_window_layers": 28}
    result = check(tmp_path, raw)
    [intended] = by_key(result, "sliding_window")
    assert (intended.rule, intended.severity.value) == ("DG008", "info")
    assert not [f for f in result.findings if f.severity.value != "info"]


def test_rope_theta_folded_into_rope_parameters_is_a_rename(tmp_path):
    result = check(tmp_path, qwen3(rope_theta=1000000))
    [renamed] = by_key(result, "rope_theta")
    assert (renamed.rule, renamed.severity.value) == ("DG007", "info")


def test_rope_scaling_beside_disagreeing_rope_parameters_is_a_contradiction(tmp_path):
    raw = qwen3(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
                rope_parameters={"rope_type": "default", "rope_theta": 10000})
    result = check(tmp_path, raw)
    [clash] = by_key(result, "rope_parameters.rope_type")
    assert (clash.rule, clash.severity.value) == ("DG002", "error")
    assert (clash.raw, clash.resolved) == ("default", "yarn")
    assert "rope_scaling" in clash.message
    assert clash.line == line_of(tmp_path, "rope_parameters") + 1  # the nested key's own line


def test_rope_theta_beside_disagreeing_rope_parameters_is_a_contradiction(tmp_path):
    result = check(tmp_path, qwen3(rope_theta=500000, rope_parameters={"rope_type": "default", "rope_theta": 1e6}))
    [clash] = by_key(result, "rope_theta")
    assert (clash.rule, clash.severity.value) == ("DG002", "error")
    assert clash.resolved == 1e6


def test_alias_and_canonical_key_that_disagree_are_a_contradiction(tmp_path):
    raw = {"model_type": "gpt2", "n_embd": 64, "hidden_size": 128, "n_head": 2, "n_layer": 2}
    result = check(tmp_path, raw)
    [clash] = by_key(result, "n_embd")
    assert (clash.rule, clash.severity.value) == ("DG002", "error")
    assert (clash.raw, clash.resolved) == (64, 128)
    assert "hidden_size" in clash.message


def test_alias_alone_is_followed_silently(tmp_path):
    result = check(tmp_path, {"model_type": "gpt2", "n_embd": 64, "n_head": 2, "n_layer": 2})
    assert result.findings == []


def test_head_dim_default_contradicting_hidden_over_heads_is_a_warning(tmp_path):
    raw = {"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 2}
    result = check(tmp_path, raw)
    [injected] = by_key(result, "head_dim")
    assert (injected.rule, injected.severity.value) == ("DG003", "warning")
    assert (injected.raw, injected.resolved) == (ABSENT, 128)
    assert '"head_dim": 64' in injected.message
    assert injected.line == line_of(tmp_path, "num_attention_heads")


def test_explicit_head_dim_different_from_hidden_over_heads_is_the_authors_choice(tmp_path):
    raw = {"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16, "head_dim": 128,
           "num_hidden_layers": 2}
    assert check(tmp_path, raw).findings == []


def test_torch_dtype_renamed_to_dtype_is_never_an_error(tmp_path):
    result = check(tmp_path, qwen3(torch_dtype="bfloat16"))
    assert not [f for f in result.findings if f.severity.value != "info"]


def test_dropped_torch_dtype_with_equal_dtype_is_a_rename():
    # A node as an older or newer transformers could return it: torch_dtype gone, dtype holds it.
    node = {"__config__": "Qwen3Config", "attribute_map": {}, "values": {"dtype": "bfloat16", "model_type": "qwen3"}}
    findings, _ = judge_config({"model_type": "qwen3", "torch_dtype": "bfloat16"}, node,
                               version="x", file="config.json", line_of=lambda k: None)
    assert [(f.rule, f.key) for f in findings] == [("DG007", "torch_dtype")]


def test_a_key_the_class_drops_is_an_error():
    node = {"__config__": "FooConfig", "attribute_map": {}, "values": {"model_type": "foo"}}
    findings, _ = judge_config({"model_type": "foo", "mask_token_id": 7}, node,
                               version="x", file="config.json", line_of=lambda k: 3)
    [dropped] = findings
    assert (dropped.rule, dropped.raw, dropped.resolved, dropped.line) == ("DG001", 7, ABSENT, 3)
    assert "drops it" in dropped.message


def test_unknown_keys_pass_through_unchanged(tmp_path):
    raw = qwen3(dflash_config={"mask_token_id": 5, "target_layer_ids": [0, 2]}, block_size=4)
    assert check(tmp_path, raw).findings == []


def test_nested_sub_config_is_recursed_with_dotted_keys_and_lines(tmp_path):
    text = qwen3(layer_types=["sliding_attention", "full_attention"], sliding_window=512, num_hidden_layers=2)
    raw = {"model_type": "llava", "text_config": text, "vision_config": {"model_type": "clip_vision_model"}}
    result = check(tmp_path, raw)
    [dropped] = by_key(result, "text_config.sliding_window")
    assert dropped.rule == "DG001" and dropped.resolved is None
    lines = (tmp_path / "config.json").read_text().splitlines()
    assert '"sliding_window": 512' in lines[dropped.line - 1]
    assert by_key(result, "text_config.layer_types")[0].rule == "DG005"


def test_null_asks_for_the_default_and_is_not_an_error(tmp_path):
    result = check(tmp_path, qwen3(num_key_value_heads=None))
    [asked] = by_key(result, "num_key_value_heads")
    assert (asked.rule, asked.resolved) == ("DG008", 1)


def test_strict_type_validation_is_bad_input_naming_key_and_line(tmp_path):
    with pytest.raises(BadInput) as err:
        check(tmp_path, qwen3(sliding_window="1024"))
    assert err.value.key == "sliding_window"
    assert err.value.line == line_of(tmp_path, "sliding_window")
    assert "sliding_window" in str(err.value)


def test_resolve_does_not_touch_the_callers_raw_dict():
    raw = qwen3(rope_scaling={"type": "linear", "factor": 2.0})
    before = json.dumps(raw, sort_keys=True)
    resolve(raw)
    assert json.dumps(raw, sort_keys=True) == before


def test_resolved_node_is_plain_json():
    node = resolve(qwen3(torch_dtype="bfloat16", id2label={"0": "a"}))
    assert json.loads(json.dumps(node)) == node
    assert node["values"]["id2label"] == {"0": "a"}


def test_flat_keys_moved_into_text_config_are_one_rename(tmp_path):
    raw = {"model_type": "qwen2_vl", "hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2,
           "vocab_size": 100, "vision_config": {"hidden_size": 32, "depth": 1}}
    result = check(tmp_path, raw)
    [moved] = by_key(result, "text_config")
    assert (moved.rule, moved.severity.value) == ("DG007", "info")
    assert set(moved.raw) == {"hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size"}
    assert moved.line == line_of(tmp_path, "hidden_size")


def test_flat_key_changed_after_moving_into_text_config_is_still_judged(tmp_path):
    raw = {"model_type": "qwen2_vl", "hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2,
           "sliding_window": 1024, "layer_types": ["sliding_attention", "full_attention"]}
    result = check(tmp_path, raw)
    [dropped] = by_key(result, "sliding_window")
    assert (dropped.rule, dropped.raw, dropped.resolved) == ("DG001", 1024, None)
    assert "moved into `text_config`" in dropped.message and "use_sliding_window" in dropped.message


def test_per_layer_type_rope_parameters_keep_both_thetas(tmp_path):
    raw = {"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 32, "num_hidden_layers": 6, "sliding_window": 512, "rope_theta": 1000000,
           "rope_local_base_freq": 10000,
           "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    result = check(tmp_path, raw)
    assert {(f.rule, f.key) for f in result.findings} == {
        ("DG007", "rope_theta"), ("DG007", "rope_local_base_freq"), ("DG007", "rope_scaling")}


def test_head_dim_derived_from_another_key_is_not_an_injected_default(tmp_path):
    # DeepSeek's MLA head_dim is qk_rope_head_dim, not hidden_size / heads; the file says so.
    raw = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128, "num_hidden_layers": 2,
           "qk_rope_head_dim": 64, "kv_lora_rank": 512, "q_lora_rank": 1536}
    assert by_key(check(tmp_path, raw), "head_dim") == []


def test_heterogeneous_per_layer_config_is_read_per_layer(tmp_path):
    # transformers 5.x refuses global reads of per-layer attributes (they raised, so the keys read as
    # dropped); the global value and each overridden layer's value are what the model code uses.
    raw = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 4,
           "num_hidden_layers": 3, "intermediate_size": 128, "per_layer_config": {"1": {"intermediate_size": 256}}}
    assert check(tmp_path, raw).findings == []
    node = resolve(raw)
    assert node["values"]["intermediate_size"] == 128
    assert node["values"]["per_layer_config"] == {"1": {"intermediate_size": 256}}


GEMMA4 = Path(__file__).parent / "data" / "real-configs" / "google--gemma-4-26b-a4b" / "config.json"


def _gemma4_last_layer_sliding() -> dict:
    raw = json.loads(GEMMA4.read_text())
    raw["text_config"]["layer_types"][-1] = "sliding_attention"  # the class forces the last layer full
    return raw


@pytest.mark.skipif(not hasattr(transformers, "Gemma4Config"), reason="transformers without Gemma 4")
def test_a_layer_type_the_class_corrects_and_says_so_is_not_a_lost_window(tmp_path):
    # The window survives: only layer 29's type changes, and Gemma4TextConfig logs that it forces
    # it. Before, DG005 said "the window resolved to 1024", which is no cause at all.
    result = check(tmp_path, _gemma4_last_layer_sliding())
    [finding] = by_key(result, "text_config.layer_types")
    assert (finding.rule, finding.severity.value) == ("DG009", "info")
    assert "layer 29 is declared sliding_attention" in finding.message and "Forcing last layer" in finding.message
    assert not [f for f in result.findings if f.severity.value != "info"]


@pytest.mark.skipif(not hasattr(transformers, "Gemma4Config"), reason="transformers without Gemma 4")
def test_a_layer_type_rewritten_silently_is_named_as_a_rewrite_not_a_lost_window():
    raw = _gemma4_last_layer_sliding()
    node = resolve(raw)
    node["values"]["text_config"]["evidence"] = {}
    node["evidence"]["messages"] = []  # the same rewrite, from a class that says nothing
    findings, _ = judge_config(raw, node, version="5.24.0", file="config.json", line_of=lambda key: None)
    [finding] = [f for f in findings if f.key == "text_config.layer_types"]
    assert (finding.rule, finding.severity.value) == ("DG005", "error")
    assert "rewrites the type to full_attention without saying so" in finding.message
    assert "window (1024) is kept" in finding.message and "resolved to" not in finding.message
