"""FP8 checkpoints under a declared ``quantization_config``, read as vLLM 0.32's linear methods read them,
so the reference runs a target and its MTP layer stored as released (issue 43: block FP8 was the only
scheme; per-tensor and per-channel FP8 were refused though vLLM serves them).

The schemes (``fp8_scheme``), each a weight stored float8 beside a float32 scale, real = fp8 x scale:

- ``quant_method`` fp8 with ``weight_block_size`` [bh, bw] (DeepSeek-V3, Qwen3-Next-FP8, MiMo-V2-Flash):
  ``*.weight_scale_inv``, one value per bh x bw block, the last blocks partial where a side does not
  divide (vLLM's ``BlockQuantScaleParameter``);
- ``quant_method`` fp8 without a block size: ``*.weight_scale``, one value per tensor
  (``PerTensorScaleParameter``; vLLM names it ``weight_scale`` there, ``weight_scale_inv`` for blocks);
- ``compressed-tensors`` (llm-compressor's FP8 exports): every ``config_groups`` entry's ``weights`` of
  ``type`` float and 8 bits, ``strategy`` tensor, channel (one scale per output row, [R, 1]) or block
  (``block_structure``), the scale ``*.weight_scale``; a group of another type (int8, int4, nvfp4)
  is not this scheme and stays refused by the caller;
- ``modelopt`` (NVIDIA ModelOpt, flat or under ``quantization``): ``quant_algo`` FP8 (per tensor),
  FP8_PER_CHANNEL_PER_TOKEN (per row) or FP8_PB_WO (128 x 128 blocks), the scale ``*.weight_scale``;
- ``fbgemm_fp8``: per row, ``*.weight_scale`` [R, 1].

The activation scales (``*.input_scale``) and an FP8 KV cache's (``*.k_scale``, ``*.v_scale``) are read
and dropped: the reference runs activations and its cache in float. vLLM on a GPU quantizes activations
(dynamically or with those scales), and for a fused q/k/v or gate/up it requantizes the parts to their
largest per-tensor scale; both are rounding-level differences a τ within 5 % absorbs. Quantized tensors
where config.json declares no quantization stay a fault (``runner/mtp_weights.py``).

In: config.json's ``quantization_config`` and a checkpoint's tensors (with the shard file each is in).
Out: ``fp8_scheme`` (the declared scheme or None), ``dequantize`` (one weight) and ``dequantize_declared``
(every FP8 weight dequantized, its scales consumed; bad input naming the file and key for a missing
scale or one whose shape the scheme does not give). Needs torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from draftguard.snapshot import BadInput

FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2") if hasattr(torch, n))
# Scales an engine applies to activations or the KV cache: the reference runs those in float.
ACTIVATION_SCALES = (".input_scale", ".k_scale", ".v_scale", ".q_scale", ".prob_scale")
MODELOPT = {"FP8": ("tensor", None), "FP8_PER_CHANNEL_PER_TOKEN": ("channel", None),
            "FP8_PB_WO": ("block", (128, 128))}


@dataclass(frozen=True)
class Fp8Scheme:
    """How a declared FP8 checkpoint scales its weights."""

    method: str  # quant_method, as config.json names it
    granularity: str  # "tensor", "channel" (one per output row) or "block"
    suffix: str  # the scale's name after the weight's: "_scale_inv" or "_scale"
    block: tuple[int, int] | None = None

    def describe(self) -> str:
        what = f"{self.block[0]} x {self.block[1]} blocks" if self.block else f"per {self.granularity}"
        return f"quant_method {self.method!r}, FP8 {what}"


def _block(value: Any) -> tuple[int, int] | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(s, int) and not isinstance(s, bool) and s > 0
                                                            for s in value):
        return value[0], value[1]
    return None


def _compressed_tensors(qc: dict[str, Any]) -> Fp8Scheme | None:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return None
    found = set()
    for group in groups.values():
        weights = group.get("weights") if isinstance(group, dict) else None
        if not (isinstance(weights, dict) and weights.get("type") == "float" and weights.get("num_bits") == 8):
            return None  # int8, int4, nvfp4...: not an FP8 scheme
        strategy = weights.get("strategy")
        block = _block(weights.get("block_structure")) if strategy == "block" else None
        if strategy not in ("tensor", "channel", "block") or (strategy == "block" and block is None):
            return None
        found.add((strategy, block))
    if len(found) != 1:
        return None  # groups scaled differently: which tensor is which needs the targets matched
    strategy, block = found.pop()
    return Fp8Scheme("compressed-tensors", strategy, "_scale", block)


def fp8_scheme(raw: dict[str, Any]) -> Fp8Scheme | None:
    """The declared FP8 scheme of a config.json, else None (none declared, or one the reference does
    not dequantize).

    Example::

        >>> fp8_scheme({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}).block
        (128, 128)
        >>> fp8_scheme({"quantization_config": {"quant_method": "fp8"}}).suffix
        '_scale'
    """
    qc = raw.get("quantization_config")
    if not isinstance(qc, dict):
        return None
    method = qc.get("quant_method")
    if method == "fp8":
        if "weight_block_size" in qc and qc["weight_block_size"] is not None:
            block = _block(qc["weight_block_size"])
            return Fp8Scheme("fp8", "block", "_scale_inv", block) if block else None
        return Fp8Scheme("fp8", "tensor", "_scale")
    if method == "compressed-tensors":
        return _compressed_tensors(qc)
    if method == "modelopt":
        inner = qc.get("quantization") if isinstance(qc.get("quantization"), dict) else qc
        algo = str(inner.get("quant_algo", "")).upper()
        if algo in MODELOPT:
            return Fp8Scheme("modelopt", MODELOPT[algo][0], "_scale", MODELOPT[algo][1])
        return None
    if method == "fbgemm_fp8":
        return Fp8Scheme("fbgemm_fp8", "channel", "_scale")
    return None


def dequantize(weight: torch.Tensor, scale: torch.Tensor, scheme: Fp8Scheme | tuple[int, int], where: str = "",
               key: str = "") -> torch.Tensor:
    """An FP8 weight [R, C] in float32, times its scale as ``scheme`` lays it out (a block size alone
    means block FP8); bad input naming ``where`` and ``key`` when the scale's shape is not the scheme's.

    Example::

        >>> w = torch.ones(3, 5).to(torch.float8_e4m3fn)
        >>> dequantize(w, torch.tensor([[2.0, 3.0]]), (4, 4))[2].tolist()
        [2.0, 2.0, 2.0, 2.0, 3.0]
        >>> dequantize(w, torch.tensor([[1.0], [2.0], [4.0]]), Fp8Scheme("fbgemm_fp8", "channel", "_scale"))[:, 0].tolist()
        [1.0, 2.0, 4.0]
    """
    if isinstance(scheme, tuple):
        scheme = Fp8Scheme("fp8", "block", "_scale_inv", scheme)
    scale_key = key + scheme.suffix
    if weight.dim() != 2:
        raise BadInput(f"{where}: `{key}` is FP8 with shape {tuple(weight.shape)}; the declared scheme "
                       f"({scheme.describe()}) scales 2-D weights", file=where, key=key)
    rows, cols = weight.shape
    if scheme.granularity == "block":
        bh, bw = scheme.block or (1, 1)
        want = (math.ceil(rows / bh), math.ceil(cols / bw))
        ok = tuple(scale.shape) == want
        source = "quantization_config.weight_block_size" if scheme.method == "fp8" else scheme.describe()
        need = f"in {bh} x {bw} blocks ({source}) needs {want}"
    elif scheme.granularity == "channel":
        ok = tuple(scale.shape) in ((rows,), (rows, 1))
        need = f"under the declared quantization_config ({scheme.describe()}) needs ({rows}, 1), one per output row"
    else:
        ok = scale.numel() == 1
        need = f"under the declared quantization_config ({scheme.describe()}) needs one value"
    if not ok:
        raise BadInput(f"{where}: `{scale_key}` has shape {tuple(scale.shape)}, but `{key}` {rows} x {cols} {need}",
                       file=where, key=scale_key)
    s = scale.float()
    if scheme.granularity == "block":
        s = s.repeat_interleave(scheme.block[0], 0).repeat_interleave(scheme.block[1], 1)[:rows, :cols]
    elif scheme.granularity == "channel":
        s = s.reshape(rows, 1)
    else:
        s = s.reshape(())
    return weight.float() * s


def dequantize_declared(raw: dict[str, Any], weights: dict[str, torch.Tensor], prefix: str,
                        file_of: Callable[[str], str]) -> dict[str, torch.Tensor]:
    """The tensors with each FP8 weight dequantized and its scales consumed, where config.json declares
    an FP8 scheme; unchanged otherwise (an undeclared quantized tensor is a fault the run measures, and
    another declared scheme is refused by the caller). ``prefix`` + a key is the checkpoint name and
    ``file_of`` gives the file it is in."""
    scheme = fp8_scheme(raw)
    if scheme is None:
        return weights
    out = {k: v for k, v in weights.items() if not k.endswith(ACTIVATION_SCALES)}
    for key, tensor in weights.items():
        if tensor.dtype not in FP8_DTYPES:
            continue
        name = prefix + key
        scale = weights.get(key + scheme.suffix)
        if scale is None:
            other = [key + s for s in ("_scale", "_scale_inv") if s != scheme.suffix and key + s in weights]
            held = f"; it holds `{prefix}{other[0]}`, another scheme's name" if other else ""
            raise BadInput(f"{file_of(name)}: `{name}` is stored {tensor.dtype} under the declared quantization_config "
                           f"({scheme.describe()}), but the weights hold no `{name}{scheme.suffix}`{held}",
                           file=file_of(name), key=name + scheme.suffix)
        out[key] = dequantize(tensor, scale, scheme, file_of(name + scheme.suffix), name)
        del out[key + scheme.suffix]
    return out


__all__ = ["FP8_DTYPES", "Fp8Scheme", "dequantize", "dequantize_declared", "fp8_scheme"]
