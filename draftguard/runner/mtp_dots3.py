"""dots3 (rednote-hilab's Dots3Note, ``model_type`` dots3_note) MTP layer as vLLM 0.32's
``models/dots3_note/nvidia/mtp.py`` builds and runs it (``Dots3NoteMTP``, method mtp), and its text target.

vLLM's ``SpeculativeConfig.hf_config_override`` appends ``mtp_layer_types`` (one per MTP layer, default
``"sliding_attention"``) to ``layer_types``; ``Dots3NoteMultiTokenPredictorLayer`` is DeepSeek-V3.2's layer
(checkpoint names ``model.layers.{N}.{enorm, hnorm, eh_proj, shared_head.norm, shared_head.head}``):

- ``fused_eh_norm`` / ``fused_embed_eh_norm``: the embedding zeroed at position 0, ``enorm`` of it and
  ``hnorm`` of the target's hidden state, [embedding, hidden] through ``eh_proj``;
- ``Dots3NoteDecoderLayer`` built at index N: its attention by ``layer_types[N]`` (``Dots3NoteSlidingAttention``:
  dense MLA with the ``swa_*`` geometry, ``swa_rope_theta`` GPT-J RoPE on ``swa_qk_rope_head_dim``, the window
  ``sliding_window_size`` (the query and the window - 1 tokens before it), ``k_rope_only_layernorm``, the
  LoRA latents scaled by sqrt(hidden / rank) under ``apply_mla_qkv_lora_rescale``, a sigmoid ``g_proj`` gate);
  else ``Dots3NoteFullAttention``, DSA, which the reference does not build), and its MLP always dense
  (``is_moe`` needs layer_idx < num_hidden_layers) of ``intermediate_size``. ``_pad_dense_mlp_weight`` pads
  block-FP8 dense MLP weights with zero rows / columns to the block: the same maths, so nothing here;
- ``shared_head.norm`` of output + residual: the normed state feeds the next step, and the target's
  ``lm_head`` of it gives the logits (``has_own_lm_head = False``: the proposer shares it).

The embedding: ``has_own_embed_tokens = True``. ``Dots3NoteMTP._adapt_weights`` renames
``model.mtp.embed_tokens.*`` to the layer's, which ``_rewrite_spec_layer_name`` loads into the MTP model's
``embed_tokens``; the target's ``model.embed_tokens.weight`` loads there too (``is_unused_checkpoint_weight``
keeps every name with ``embed_tokens``), before it in a checkpoint's sorted names. The proposer keeps the
MTP model's table where it differs from the target's. So the layer drafts with ``model.mtp.embed_tokens``
where the checkpoint has it, else with the target's: ``dots3_embedding``.

transformers 5.24's ``Dots3NoteTextDecoderLayer`` is that layer where the config asks for what it always
does (headwise gate, the LoRA rescale; ``dots3_block`` refuses otherwise), built at index N from the config
with ``layer_types`` extended as vLLM extends it and the MLP made dense.

In: the target's config.json (``raw``) and folder.
Out: ``dots3_text_config``, ``load_dots3_target``, ``dots3_block`` (the decoder layer, its rotary and
window), ``dots3_embedding``. Needs torch and transformers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from draftguard.errors import MissingWeights
from draftguard.runner.dflash_model import _read_weights, finish_target
from draftguard.runner.mtp_quant import dequantize_declared
from draftguard.snapshot import BadInput

OWN_EMBED = "model.mtp.embed_tokens.weight"
_DROP = ("model_type", "architectures", "auto_map", "quantization_config", "text_config", "vision_config",
         "audio_config")


def dots3_text_config(raw: dict[str, Any], extra_layers: int = 0) -> Any:
    """transformers' ``Dots3NoteTextConfig`` of a dots3 config.json (published checkpoints keep the text keys at
    the top level; an export with ``text_config`` keeps them there); ``extra_layers`` > 0: with the MTP layers
    appended as vLLM appends them (``mtp_layer_types``, default sliding; MLP dense)."""
    from transformers.models.dots3_note.configuration_dots3_note import Dots3NoteTextConfig  # transformers: a run pays it

    node = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    keys = {k: v for k, v in node.items() if k not in _DROP}
    if extra_layers:
        n = int(keys["num_hidden_layers"])
        base = Dots3NoteTextConfig(**keys)
        mtp_types = keys.get("mtp_layer_types") or ["sliding_attention"] * extra_layers
        if len(mtp_types) != extra_layers:
            raise BadInput(f"config.json: mtp_layer_types has {len(mtp_types)} entries for {extra_layers} MTP layer(s) "
                           "(vLLM 0.32 refuses it: one entry per MTP layer)", key="mtp_layer_types")
        stated = [("full_attention" if t == "indexed_attention" else t) for t in base.layer_types]
        keys.update(num_hidden_layers=n + extra_layers, layer_types=stated + list(mtp_types),
                    mlp_layer_types=list(base.mlp_layer_types) + ["dense"] * extra_layers)
    return Dots3NoteTextConfig(**keys)


def load_dots3_target(folder: Path, raw: dict[str, Any], device: str, dtype: torch.dtype | None,
                      file_of: Callable[[str], str]) -> tuple[nn.Module, Any]:
    """The text target, transformers' ``Dots3NoteForCausalLM``, with every tensor but the MTP layers'
    (``model.layers.{j}`` for j >= N, ``model.mtp.*``); a declared FP8 checkpoint dequantized as vLLM reads it."""
    from transformers.models.dots3_note.modeling_dots3_note import Dots3NoteForCausalLM  # transformers: a run's cost

    config = dots3_text_config(raw)
    config._attn_implementation = "eager"
    n = int(config.num_hidden_layers)
    model = Dots3NoteForCausalLM(config)

    def mtp(key: str) -> bool:
        index = key[len("model.layers."):].split(".")[0] if key.startswith("model.layers.") else ""
        return key.startswith("model.mtp.") or (index.isdigit() and int(index) >= n)

    own = {k: v for k, v in _read_weights(folder).items() if not mtp(k)}
    own = dequantize_declared(raw, own, "", file_of)
    missing, unexpected = model.load_state_dict(own, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise MissingWeights(f"{folder}: the target's weights " + (f"lack {', '.join(missing[:4])}" if missing else
                             f"hold tensors dots3_note does not name: {', '.join(unexpected[:4])}"), file=str(folder))
    return finish_target(model, folder, device, dtype)


def dots3_block(raw: dict[str, Any], where: str) -> tuple[nn.Module, nn.Module, str, int]:
    """MTP layer 0's decoder layer (transformers' ``Dots3NoteTextDecoderLayer`` at index N), the rotary that
    turns its positions, its layer type and its window (0: none)."""
    from transformers.models.dots3_note.modeling_dots3_note import (  # transformers: only a model run pays it
        Dots3NoteTextDecoderLayer, Dots3NoteTextRotaryEmbedding)

    node = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    for key in ("attention_gate_type", "swa_attention_gate_type"):
        if node.get(key, "headwise") != "headwise":
            raise BadInput(f"{where}: {key} is {node.get(key)!r}: vLLM 0.32 gates elementwise there, which the "
                           "reference does not build (it builds the headwise gate); run --backend vllm alone",
                           file=where, key=key)
    count = int(node.get("num_nextn_predict_layers", 1) or 1)
    config = dots3_text_config(raw, extra_layers=count)
    config._attn_implementation = "sdpa"
    n = int(config.num_hidden_layers) - count
    kind = config.layer_types[n]
    if kind != "sliding_attention":
        raise BadInput(f"{where}: mtp_layer_types makes the MTP layer {kind}: vLLM 0.32 builds DSA "
                       "(Dots3NoteFullAttention, the lightning indexer) there, which the reference does not build; "
                       "run --backend vllm alone", file=where, key="mtp_layer_types")
    block = Dots3NoteTextDecoderLayer(config, n)
    if not node.get("apply_mla_qkv_lora_rescale", False):  # vLLM scales the latents only under the flag
        block.self_attn.q_lora_scale = block.self_attn.kv_lora_scale = 1.0
    window = int(node.get("sliding_window_size") or node.get("sliding_window") or 0)
    return block, Dots3NoteTextRotaryEmbedding(config), kind, window


def dots3_embedding(weights: dict[str, torch.Tensor], target: nn.Module, where: str) -> nn.Module | None:
    """The table the layer drafts with: ``model.mtp.embed_tokens`` where the checkpoint has it (vLLM keeps
    it: ``has_own_embed_tokens``), else None (the target's, which vLLM loads in its place)."""
    table = weights.get(OWN_EMBED)
    if table is None:
        return None
    shape = tuple(target.get_input_embeddings().weight.shape)
    if tuple(table.shape) != shape:
        raise BadInput(f"{where}: `{OWN_EMBED}` has shape {tuple(table.shape)}, the config calls for {shape}",
                       file=where, key=OWN_EMBED)
    embed = nn.Embedding(*shape)
    embed.weight.data.copy_(table.to(torch.float32))
    return embed


__all__ = ["OWN_EMBED", "dots3_block", "dots3_embedding", "dots3_text_config", "load_dots3_target"]
