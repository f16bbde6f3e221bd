"""Tencent HY-V3's (Hy3) MTP layer (issue 43): ``HYV3ForCausalLM``, ``model.layers.{N}.{enorm, hnorm, eh_proj,
final_layernorm}`` and a MoE ``HYV3DecoderLayer`` at N, the embedding zeroed at position 0, the target's
embeddings and ``lm_head`` shared, under the reference. The tiny target and its trained MTP layer are built at
test time into tmp_path (tests/fixtures/make_mtp_hyv3.py; nothing shipped). vLLM 0.32's CPU build on the
same folders: tests/test_mtp_hyv3_vllm.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from draftguard.cli import main  # noqa: E402
from draftguard.runner.result import AcceptanceResult  # noqa: E402
from tests.test_mtp import PROMPTS  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
BAR = "1.8"  # healthy 2.00, the layer left FP8 1.55, dropped 1.02 (measured 2026-12-05, 24 prompts)


@pytest.fixture(scope="session")
def hyv3_folders() -> dict[str, Path]:
    import built_once
    import make_mtp_hyv3

    return built_once.once("hyv3", make_mtp_hyv3.build)


def run(capsys, target: Path, *args: str) -> tuple[int, AcceptanceResult | None, str]:
    code = main(["accept", "--target", str(target), "--method", "mtp", "--prompts", str(PROMPTS),
                 "--max-new-tokens", "32", "--quiet", "--format", "json", "--no-early-stop",
                 "--min-acceptance-length", BAR, *args])
    out, err = capsys.readouterr()
    return code, (AcceptanceResult.from_json(out, "stdout") if out.strip() else None), err


def test_the_hyv3_layout_is_read_from_the_architecture_and_the_model_type():
    from draftguard.check.drafter.detect import MTP_REFERENCE_ARCHITECTURES, detect_drafter
    from draftguard.runner.mtp_coverage import NOT_BUILT
    from draftguard.runner.mtp_weights import mtp_layout
    from make_mtp_hyv3 import hyv3_config

    raw = hyv3_config()
    layout = mtp_layout(raw, "config.json")
    assert layout.name == "hy_v3" and layout.block_at_n and layout.zero_first and layout.embeds_first
    assert layout.final_norm == "final_layernorm" and not layout.recycle_prenorm and not layout.own_head
    assert layout.prefix.format(n=raw["num_hidden_layers"]) == "model.layers.2."
    assert mtp_layout({**raw, "architectures": []}, "config.json").name == "hy_v3"  # by model_type
    assert "HYV3ForCausalLM" in MTP_REFERENCE_ARCHITECTURES and "HYV3MTPModel" not in NOT_BUILT
    assert detect_drafter(raw).acceptance_testable


def test_healthy_hyv3_mtp_layer_passes_well_above_1(capsys, hyv3_folders):
    """Before: exit 2, "vLLM 0.32 drafts for it with method mtp (its HYV3MTPModel), which the reference does
    not build yet". Measured 2026-12-05: τ 2.00 (K = 1, 24 prompts, 32 new tokens)."""
    code, result, err = run(capsys, hyv3_folders["healthy"])
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert result.mean_acceptance_length > 1.9


def fails_with_mtp_weights(capsys, folder: Path, below: float, said: str) -> AcceptanceResult:
    """A faulty copy's run: exit 1, τ below ``below``, the diagnosis ``mtp-weights`` saying ``said``."""
    code, result, err = run(capsys, folder)
    assert code == 1, err
    assert result.diagnosis["cause"] == "mtp-weights" and result.mean_acceptance_length < below
    assert said in result.diagnosis["reason"]
    return result


def test_a_dropped_hyv3_mtp_layer_fails_with_mtp_weights_named(capsys, hyv3_folders):
    result = fails_with_mtp_weights(capsys, hyv3_folders["dropped"], 1.25,
                                    "the weights hold no tensor under `model.layers.2.`: dropped at save")
    # vLLM 0.32 ran this copy (τ 1.01, 4 prompts, --backend vllm, 2026-12-05): HYV3MTP.load_weights returns None,
    # so DefaultModelLoader's "weights not initialized" check never runs; the sentence said it refused to start.
    assert "vLLM 0.32 starts all the same" in result.diagnosis["reason"]


def test_a_hyv3_mtp_layer_left_fp8_fails_with_mtp_weights_named(capsys, hyv3_folders):
    """The layer's weights float8 with their scales beside them, no quantization_config: read raw (τ 1.55)."""
    fails_with_mtp_weights(capsys, hyv3_folders["fp8"], 1.7, "`model.layers.2.eh_proj.weight` is stored F8_E4M3")


def test_the_layers_own_embeddings_and_head_are_skipped_as_vllm_skips_them(hyv3_folders, tmp_path):
    """vLLM's HYV3MTP.load_weights skips ``model.layers.N.embed_tokens`` and ``shared_head`` and maps the target's
    ``model.embed_tokens`` / ``lm_head`` in (Tencent's infer_mtp uses lm_head): copies there that differ are
    neither read nor refused nor a fault; the head drafts with the target's."""
    from safetensors.torch import load_file, save_file

    from draftguard.runner.mtp_model import load_mtp, load_mtp_target
    from draftguard.runner.mtp_weights import mtp_faults

    folder = tmp_path / "copies"
    folder.mkdir()
    (folder / "config.json").write_text((hyv3_folders["healthy"] / "config.json").read_text())
    weights = load_file(str(hyv3_folders["healthy"] / "model.safetensors"))
    weights["model.layers.2.embed_tokens.weight"] = torch.randn_like(weights["model.embed_tokens.weight"])
    weights["model.layers.2.shared_head.head.weight"] = torch.randn_like(weights["lm_head.weight"])
    weights["model.layers.2.shared_head.norm.weight"] = torch.ones(64)
    save_file(weights, str(folder / "model.safetensors"))
    assert mtp_faults(folder) == []
    target, _ = load_mtp_target(str(folder))
    head = load_mtp(str(folder), target)
    assert head._shared["head"] is target.lm_head and head.own_embed is None


def test_the_head_is_vllms_hyv3_layer(hyv3_folders):
    """Zeroed at position 0, [embedding, hidden], final_layernorm's output fed on and read by the target's
    lm_head; the layer at N MoE (first_k_dense_replace 1), routed by HyV3Router, with q/k norms."""
    from safetensors.torch import load_file

    from draftguard.runner.mtp_hyv3 import HyV3Router
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    folder = str(hyv3_folders["healthy"])
    target, _ = load_mtp_target(folder)
    head = load_mtp(folder, target)
    stored = load_file(str(hyv3_folders["healthy"] / "model.safetensors"))
    assert type(head.block).__name__ == "HYV3DecoderLayer" and isinstance(head.block.mlp.gate, HyV3Router)
    assert torch.equal(head.block.mlp.gate.weight, stored["model.layers.2.mlp.router.gate.weight"])
    assert torch.equal(head.block.mlp.e_score_correction_bias, stored["model.layers.2.mlp.expert_bias"])
    gate, _up = head.block.mlp.experts.gate_up_proj[3].chunk(2)
    assert torch.equal(gate, stored["model.layers.2.mlp.experts.3.gate_proj.weight"])
    assert torch.equal(head.block.mlp.shared_experts.up_proj.weight, stored["model.layers.2.mlp.shared_mlp.up_proj.weight"])
    assert torch.equal(head.block.self_attn.q_norm.weight, stored["model.layers.2.self_attn.q_norm.weight"])
    assert torch.equal(head.final_norm.weight, stored["model.layers.2.final_layernorm.weight"])
    hidden, embeds = torch.randn(1, 5, 64), torch.randn(1, 5, 64)
    positions = torch.arange(5)[None]
    with torch.no_grad():
        logits, out = head(hidden, embeds, positions)
        assert torch.allclose(logits, target.lm_head(out))  # ``out`` is normed: what feeds the next step
        other = embeds.clone()
        other[:, 0] = 5.0
        assert torch.allclose(head(hidden, other, positions)[0][:, 0], logits[:, 0])  # position 0 zeroed


def test_the_target_reads_the_checkpoint_names_and_routes_as_vllm(hyv3_folders):
    from safetensors.torch import load_file

    from draftguard.runner.mtp_hyv3 import HyV3Router
    from draftguard.runner.mtp_model import load_mtp_target

    target, _ = load_mtp_target(str(hyv3_folders["healthy"]))
    stored = load_file(str(hyv3_folders["healthy"] / "model.safetensors"))
    moe = target.model.layers[1].mlp
    assert type(target.model.layers[0].mlp).__name__ == "HYV3MLP" and isinstance(moe.gate, HyV3Router)
    assert torch.equal(moe.gate.weight, stored["model.layers.1.mlp.router.gate.weight"])
    assert torch.equal(moe.e_score_correction_bias, stored["model.layers.1.mlp.expert_bias"])
    assert torch.equal(moe.experts.down_proj[1], stored["model.layers.1.mlp.experts.1.down_proj.weight"])


def test_routing_reads_route_norm_and_the_scale_as_vllm_does():
    """vLLM renormalises the chosen scores only under ``route_norm`` (transformers' router always does), and
    scales by ``router_scaling_factor``, 1.0 where the file states none (transformers' default: 2.826);
    without ``qk_norm`` vLLM's attention has no q/k norms (transformers' class always builds them)."""
    from draftguard.runner.mtp_hyv3 import HyV3Router, hyv3_block, hyv3_config
    from make_mtp_hyv3 import hyv3_config as fixture_config

    raw = {k: v for k, v in fixture_config().items() if k != "router_scaling_factor"}
    text = hyv3_config({**raw, "route_norm": False, "qk_norm": False})
    assert text.router_scaling_factor == 1.0 and text.mlp_layer_types == ["dense", "sparse"]
    assert hyv3_config({**raw, "expert_hidden_dim": 24}).moe_intermediate_size == 24  # vLLM's width key
    router = HyV3Router(text)
    torch.nn.init.normal_(router.weight)
    hidden, bias = torch.randn(3, 64), torch.tensor([0.0, 5.0, 0.0, 0.0])
    logits, weights, ids = router(hidden, bias)
    assert (ids == 1).any(-1).all()  # the bias chooses
    assert torch.allclose(weights, logits.sigmoid().gather(1, ids))  # not renormalised, scale 1
    block = hyv3_block(text, __import__("transformers").models.hy_v3.modeling_hy_v3.HYV3DecoderLayer, 2)
    assert isinstance(block.self_attn.q_norm, torch.nn.Identity) and isinstance(block.mlp.gate, HyV3Router)


def test_a_config_without_first_k_dense_replace_is_bad_input_naming_the_key(capsys, hyv3_folders, tmp_path):
    import shutil

    folder = tmp_path / "no-fkdr"
    shutil.copytree(hyv3_folders["healthy"], folder)
    raw = json.loads((folder / "config.json").read_text())
    del raw["first_k_dense_replace"]
    (folder / "config.json").write_text(json.dumps(raw))
    code, _result, err = run(capsys, folder)
    assert code == 2 and "`first_k_dense_replace`" in err and "Traceback" not in err
