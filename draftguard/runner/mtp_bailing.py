"""Ling-3.0 / Ring-3.0's MTP layer (``BailingMoeV3ForCausalLM``, model_type ``bailing_hybrid``) as vLLM 0.32's
``bailing_moe_v3_mtp.py`` (``BailingMoeV3MTPModel``) builds and runs it, and its target as vLLM builds it.

The layer (``BailingMoeV3MultiTokenPredictorLayer``), checkpoint names under ``model.layers.{N}.``
(N = ``num_hidden_layers``; vLLM maps ``.attention.`` to ``.self_attn.``, transformers 5.24 also
``attention.dense`` to ``o_proj`` and ``mlp.gate.expert_bias`` to ``e_score_correction_bias``):

- ``enorm`` of the token's embedding (NOT zeroed at position 0: the forward has no such line) and ``hnorm``
  of the target's hidden state, ``eh_proj`` of [embedding, hidden];
- ``input_layernorm``, MLA attention (``BailingMoeV3MLAAttention``: ``q_proj`` or a query LoRA,
  ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, interleaved RoPE on ``qk_rope_head_dim``,
  scale ``qk_head_dim ** -0.5``, the head-wise sigmoid gate ``g_proj`` only where
  ``gated_attention_proj_granularity_type`` is ``head_wise``, ``dense`` out), whatever ``layer_types``
  says of the target's layers (the MTP layer is never KDA);
- ``post_attention_layernorm`` and always MoE (``BailingMoeV3MoE``, whatever ``first_k_dense_replace``):
  sigmoid scores, grouped top-k with the ``expert_bias`` added for the choice, renormalised always
  (vLLM passes ``renormalize=True``; transformers' router reads ``norm_topk_prob``), times
  ``routed_scaling_factor``, plus a shared expert of ``moe_shared_expert_intermediate_size`` x
  ``num_shared_experts`` (transformers sizes it ``moe_intermediate_size`` x ``n_shared_experts``);
- ``final_layernorm``: its output is both what the logits read and what the next chain step gets;
  ``shared_head`` is the identity and the head is the target's ``lm_head`` (the proposer shares it,
  and the embeddings: "Detected MTP model").

The target: transformers 5.24's ``BailingHybridForCausalLM`` (which loads the checkpoint's names through
its conversion mapping), with vLLM's routing put in (renormalised always) and two refusals where
vLLM 0.32 builds another model than transformers: a layer whose attention type differs from vLLM's
rule (KDA unless (i + 1) % ``layer_group_size`` == 0 or i is past the last whole group), and MLA layers
without ``gated_attention_proj_granularity_type`` ``head_wise`` (transformers always gates). Bad input
names the key. A KDA layer runs as transformers writes it (its torch fallback where the fla kernel is
absent; the tests build MLA-only targets).

In: the target's text config, its decoder layer class, the target folder.
Out: ``bailing_block`` (the MTP decoder layer at N) and ``load_bailing_target``. Needs torch.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any, Callable

import torch
from torch import nn

from draftguard.runner.mtp_dsv3 import VllmRouter
from draftguard.snapshot import BadInput


def vllm_router(text: Any) -> VllmRouter:
    """vLLM's ``BailingMoeV3MoE`` routing: sigmoid, grouped top-k with the bias, renormalised always."""
    experts = getattr(text, "num_experts", None) or getattr(text, "num_local_experts", None)
    if not experts:
        raise BadInput("num_experts is not set: vLLM 0.32's Bailing V3 MTP layer is always MoE", key="num_experts")
    spec = SimpleNamespace(n_routed_experts=int(experts), num_experts_per_tok=int(text.num_experts_per_tok),
                           n_group=int(text.n_group or 1), topk_group=int(text.topk_group or 1),
                           hidden_size=int(text.hidden_size), norm_topk_prob=True,
                           routed_scaling_factor=float(getattr(text, "routed_scaling_factor", 1.0) or 1.0))
    return VllmRouter(spec, scoring="sigmoid", biased=True)


def _check_vllm_geometry(text: Any, where: str = "config.json") -> None:
    """Bad input where vLLM 0.32 would build another layer than transformers' class here."""
    granularity = getattr(text, "gated_attention_proj_granularity_type", None)
    key = "gated_attention_proj_granularity_type"
    if granularity not in (None, "head_wise"):
        raise BadInput(f"{where}: {key} {granularity!r}: the reference builds the head-wise attention gate "
                       "(transformers' BailingHybridAttention) or none; run --backend vllm alone", file=where, key=key)
    for key in ("expert_swiglu_limit_list", "share_expert_swiglu_limit_list"):
        if getattr(text, key, None):
            raise BadInput(f"{where}: {key}: vLLM 0.32 clamps the SwiGLU of these layers, the reference does not; "
                           "run --backend vllm alone", file=where, key=key)


class _OpenGate(nn.Module):
    """No attention gate (vLLM builds ``g_proj`` only for ``head_wise``): sigmoid(+inf) = 1 exactly."""

    def __init__(self, heads: int):
        super().__init__()
        self.heads = heads

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden.new_full((*hidden.shape[:-1], self.heads), float("inf"))


def _as_vllm(block: nn.Module, text: Any) -> None:
    """One decoder layer as vLLM builds it: its attention gate, its router and shared expert width."""
    attn, mlp = block.self_attn, block.mlp
    if hasattr(attn, "g_proj") and getattr(text, "gated_attention_proj_granularity_type", None) != "head_wise":
        attn.g_proj = _OpenGate(int(text.num_attention_heads))
    if hasattr(mlp, "experts"):
        mlp.gate = vllm_router(text)
        shared = getattr(text, "moe_shared_expert_intermediate_size", None) or text.moe_intermediate_size
        width = int(shared) * int(getattr(text, "num_shared_experts", None) or text.n_shared_experts or 1)
        if mlp.shared_experts.gate_proj.out_features != width:
            mlp.shared_experts = type(mlp.shared_experts)(text, intermediate_size=width)


def bailing_block(text: Any, layer_class: Callable[..., nn.Module], index: int) -> nn.Module:
    """The MTP decoder layer at ``index`` (N) as vLLM 0.32 builds it: MLA attention, MoE.
    Example: ``bailing_block(text_config(target), type(target.model.layers[0]), n)``."""
    _check_vllm_geometry(text)
    config = copy.deepcopy(text)
    attn = list(getattr(text, "layer_types", None) or [])
    mlp = list(getattr(text, "mlp_layer_types", None) or [])
    config.layer_types = (attn + ["full_attention"] * (index + 1))[:index] + ["full_attention"]
    config.mlp_layer_types = (mlp + ["sparse"] * (index + 1))[:index] + ["sparse"]
    block = layer_class(config, layer_idx=index)
    _as_vllm(block, text)
    return block


def vllm_kda_layer(index: int, group: int, layers: int) -> bool:
    """vLLM 0.32's ``_is_kda_layer``: the last layer of each whole group and every layer past them are MLA."""
    return not ((index + 1) % group == 0 or index >= layers // group * group)


def load_bailing_target(folder: Any, load: Callable[..., tuple[nn.Module, Any]], device: str,
                        dtype: torch.dtype | None) -> tuple[nn.Module, Any]:
    """The target by transformers' class (``load``: ``dflash_model.load_target``), refused where vLLM builds
    other attention, its MoE layers routed as vLLM routes them."""
    from transformers import AutoConfig  # a model run pays it

    text = AutoConfig.from_pretrained(str(folder))  # refused before transformers builds (and warns about) it
    _check_vllm_geometry(text, f"{folder}/config.json")
    n, group = int(text.num_hidden_layers), int(text.layer_group_size)
    for i, kind in enumerate(text.layer_types[:n]):
        vllm = "linear_attention" if vllm_kda_layer(i, group, n) else "full_attention"
        if kind != vllm:
            raise BadInput(f"{folder}/config.json: layer_types[{i}] is {kind!r}, but vLLM 0.32 builds layer {i} as "
                           f"{vllm!r} (KDA unless (i + 1) % layer_group_size == 0 or i >= {n // group * group}); the "
                           "reference would run another model than the engine", file=f"{folder}/config.json",
                           key="layer_types")
    model, tokenizer = load(str(folder), device, dtype)
    for layer in model.model.layers:
        if hasattr(layer.mlp, "experts"):
            old = layer.mlp.gate
            layer.mlp.gate = vllm_router(text).to(old.weight.device)
            layer.mlp.gate.load_state_dict(old.state_dict())
        if hasattr(layer.self_attn, "g_proj") and getattr(text, "gated_attention_proj_granularity_type", None) != "head_wise":
            layer.self_attn.g_proj = _OpenGate(int(text.num_attention_heads))
    return model, tokenizer


__all__ = ["bailing_block", "load_bailing_target", "vllm_kda_layer", "vllm_router"]
