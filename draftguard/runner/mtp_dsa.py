"""DeepSeek-V3.2's and GLM-5's MTP layer (sparse attention: DeepSeek's lightning indexer), built as vLLM
0.32's ``DeepseekV32MTPModel`` (``models/deepseek_v32/nvidia/mtp.py``) runs it, with transformers' own
decoder layer (``DeepseekV32DecoderLayer`` / ``GlmMoeDsaDecoderLayer``) at index N, so the indexer is
transformers'.

What vLLM 0.32's V3.2 MTP layer does, read against DeepSeek-V3's (``deepseek_mtp.py``):

- the same outer forward: ``fused_eh_norm`` zeroes the embedding at position 0 and applies ``enorm`` /
  ``hnorm`` before ``eh_proj`` of [embedding, hidden]; the output goes through ``shared_head.norm`` and that
  normed state is both the logits' input and the next step's hidden (the comment cites PR #45895);
- the same names: ``model.layers.{N}.{enorm, hnorm, eh_proj, shared_head.*, embed_tokens}``, the decoder
  layer beside them, the indexer under ``model.layers.{N}.self_attn.indexer.{wq_b, wk, k_norm,
  weights_proj}`` (vLLM fuses wk and weights_proj; an FP8 ``wk`` with its ``weight_scale_inv`` is
  dequantized at load, ``_try_load_fp8_indexer_wk``; ``runner/mtp_quant.py`` dequantizes it with the rest);
- the proposer shares the target's embeddings and ``lm_head`` (``shared_head.head`` replaced) and its
  ``topk_indices_buffer`` (a scratch buffer: every layer with an indexer writes its own rows before reading);
- the MTP layer always builds a full indexer, whatever ``index_topk_freq`` / ``index_topk_pattern`` /
  ``indexer_types`` say of the target's layers (``DeepseekV2Attention``: ``is_mtp_layer``), and computes its
  own top-k at every draft step unless ``index_share_for_mtp_iteration`` (default false) makes steps 1+
  reuse step 0's rows; that sharing is not built here and is refused;
- the indexer's RoPE is neox (half split) unless ``indexer_rope_interleave``; transformers rotates
  DeepSeek-V3.2's half split and GLM-5's interleaved, so a config whose key disagrees with its class is
  refused rather than run differently from vLLM;
- MoE at N by ``first_k_dense_replace`` / ``moe_layer_freq``, routed by vLLM's ``grouped_topk``
  (``VllmRouter``); transformers reads ``mlp_layer_types``, which has no entry for N.

In: the target's text config (transformers' ``DeepseekV32Config`` / ``GlmMoeDsaConfig``), its decoder layer
class, N, and config.json as read (for the keys transformers' config class may drop).
Out: ``dsa_block`` (the decoder layer at N) and ``check_dsa`` (bad input for what is not built). Needs torch.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from torch import nn

from draftguard.runner.mtp_dsv3 import VllmRouter, vllm_moe_at
from draftguard.snapshot import BadInput

# model_type -> whether transformers' class rotates the indexer's RoPE dims interleaved
_INTERLEAVED = {"deepseek_v32": False, "glm_moe_dsa": True}


def _text(raw: dict[str, Any]) -> dict[str, Any]:
    text = raw.get("text_config")
    return text if isinstance(text, dict) else raw


def check_dsa(raw: dict[str, Any], where: str) -> None:
    """Bad input for a V3.2 / GLM-5 config the reference would run differently from vLLM 0.32."""
    text = _text(raw)
    model_type = str(text.get("model_type") or raw.get("model_type"))
    if text.get("index_share_for_mtp_iteration") or raw.get("index_share_for_mtp_iteration"):
        raise BadInput(f"{where}: index_share_for_mtp_iteration is true: vLLM 0.32 then reuses the MTP layer's "
                       "step-0 top-k indices at draft steps 1+, which the reference does not build (it computes "
                       "them at every step, vLLM's default); run --backend vllm alone", file=where,
                       key="index_share_for_mtp_iteration")
    for key in ("index_topk", "q_lora_rank"):
        if not isinstance(text.get(key), int) or text[key] <= 0:
            raise BadInput(f"{where}: {key} {text.get(key)!r}: DeepSeek sparse attention needs a positive integer "
                           "(vLLM 0.32 asserts q_lora_rank for the indexer)", file=where, key=key)
    interleaved = bool(text.get("indexer_rope_interleave", False))
    if model_type in _INTERLEAVED and interleaved != _INTERLEAVED[model_type]:
        raise BadInput(f"{where}: indexer_rope_interleave {text.get('indexer_rope_interleave')!r}: vLLM 0.32 rotates "
                       f"the indexer {'interleaved' if interleaved else 'half split (neox)'} by it, transformers' "
                       f"{model_type} class {'interleaved' if _INTERLEAVED[model_type] else 'half split'}; the "
                       "reference runs transformers' indexer, so it cannot run this target as vLLM does; run "
                       "--backend vllm alone", file=where, key="indexer_rope_interleave")


def dsa_block(text: Any, layer_class: Callable[..., nn.Module], index: int) -> nn.Module:
    """transformers' V3.2 / GLM-5 decoder layer at ``index`` (N): MoE or dense as vLLM builds layer N, a full
    indexer (``indexer_types`` extended with "full" for GLM-5), vLLM's router. The target's config is not
    changed. Example: ``dsa_block(text_config(target), type(target.model.layers[0]), n)``."""
    config = copy.deepcopy(text)
    moe = vllm_moe_at(text, index)
    config.mlp_layer_types = list(config.mlp_layer_types or [])[:index] + ["dense"] * max(0, index - len(
        config.mlp_layer_types or [])) + ["sparse" if moe else "dense"]
    if hasattr(config, "indexer_types"):  # GLM-5: "shared" layers reuse a previous layer's top-k
        config.indexer_types = list(config.indexer_types or [])[:index] + ["full"] * max(0, index - len(
            config.indexer_types or [])) + ["full"]
    block = layer_class(config, layer_idx=index)
    if moe:
        block.mlp.gate = VllmRouter(text)
    return block


__all__ = ["check_dsa", "dsa_block"]
