"""Issue 23: the mechanisms behind six families of false errors, each fixed generically in the
resolver's tracing (check/resolver/) and judged in check/judges.py, each pinned on a real config of
tests/data/real-configs where one could be sourced (SOURCE notes there), else on a config shaped
after the published file (named below). Every test here failed before the fix, with the verdict in
its comment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftguard.check import matrix
from draftguard.check.fidelity import judge_config
from draftguard.check.light import check_snapshot
from draftguard.snapshot import load_snapshot

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "real-configs"
OLD = "4.52.4"


def real(name: str):
    return check_snapshot(load_snapshot(str(CORPUS / name)))


def check(tmp_path: Path, raw: dict):
    (tmp_path / "config.json").write_text(json.dumps(raw, indent=2))
    return check_snapshot(load_snapshot(str(tmp_path)))


def on(result, key: str) -> list:
    return [f for f in result.findings if f.key == key]


def loud(result) -> list[str]:
    return [f"{f.rule} {f.key}" for f in result.findings if f.severity.value != "info"]


def corpus_raw(name: str) -> dict:
    return json.loads((CORPUS / name / "config.json").read_text())


# --- a value the class computes itself, equal to the file's: read (Swin, Swinv2) -------------------


def test_swin_hidden_size_computed_by_the_class_is_read():
    # Was DG002: "hidden_size is 1536 but embed_dim is 192 ... built with 192". SwinConfig sets
    # hidden_size = embed_dim * 2 ** (stages - 1) = 1536 itself; getattr returns the file's value.
    result = real("jyotirmoykonwar--derma-swin-large")
    assert on(result, "hidden_size") == [] and loud(result) == []


def test_swinv2_hidden_size_is_read_too(tmp_path):
    # Shaped after microsoft/swinv2-tiny-patch4-window8-256's config.json (not in the corpus).
    raw = {**corpus_raw("jyotirmoykonwar--derma-swin-large"), "model_type": "swinv2",
           "architectures": ["Swinv2ForImageClassification"], "pretrained_window_sizes": [0, 0, 0, 0]}
    assert on(check(tmp_path, raw), "hidden_size") == []


def test_a_true_unread_alias_still_fires(tmp_path):
    # The one true finding the issue keeps: a Mamba config with n_layer 64 and no
    # num_hidden_layers builds 32 layers (shaped after state-spaces' Mamba configs).
    raw = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 2560, "n_layer": 64,
           "state_size": 16, "vocab_size": 50280, "expand": 2, "conv_kernel": 4}
    [unread] = on(check(tmp_path, raw), "n_layer")
    assert (unread.rule, unread.severity.value, unread.resolved) == ("DG011", "warning", 32)


# --- a legacy key folded into a structure, then popped (Cohere2) -----------------------------------


# Shaped after CohereForAI/c4ai-command-r7b-12-2024's config.json (not in the corpus).
COHERE2 = {"architectures": ["Cohere2ForCausalLM"], "model_type": "cohere2", "hidden_size": 4096,
           "head_dim": 128, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
           "num_hidden_layers": 32, "max_position_embeddings": 132096, "sliding_window": 4096,
           "sliding_window_pattern": 4, "order_of_interleaved_layers": "local_attn_first", "rope_theta": 50000,
           "rotary_pct": 1.0, "position_embedding_type": "rope_gptj", "logit_scale": 0.25, "vocab_size": 256000,
           "use_parallel_block": True, "use_qk_norm": False, "rope_scaling": None}


def test_cohere2_pattern_is_traced_into_layer_types_with_its_attention(tmp_path):
    # Was DG001: "sliding_window_pattern is 4 ... Cohere2Config drops it".
    result = check(tmp_path, COHERE2)
    [pattern] = on(result, "sliding_window_pattern")
    assert (pattern.rule, pattern.severity.value) == ("DG009", "info")
    assert "`layer_types`" in pattern.message and "full at layers 3, 7, 11" in pattern.message
    assert "sliding(4096) at layers 0-2, 4-6" in pattern.message
    assert loud(result) == []


# --- a boolean renamed with its value kept (VideoMAE) ----------------------------------------------


@pytest.mark.parametrize("value", [True, False])
def test_videomae_qkv_bias_is_a_rename_to_qv_bias(tmp_path, value):
    # Was DG001: "qkv_bias is true in config.json, but VideoMAEConfig drops it".
    raw = {**corpus_raw("mitegvg--videomae-base-finetuned-xd-violence-videomae-tiny-finetuned-xd-violence"),
           "qkv_bias": value}
    [renamed] = on(check(tmp_path, raw), "qkv_bias")
    assert (renamed.rule, renamed.moved_to) == ("DG007", "qv_bias")


# --- a compatibility flag the class hard-codes or sets aside (DETR) --------------------------------


def test_detr_backbone_flags_are_info_naming_the_flag():
    # Was DG001 twice: use_pretrained_backbone (hard-coded false in the timm backbone config) and
    # use_timm_backbone (folded into backbone_config). facebook/detr-resnet-50's own file.
    result = real("facebook--detr-resnet-50")
    [pretrained] = on(result, "use_pretrained_backbone")
    [timm] = on(result, "use_timm_backbone")
    assert (pretrained.rule, timm.rule) == ("DG009", "DG009")
    assert "stores false whatever the file says" in pretrained.message
    assert "use_timm_backbone" in timm.message and loud(result) == []


# --- the engines' context length beside the model's (Cohere Command-R) -----------------------------


def test_model_max_length_is_the_engines_length_not_a_clash(tmp_path):
    # Was DG002 error. Aya-23-8B's real config (a Cohere model) with Command-R's own pair of lengths:
    # "model_max_length": 131072 beside "max_position_embeddings": 8192, as c4ai-command-r-v01 ships.
    raw = {**corpus_raw("cohereforai--aya-23-8b"), "model_max_length": 131072}
    result = check(tmp_path, raw)
    [length] = on(result, "model_max_length")
    assert (length.rule, length.severity.value) == ("DG013", "info")
    assert "vLLM" in length.message and "SGLang" in length.message and "131072" in length.message
    assert loud(result) == []


# --- under transformers 4.52: M2M100's num_hidden_layers (SMaLL-100) ------------------------------


def test_m2m100_num_hidden_layers_under_4_52_is_the_encoder_depth_it_is():
    # Was DG002 under 4.52.4: "num_hidden_layers is 12 but decoder_layers is 3 ... built with 3".
    # M2M100Config 4.52 sets num_hidden_layers = encoder_layers itself. Shaped after
    # alirezamsh/small100 (12 encoder layers, 3 decoder layers), beside the corpus's real m2m100_418M.
    python, _ = matrix.ensure_env(OLD, progress=lambda line: None)
    small100 = {**corpus_raw("clap-esp--clap-ai-core-api-models-m2m100_418m"), "decoder_layers": 3,
                "num_hidden_layers": 12, "encoder_layers": 12}
    swin = corpus_raw("jyotirmoykonwar--derma-swin-large")
    nodes = matrix.run_resolver(python, [{"raw": small100}, {"raw": swin}], timeout=300)
    for raw, node in zip((small100, swin), nodes):
        findings, _ = judge_config(raw, node, version=OLD, file="config.json", line_of=lambda key: None)
        assert [f"{f.rule} {f.key}" for f in findings if f.severity.value != "info"] == []
