"""GLM-OCR's MTP layer (``GlmOcrForConditionalGeneration``, model_type ``glm_ocr``) as vLLM 0.32 builds it
(``glm_ocr_mtp.py``'s ``GlmOcrMTP``, drafted for with ``method: mtp`` by ``config/speculative.py``).

- The target: vLLM builds the export's language model as ``Glm4ForCausalLM`` from ``text_config``
  (``glm4_1v.py``: model_type glm_ocr -> ``Glm4ForCausalLM``), its tensors under ``model.language_model.``,
  ``lm_head`` at the top, the vision tower under ``model.visual.``. Drafting reads no image, so the reference
  builds transformers' ``Glm4ForCausalLM`` from ``text_config`` (runner/mtp_glm_lite.py's loader), the vision
  tower neither built nor read. Text-only positions are one row repeated three times, so the M-RoPE
  sections (``mrope_section``) rotate as plain interleaved RoPE; transformers' ``Glm4RotaryEmbedding`` with
  the config's ``partial_rotary_factor`` is that rotation (GLM-OCR states 1.0; vLLM's ``Glm4Attention``
  takes 0.5 where none is stated). ``glm_ocr_text_keys`` reads the keys as vLLM's ``Glm4ForCausalLM``
  does where transformers' ``Glm4Config`` defaults differ (``attention_bias`` False, ``head_dim``
  hidden / heads, no ``pad_token_id``).
- The MTP layer: ``model.language_model.layers.{N}.{enorm, hnorm, eh_proj, shared_head.norm}`` (vLLM renames
  ``model.language_model.layers`` to ``model.layers``; N = ``text_config.num_hidden_layers``), the embedding
  zeroed at position 0, [embedding, hidden] into ``eh_proj``, then vLLM's ``Glm4DecoderLayer`` (sandwich
  norms: ``post_self_attn_layernorm``, ``post_mlp_layernorm``; fused ``gate_up_proj``) built from
  ``text_config`` with the target's rotary; the layer returns its output before ``shared_head.norm`` (the
  logits alone are normed), which feeds the next chain step, as GLM-4.5's. The proposer shares the target's
  embeddings and head (``lm_head.weight`` is even loaded into ``shared_head.head``); the layer's own
  copies, where a checkpoint ships them, are compared with the target's (runner/mtp_weights.py).

In: the target folder and its config.json (``text_config``); the text config and decoder layer class.
Out: ``load_glm_ocr_target`` (the text model, its tokenizer), ``glm_ocr_block`` (the MTP decoder layer at N)
and ``glm_ocr_text_keys``. Needs torch.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from draftguard.runner.mtp_glm_lite import load_glm4v_target


def glm_ocr_text_keys(keys: dict[str, Any]) -> dict[str, Any]:
    """``text_config``'s keys for transformers' ``Glm4Config`` as vLLM's ``Glm4ForCausalLM`` reads them: its
    defaults where the file states none (``Glm4Config``'s differ), ``mrope_section`` left out (text-only
    positions rotate as plain RoPE). Example:
    ``glm_ocr_text_keys({"hidden_size": 64, "num_attention_heads": 4})["head_dim"] == 16``."""
    keys = copy.deepcopy(keys)
    keys.setdefault("attention_bias", False)  # vLLM: getattr(config, "attention_bias", False)
    if keys.get("head_dim") is None and keys.get("hidden_size") and keys.get("num_attention_heads"):
        keys["head_dim"] = int(keys["hidden_size"]) // int(keys["num_attention_heads"])
    keys.setdefault("pad_token_id", None)  # Glm4Config's 151329 is past a small vocabulary
    rope = dict(keys.get("rope_parameters") or {})
    rope.pop("mrope_section", None)
    rope.setdefault("rope_type", "default")
    rope.setdefault("rope_theta", keys.get("rope_theta", 10000.0))
    rope.setdefault("partial_rotary_factor", 0.5)  # vLLM's Glm4Attention where the config states none
    keys["rope_parameters"] = rope
    return keys


def load_glm_ocr_target(folder: Path, raw: dict[str, Any], device: str = "cpu",
                        dtype: torch.dtype | None = None) -> tuple[nn.Module, Any]:
    """GLM-OCR's text model as vLLM builds it (``Glm4ForCausalLM`` from ``text_config``), read from
    ``model.language_model.*`` and ``lm_head.weight`` only. Example:
    ``target, tok = load_glm_ocr_target(Path(f), read_config(Path(f)))``."""
    return load_glm4v_target(folder, raw, device, dtype, base="glm4", adjust=glm_ocr_text_keys)


def glm_ocr_block(text: Any, layer_class: Callable[..., nn.Module], index: int) -> nn.Module:
    """vLLM's ``Glm4DecoderLayer`` of the MTP layer, built from the text config: the target's own decoder
    layer class (transformers' ``Glm4DecoderLayer``: the same tensors and forward) at index N."""
    return layer_class(text, layer_idx=index)


__all__ = ["glm_ocr_block", "glm_ocr_text_keys", "load_glm_ocr_target"]
