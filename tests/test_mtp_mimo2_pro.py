"""MiMo-V2-Pro's and the omni export's MTP layer (issue 43): ``MiMoV2ForCausalLM`` (MiMo-V2-Pro / MiMo-V2.5-Pro;
also MiMo-V2.5's config.json, which vLLM 0.32 turns into ``MiMoV2OmniForCausalLM`` by its ``vision_config``) and
``MiMoV2OmniForCausalLM``, whose MTP layer vLLM 0.32 builds as Flash's (``MiMoV2MTP`` / ``MiMoV2OmniMTP`` in
``mimo_v2_mtp.py``, 1 layer by architecture). What differs is the target and the names (runner/mtp_mimo2.py):
a fused ``self_attn.qkv_proj``, the Pro's geometry (as many key/value heads in its full layers as in its
sliding ones, where transformers' MiMo-V2-Flash doubles them), the omni export's text model under
``model.language_model.`` beside its vision and audio towers.

The tiny targets are built here from the trained MiMo-V2-Flash fixture (``tests/fixtures/mtp-models/mimo-v2-flash``)
into tmp_path, computing the same function: q/k/v fused into ``qkv_proj``; for the Pro, the full layer's one
key/value head stored twice (``num_key_value_heads`` 1 -> 2, as many as ``swa_num_key_value_heads``, the Pro's
8 and 8), which leaves every query head reading the same keys and values. So each must reproduce Flash's
trained τ prompt for prompt. No weights shipped. vLLM 0.32's CPU build: tests/test_mtp_mimo2_pro_vllm.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import BAR, MODELS, accept, assert_healthy_matches_trained, dropped_fails  # noqa: E402

FLASH, MTP_SHARD = "mimo-v2-flash", "model-00002-of-00002.safetensors"
REAL = Path(__file__).resolve().parent / "data" / "mimo-v2-configs"
VISION = {"depth": 1, "hidden_size": 16, "num_heads": 2, "intermediate_size": 32, "out_hidden_size": 32,
          "patch_size": 14, "spatial_merge_size": 2, "temporal_patch_size": 2, "in_chans": 3}


def _fuse(state: dict, prefix: str) -> dict:
    """``<layer>.self_attn.{q,k,v}_proj.weight`` as one ``qkv_proj.weight`` ([Q; K; V] rows), under ``prefix``."""
    out = {}
    for key, tensor in state.items():
        if ".self_attn.q_proj." in key:
            stem = key.split(".self_attn.q_proj.")[0] + ".self_attn."
            tensor = torch.cat([state[stem + n + ".weight"] for n in ("q_proj", "k_proj", "v_proj")])
            key = stem + "qkv_proj.weight"
        elif ".self_attn.k_proj." in key or ".self_attn.v_proj." in key:
            continue
        text = key.startswith("model.") and not key.startswith(("model.mtp.", "model.visual."))
        out[prefix + key[len("model."):] if text else key] = tensor
    return out


def derived(tmp_path: Path, kind: str, *, mtp=None, model_type: str = "mimo_v2") -> Path:
    """The Flash fixture as a Pro ("pro") or omni ("omni": MiMo-V2.5's config, "omni-class": vLLM's class
    name) checkpoint computing the same function; ``mtp`` rewrites the MTP layer's tensors (a fault).
    ``model_type`` mimo_v2 as released (a config class only the checkpoint's remote code has); vLLM 0.32
    reads the file without remote code under transformers' ``mimo_v2_flash`` only."""
    from safetensors.torch import load_file, save_file

    folder = tmp_path / f"mimo-v2-{kind}"
    shutil.copytree(MODELS / FLASH, folder)
    raw = json.loads((folder / "config.json").read_text())
    for key in ("layer_types", "mlp_layer_types"):  # as released: vLLM's keys only
        raw.pop(key)
    raw.update(architectures=["MiMoV2ForCausalLM"], model_type=model_type, attention_projection_layout="fused_qkv")
    shards = {name: load_file(str(folder / name)) for name in sorted({*json.loads(
        (folder / "model.safetensors.index.json").read_text())["weight_map"].values()})}
    prefix = "model."
    if kind == "pro":  # the Pro's geometry: full layers with as many key/value heads as the sliding ones
        raw["num_key_value_heads"] = raw["swa_num_key_value_heads"]
        for state in shards.values():
            for name in ("k_proj", "v_proj"):
                key = f"model.layers.0.self_attn.{name}.weight"
                if key in state:
                    state[key] = state[key].view(1, -1, state[key].shape[1]).repeat_interleave(2, 0).flatten(0, 1)
    else:  # MiMo-V2.5: the text model under model.language_model., towers beside it that drafting never reads
        raw["vision_config"], raw["audio_config"] = VISION, {"audio_channels": 2}
        raw["architectures"] = ["MiMoV2OmniForCausalLM"] if kind == "omni-class" else raw["architectures"]
        prefix = "model.language_model."
        first = next(iter(shards))
        shards[first]["model.visual.patch_embed.proj.weight"] = torch.ones(16, 3, 2, 14, 14, dtype=torch.bfloat16)
        shards[first]["speech_embeddings.0.weight"] = torch.ones(4, 32, dtype=torch.bfloat16)
    index = {}
    for name, state in shards.items():
        state = _fuse(state, prefix)
        if name == MTP_SHARD and mtp is not None:
            state = mtp(state)
        save_file(state, str(folder / name), metadata={"format": "pt"})
        index.update({k: name for k in state})
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": index}))
    (folder / "config.json").write_text(json.dumps(raw, indent=1))
    return folder


@pytest.fixture(scope="module")
def pro(tmp_path_factory) -> Path:
    return derived(tmp_path_factory.mktemp("pro"), "pro")


@pytest.fixture(scope="module")
def omni(tmp_path_factory) -> Path:
    return derived(tmp_path_factory.mktemp("omni"), "omni")


def test_the_layout_and_count_come_from_the_architecture():
    """vLLM 0.32 (config/speculative.py) builds MiMoV2MTPModel / MiMoV2OmniMTPModel with 1 layer for both
    architectures, the config naming no count (MiMo-V2.5's and MiMo-V2.5-Pro's). Before: refused, "the Pro's
    geometry" / MiMoV2OmniMTPModel not built."""
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.mtp_coverage import NOT_BUILT, NOT_BUILT_TARGETS, vllm_drafter
    from draftguard.runner.mtp_weights import mtp_count, mtp_layout

    for arch, drafter in (("MiMoV2ForCausalLM", "MiMoV2MTPModel"), ("MiMoV2OmniForCausalLM", "MiMoV2OmniMTPModel")):
        raw = {"architectures": [arch], "model_type": "mimo_v2"}
        layout = mtp_layout(raw, "config.json")
        assert layout.name == "mimo_v2" and layout.prefix == "model.mtp.layers.{i}." and layout.sliding
        assert not layout.zero_first and layout.embeds_first and layout.base_model_type == "mimo_v2_flash"
        assert mtp_count(raw) == ("architectures", 1)
        assert vllm_drafter(raw)[2] == drafter and drafter not in NOT_BUILT
    assert "architecture:MiMoV2ForCausalLM" not in NOT_BUILT_TARGETS
    for name in ("xiaomimimo--mimo-v2.5", "xiaomimimo--mimo-v2.5-pro"):
        path = REAL / name / "config.json"
        raw = json.loads(path.read_text())
        assert mtp_layout(raw, str(path)).name == "mimo_v2" and mtp_count(raw, str(path)) == ("architectures", 1)
        fmt = detect_drafter(raw)  # the GPU path runs the model as its own target
        assert fmt.family == "mtp" and fmt.acceptance_testable and fmt.num_target_layers.key == "architectures"


@pytest.mark.parametrize("kind", ["pro", "omni"])
def test_healthy_pro_and_omni_mtp_layers_match_flashs_trained_tau_prompt_for_prompt(capsys, kind, pro, omni):
    """The same function as the trained Flash fixture, so its τ, prompt for prompt (1.89)."""
    assert_healthy_matches_trained(capsys, str({"pro": pro, "omni": omni}[kind]), 1.85)


def test_vllms_omni_class_name_is_the_same_target(capsys, tmp_path):
    assert_healthy_matches_trained(capsys, str(derived(tmp_path, "omni-class")), 1.85)


@pytest.mark.parametrize("kind", ["pro", "omni"])
def test_a_dropped_layer_fails_with_mtp_weights_named(capsys, tmp_path, kind):
    folder = derived(tmp_path, kind, mtp=lambda state: {})
    reason = dropped_fails(capsys, folder)
    assert "vLLM 0.32 builds 1 MTP layer(s) for MiMoV2ForCausalLM (by its architecture" in reason
    assert "the weights hold no tensor under `model.mtp.layers.0.`: dropped at save" in reason


def test_a_pro_mtp_layer_left_fp8_fails_with_the_fused_projection_named(capsys, tmp_path):
    """The layer's 2-D weights float8_e4m3fn with a weight_scale_inv each, no quantization_config: read raw."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
    import make_mtp_models

    folder = derived(tmp_path, "pro", mtp=make_mtp_models.fp8_state)
    code, result, err = accept(capsys, str(folder), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 1, err
    assert result.diagnosis["cause"] == "mtp-weights" and result.mean_acceptance_length < 1.25
    assert ("`model.mtp.layers.0.self_attn.qkv_proj.weight` is stored F8_E4M3 with "
            "`model.mtp.layers.0.self_attn.qkv_proj.weight_scale_inv` beside it") in result.diagnosis["reason"]


def test_the_targets_compute_flashs_function_in_vllms_geometry(pro, omni):
    """Each attention in vLLM's geometry (the Pro's full layer: 2 key/value heads, transformers would build 1
    and its sliding layer 4), the fused projections split, the towers not read; logits equal Flash's."""
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    flash, _ = load_mtp_target(str(MODELS / FLASH))
    ids = torch.tensor([[1, 40, 3, 6, 9, 12, 15, 18, 21]])
    for folder, kv in ((pro, [2, 2]), (omni, [1, 2])):
        target, _ = load_mtp_target(str(folder))
        assert [layer.self_attn.k_proj.out_features // 32 for layer in target.model.layers] == kv
        assert target.model.layers[0].self_attn.sinks is None and target.model.layers[1].self_attn.sinks is not None
        with torch.no_grad():
            assert torch.allclose(target(ids).logits, flash(ids).logits, atol=1e-5)
        head = load_mtp(str(folder), target)
        assert head.spec.faults == [] and head.block.self_attn.k_proj.out_features == 2 * 32
        assert head.block.self_attn.num_key_value_groups == 1


def test_a_fused_projection_that_does_not_fit_the_geometry_is_bad_input(pro, tmp_path):
    from draftguard.runner.mtp_model import load_mtp_target
    from draftguard.snapshot import BadInput

    folder = tmp_path / "pro-wrong-heads"
    shutil.copytree(pro, folder)
    raw = json.loads((folder / "config.json").read_text())
    raw["num_key_value_heads"] = 1  # the stored full layer has 2
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(BadInput, match=r"`model.layers.0.self_attn.qkv_proj.weight` has 192 rows; the config's "
                                       r"geometry calls for 64 \+ 32 \+ 32"):
        load_mtp_target(str(folder))


def test_the_light_check_flags_a_dropped_omni_layer_without_a_run(omni, tmp_path):
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    def errors(folder: Path) -> set[str]:
        return {f.rule for f in check_repo(load_snapshot(str(folder)), {}) if f.severity.name == "ERROR"}

    assert errors(omni) == set()
    assert errors(derived(tmp_path, "omni", mtp=lambda state: {})) == {"DG404"}


def _tiled_fp8(tensor: torch.Tensor, shards: int, sizes: tuple[int, int, int], block: int) -> tuple:
    """A [Q; K; V] weight stored as MiMo-V2.5-Pro stores it: ``shards`` shards of [Q_c; K_c; V_c], block
    FP8, the scales tiled shard by shard (the last block of a shard partial)."""
    q, k, v = (part.chunk(shards) for part in tensor.float().split(sizes))
    weights, scales = [], []
    for chunk in (torch.cat([q[i], k[i], v[i]]) for i in range(shards)):
        rows, cols = chunk.shape
        pad = torch.zeros(-(-rows // block) * block, -(-cols // block) * block)
        pad[:rows, :cols] = chunk
        grid = pad.unflatten(0, (-1, block)).unflatten(2, (-1, block)).abs().amax((1, 3)) / 448
        scale = grid.repeat_interleave(block, 0).repeat_interleave(block, 1)[:rows, :cols]
        weights.append((chunk / scale).to(torch.float8_e4m3fn))
        scales.append(grid)
    return torch.cat(weights), torch.cat(scales)


def test_a_block_fp8_fused_projection_stored_pre_sharded_is_read_as_vllm_reads_it(pro, tmp_path):
    """MiMo-V2.5-Pro's ``qkv_proj`` (27136 rows, scales [216, 48]) is 8 shards (``num_key_value_heads``) of
    [Q_c; K_c; V_c], scales tiled per shard; vLLM 0.32's ``_shard_fp8_qkv_proj`` gathers them. Here 2 shards
    of 96 rows in 64 x 64 blocks: scales 2 x 2 rows (one grid would be 3). Before: refused, the scale's shape
    is not one grid's."""
    from safetensors.torch import load_file, save_file

    from draftguard.runner.mtp_model import load_mtp, load_mtp_target

    folder = tmp_path / "pro-fp8"
    shutil.copytree(pro, folder)
    raw = json.loads((folder / "config.json").read_text())
    raw["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [64, 64],
                                  "activation_scheme": "dynamic"}
    (folder / "config.json").write_text(json.dumps(raw))
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    for shard in sorted(set(index["weight_map"].values())):
        state = load_file(str(folder / shard))
        for key in [k for k in state if k.endswith("qkv_proj.weight")]:
            state[key], state[key + "_scale_inv"] = _tiled_fp8(state[key], 2, (64, 64, 64), 64)
            assert tuple(state[key + "_scale_inv"].shape) == (4, 1)
            index["weight_map"][key + "_scale_inv"] = shard
        save_file(state, str(folder / shard), metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    plain, _ = load_mtp_target(str(pro))
    built, _ = load_mtp_target(str(folder))
    ids = torch.tensor([[1, 40, 3, 6, 9, 12, 15, 18, 21]])
    with torch.no_grad():
        want, got = plain(ids).logits, built(ids).logits
    assert (got - want).abs().max() < 0.1 * want.abs().max()
    for name in ("q_proj", "k_proj", "v_proj"):  # each part from its own rows of every shard
        a, b = (getattr(m.model.layers[0].self_attn, name).weight for m in (plain, built))
        assert (a - b).abs().max() <= a.abs().max() / 8
    head, fp8_head = load_mtp(str(pro), plain), load_mtp(str(folder), built)
    a, b = head.block.self_attn.k_proj.weight, fp8_head.block.self_attn.k_proj.weight
    assert (a - b).abs().max() <= a.abs().max() / 8 and fp8_head.spec.faults == []
