"""LongCat-Flash's MTP layer (issue 43): ``LongcatFlashForCausalLM``, vLLM 0.32's ``longcat_flash_mtp.py``
layout (``model.mtp.*``), under the reference. No weights are shipped: the tiny target and its trained MTP
layer are built here once per session into a temporary folder (``tests/fixtures/make_mtp_longcat.py``,
about 30 s on one core). vLLM 0.32's CPU build on the same target: tests/test_mtp_longcat_vllm.py.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import BAR, accept, dropped_fails  # noqa: E402  (one accept call)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
MTP_SHARD = "model-00002-of-00002.safetensors"


@pytest.fixture(scope="session")
def longcat() -> Path:
    """The healthy tiny LongCat-Flash target with its trained MTP layer (built, not shipped)."""
    import built_once
    import make_mtp_longcat

    return built_once.once("longcat", make_mtp_longcat.build, subfolder="longcat-flash")


def dropped_copy(healthy: Path, tmp_path: Path) -> Path:
    """The target with its MTP shard left out at save (vllm-project/vllm#35548), the config unchanged."""
    folder = tmp_path / "longcat-mtp-dropped"
    shutil.copytree(healthy, folder)
    (folder / MTP_SHARD).unlink()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != MTP_SHARD}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_the_longcat_layout_and_its_layer_count_are_read_as_vllm_reads_them():
    """Before: exit 2, "the reference builds MTP layers of the mimo, deepseek_v3, ... layout". LongCat-Flash's
    config.json states no MTP key; vLLM 0.32 reads ``num_nextn_predict_layers`` with a default of 1."""
    import make_mtp_longcat

    from draftguard.check.drafter.detect import MTP_BY_ARCHITECTURE, MTP_REFERENCE_ARCHITECTURES, detect_drafter
    from draftguard.check.repo import checkpoint
    from draftguard.runner.mtp_weights import mtp_count, mtp_layout

    raw = make_mtp_longcat.longcat_config()
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "longcat_flash" and layout.embeds_first and not layout.zero_first
    assert not layout.recycle_prenorm and layout.prefix == "model.mtp."
    by_type = {**raw, "architectures": [], "num_nextn_predict_layers": 1}
    assert mtp_layout(by_type, "config.json").name == "longcat_flash"  # by model_type
    assert mtp_count(raw) == ("architectures", 1)
    assert mtp_count({**raw, "num_nextn_predict_layers": 1}) == ("num_nextn_predict_layers", 1)
    # vLLM reads num_nextn_predict_layers, 1 only where it is absent: a stated 0 is no MTP layer, for both readers
    assert checkpoint.mtp_declared({**raw, "num_nextn_predict_layers": 0}) is None
    assert detect_drafter({**raw, "num_nextn_predict_layers": 0}) is None
    assert "LongcatFlashForCausalLM" in MTP_REFERENCE_ARCHITECTURES
    assert MTP_BY_ARCHITECTURE["LongcatFlashForCausalLM"] == checkpoint.MTP_BY_ARCHITECTURE["LongcatFlashForCausalLM"] == 1
    assert detect_drafter(raw).acceptance_testable


def test_the_gpu_job_runs_a_longcat_model_as_its_own_target(longcat):
    """Before: detection found no MTP layer in LongCat-Flash's config (it states no count) and the GPU path
    did not run it."""
    from draftguard.runner.engine_options import drafting_method
    from draftguard.runner.gpu_job import accept_command
    from draftguard.settings import Settings

    assert drafting_method(str(longcat)) == "mtp"
    cmd = accept_command("Qwen/Qwen3-8B", str(longcat), Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == str(longcat) and cmd[cmd.index("--drafter") + 1] == str(longcat)


def test_healthy_longcat_mtp_layer_passes(capsys, longcat):
    """Measured 2026-12-05: τ 1.91 at K = 1 on 8 prompts; the bar is the MTP fixtures' (1.8)."""
    code, result, err = accept(capsys, str(longcat), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert result.mean_acceptance_length > float(BAR)


def test_a_dropped_longcat_mtp_layer_fails_with_mtp_weights_named(capsys, longcat, tmp_path):
    reason = dropped_fails(capsys, dropped_copy(longcat, tmp_path))
    assert "vLLM 0.32 builds 1 MTP layer(s) for LongcatFlashForCausalLM" in reason
    assert "the weights hold no tensor under `model.mtp.`: dropped at save" in reason


def test_the_light_check_flags_the_dropped_longcat_layer_without_a_run(longcat, tmp_path):
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(longcat) == set()
    assert errors(dropped_copy(longcat, tmp_path)) == {"DG404"}


def test_the_target_loads_from_its_routed_experts_which_transformers_own_loader_refuses(longcat):
    """transformers 5.24 sizes ``experts.gate_up_proj`` for the zero-computation experts too, so its
    ``from_pretrained`` refuses a checkpoint that stores the routed experts only (as LongCat-Flash's do and
    vLLM loads them); the reference stacks them and leaves the identity experts' rows zero."""
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from draftguard.runner.mtp_model import load_mtp_target

    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        AutoModelForCausalLM.from_pretrained(str(longcat))
    target, _ = load_mtp_target(str(longcat))
    stored = load_file(str(longcat / "model-00001-of-00002.safetensors"))
    stack = target.model.layers[0].mlp.experts.gate_up_proj
    assert stack.shape[0] == 4 and not any(k.startswith("model.layers.0.mlp.experts.2.") for k in stored)
    assert torch.equal(stack[1], torch.cat([stored["model.layers.0.mlp.experts.1.gate_proj.weight"],
                                            stored["model.layers.0.mlp.experts.1.up_proj.weight"]]))
    assert not stack[2:].any()


def _head(longcat):
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(longcat))
    return target, load_mtp(str(longcat), target)


def test_the_layer_is_dense_and_not_zeroed_at_position_0_and_feeds_the_next_step_normed(longcat):
    """vLLM's LongCatFlashMTP clears n_routed_experts (a dense MLP of ffn_hidden_size), never zeroes the
    embedding at position 0 (DeepSeek-V3's layer does), and returns the final-normed output to the chain."""
    from safetensors.torch import load_file

    target, head = _head(longcat)
    assert head.spec.faults == [] and head.spec.aux_ids == [1]
    stored = load_file(str(longcat / MTP_SHARD))
    assert torch.equal(head.block.mlp.gate_proj.weight, stored["model.mtp.layers.0.transformer_layer.mlp.gate_proj.weight"])
    assert torch.equal(head.enorm.weight, stored["model.mtp.layers.0.enorm.m.weight"])
    assert torch.equal(head.final_norm.weight, stored["model.mtp.norm.weight"])
    hidden, embeds, positions = torch.randn(1, 5, 32), torch.randn(1, 5, 32), torch.arange(5)[None]
    with torch.no_grad():
        logits, out = head(hidden, embeds, positions)
        assert torch.allclose(logits, target.lm_head(out))  # the logits read the output the next step reads
        rms = (out / head.final_norm.weight).pow(2).mean(-1)  # and that output is final-normed
        assert torch.allclose(rms, torch.ones_like(rms), atol=1e-3)
        moved = embeds.clone()
        moved[0, 0] += 1.0
        assert not torch.allclose(head(hidden, moved, positions)[0][0, 0], logits[0, 0])


def _config(**changes):
    import make_mtp_longcat
    from transformers import AutoConfig

    keys = {k: v for k, v in make_mtp_longcat.longcat_config().items() if k not in ("model_type", "architectures")}
    return AutoConfig.for_model("longcat_flash", **{**keys, **changes})


def test_the_mla_lora_scaling_is_the_latent_norms_weights_scaled_as_vllm_loads_them():
    """vLLM folds sqrt(hidden / rank) into q_a_layernorm / kv_a_layernorm at load (scale_mla_lora_norms_on_load)
    where mla_scale_q_lora / mla_scale_kv_lora are set; the reference scales the norms' outputs: the same."""
    from draftguard.runner.mtp_longcat import LongcatMla

    torch.manual_seed(0)
    scaled, plain = LongcatMla(_config()), LongcatMla(_config(mla_scale_q_lora=False, mla_scale_kv_lora=False))
    for p in scaled.parameters():
        torch.nn.init.normal_(p, std=0.2)
    state = scaled.state_dict()
    state["q_a_layernorm.weight"] = state["q_a_layernorm.weight"] * math.sqrt(32 / 16)
    state["kv_a_layernorm.weight"] = state["kv_a_layernorm.weight"] * math.sqrt(32 / 512)
    plain.load_state_dict(state)
    x, mask = torch.randn(1, 6, 32), torch.full((6, 6), float("-inf")).triu(1)[None, None]
    cos, sin = _rope(6)
    assert torch.allclose(scaled(x, mask, cos, sin), plain(x, mask, cos, sin), atol=1e-5)
    unscaled = LongcatMla(_config(mla_scale_q_lora=False, mla_scale_kv_lora=False))
    unscaled.load_state_dict(scaled.state_dict())  # the flags off, the norms as stored: another layer
    assert not torch.allclose(scaled(x, mask, cos, sin), unscaled(x, mask, cos, sin), atol=1e-3)


def _rope(n: int):
    inv = 1.0 / 10000.0 ** (torch.arange(0, 64, 2).float() / 64)
    freqs = torch.arange(n)[None, :, None].float() * inv
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos(), emb.sin()


def test_the_mla_matches_transformers_longcat_attention_where_both_scale_the_lora():
    """The reference's MLA (vLLM's: interleaved RoPE on the rope dims, LoRA scaling) against transformers'
    LongcatFlashMLA on the same weights; transformers' latent norms use eps 1e-6, so the config says 1e-6."""
    from transformers.models.longcat_flash.modeling_longcat_flash import LongcatFlashMLA, LongcatFlashRotaryEmbedding

    from draftguard.runner.mtp_longcat import LongcatMla

    torch.manual_seed(1)
    config = _config(rms_norm_eps=1e-6)
    config._attn_implementation = "sdpa"
    theirs, ours = LongcatFlashMLA(config, layer_idx=0), LongcatMla(config)
    for p in theirs.parameters():
        torch.nn.init.normal_(p, std=0.2)
    ours.load_state_dict(theirs.state_dict())
    x, positions = torch.randn(1, 7, 32), torch.arange(7)[None]
    cos, sin = LongcatFlashRotaryEmbedding(config)(x, positions)
    mask = torch.full((7, 7), float("-inf")).triu(1)[None, None]
    with torch.no_grad():
        want = theirs(x, (cos, sin), attention_mask=mask)[0]
        assert torch.allclose(ours(x, mask, cos, sin), want, atol=1e-5)


def _rewritten_mtp(healthy: Path, folder: Path, change) -> Path:
    """A copy of the target whose MTP shard holds ``change(tensors)``."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(healthy, folder)
    save_file(change(load_file(str(healthy / MTP_SHARD))), str(folder / MTP_SHARD), metadata={"format": "pt"})
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"] = {**{k: v for k, v in index["weight_map"].items() if v != MTP_SHARD},
                           **{k: MTP_SHARD for k in load_file(str(folder / MTP_SHARD))}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def test_a_longcat_mtp_layer_left_fp8_fails_with_the_tensors_named(capsys, longcat, tmp_path):
    """The layer's linear weights float8_e4m3fn with a weight_scale_inv beside each, no quantization_config
    (sgl-project/sglang#35797): the reference reads the raw values, as an engine that loads it would."""
    import make_mtp_models

    def fp8(state):
        return {**make_mtp_models.fp8_state({k: v for k, v in state.items() if "embed_tokens" not in k}),
                "model.mtp.embed_tokens.weight": state["model.mtp.embed_tokens.weight"]}

    folder = _rewritten_mtp(longcat, tmp_path / "longcat-mtp-fp8", fp8)
    code, result, err = accept(capsys, str(folder), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 1, err
    assert result.diagnosis["cause"] == "mtp-weights" and result.mean_acceptance_length < 1.25
    assert ("`model.mtp.layers.0.eh_proj.weight` is stored F8_E4M3 with `model.mtp.layers.0.eh_proj.weight_scale_inv` "
            "beside it") in result.diagnosis["reason"]


def test_an_embedding_copy_that_differs_from_the_targets_is_named(longcat, tmp_path):
    """vLLM's proposer replaces the layer's ``model.mtp.embed_tokens`` with the target's; a copy that differs
    means a layer trained against embeddings it will not draft with."""
    from draftguard.runner.mtp_weights import mtp_faults

    def own(state):
        return {**state, "model.mtp.embed_tokens.weight": state["model.mtp.embed_tokens.weight"] + 0.5}

    assert mtp_faults(longcat) == []
    faults = mtp_faults(_rewritten_mtp(longcat, tmp_path / "longcat-own-embeddings", own))
    assert faults and "`model.mtp.embed_tokens.weight` differs from the target's `model.embed_tokens.weight`" in faults[0]


def test_a_block_fp8_target_is_dequantized_as_vllm_reads_it_and_another_scheme_refused(longcat, tmp_path):
    """LongCat-Flash-Chat-FP8 declares block FP8; the target's projections (experts one by one included) are
    read as fp8 x their block's scale. Another declared scheme is bad input naming quantization_config."""
    from safetensors.torch import load_file, save_file

    from draftguard.runner.mtp_model import load_mtp_target
    from draftguard.snapshot import BadInput

    folder = tmp_path / "longcat-fp8"
    shutil.copytree(longcat, folder)
    shard = folder / "model-00001-of-00002.safetensors"
    state, quantized = load_file(str(shard)), {}
    for key, tensor in state.items():
        if "_proj" in key and key.endswith(".weight"):  # every projection, kv_a_proj_with_mqa too
            rows, cols = -(-tensor.shape[0] // 128), -(-tensor.shape[1] // 128)
            scale = tensor.abs().max() / 448.0
            quantized[key] = (tensor / scale).to(torch.float8_e4m3fn)
            quantized[key + "_scale_inv"] = torch.full((rows, cols), float(scale))
        else:
            quantized[key] = tensor
    save_file(quantized, str(shard), metadata={"format": "pt"})
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"].update({k: shard.name for k in quantized})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic"}
    (folder / "config.json").write_text(json.dumps(config))
    target, _ = load_mtp_target(str(folder))
    key = "model.layers.0.self_attn.1.kv_a_proj_with_mqa.weight"
    want = quantized[key].float() * quantized[key + "_scale_inv"][0, 0]
    assert torch.equal(target.model.layers[0].self_attn[1].kv_a_proj_with_mqa.weight, want)
    expert = quantized["model.layers.0.mlp.experts.0.down_proj.weight"].float()
    assert torch.equal(target.model.layers[0].mlp.experts.down_proj[0],
                       expert * quantized["model.layers.0.mlp.experts.0.down_proj.weight_scale_inv"][0, 0])
    config["quantization_config"] = {"quant_method": "compressed-tensors"}
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(BadInput, match="quantization_config") as caught:
        load_mtp_target(str(folder))
    assert caught.value.key == "quantization_config"
