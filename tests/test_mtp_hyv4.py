"""Tencent HY-V4's MTP layer (issue 43: "a drafter vLLM runs is never refused by the reference"):
``HYV4ForCausalLM`` with dense (``full_attention``) MLA layers, iHC hyper-connections and a sigmoid-routed MoE,
its MTP layer ``model.layers.{N}.{enorm, hnorm, eh_proj, final_layernorm}`` and a decoder layer at N without
iHC, the embedding zeroed at position 0, the target's embeddings and ``lm_head`` shared, under the reference
(runner/mtp_hyv4.py, written from vLLM 0.32's models/hy_v4/nvidia). The tiny target and its trained MTP layer
are built at test time (tests/fixtures/make_mtp_hyv4.py; nothing shipped). vLLM 0.32's CPU build on the same
folders: tests/test_mtp_hyv4_vllm.py.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp_hyv3 import fails_with_mtp_weights, run  # noqa: E402  (accept --method mtp, bar 1.8)

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))


@pytest.fixture(scope="session")
def hyv4_folders() -> dict[str, Path]:
    import built_once
    import make_mtp_hyv4

    return built_once.once("hyv4", make_mtp_hyv4.build)


def _copy_with(folder: Path, tmp_path: Path, **changes) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    raw = json.loads((copy / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    (copy / "config.json").write_text(json.dumps(raw))
    return copy


def test_the_hyv4_layout_is_read_from_the_architecture_and_the_model_type():
    from draftguard.check.drafter.detect import MTP_REFERENCE_ARCHITECTURES, detect_drafter
    from draftguard.runner.mtp_coverage import NOT_BUILT
    from draftguard.runner.mtp_weights import mtp_layout
    from make_mtp_hyv4 import hyv4_config

    raw = hyv4_config()
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "hy_v4" and layout.block_at_n and layout.zero_first and layout.embeds_first
    assert layout.final_norm == "final_layernorm" and not layout.recycle_prenorm and not layout.own_head
    assert mtp_layout({**raw, "architectures": []}, "config.json").name == "hy_v4"  # by model_type
    assert "HYV4ForCausalLM" in MTP_REFERENCE_ARCHITECTURES and "HYV4MTPModel" not in NOT_BUILT
    assert detect_drafter(raw).acceptance_testable


def test_healthy_hyv4_mtp_layer_passes_well_above_1(capsys, hyv4_folders):
    """Before: exit 2, "vLLM 0.32 drafts for it with method mtp (its HYV4MTPModel), which the reference does
    not build". Measured 2026-12-06 (24 prompts, K = 1): healthy 1.99, the layer left FP8 1.12, dropped 1.02."""
    code, result, err = run(capsys, hyv4_folders["healthy"])
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert result.mean_acceptance_length > 1.9


@pytest.mark.parametrize("copy, below, said", [
    ("dropped", 1.25, "the weights hold no tensor under `model.layers.2.`: dropped at save (vLLM 0.32 refuses to start"),
    ("fp8", 1.7, "`model.layers.2.eh_proj.weight` is stored F8_E4M3"),
])
def test_a_faulty_hyv4_mtp_layer_fails_with_mtp_weights_named(capsys, hyv4_folders, copy, below, said):
    """vLLM 0.32 refuses the dropped copy at load ("Following weights were not initialized from checkpoint",
    run once 2026-12-06 with --backend vllm); the FP8 one is read raw."""
    fails_with_mtp_weights(capsys, hyv4_folders[copy], below, said)


@pytest.mark.parametrize("kind", ["deepseek_sparse_attention", "indexed_attention", "sparse"])
def test_a_sparse_attention_layer_is_bad_input_naming_layer_types_and_what_vllm_does(capsys, hyv4_folders, tmp_path,
                                                                                    kind):
    """HY-V4 as designed (DSA sparse layers): vLLM 0.32 builds them on CUDA and ROCm and its CPU build refuses
    them; the reference says so, exit 2, no traceback. The MTP layer takes the list's last entry."""
    folder = _copy_with(hyv4_folders["healthy"], tmp_path, layer_types=["full_attention", kind])
    code, _result, err = run(capsys, folder)
    assert code == 2 and "`layer_types`" in err and "Traceback" not in err, err
    assert f"layer 1 {kind!r}" in err and "Sparse Attention is not supported on CPU" in err
    assert "run --backend vllm alone on a GPU" in err


def test_no_layer_types_is_dense_as_vllm_reads_it_where_transformers_fills_sparse(hyv4_folders, tmp_path):
    """vLLM's own HYV4Config keeps ``layer_types`` None (every layer dense: ``requested_sparse`` needs a list);
    transformers 5.24's class fills ``indexed_attention``, which vLLM reads as sparse. The reference reads the
    file as vLLM does."""
    from transformers import HYV4Config

    from draftguard.runner.mtp_hyv4 import hyv4_config

    raw = json.loads((hyv4_folders["healthy"] / "config.json").read_text())
    raw.pop("layer_types")
    assert set(HYV4Config(**{k: v for k, v in raw.items() if k != "model_type"}).layer_types) == {"indexed_attention"}
    assert hyv4_config(raw).layer_types == ["full_attention"] * raw["num_hidden_layers"]


def test_the_target_reads_the_checkpoint_names_as_vllms_loader_does(hyv4_folders):
    """``hc_fn`` stored without ``.weight``, the router's bias beside its weight, experts one by one; the head's
    iHC merge before ``model.norm``."""
    from safetensors.torch import load_file

    from draftguard.runner.mtp_model import load_mtp_target

    target, _ = load_mtp_target(str(hyv4_folders["healthy"]))
    stored = load_file(str(hyv4_folders["healthy"] / "model.safetensors"))
    layer = target.model.layers[1]
    assert torch.equal(layer.hc_attn_layer.hc_pre.fn, stored["model.layers.1.hc_attn_layer.hc_pre.hc_fn"])
    assert torch.equal(layer.hc_mlp_layer.hc_pre.base, stored["model.layers.1.hc_mlp_layer.hc_pre.hc_base"])
    assert torch.equal(target.model.hc_head.fn, stored["model.hc_head.hc_head_fn"])
    assert torch.equal(layer.mlp.gate.e_score_correction_bias, stored["model.layers.1.mlp.gate.e_score_correction_bias"])
    assert torch.equal(layer.mlp.experts.down_proj[2], stored["model.layers.1.mlp.experts.2.down_proj.weight"])
    assert type(target.model.layers[0].mlp).__name__ == "SwiGlu"  # mlp_layer_types[0] dense


def test_the_head_is_vllms_hyv4_mtp_layer(hyv4_folders):
    """Zeroed at position 0, [embedding, hidden], the layer at N without iHC and MoE (mlp_layer_types extended
    with its last entry), final_layernorm's output fed on and read by the target's lm_head."""
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    folder = str(hyv4_folders["healthy"])
    target, _ = load_mtp_target(folder)
    head = load_mtp(folder, target)
    assert not head.block.ihc and not hasattr(head.block, "hc_attn_layer")
    assert type(head.block.mlp).__name__ == "HyV4MoE" and head._shared["head"] is target.lm_head
    hidden, embeds = torch.randn(1, 5, 64), torch.randn(1, 5, 64)
    positions = torch.arange(5)[None]
    with torch.no_grad():
        logits, out = head(hidden, embeds, positions)
        assert torch.allclose(logits, target.lm_head(out))  # ``out`` is normed: what feeds the next step
        other = embeds.clone()
        other[:, 0] = 5.0
        assert torch.allclose(head(hidden, other, positions)[0][:, 0], logits[:, 0])  # position 0 zeroed


def test_rope_turns_interleaved_pairs_as_vllms_gptj_style():
    """Pair (2i, 2i + 1) of the rope dims is one complex number turned by position x inv_freq[i] (vLLM's
    ``is_neox_style=False``; transformers' hy_v4 class turns halves, NeoX style)."""
    from draftguard.runner.mtp_hyv4 import _rotate

    x = torch.randn(1, 2, 3, 8)
    pos = torch.tensor([[0, 1, 5]])
    inv = 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8)
    angle = pos.float()[..., None] * inv
    turned = _rotate(x, angle.cos(), angle.sin())
    z = torch.view_as_complex(x.reshape(1, 2, 3, 4, 2).contiguous()) * torch.polar(torch.ones_like(angle), angle)[:, None]
    assert torch.allclose(turned, torch.view_as_real(z).flatten(-2), atol=1e-6)


def test_the_cache_decodes_what_a_whole_forward_computes(hyv4_folders):
    from transformers import DynamicCache

    from draftguard.runner.mtp_model import load_mtp_target

    target, _ = load_mtp_target(str(hyv4_folders["healthy"]))
    ids = torch.tensor([[40, 3, 6, 9, 12, 15, 18]])
    with torch.no_grad():
        whole = target(ids).logits
        cache = DynamicCache(config=target.config)
        first = target(ids[:, :5], cache=cache, use_cache=True).logits
        rest = target(ids[:, 5:], position_ids=torch.tensor([[5, 6]]), cache=cache, use_cache=True).logits
    assert torch.allclose(torch.cat([first, rest], 1), whole, atol=1e-5)


def test_routed_experts_clamp_their_swiglu_and_the_sinks_are_not_applied(hyv4_folders):
    """The routed experts' SwiGLU is clamped at ``swiglu_limit`` (vLLM's GPU experts; its CPU experts skip it), the
    shared ones not; a dense layer's learnable sink changes nothing (vLLM binds sinks only through its sparse MLA
    backend: "the sink bias is disabled")."""
    from draftguard.runner.mtp_hyv4 import HyV4Experts, hyv4_config
    from draftguard.runner.mtp_model import load_mtp_target

    text = hyv4_config(json.loads((hyv4_folders["healthy"] / "config.json").read_text()))
    experts = HyV4Experts(text)
    torch.nn.init.normal_(experts.gate_up_proj, std=1.0)
    torch.nn.init.normal_(experts.down_proj, std=0.1)
    x, weights, ids = torch.randn(4, 64) * 10, torch.ones(4, 1), torch.zeros(4, 1, dtype=torch.long)
    clamped = experts(x, weights, ids)
    gate, up = torch.nn.functional.linear(x, experts.gate_up_proj[0]).chunk(2, -1)
    assert gate.max() > 10 and up.abs().max() > 10  # the clamp has something to do
    plain = torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, experts.down_proj[0])
    capped = torch.nn.functional.silu(gate.clamp(max=10)) * up.clamp(-10, 10)
    assert torch.allclose(clamped, torch.nn.functional.linear(capped, experts.down_proj[0]), atol=1e-4)
    assert not torch.allclose(clamped, plain, atol=1e-2)
    target, _ = load_mtp_target(str(hyv4_folders["healthy"]))
    ids = torch.tensor([[40, 3, 6, 9]])
    with torch.no_grad():
        before = target(ids).logits
        for layer in target.model.layers:
            layer.self_attn.learnable_sink_param.fill_(math.log(50.0))
        assert torch.equal(target(ids).logits, before)


def test_the_layer_stored_as_mtp_layers_0_reads_as_at_n(capsys, hyv4_folders, tmp_path):
    """Tencent's checkpoints name the layer ``model.mtp_layers.0.*`` (vLLM's ``_remap_mtp_quant_exclusions`` says
    so), which vLLM's loader maps to layer N: the same layer, the same τ, no fault."""
    from safetensors.torch import load_file, save_file

    from draftguard.runner.mtp_weights import mtp_faults

    folder = _copy_with(hyv4_folders["healthy"], tmp_path)
    weights = load_file(str(folder / "model.safetensors"))
    renamed = {k.replace("model.layers.2.", "model.mtp_layers.0."): v for k, v in weights.items()}
    assert renamed.keys() != weights.keys()
    save_file(renamed, str(folder / "model.safetensors"))
    assert mtp_faults(folder) == []
    results = [run(capsys, f, "--num-prompts", "6") for f in (hyv4_folders["healthy"], folder)]
    assert [code for code, _r, _e in results] == [0, 0], results[1][2]
    assert results[0][1].mean_acceptance_length == results[1][1].mean_acceptance_length > 1.9
    dropped = _copy_with(hyv4_folders["dropped"], tmp_path / "d")
    assert "hold no tensor under `model.layers.2.`" in mtp_faults(dropped)[0]  # neither name: dropped


def test_a_bfloat16_run_keeps_the_router_and_the_ihc_mixes_in_float32_as_vllm(hyv4_folders):
    """vLLM builds the router and the iHC mixes with ``params_dtype=torch.float32`` and, under
    ``enable_lm_head_fp32``, computes the logits in float32; the rest of the model runs in the run's dtype."""
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    folder = str(hyv4_folders["healthy"])
    full, _ = load_mtp_target(folder)
    half, _ = load_mtp_target(folder, dtype=torch.bfloat16)
    head = load_mtp(folder, half)
    assert half.model.layers[0].self_attn.q_a_proj.weight.dtype == torch.bfloat16
    for name in ("layers.1.mlp.gate.weight", "layers.1.hc_attn_layer.hc_pre.fn", "hc_head.base"):
        kept = half.model.get_parameter(name)
        assert kept.dtype == torch.float32 and torch.equal(kept, full.model.get_parameter(name)), name
    assert head.block.mlp.gate.weight.dtype == torch.float32 and head.proj.weight.dtype == torch.bfloat16
    with torch.no_grad():
        logits = half(torch.tensor([[40, 3, 6, 9]])).logits
    assert logits.dtype == torch.float32
