"""DeepSeek-V3's MTP layer as released checkpoints ship it: an MoE decoder layer, stored block-FP8
under a declared ``quantization_config``, built as vLLM 0.32's ``deepseek_v2.py`` / ``deepseek_mtp.py``
run it.

- The layer at index N (``num_hidden_layers``) is MoE where vLLM's ``DeepseekV2DecoderLayer`` makes it
  so: ``n_routed_experts`` set, N >= ``first_k_dense_replace`` and N % ``moe_layer_freq`` == 0
  (transformers 5 reads only ``first_k_dense_replace``; ``dsv3_block`` builds transformers' layer with
  vLLM's choice). Its experts are stored one by one and held fused by transformers
  (``mtp_qwen35.fuse_experts`` stacks them, as for Qwen3-Next).
- Routing as vLLM's ``grouped_topk`` (``VllmRouter``, in place of transformers' ``DeepseekV3TopkRouter``,
  which always scores with sigmoid and always adds the correction bias): ``scoring_func`` softmax or
  sigmoid; with ``topk_method`` noaux_tc the ``e_score_correction_bias`` is added for the choice only
  (the weights are the unbiased scores) and a group scores the sum of its top two, else a group scores
  its max and the bias is not read (vLLM has no such parameter then); the top ``topk_group`` of
  ``n_group`` groups are kept, ``num_experts_per_tok`` experts chosen among them, the weights
  renormalised when ``norm_topk_prob``, times ``routed_scaling_factor``; the shared experts added unscaled.
- Block FP8 (``quant_method`` fp8, ``weight_block_size`` [bh, bw]; DeepSeek-V3: e4m3, [128, 128]) and the
  other declared FP8 schemes are dequantized by ``runner/mtp_quant.py``.

In: the target's text config and the MTP layer's checkpoint tensors (with the shard file each is in).
Out: ``dsv3_block`` (the decoder layer at N), ``glm4_block`` (GLM-4.5's, routed the same way with sigmoid
scores and the correction bias always), ``mimo_v2_block`` and ``mimo_v2_rope`` (MiMo-V2-Flash's dense
sliding-window MTP layer with sinks, and its rotary), ``ernie_block`` (ERNIE-4.5's Llama layer and its neox
rotary) and ``VllmRouter``. Needs torch.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
from torch import nn

from draftguard.runner.mtp_mimo2 import set_geometry
from draftguard.snapshot import BadInput


def vllm_moe_at(text: Any, index: int) -> bool:
    """Whether vLLM 0.32's ``DeepseekV2DecoderLayer`` builds layer ``index`` as MoE."""
    freq = int(getattr(text, "moe_layer_freq", 1) or 1)
    return (getattr(text, "n_routed_experts", None) is not None
            and index >= int(getattr(text, "first_k_dense_replace", 0) or 0) and index % freq == 0)


class VllmRouter(nn.Module):
    """vLLM's ``grouped_topk`` for DeepSeek-V2/V3 routing, under the names transformers' router holds
    (``weight`` [E, H] float32, ``e_score_correction_bias`` [E]); returns (logits, weights, ids) as it does."""

    def __init__(self, text: Any, scoring: str | None = None, biased: bool | None = None):
        super().__init__()
        self.experts = int(text.n_routed_experts)
        self.top_k, self.groups = int(text.num_experts_per_tok), int(getattr(text, "n_group", 1) or 1)
        self.topk_group = int(getattr(text, "topk_group", 1) or 1)
        self.scoring = scoring or str(getattr(text, "scoring_func", "softmax"))
        self.biased = getattr(text, "topk_method", None) == "noaux_tc" if biased is None else biased
        self.renormalize = bool(getattr(text, "norm_topk_prob", False))
        self.scale = float(getattr(text, "routed_scaling_factor", 1.0) or 1.0)
        self.weight = nn.Parameter(torch.zeros(self.experts, int(text.hidden_size), dtype=torch.float32))
        self.e_score_correction_bias = nn.Buffer(torch.zeros(self.experts, dtype=torch.float32))

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = hidden.reshape(-1, self.weight.shape[1])
        logits = nn.functional.linear(hidden.float(), self.weight.float())
        if self.scoring == "softmax":
            scores = logits.softmax(-1)
        elif self.scoring == "sigmoid":
            scores = logits.sigmoid()
        else:
            raise BadInput(f"scoring_func {self.scoring!r}: vLLM 0.32 scores experts with softmax or sigmoid only",
                           key="scoring_func")
        n = scores.shape[0]
        choice = scores + self.e_score_correction_bias if self.biased else scores
        grouped = choice.view(n, self.groups, -1)
        group_scores = grouped.topk(2, dim=-1)[0].sum(-1) if self.biased else grouped.max(-1).values
        keep = torch.zeros_like(group_scores).scatter_(1, group_scores.topk(self.topk_group, dim=-1)[1], 1)
        mask = keep.unsqueeze(-1).expand(n, self.groups, self.experts // self.groups).reshape(n, -1)
        ids = choice.masked_fill(~mask.bool(), float("-inf")).topk(self.top_k, dim=-1)[1]
        weights = scores.gather(1, ids)
        if self.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        return logits, weights * self.scale, ids


def dsv3_block(text: Any, layer_class: Callable[..., nn.Module], index: int) -> nn.Module:
    """The decoder layer at ``index`` (N), MoE or dense as vLLM builds it, its router vLLM's.
    Example: ``block = dsv3_block(text_config(target), type(target.model.layers[0]), n)``."""
    moe = vllm_moe_at(text, index)
    config = text
    if moe != (index >= int(getattr(text, "first_k_dense_replace", 0) or 0)):  # moe_layer_freq, no experts
        config = copy.deepcopy(text)
        config.first_k_dense_replace = 0 if moe else index + 1
    block = layer_class(config, layer_idx=index)
    if moe:
        block.mlp.gate = VllmRouter(text)
    return block


def glm4_block(text: Any, layer_class: Callable[..., nn.Module], index: int) -> nn.Module:
    """GLM-4.5/4.6/4.7's decoder layer at ``index`` (N) as vLLM 0.32's ``Glm4MoeDecoderLayer`` builds it:
    MoE where ``n_routed_experts`` is set and N >= ``first_k_dense_replace`` (no ``moe_layer_freq``), routed
    by ``Glm4MoE``'s ``grouped_topk`` (sigmoid scores, ``e_score_correction_bias`` always read: the config
    names no ``scoring_func`` or ``topk_method``). Example: ``glm4_block(text, type(target.model.layers[0]), n)``."""
    moe = getattr(text, "n_routed_experts", None) is not None and index >= int(text.first_k_dense_replace or 0)
    config = text
    if not moe and index >= int(text.first_k_dense_replace or 0):  # no experts: transformers would build MoE
        config = copy.deepcopy(text)
        config.first_k_dense_replace = index + 1
    block = layer_class(config, layer_idx=index)
    if moe:
        block.mlp.gate = VllmRouter(text, scoring="sigmoid", biased=True)
    return block


def mimo_v2_block(text: Any, layer_class: Callable[..., nn.Module]) -> nn.Module:
    """MiMo-V2's MTP decoder layer (Flash, Pro, the omni export) as vLLM 0.32's ``MiMoV2MTPLayer`` builds it:
    transformers' decoder layer of the target's class, dense (``intermediate_size``), its attention the
    sliding-window kind with vLLM's ``swa_*`` geometry (``mtp_mimo2.set_geometry``: heads, key/value heads and
    head dims as the keys state them, not transformers' twice-the-full-layers rule), ``attention_value_scale``
    on the values, sinks where ``add_swa_attention_sink_bias`` (none otherwise), eager attention (the sinks'
    softmax). The window and rotary are ``mimo_v2_rope`` / the head's mask. Example:
    ``mimo_v2_block(text_config(target), type(target.model.layers[0]))``."""
    config = copy.deepcopy(text)
    config.layer_types, config.mlp_layer_types = ["sliding_attention"], ["dense"]
    config._attn_implementation = "eager"
    block = layer_class(config, layer_idx=0)
    set_geometry(block.self_attn, text, sliding=True)
    return block


def mimo_v2_rope(text: Any, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) for MiMo-V2-Flash's MTP layer as vLLM 0.32 rotates it: theta ``swa_rope_theta`` (else
    ``rope_theta``), the first int(swa_head_dim x ``partial_rotary_factor``) dims, neox halves."""
    theta = float(getattr(text, "swa_rope_theta", None) or getattr(text, "rope_theta", None) or 1e6)
    head = int(getattr(text, "swa_head_dim", text.head_dim))
    dim = int(head * float(getattr(text, "partial_rotary_factor", 1.0) or 1.0))
    inv = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim)
    freqs = positions[..., None].float() * inv
    emb = torch.cat((freqs, freqs), -1)
    return emb.cos(), emb.sin()


def ernie_block(text: Any) -> tuple[nn.Module, nn.Module]:
    """ERNIE-4.5's MTP block as vLLM 0.32's ``ernie_mtp.py`` builds it, ``LlamaDecoderLayer`` from the
    target's config: neox-style RoPE (the target's ``Ernie4_5_MoeAttention`` rotates interleaved), q/k/v/o
    bias only where the config says ``attention_bias`` or ``bias`` (ERNIE's ``use_bias`` is not read), a
    dense MLP of ``intermediate_size``. Returns the layer and its rotary embedding (transformers' Llama ones).
    Example: ``block, rotary = ernie_block(text_config(target))``."""
    from transformers import LlamaConfig  # transformers: only a model run pays it
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    heads = int(text.num_attention_heads)
    config = LlamaConfig(
        vocab_size=int(text.vocab_size), hidden_size=int(text.hidden_size), intermediate_size=int(text.intermediate_size),
        num_attention_heads=heads, num_key_value_heads=int(getattr(text, "num_key_value_heads", None) or heads),
        head_dim=int(getattr(text, "head_dim", None) or int(text.hidden_size) // heads),
        rms_norm_eps=float(text.rms_norm_eps), hidden_act=str(text.hidden_act),
        max_position_embeddings=int(getattr(text, "max_position_embeddings", 8192)),
        attention_bias=bool(getattr(text, "attention_bias", False) or getattr(text, "bias", False)), mlp_bias=False,
        rope_parameters=dict(getattr(text, "rope_parameters", None) or {"rope_type": "default", "rope_theta": 500000.0}))
    config._attn_implementation = "sdpa"
    return LlamaDecoderLayer(config, layer_idx=0), LlamaRotaryEmbedding(config)
