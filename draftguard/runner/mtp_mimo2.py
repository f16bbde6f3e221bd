"""MiMo-V2's MTP targets beside MiMo-V2-Flash: MiMo-V2-Pro / MiMo-V2.5-Pro (``MiMoV2ForCausalLM``) and the
omni export (``MiMoV2OmniForCausalLM``: MiMo-V2.5, whose config.json says ``MiMoV2ForCausalLM`` with a
``vision_config``, which vLLM 0.32's ``MimoV2ModelArchConfigConvertor`` turns into the omni class), read as
vLLM 0.32 reads them. ``mimo_v2.py`` builds both targets as ``MiMoV2FlashForCausalLM`` (the omni one as the
``language_model`` of ``mimo_v2_omni.py``, the text model the drafting reads); ``mimo_v2_mtp.py``'s
``MiMoV2MTP`` / ``MiMoV2OmniMTP`` build MTP layer 0, the same ``MiMoV2MTPLayer`` as Flash's (the omni class
only merges image and audio embeddings, which text drafting never has), under ``model.mtp.layers.0.``, one
layer by architecture whatever the config states (``config/speculative.py``: ``_MIMO_V2_PRO_NUM_MTP_LAYERS``).

What differs from Flash, and what this module does about it (the layer itself is Flash's:
``mtp_dsv3.mimo_v2_block`` / ``mimo_v2_rope`` and ``mtp_model.MtpHead``):

- ``split_qkv``: the Pro and the omni export store one fused ``self_attn.qkv_proj`` ([Q; K; V] rows,
  ``attention_projection_layout`` fused_qkv) where Flash stores q/k/v_proj; vLLM loads either, target and MTP
  layer alike (unquantized: the rows as they are). Split by each layer's geometry.
- ``set_geometry``: transformers' MiMo-V2-Flash gives a sliding-window layer twice the full layers'
  key/value heads (Flash: 4 and 8) and one head dim; vLLM reads each kind's own keys (``swa_*`` for a
  layer ``hybrid_layer_pattern`` marks 1, the plain ones otherwise), and the Pro has 8 and 8. Every
  attention is rebuilt with vLLM's numbers, sinks only in sliding layers that ``add_swa_attention_sink_bias``.
- ``text_keys``: vLLM reads ``hybrid_layer_pattern``, ``moe_layer_freq``, ``rope_theta`` / ``swa_rope_theta``
  with ``partial_rotary_factor``, ``layernorm_epsilon`` and ``sliding_window_size`` (the query and the
  size - 1 before it), which transformers' config class would replace with its own defaults (its rope
  5e6, its window one longer); stated here in transformers' names.
- ``text_weights``: the omni export's text model is under ``model.`` (or ``model.language_model.``, the
  names vLLM's mapper also takes); the vision tower (``model.visual.``, ``visual.``) and the audio
  tensors are not read.
- ``untile_qkv``: a block-FP8 fused ``qkv_proj`` is stored pre-sharded for ``num_key_value_heads`` ranks,
  [Q_c; K_c; V_c] per shard, its scales tiled per shard (MiMo-V2.5-Pro: 8 shards of 3392 rows, scales
  [216, 48] for 27136 rows) or one grid; vLLM's ``_shard_fp8_qkv_proj`` gathers each rank's heads from
  the shards. Dequantized shard by shard and put back in [Q; K; V] order, as one rank holds it. An
  unquantized fused projection vLLM reads as it is.

In: the target's config.json (dict) or its transformers config, its tensors, the built transformers model.
Out: ``text_keys``, ``text_weights``, ``untile_qkv``, ``split_qkv``, ``geometry``, ``set_geometry``,
``fix_target``. Needs torch.
"""

from __future__ import annotations

from typing import Any

import math

import torch
from torch import nn

from draftguard.runner.mtp_quant import FP8_DTYPES, dequantize, fp8_scheme
from draftguard.snapshot import BadInput

TOWERS = ("model.visual.", "visual.", "speech_embeddings.", "audio_tokenizer.", "audio_encoder.")


def _get(node: Any, key: str) -> Any:
    return node.get(key) if isinstance(node, dict) else getattr(node, key, None)


def sliding_layers(node: Any) -> list[bool]:
    """Which target layers vLLM builds sliding-window: ``hybrid_layer_pattern`` 1 (none without it)."""
    pattern = _get(node, "hybrid_layer_pattern")
    n = int(_get(node, "num_hidden_layers"))
    if isinstance(pattern, list) and len(pattern) >= n:
        return [int(v) == 1 for v in pattern[:n]]
    layer_types = _get(node, "layer_types")  # a file written for transformers only
    if isinstance(layer_types, list) and len(layer_types) >= n:
        return [t == "sliding_attention" for t in layer_types[:n]]
    return [False] * n


def geometry(node: Any, sliding: bool) -> tuple[int, int, int, int]:
    """(heads, key/value heads, q/k head dim, v head dim) of an attention as vLLM 0.32's ``MiMoV2Attention``
    is built: a sliding one (the MTP layer's too) from the ``swa_*`` keys, a full one from the plain keys."""
    pre = "swa_" if sliding else ""
    for key in ("num_attention_heads", "num_key_value_heads", "head_dim"):
        if not isinstance(_get(node, pre + key), int):
            raise BadInput(f"config.json: `{pre}{key}` is {_get(node, pre + key)!r}; vLLM 0.32 builds MiMo-V2's "
                           f"{'sliding-window' if sliding else 'full'} attention from it", key=pre + key)
    heads, kv, dim = (int(_get(node, pre + k)) for k in ("num_attention_heads", "num_key_value_heads", "head_dim"))
    return heads, kv, dim, int(_get(node, pre + "v_head_dim") or dim)


def text_keys(raw: dict[str, Any]) -> dict[str, Any]:
    """config.json's keys with vLLM's reading stated in transformers' MiMoV2FlashConfig names."""
    keys = {k: v for k, v in raw.items() if k not in ("vision_config", "audio_config", "processor_config",
                                                      "sliding_window_size", "rope_scaling")}
    slide = sliding_layers(raw)
    keys["layer_types"] = ["sliding_attention" if s else "full_attention" for s in slide]
    freq = raw.get("moe_layer_freq")
    keys["mlp_layer_types"] = [("sparse" if isinstance(freq, list) and freq[i] else "dense") for i in range(len(slide))]
    theta = float(raw.get("rope_theta") or 1e6)
    factor = float(raw.get("partial_rotary_factor") or 1.0)
    keys["rope_parameters"] = {
        "full_attention": {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": factor},
        "sliding_attention": {"rope_type": "default", "rope_theta": float(raw.get("swa_rope_theta") or theta),
                              "partial_rotary_factor": factor}}
    keys["attention_value_scale"] = raw.get("attention_value_scale")  # absent: none (transformers' default 0.707)
    if raw.get("layernorm_epsilon") is not None:
        keys["rms_norm_eps"] = raw["layernorm_epsilon"]
    window = raw.get("sliding_window_size", -1)
    keys["sliding_window"] = int(window) if window and int(window) > 0 else None
    return keys


def text_weights(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The text model's tensors under the names the causal LM holds them (the omni export's towers left out)."""
    out = {}
    for key, tensor in weights.items():
        if key.startswith(TOWERS):
            continue
        out["model." + key[len("model.language_model."):] if key.startswith("model.language_model.") else key] = tensor
    return out


def untile_qkv(raw: dict[str, Any], weights: dict[str, torch.Tensor], sliding: Any, where: str
               ) -> dict[str, torch.Tensor]:
    """Each block-FP8 fused ``<layer>.self_attn.qkv_proj.weight`` (with its ``weight_scale_inv``) in float,
    rows [Q; K; V], read as vLLM 0.32 reads the pre-sharded layout; other tensors unchanged."""
    scheme = fp8_scheme(raw)
    shards = int(raw.get("num_key_value_heads") or 0)
    if scheme is None or scheme.granularity != "block" or shards <= 0:
        return weights
    out = dict(weights)
    for key, tensor in weights.items():
        scale = weights.get(key + "_scale_inv")
        if not key.endswith("self_attn.qkv_proj.weight") or tensor.dtype not in FP8_DTYPES or scale is None:
            continue
        heads, kv, dim, vdim = geometry(raw, sliding(key))
        rows, block = tensor.shape[0], scheme.block[0]
        q, k, v = (heads // shards) * dim, (kv // shards) * dim, (kv // shards) * vdim
        if heads % shards or kv % shards or rows != shards * (q + k + v):
            raise BadInput(f"{where}: `{key}` has {rows} rows, not {shards} shards (num_key_value_heads) of "
                           f"{q} + {k} + {v} q, k, v rows, as vLLM 0.32 reads a fused FP8 qkv_proj", key=key)
        if scale.shape[0] == shards * math.ceil((q + k + v) / block):  # scales tiled shard by shard
            full = torch.cat([dequantize(c, s, scheme, where, key) for c, s in zip(tensor.chunk(shards),
                                                                                    scale.chunk(shards))])
        else:  # one grid over the whole tensor (or a shape dequantize names)
            full = dequantize(tensor, scale, scheme, where, key)
        parts = full.view(shards, q + k + v, -1).split([q, k, v], dim=1)
        out[key] = torch.cat([part.reshape(-1, full.shape[1]) for part in parts])
        del out[key + "_scale_inv"]
    return out


def split_qkv(weights: dict[str, torch.Tensor], node: Any, sliding: Any, where: str) -> dict[str, torch.Tensor]:
    """Each fused ``<layer>.self_attn.qkv_proj.{weight,bias}`` as q/k/v_proj by that layer's geometry;
    ``sliding(key)`` says whether the key's layer is a sliding-window one."""
    out = {}
    for key, tensor in weights.items():
        head, sep, tail = key.rpartition("self_attn.qkv_proj.")
        if not sep or tail not in ("weight", "bias"):
            out[key] = tensor
            continue
        heads, kv, dim, vdim = geometry(node, sliding(key))
        sizes = [heads * dim, kv * dim, kv * vdim]
        if tensor.shape[0] != sum(sizes):
            raise BadInput(f"{where}: `{key}` has {tensor.shape[0]} rows; the config's geometry calls for "
                           f"{sizes[0]} + {sizes[1]} + {sizes[2]} (q, k, v)", file=where, key=key)
        for name, part in zip(("q_proj", "k_proj", "v_proj"), tensor.split(sizes)):
            out[f"{head}self_attn.{name}.{tail}"] = part
    return out


def set_geometry(attn: nn.Module, node: Any, sliding: bool) -> None:
    """Rebuild a transformers ``MiMoV2FlashAttention`` with vLLM's geometry for its kind (its weights then
    loaded): projections, head dims, the query groups per key/value head, the scaling and the sinks."""
    heads, kv, dim, vdim = geometry(node, sliding)
    if heads % kv:
        raise BadInput(f"{'swa_' if sliding else ''}num_attention_heads {heads} is not a multiple of "
                       f"{'swa_' if sliding else ''}num_key_value_heads {kv}", key="num_key_value_heads")
    size, bias = attn.q_proj.in_features, attn.q_proj.bias is not None
    attn.q_proj, attn.k_proj = nn.Linear(size, heads * dim, bias=bias), nn.Linear(size, kv * dim, bias=bias)
    attn.v_proj, attn.o_proj = nn.Linear(size, kv * vdim, bias=bias), nn.Linear(heads * vdim, size, bias=False)
    attn.head_dim, attn.v_head_dim, attn.num_key_value_groups, attn.scaling = dim, vdim, heads // kv, dim ** -0.5
    attn.sinks = nn.Parameter(torch.zeros(heads)) if sliding and _get(node, "add_swa_attention_sink_bias") else None


def fix_target(model: nn.Module, raw: dict[str, Any]) -> None:
    """Every decoder layer's attention in vLLM's geometry (``set_geometry``), by ``hybrid_layer_pattern``."""
    for layer, sliding in zip(model.model.layers, sliding_layers(raw)):
        set_geometry(layer.self_attn, raw, sliding)


def target_layer_sliding(raw: dict[str, Any]) -> Any:
    """``split_qkv``'s ``sliding`` for the target's own tensors (``model.layers.{i}.``)."""
    slide = sliding_layers(raw)

    def sliding(key: str) -> bool:  # model.layers.{i}. or the omni export's model.language_model.layers.{i}.
        index = key.split("layers.", 1)[1].split(".")[0] if "layers." in key else ""
        return index.isdigit() and int(index) < len(slide) and slide[int(index)]
    return sliding


__all__ = ["fix_target", "geometry", "set_geometry", "sliding_layers", "split_qkv", "target_layer_sliding",
           "text_keys", "text_weights", "untile_qkv"]
