"""GLM-4.7-Flash's MTP layer and GLM-4.5V/4.6V's multimodal target, as vLLM 0.32 builds them.

- GLM-4.7-Flash (``Glm4MoeLiteForCausalLM``, model_type ``glm4_moe_lite``; vLLM's ``glm4_moe_lite_mtp.py``):
  DeepSeek-V3's MTP names (``model.layers.{N}.{enorm, hnorm, eh_proj, shared_head.norm}``), the embedding
  zeroed at position 0, [embedding, hidden] into ``eh_proj``, then vLLM's ``Glm4MoeLiteDecoderLayer``:
  DeepSeek-V2's MLA attention and GLM's MoE (``Glm4MoE``: grouped top-k with sigmoid scores and the
  ``e_score_correction_bias`` always read, whatever ``scoring_func`` / ``topk_method`` say), MoE at N
  where ``n_routed_experts`` is set, N >= ``first_k_dense_replace`` and N % ``moe_layer_freq`` == 0. The
  layer returns its output before ``shared_head.norm``, which feeds the next chain step (the logits alone
  are normed), as GLM-4.5's; DeepSeek-V3's returns it normed. transformers 5's ``Glm4MoeLiteDecoderLayer``
  has the same tensors and forward but picks MoE by ``mlp_layer_types`` (one entry per target layer, none
  for N): ``glm4_lite_block`` builds it with vLLM's choice at N.
- GLM-4.5V / GLM-4.6V (``Glm4vMoeForConditionalGeneration``): the text model is GLM-4.5's (vLLM builds
  ``Glm4MoeForCausalLM`` from ``text_config``), its tensors under ``model.language_model.``, the MTP layer's
  at ``model.language_model.layers.{N}.``, ``lm_head`` at the top, the vision tower under ``model.visual.``.
  Drafting reads no image, so ``load_glm4v_target`` builds the text model alone and reads only its tensors
  (the vision tower's shards are never opened).

In: the target's text config, the decoder layer class, a target folder.
Out: ``glm4_lite_block`` (the MTP decoder layer at N) and ``load_glm4v_target`` (the text model of a
GLM-4.5V export, with its tokenizer). Needs torch.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from draftguard.errors import MissingWeights
from draftguard.runner.dflash_model import finish_target
from draftguard.runner.mtp_dsv3 import VllmRouter, vllm_moe_at
from draftguard.runner.mtp_qwen35 import fuse_experts
from draftguard.snapshot import BadInput

TEXT_PREFIX = "model.language_model."


def glm4_lite_block(text: Any, layer_class: Callable[..., nn.Module], index: int) -> nn.Module:
    """GLM-4.7-Flash's decoder layer at ``index`` (N) as vLLM 0.32's ``Glm4MoeLiteDecoderLayer`` builds it:
    MoE or dense by vLLM's rule, routed by ``Glm4MoE``'s grouped top-k (sigmoid, the correction bias always).
    Example: ``glm4_lite_block(text_config(target), type(target.model.layers[0]), n)``."""
    moe = vllm_moe_at(text, index)
    config = copy.deepcopy(text)
    kinds = list(getattr(text, "mlp_layer_types", None) or [])
    kinds = (kinds + ["dense"] * (index + 1 - len(kinds)))[: index + 1]
    kinds[index] = "sparse" if moe else "dense"
    config.mlp_layer_types = kinds
    block = layer_class(config, layer_idx=index)
    if moe:
        block.mlp.gate = VllmRouter(text, scoring="sigmoid", biased=True)
    return block


def load_glm4v_target(folder: Path, raw: dict[str, Any], device: str = "cpu", dtype: torch.dtype | None = None,
                      base: str = "glm4_moe", adjust: Callable[[dict[str, Any]], dict[str, Any]] | None = None
                      ) -> tuple[nn.Module, Any]:
    """The text model of a GLM-4.5V/4.6V export as vLLM builds it: transformers' ``Glm4MoeForCausalLM``
    from ``text_config``, loaded from ``model.language_model.*`` (less the MTP layers at N and after) and
    ``lm_head.weight``, read from the shards that hold them only. Bad input naming config.json without a
    ``text_config``; ``MissingWeights`` naming the first tensor the text model lacks. ``base`` / ``adjust``:
    another GLM text class and the keys as vLLM reads them for it (GLM-OCR: runner/mtp_glm_ocr.py)."""
    from transformers import AutoConfig, AutoModelForCausalLM  # a model run pays it

    text = raw.get("text_config")
    if not isinstance(text, dict):
        raise BadInput(f"{folder / 'config.json'}: {raw.get('architectures')} needs a `text_config` object (the "
                       "language model's settings)", file=str(folder / "config.json"), key="text_config")
    keys = {k: v for k, v in text.items() if k not in ("model_type", "architectures")}
    keys.setdefault("tie_word_embeddings", raw.get("tie_word_embeddings", False))
    config = AutoConfig.for_model(base, **(adjust(keys) if adjust else keys))
    config._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    n = int(config.num_hidden_layers)

    def wanted(key: str) -> bool:
        if key == "lm_head.weight":
            return True
        if not key.startswith(TEXT_PREFIX):
            return False
        rest = key[len(TEXT_PREFIX):]
        index = rest.split(".")[1] if rest.startswith("layers.") else ""
        return not (index.isdigit() and int(index) >= n)

    weights = {("model." + k[len(TEXT_PREFIX):] if k.startswith(TEXT_PREFIX) else k): v
               for k, v in read_matching(folder, wanted).items()}
    weights = fuse_experts(weights, model.state_dict())
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise MissingWeights(f"{folder}: the text model's weights " + (
            f"lack {', '.join(_stored(k) for k in missing[:4])}" if missing
            else f"hold tensors {type(model).__name__} does not name: {', '.join(_stored(k) for k in unexpected[:4])}"),
            file=str(folder))
    return finish_target(model, folder, device, dtype)


def _stored(key: str) -> str:
    """A text-model key under the name the export stores it."""
    return TEXT_PREFIX + key[len("model."):] if key.startswith("model.") else key


def read_matching(folder: Path, wanted: Callable[[str], bool]) -> dict[str, torch.Tensor]:
    """The tensors whose names ``wanted`` accepts, read one by one from the shards the index puts them in
    (one ``model.safetensors`` otherwise): a shard holding none of them is never opened."""
    from safetensors import safe_open  # safetensors: the runner extra only

    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    elif index.is_file():
        shards = sorted({f for k, f in json.loads(index.read_text())["weight_map"].items() if wanted(k)})
    else:
        raise MissingWeights(f"{folder}: no model.safetensors (or model.safetensors.index.json)", file=str(folder))
    out: dict[str, torch.Tensor] = {}
    for shard in shards:
        if not (folder / shard).is_file():
            raise MissingWeights(f"{folder / shard}: shard named in {index.name} is missing", file=str(index))
        with safe_open(str(folder / shard), "pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys() if wanted(k)})
    return out
