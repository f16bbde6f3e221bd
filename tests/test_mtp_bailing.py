"""Ling-3.0 / Ring-3.0's MTP layer (issue 43): ``BailingMoeV3ForCausalLM`` (model_type ``bailing_hybrid``), vLLM
0.32's ``bailing_moe_v3_mtp.py`` layout (``model.layers.{N}.*``), under the reference. No weights are shipped:
the tiny target and its trained MTP layer are built here once per session into a temporary folder
(``tests/fixtures/make_mtp_bailing.py``). vLLM 0.32's CPU build on the same target:
tests/test_mtp_bailing_vllm.py.
"""

from __future__ import annotations

import json
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
def ling() -> Path:
    """The healthy tiny Ling-3.0 target with its trained MTP layer (built, not shipped)."""
    import built_once
    import make_mtp_bailing

    return built_once.once("ling", make_mtp_bailing.build, subfolder="ling-3")


def _copy(healthy: Path, tmp_path: Path, name: str, mtp: dict | None = None, config: dict | None = None) -> Path:
    """A copy of the healthy folder, its MTP shard replaced by ``mtp`` ({} : left out at save), its config
    updated by ``config``."""
    from safetensors.torch import save_file

    folder = tmp_path / name
    shutil.copytree(healthy, folder)
    if mtp is not None:
        (folder / MTP_SHARD).unlink()
        index = json.loads((folder / "model.safetensors.index.json").read_text())
        index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != MTP_SHARD}
        if mtp:
            save_file(mtp, str(folder / MTP_SHARD), metadata={"format": "pt"})
            index["weight_map"].update({k: MTP_SHARD for k in mtp})
        (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    if config:
        raw = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**raw, **config}))
    return folder


def _mtp(ling: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(ling / MTP_SHARD))


def test_the_layout_is_read_by_architecture_not_by_the_model_type_ling_2_5_shares():
    """Before: exit 2, vLLM 0.32's BailingMoeV3MTPModel "which the reference does not build yet". Ling-2.5
    (BailingMoeV2_5ForCausalLM, another MTP model in vLLM) states the same model_type: still refused."""
    import make_mtp_bailing

    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.mtp_weights import mtp_count, mtp_layout
    from draftguard.snapshot import BadInput

    raw = make_mtp_bailing.ling_config()
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "bailing_moe_v3" and layout.embeds_first and not layout.zero_first
    assert not layout.recycle_prenorm and layout.final_norm == "final_layernorm" and layout.block_at_n
    assert mtp_count(raw) == ("num_nextn_predict_layers", 1)
    assert detect_drafter(raw).acceptance_testable
    with pytest.raises(BadInput, match="BailingMoeV25MTPModel"):
        mtp_layout({**raw, "architectures": ["BailingMoeV2_5ForCausalLM"]}, "config.json")


def test_healthy_ling_mtp_layer_passes(capsys, ling):
    code, result, err = accept(capsys, str(ling), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert result.mean_acceptance_length > float(BAR)


def test_a_dropped_ling_mtp_layer_fails_with_mtp_weights_named(capsys, ling, tmp_path):
    reason = dropped_fails(capsys, _copy(ling, tmp_path, "ling-mtp-dropped", mtp={}))
    assert "config.json declares 1 MTP layer(s) (`num_nextn_predict_layers`)" in reason
    assert "the weights hold no tensor under `model.layers.2.`: dropped at save" in reason


def test_a_ling_mtp_layer_left_fp8_fails_with_mtp_weights_named(capsys, ling, tmp_path):
    """The MTP layer's matrices stored float8 with their scales beside them, config.json declaring no
    quantization: the reference reads the raw values, as an engine that does not know they are FP8 does."""
    fp8 = {}
    for k, v in _mtp(ling).items():
        if v.dim() == 2:
            scale = v.abs().max() / 448.0
            fp8[k], fp8[k + "_scale_inv"] = (v / scale).to(torch.float8_e4m3fn), scale.reshape(1, 1).float()
        else:
            fp8[k] = v
    code, result, err = accept(capsys, str(_copy(ling, tmp_path, "ling-mtp-fp8", mtp=fp8)), "--no-early-stop",
                               "--min-acceptance-length", BAR)
    assert code == 1, err
    assert result.diagnosis["cause"] == "mtp-weights"
    assert ("`model.layers.2.eh_proj.weight` is stored F8_E4M3 with `model.layers.2.eh_proj.weight_scale_inv` "
            "beside it") in result.diagnosis["reason"]
    assert result.mean_acceptance_length < 1.25


def test_a_head_copy_unlike_the_targets_lm_head_fails_with_mtp_weights_named(capsys, ling, tmp_path):
    """vLLM's proposer replaces the layer's ``shared_head.head`` with the target's lm_head ("Detected MTP
    model"): a layer trained against a head of its own drafts with one it was not trained with."""
    from safetensors.torch import load_file

    mtp = _mtp(ling)
    head = load_file(str(ling / "model-00001-of-00002.safetensors"))["lm_head.weight"]
    mtp["model.layers.2.shared_head.head.weight"] = head.flip(0).contiguous()
    code, result, err = accept(capsys, str(_copy(ling, tmp_path, "ling-own-head", mtp=mtp)), "--no-early-stop",
                               "--min-acceptance-length", BAR)
    assert result.diagnosis is not None and result.diagnosis["cause"] == "mtp-weights", err
    assert "`model.layers.2.shared_head.head.weight` differs from the target's `lm_head.weight`" in (
        result.diagnosis["reason"])


def test_the_light_check_flags_the_dropped_ling_layer_without_a_run(ling, tmp_path):
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(ling) == set()
    assert errors(_copy(ling, tmp_path, "ling-mtp-dropped", mtp={})) == {"DG404"}


def test_the_layer_is_built_as_vllm_builds_it(ling):
    """vLLM's BailingMoeV3MultiTokenPredictorLayer: MLA + MoE at N (whatever first_k_dense_replace), the
    head-wise gate, renormalised sigmoid routing with the bias, the embedding not zeroed at position 0,
    [embedding, hidden] into eh_proj, final_layernorm's output to both the logits and the next step."""
    from draftguard.runner.mtp_dsv3 import VllmRouter
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(ling))
    head = load_mtp(str(ling), target)
    assert head.spec.faults == [] and head.spec.aux_ids == [2]
    block = head.block
    assert type(block.self_attn).__name__ == "BailingHybridAttention" and hasattr(block.mlp, "experts")
    assert isinstance(block.mlp.gate, VllmRouter) and block.mlp.gate.renormalize and block.mlp.gate.biased
    assert isinstance(target.model.layers[1].mlp.gate, VllmRouter)  # the target routes as vLLM's too
    stored = _mtp(ling)
    assert torch.equal(block.self_attn.o_proj.weight, stored["model.layers.2.attention.dense.weight"])
    assert torch.equal(block.mlp.gate.e_score_correction_bias, stored["model.layers.2.mlp.gate.expert_bias"])
    assert torch.equal(head.final_norm.weight, stored["model.layers.2.final_layernorm.weight"])
    hidden = torch.randn(1, 5, 32)
    embeds = torch.randn(1, 5, 32)
    positions = torch.arange(5)[None]
    with torch.no_grad():
        logits, fed = head(hidden, embeds, positions)
        x = head.proj(torch.cat([head.enorm(embeds), head.hnorm(hidden)], -1))  # embedding first, not zeroed
        n = 5
        mask = torch.full((n, n), float("-inf")).triu(1)[None, None]
        out = block(x, attention_mask=mask, position_ids=positions,
                    position_embeddings=target.model.rotary_emb(x, positions))
        normed = head.final_norm(out[0] if isinstance(out, tuple) else out)
    assert torch.allclose(fed, normed, atol=1e-6) and torch.allclose(logits, target.lm_head(normed), atol=1e-5)


def test_vllm_geometry_the_reference_does_not_build_is_bad_input_naming_the_key(capsys, ling, tmp_path):
    """transformers lays out a tail of linear-attention layers where vLLM 0.32 builds MLA ones, and gates
    every MLA layer where vLLM gates only ``head_wise``: a config that makes them differ is refused by key."""
    from draftguard.cli import main

    folder = _copy(ling, tmp_path, "ling-kda-tail", config={"layer_types": ["linear_attention", "full_attention"]})
    code = main(["accept", "--target", str(folder), "--prompts", str(ROOT / "tests/fixtures/models/prompts.jsonl"),
                 "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "layer_types[0] is 'linear_attention', but vLLM 0.32 builds layer 0 as 'full_attention'" in err
    assert "Traceback" not in err
    folder = _copy(ling, tmp_path, "ling-element-gate", config={"gated_attention_proj_granularity_type": "element_wise"})
    code = main(["accept", "--target", str(folder), "--prompts", str(ROOT / "tests/fixtures/models/prompts.jsonl"),
                 "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "config.json: gated_attention_proj_granularity_type 'element_wise'" in err and "Traceback" not in err


def test_an_ungated_config_runs_the_mla_layers_without_the_gate_as_vllm_does(ling, tmp_path):
    """No ``gated_attention_proj_granularity_type``: vLLM builds no ``g_proj`` (transformers always does);
    the reference opens the gate (x 1) in the target and the MTP layer alike."""
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    raw = json.loads((ling / "config.json").read_text())
    del raw["gated_attention_proj_granularity_type"]
    mtp = {k: v for k, v in _mtp(ling).items() if ".g_proj." not in k}  # an ungated layer stores none
    folder = _copy(ling, tmp_path, "ling-ungated", mtp=mtp)
    (folder / "config.json").write_text(json.dumps(raw))
    target, _ = load_mtp_target(str(folder))
    head = load_mtp(str(folder), target)
    x = torch.randn(1, 3, 32)
    for attn in (target.model.layers[0].self_attn, head.block.self_attn):
        assert torch.equal(torch.sigmoid(attn.g_proj(x).float()), torch.ones(1, 3, 2))
