"""DeepSeek-V3's MTP layer as released checkpoints ship it (issue 43): MoE (``tests/fixtures/mtp-models/dsv3-moe``,
``make_mtp_dsv3.py --moe``) and block-FP8 under a declared ``quantization_config`` (a copy of that fixture
built here into tmp_path, not shipped), under the reference (``runner/mtp_dsv3.py``) and, marked vllm,
vLLM's CPU build, which runs the MoE layer but not this fixture's FP8 copy (measured 2026-12-05): in
float32, which its CPU MLA needs here, fp8 is refused ("torch.float32 is not supported for quantization
method fp8"); in bfloat16 the CPU MLA's packing refuses the fixture's 8-wide heads ("invalid weight input
features 8"), and its CPU FP8 kernel (W8A16) wants K blocks of 128 and N blocks and output widths in
multiples of 32 (q_proj's 72 rows: "invalid weight out features 72").
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import BAR, MODELS, accept, trained  # noqa: E402  (one accept call)
from tests.test_mtp_dsv3 import VLLM_ARGS  # noqa: E402

MTP_SHARD, TARGET_SHARD = "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"
BLOCK = (128, 128)  # DeepSeek-V3's weight_block_size: kv_a_proj_with_mqa [576, 32] is 4.5 x 1 blocks
# What DeepSeek's FP8 checkpoints keep in bf16: embeddings, the head and its copy, norms, the router, eh_proj
# (vLLM's deepseek_mtp.py builds eh_proj as a plain nn.Linear).
KEPT = ("embed_tokens.weight", "lm_head.weight", "shared_head.head.weight", "norm.weight", "layernorm.weight",
        "mlp.gate.weight", "e_score_correction_bias", "eh_proj.weight")


def fp8_blocks(w: torch.Tensor, block=BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """A weight as float8_e4m3fn plus a float32 ``weight_scale_inv`` per block (real = fp8 x scale_inv)."""
    rows, cols = w.shape
    grid = (math.ceil(rows / block[0]), math.ceil(cols / block[1]))
    scale = torch.zeros(grid)
    for i in range(grid[0]):
        for j in range(grid[1]):
            part = w[i * block[0]:(i + 1) * block[0], j * block[1]:(j + 1) * block[1]].float()
            scale[i, j] = part.abs().max().clamp(min=1e-12) / 448.0
    full = scale.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)[:rows, :cols]
    return (w.float() / full).to(torch.float8_e4m3fn), scale


def fp8_copy(tmp_path: Path, declare: bool = True, name: str = "dsv3-moe-fp8") -> Path:
    """The dsv3-moe folder with every linear weight of the target and the MTP layer block-FP8, as
    DeepSeek-V3's checkpoints store them, the config declaring it (or not: the fault)."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / name
    shutil.copytree(MODELS / "dsv3-moe", folder, symlinks=False)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    for shard in (TARGET_SHARD, MTP_SHARD):
        state = load_file(str(folder / shard))
        out = {}
        for k, v in state.items():
            if v.dim() == 2 and not k.endswith(KEPT):
                out[k], out[k + "_scale_inv"] = fp8_blocks(v)
                index["weight_map"][k + "_scale_inv"] = shard
            else:
                out[k] = v
        (folder / shard).unlink()
        save_file(out, str(folder / shard), metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    if declare:
        raw = json.loads((folder / "config.json").read_text())
        raw["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                      "weight_block_size": list(BLOCK)}
        (folder / "config.json").write_text(json.dumps(raw))
    return folder


def test_the_moe_fixture_is_an_moe_layer_stored_expert_by_expert_and_small():
    from safetensors import safe_open

    raw = json.loads((MODELS / "dsv3-moe" / "config.json").read_text())
    assert raw["first_k_dense_replace"] == raw["num_hidden_layers"] == 1 and raw["n_routed_experts"] == 8
    with safe_open(str(MODELS / "dsv3-moe" / MTP_SHARD), "pt") as f:
        keys = set(f.keys())
    assert {f"model.layers.1.mlp.experts.{e}.{p}.weight" for e in range(8)
            for p in ("gate_proj", "up_proj", "down_proj")} <= keys
    assert {"model.layers.1.mlp.gate.weight", "model.layers.1.mlp.gate.e_score_correction_bias",
            "model.layers.1.mlp.shared_experts.down_proj.weight"} <= keys
    shard = MODELS / "dsv3-moe" / TARGET_SHARD
    assert shard.is_symlink() and (MODELS / "dsv3-moe" / MTP_SHARD).stat().st_size < 250_000


def test_healthy_moe_mtp_layer_passes_and_matches_its_trained_tau_prompt_for_prompt(capsys):
    """Before: exit 2, "an MoE layer is not built yet"."""
    code, result, err = accept(capsys, "dsv3-moe", "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.diagnosis is None
    assert [round(p.mean_acceptance_length, 4) for p in result.per_prompt] == trained("dsv3-moe")["per_prompt"]
    assert result.mean_acceptance_length > 1.9 and trained("dsv3-moe")["faults"] == []


def test_the_experts_are_stacked_from_the_checkpoint_and_the_router_reads_the_correction_bias():
    from safetensors.torch import load_file

    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    target, _ = load_mtp_target(str(MODELS / "dsv3-moe"))
    head = load_mtp(str(MODELS / "dsv3-moe"), target)
    stored = load_file(str(MODELS / "dsv3-moe" / MTP_SHARD))
    experts = head.block.mlp.experts
    for e in (0, 7):
        gate, up = experts.gate_up_proj[e].chunk(2)
        assert torch.equal(gate, stored[f"model.layers.1.mlp.experts.{e}.gate_proj.weight"].float())
        assert torch.equal(up, stored[f"model.layers.1.mlp.experts.{e}.up_proj.weight"].float())
        assert torch.equal(experts.down_proj[e], stored[f"model.layers.1.mlp.experts.{e}.down_proj.weight"].float())
    bias = stored["model.layers.1.mlp.gate.e_score_correction_bias"]
    assert torch.equal(head.block.mlp.gate.e_score_correction_bias, bias) and bias.abs().sum() > 0
    hidden = torch.randn(64, 32)
    _, _, ids = head.block.mlp.gate(hidden)
    head.block.mlp.gate.e_score_correction_bias.zero_()
    _, _, unbiased = head.block.mlp.gate(hidden)
    assert not torch.equal(ids.sort(-1).values, unbiased.sort(-1).values)  # the bias steers the choice


def _routing(router, hidden):
    _, weights, ids = router(hidden)
    order = ids.argsort(-1)
    return ids.gather(1, order), weights.gather(1, order)


def test_the_router_is_vllms_grouped_topk():
    """For DeepSeek-V3's settings (sigmoid, noaux_tc) transformers' router and vLLM's agree; for the others
    vLLM's grouped_topk reads scoring_func and topk_method, which transformers' router ignores."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

    from draftguard.runner.mtp_dsv3 import VllmRouter

    torch.manual_seed(0)
    keys = dict(hidden_size=16, n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
                norm_topk_prob=True, routed_scaling_factor=2.5, scoring_func="sigmoid", topk_method="noaux_tc")
    config = DeepseekV3Config(**keys)
    ours, theirs = VllmRouter(config), DeepseekV3TopkRouter(config)
    weight, bias, hidden = torch.randn(8, 16), torch.randn(8) * 0.3, torch.randn(50, 16)
    for router in (ours, theirs):
        router.weight.data, router.e_score_correction_bias.data = weight.clone(), bias.clone()
    (a_ids, a_w), (b_ids, b_w) = _routing(ours, hidden), _routing(theirs, hidden)
    assert torch.equal(a_ids, b_ids) and torch.allclose(a_w, b_w, atol=1e-6)
    # softmax scores, no correction bias (topk_method greedy): groups score their max; a hand check
    soft = VllmRouter(DeepseekV3Config(**{**keys, "scoring_func": "softmax", "topk_method": "greedy", "n_group": 1,
                                          "topk_group": 1, "norm_topk_prob": False, "routed_scaling_factor": 1.0}))
    soft.weight.data, soft.e_score_correction_bias.data = weight.clone(), bias.clone()
    ids, w = _routing(soft, hidden)
    probs = (hidden @ weight.T).softmax(-1)
    want = probs.topk(3, -1)[1].sort(-1).values
    assert torch.equal(ids, want) and torch.allclose(w, probs.gather(1, want), atol=1e-6)


def test_block_fp8_dequantizes_to_the_float_weights_within_fp8_error(tmp_path):
    from safetensors.torch import load_file

    from draftguard.runner.mtp_quant import dequantize

    folder = fp8_copy(tmp_path)
    healthy = {**load_file(str(MODELS / "dsv3-moe" / MTP_SHARD)), **load_file(str(MODELS / "dsv3" / TARGET_SHARD))}
    stored = {**load_file(str(folder / MTP_SHARD)), **load_file(str(folder / TARGET_SHARD))}
    checked = 0
    for k, v in stored.items():
        if v.dtype != torch.float8_e4m3fn:
            continue
        scale = stored[k + "_scale_inv"]
        real = dequantize(v, scale, BLOCK, "f", k)
        want = healthy[k].float()
        floor = scale.max() * 2 ** -9  # e4m3's smallest step, in the block's scale
        assert ((real - want).abs() <= want.abs() * 2 ** -4 + floor).all(), k  # 3 mantissa bits: half a step
        checked += 1
    assert checked > 20 and tuple(stored["model.layers.0.self_attn.kv_a_proj_with_mqa.weight_scale_inv"].shape) == (5, 1)
    # a partial last block is read with its own scale, not its neighbour's
    w = torch.ones(130, 3).to(torch.float8_e4m3fn)
    assert dequantize(w, torch.tensor([[1.0], [4.0]]), BLOCK)[128:].unique().tolist() == [4.0]


def test_the_declared_fp8_moe_copy_runs_close_to_healthy(capsys, tmp_path):
    """Before: exit 2, "which the reference does not dequantize"."""
    folder = fp8_copy(tmp_path)
    code, result, err = accept(capsys, str(folder), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.diagnosis is None
    healthy = trained("dsv3-moe")["mean_acceptance_length"]
    assert abs(result.mean_acceptance_length - healthy) <= 0.05 * healthy, (result.mean_acceptance_length, healthy)


def test_fp8_moe_weights_with_no_declared_quantization_stay_an_mtp_weights_fault(tmp_path):
    from draftguard.runner.mtp_weights import mtp_faults

    faults = mtp_faults(fp8_copy(tmp_path, declare=False))
    assert any("`model.layers.1.mlp.experts.3.down_proj.weight` is stored F8_E4M3" in f and
               "declares no quantization_config" in f for f in faults), faults


def _edit(folder: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(str(folder / MTP_SHARD))
    change(state)
    (folder / MTP_SHARD).unlink()
    save_file(state, str(folder / MTP_SHARD), metadata={"format": "pt"})


@pytest.mark.parametrize("change, says, key", [
    (lambda s: s.update({"model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv": torch.ones(4, 1)}),
     "has shape (4, 1), but `model.layers.1.self_attn.kv_a_proj_with_mqa.weight` 576 x 32 in 128 x 128 blocks "
     "(quantization_config.weight_block_size) needs (5, 1)",
     "model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv"),
    (lambda s: s.pop("model.layers.1.mlp.experts.2.up_proj.weight_scale_inv"),
     "under the declared quantization_config (quant_method 'fp8', FP8 128 x 128 blocks), but the weights hold no "
     "`model.layers.1.mlp.experts.2.up_proj.weight_scale_inv`", "model.layers.1.mlp.experts.2.up_proj.weight_scale_inv"),
    (lambda s: s.update({"model.layers.1.mlp.experts.5.down_proj.weight": torch.zeros(32, 16).to(torch.float8_e4m3fn)}),
     "`model.layers.1.mlp.experts.5.down_proj.weight` has shape (32, 16), the config calls for (32, 32) per expert",
     "model.layers.1.mlp.experts.5.down_proj.weight"),
])
def test_a_scale_or_expert_shape_mismatch_is_bad_input_naming_file_and_key(tmp_path, capsys, change, says, key):
    folder = fp8_copy(tmp_path)
    _edit(folder, change)
    code, result, err = accept(capsys, str(folder), "--num-prompts", "2", "--min-acceptance-length", BAR)
    assert code == 2 and result is None and len(err.strip().splitlines()) == 1, err
    assert f"{folder / MTP_SHARD}: " in err and says in err and key in err


@pytest.mark.vllm
def test_vllm_runs_the_moe_mtp_layer(capsys, monkeypatch):
    """vLLM 0.32's CPU build loads and runs the MoE MTP layer (its fused-MoE CPU experts, float32). Its
    τ is low for the reason the dense layer's is (the next test)."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, "dsv3-moe", *VLLM_ARGS, "--num-prompts", "4", "--min-acceptance-length", "1.0")
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.mean_acceptance_length > 1.0


@pytest.mark.vllm
@pytest.mark.xfail(strict=True, reason="vLLM 0.32's CPU MLA leaves the key's RoPE out (tests/test_mtp_dsv3.py, the dense "
                   "layer's strict xfail): measured 2026-12-05, 4 prompts, 2 draft tokens, vLLM τ 1.52 against the "
                   "reference's 3.00, no text the same; strict, so a vLLM that rotates the key shows here")
def test_both_backends_agree_on_the_moe_mtp_layer_within_5_percent(capsys, monkeypatch):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    args = [a if a != "vllm" else "both" for a in VLLM_ARGS]
    code, result, err = accept(capsys, "dsv3-moe", *args, "--num-prompts", "4", "--num-speculative-tokens", "2",
                               "--min-acceptance-length", "2.7")
    assert code == 0, err
    diff = result.run["differential"]
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4


def test_the_layer_is_moe_or_dense_as_vllm_decides_not_as_transformers_alone():
    """vLLM's DeepseekV2DecoderLayer also reads moe_layer_freq (layer_idx % freq == 0), which transformers 5
    ignores: with first_k_dense_replace 0 and moe_layer_freq 2, layer 1 is dense in vLLM, MoE in transformers."""
    from transformers import DeepseekV3Config
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3DecoderLayer

    from draftguard.runner.mtp_dsv3 import VllmRouter, dsv3_block

    raw = json.loads((MODELS / "dsv3-moe" / "config.json").read_text())
    keys = {k: v for k, v in raw.items() if k not in ("model_type", "architectures")}
    for changes, moe in (({}, True), ({"first_k_dense_replace": 0, "moe_layer_freq": 2}, False),
                         ({"first_k_dense_replace": 0, "moe_layer_freq": 1}, True), ({"first_k_dense_replace": 2}, False)):
        config = DeepseekV3Config(**{**keys, **changes})
        block = dsv3_block(config, DeepseekV3DecoderLayer, 1)
        assert hasattr(block.mlp, "experts") is moe, changes
        assert isinstance(getattr(block.mlp, "gate", None), VllmRouter) is moe
    config = DeepseekV3Config(**{**keys, "first_k_dense_replace": 0, "moe_layer_freq": 2})
    dsv3_block(config, DeepseekV3DecoderLayer, 1)
    assert config.first_k_dense_replace == 0  # a copy is changed, not the target's config
