"""Declared FP8 schemes other than DeepSeek-V3's block FP8 (issue 43: "per-tensor FP8 and other declared
quantization schemes in MTP layers" were refused, exit 2, though vLLM serves them): the shipped, trained
DeepSeek-V3 MoE MTP fixture (``tests/fixtures/mtp-models/dsv3-moe``) is stored here, into tmp_path, as
each scheme stores it (fp8 per tensor with static activation scales, compressed-tensors per channel,
per tensor and by block, ModelOpt FP8 and FP8_PER_CHANNEL_PER_TOKEN, fbgemm_fp8), the target's linear
weights and the MTP layer's alike; each runs within 5 % of the healthy fixture's trained τ. A scale of
the wrong shape, a missing one, and a declared scheme that is not FP8 are bad input naming the file and key.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_mtp import BAR, MODELS, accept, trained  # noqa: E402  (one accept call)
from tests.test_mtp_dsv3_moe import KEPT, MTP_SHARD, TARGET_SHARD, fp8_blocks  # noqa: E402

FP8_MAX = 448.0
ACT = {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True, "symmetric": True}


def _ct(strategy: str, **extra) -> dict:
    """llm-compressor's FP8 export: one config group over every Linear, the head left out."""
    weights = {"num_bits": 8, "type": "float", "strategy": strategy, "symmetric": True, "dynamic": False, **extra}
    return {"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "input_activations": ACT}},
            "ignore": ["lm_head"]}


# name: (quantization_config, granularity, scale suffix, whether the checkpoint carries static input scales)
SCHEMES = {
    "fp8-per-tensor-static": ({"quant_method": "fp8", "activation_scheme": "static"}, "tensor", "_scale", True),
    "compressed-tensors-channel": (_ct("channel"), "channel", "_scale", False),
    "compressed-tensors-tensor": (_ct("tensor"), "tensor", "_scale", False),
    "compressed-tensors-block": (_ct("block", block_structure=[128, 128]), "block", "_scale", False),
    "modelopt-fp8": ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": None,
                      "exclude_modules": ["lm_head"]}, "tensor", "_scale", True),
    "modelopt-per-channel-nested": ({"quant_method": "modelopt", "quantization": {
        "quant_algo": "FP8_PER_CHANNEL_PER_TOKEN", "exclude_modules": ["lm_head"]}}, "channel", "_scale", False),
    "fbgemm-fp8": ({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                    "modules_to_not_convert": ["lm_head"]}, "channel", "_scale", False),
}


def quantize(w: torch.Tensor, granularity: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A weight as float8_e4m3fn and its scale (real = fp8 x scale): one value, one per row [R, 1], or
    one per 128 x 128 block."""
    if granularity == "block":
        return fp8_blocks(w)
    w = w.float()
    amax = w.abs().amax(dim=1, keepdim=True) if granularity == "channel" else w.abs().max()
    scale = amax.clamp(min=1e-12) / FP8_MAX
    return (w / scale).to(torch.float8_e4m3fn), scale.reshape(()) if granularity == "tensor" else scale


def scheme_copy(tmp_path: Path, name: str) -> Path:
    """dsv3-moe stored as the scheme ``name`` stores it, into tmp_path."""
    from safetensors.torch import load_file, save_file

    config, granularity, suffix, static = SCHEMES[name]
    folder = tmp_path / name
    shutil.copytree(MODELS / "dsv3-moe", folder, symlinks=False)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    for shard in (TARGET_SHARD, MTP_SHARD):
        out = {}
        for k, v in load_file(str(folder / shard)).items():
            if v.dim() == 2 and not k.endswith(KEPT):
                out[k], out[k + suffix] = quantize(v, granularity)
                extra = [k + suffix]
                if static:  # a calibrated activation scale, as static schemes store one
                    stem = k[:-len(".weight")]
                    out[stem + ".input_scale"] = torch.tensor(0.02)
                    extra.append(stem + ".input_scale")
                index["weight_map"].update({e: shard for e in extra})
            else:
                out[k] = v
        (folder / shard).unlink()
        save_file(out, str(folder / shard), metadata={"format": "pt"})
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    raw = json.loads((folder / "config.json").read_text())
    raw["quantization_config"] = config
    (folder / "config.json").write_text(json.dumps(raw))
    return folder


@pytest.mark.parametrize("name", list(SCHEMES))
def test_each_declared_fp8_scheme_runs_close_to_the_healthy_layer(capsys, tmp_path, name):
    """Before: exit 2, "which the reference does not dequantize (it dequantizes block FP8 ...)"
    for every scheme here but none (fp8 per tensor: the same, compressed-tensors, modelopt, fbgemm_fp8)."""
    folder = scheme_copy(tmp_path, name)
    code, result, err = accept(capsys, str(folder), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.diagnosis is None
    healthy = trained("dsv3-moe")["mean_acceptance_length"]
    assert abs(result.mean_acceptance_length - healthy) <= 0.05 * healthy, (name, result.mean_acceptance_length, healthy)


def test_the_schemes_are_read_from_the_config_as_vllm_names_them():
    from draftguard.runner.mtp_quant import fp8_scheme

    got = {name: (s.granularity, s.suffix, s.block) for name, (config, *_rest) in SCHEMES.items()
           if (s := fp8_scheme({"quantization_config": config}))}
    assert got == {
        "fp8-per-tensor-static": ("tensor", "_scale", None),
        "compressed-tensors-channel": ("channel", "_scale", None),
        "compressed-tensors-tensor": ("tensor", "_scale", None),
        "compressed-tensors-block": ("block", "_scale", (128, 128)),
        "modelopt-fp8": ("tensor", "_scale", None),
        "modelopt-per-channel-nested": ("channel", "_scale", None),
        "fbgemm-fp8": ("channel", "_scale", None),
    }
    assert fp8_scheme({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}).suffix == \
        "_scale_inv"
    int8 = _ct("channel")
    int8["config_groups"]["group_0"]["weights"]["type"] = "int"
    for other in (int8, {"quant_method": "modelopt", "quant_algo": "NVFP4"}, {"quant_method": "awq"},
                  {"quant_method": "fp8", "weight_block_size": [128]}):
        assert fp8_scheme({"quantization_config": other}) is None, other


def test_per_channel_dequantization_reads_each_rows_scale():
    from draftguard.runner.mtp_quant import Fp8Scheme, dequantize

    w = torch.randn(5, 7) * torch.tensor([[1.0], [10.0], [0.1], [3.0], [100.0]])
    q, scale = quantize(w, "channel")
    real = dequantize(q, scale, Fp8Scheme("compressed-tensors", "channel", "_scale"), "f", "w")
    assert ((real - w).abs() <= w.abs() * 2 ** -4 + scale * 2 ** -9).all()  # e4m3: half a step of 3 mantissa bits
    q, scale = quantize(w, "tensor")
    real = dequantize(q, scale, Fp8Scheme("fp8", "tensor", "_scale"), "f", "w")
    assert torch.allclose(real, q.float() * scale)


def _edit(folder: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    state = load_file(str(folder / MTP_SHARD))
    change(state)
    (folder / MTP_SHARD).unlink()
    save_file(state, str(folder / MTP_SHARD), metadata={"format": "pt"})


EH = "model.layers.1.self_attn.q_proj.weight"


@pytest.mark.parametrize("name, change, says, key", [
    ("compressed-tensors-channel", lambda s: s.update({EH + "_scale": torch.ones(3, 1)}),
     f"`{EH}_scale` has shape (3, 1), but `{EH}` 72 x 32 under the declared quantization_config "
     "(quant_method 'compressed-tensors', FP8 per channel) needs (72, 1), one per output row", EH + "_scale"),
    ("fp8-per-tensor-static", lambda s: s.update({EH + "_scale": torch.ones(72, 1)}),
     f"`{EH}_scale` has shape (72, 1), but `{EH}` 72 x 32 under the declared quantization_config "
     "(quant_method 'fp8', FP8 per tensor) needs one value", EH + "_scale"),
    ("modelopt-fp8", lambda s: s.pop(EH + "_scale"),
     f"`{EH}` is stored torch.float8_e4m3fn under the declared quantization_config (quant_method 'modelopt', "
     f"FP8 per tensor), but the weights hold no `{EH}_scale`", EH + "_scale"),
])
def test_a_scale_that_is_missing_or_of_the_wrong_shape_is_bad_input_naming_file_and_key(
        capsys, tmp_path, name, change, says, key):
    folder = scheme_copy(tmp_path, name)
    _edit(folder, change)
    code, result, err = accept(capsys, str(folder), "--num-prompts", "2", "--min-acceptance-length", BAR)
    assert code == 2 and result is None and len(err.strip().splitlines()) == 1, err
    assert f"{folder / MTP_SHARD}: " in err and says in err and key in err


def test_a_declared_scheme_that_is_not_fp8_stays_refused_in_one_sentence(capsys, tmp_path):
    """Before: transformers was asked to load the target and exit 3 followed ("internal error
    (ImportError: compressed-tensors>=0.15.0 is required ...)")."""
    folder = scheme_copy(tmp_path, "compressed-tensors-channel")
    raw = json.loads((folder / "config.json").read_text())
    raw["quantization_config"]["config_groups"]["group_0"]["weights"]["type"] = "int"  # W8A8 int8
    (folder / "config.json").write_text(json.dumps(raw))
    code, result, err = accept(capsys, str(folder), "--num-prompts", "2", "--min-acceptance-length", BAR)
    assert code == 2 and result is None and len(err.strip().splitlines()) == 1, err
    assert (f"{folder / 'config.json'}: the target declares quantization_config (quant_method "
            "'compressed-tensors'), which the reference does not dequantize") in err
