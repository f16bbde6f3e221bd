"""The Qwen3.5/3.6 and Qwen3-Next MTP layer's parts that differ from MiMo's: its decoder layer, norms
and expert tensors, as vLLM 0.32's ``qwen3_5_mtp.py`` and ``qwen3_next_mtp.py`` build them.

The forward (``runner/mtp_model.py`` ``MtpHead`` with the ``qwen3_5`` / ``qwen3_next`` layout), for the
token at position i + 1 and the target's normed hidden state at position i::

    x = fc(cat([pre_fc_norm_embedding(embed(token)), pre_fc_norm_hidden(hidden)]))   # embedding first
    h = layers[0](x)                  # a full-attention decoder layer of the target's own class
    out = norm(h); logits = lm_head(out)   # the target's lm_head (and embed_tokens): shared

- every norm is zero-centred ("gemma-style", ``x * (1 + w)``; vLLM's ``GemmaRMSNorm``, transformers'
  ``Qwen3_5RMSNorm`` / ``Qwen3NextRMSNorm``): the layer's norms are built as the target's own final norm;
- the embedding is not zeroed at position 0 (DeepSeek-V3 and MiMo zero it);
- the layer is full attention whatever the target's ``layer_types`` say at its index (vLLM builds it with
  ``layer_type="full_attention"``): Qwen3.5's targets are hybrid (Gated DeltaNet linear attention with
  full attention every fourth layer), their MTP layer is not. Its MLP follows the target's rules at
  layer index 0 (Qwen3-Next: a sparse MoE block, as the target's layers).
- a checkpoint stores experts one by one (``mlp.experts.{e}.{gate,up,down}_proj.weight``);
  transformers 5 holds them fused (``mlp.experts.gate_up_proj`` [E, 2I, H], ``down_proj`` [E, H, I]):
  ``fuse_experts`` turns the one into the other, as transformers' loader does for the target.

In: the target (a transformers model of the family) and the MTP layer's tensors under their checkpoint
names less the ``mtp.layers.0.`` prefix.
Out: ``mtp_block`` (the decoder layer), ``mtp_norm`` (a norm of the target's class),
``fuse_experts`` (the tensors under the names the layer's state dict uses; DeepSeek-V3's MoE MTP layer,
``runner/mtp_dsv3.py``, and its target use it too) and ``expert_mismatch`` (a per-expert tensor that
cannot go into its stack). Needs torch.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import torch
from torch import nn

_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def mtp_block(text: Any, target: nn.Module) -> nn.Module:
    """MTP layer 0 as vLLM builds it: the target's decoder layer class at index 0, full attention.
    Example: ``block = mtp_block(text_config(target), target)``."""
    layers = getattr(target, "model", target).layers
    config = text
    kinds = getattr(text, "layer_types", None)
    if isinstance(kinds, list) and any(k != "full_attention" for k in kinds):
        config = copy.deepcopy(text)
        config.layer_types = ["full_attention"] * len(kinds)
    return type(layers[0])(config, layer_idx=0)


def mtp_norm(target: nn.Module, size: int, eps: float) -> nn.Module:
    """A norm of the class of the target's final norm (Qwen3.5, Qwen3-Next: x * (1 + w), w zero-initialised)."""
    return type(getattr(target, "model", target).norm)(size, eps=eps)


def fuse_experts(weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Per-expert tensors (``mlp.experts.{e}.gate_proj.weight`` ...) stacked into the fused parameters the
    layer holds (``mlp.experts.gate_up_proj``: gate rows, then up rows; ``mlp.experts.down_proj``),
    where the layer's state dict names them so. Other tensors pass through. An expert the checkpoint
    lacks is left out of the stack's sources (the caller names the stack as absent: zeros).

    Example::

        >>> import torch
        >>> w = {f"mlp.experts.{e}.{p}.weight": torch.full((2, 3), float(e)) for e in range(2)
        ...      for p in ("gate_proj", "up_proj")} | {f"mlp.experts.{e}.down_proj.weight": torch.ones(3, 2)
        ...      for e in range(2)}
        >>> out = fuse_experts(w, {"mlp.experts.gate_up_proj": torch.zeros(2, 4, 3),
        ...                        "mlp.experts.down_proj": torch.zeros(2, 3, 2)})
        >>> tuple(out["mlp.experts.gate_up_proj"].shape), out["mlp.experts.gate_up_proj"][1, 0, 0].item()
        ((2, 4, 3), 1.0)
    """
    out: dict[str, torch.Tensor] = {}
    parts: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for key, tensor in weights.items():
        match = _EXPERT.match(key)
        if match is None or f"{match.group(1)}.gate_up_proj" not in expected:
            out[key] = tensor
            continue
        parts.setdefault(match.group(1), {}).setdefault(int(match.group(2)), {})[match.group(3)] = tensor
    for stem, experts in parts.items():
        count = expected[f"{stem}.gate_up_proj"].shape[0]
        if all(e in experts and {"gate_proj", "up_proj"} <= set(experts[e]) for e in range(count)):
            out[f"{stem}.gate_up_proj"] = torch.stack([torch.cat([experts[e]["gate_proj"], experts[e]["up_proj"]])
                                                       for e in range(count)])
        if all(e in experts and "down_proj" in experts[e] for e in range(count)):
            out[f"{stem}.down_proj"] = torch.stack([experts[e]["down_proj"] for e in range(count)])
    return out


def expert_mismatch(weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> tuple[str, str] | None:
    """The first per-expert tensor that cannot be stacked into the fused parameter the layer holds, and
    why (its shape is not one expert's slice, or its index is past the config's expert count); None if all fit.

    Example::

        >>> import torch
        >>> expert_mismatch({"mlp.experts.2.down_proj.weight": torch.zeros(3, 2)},
        ...                 {"mlp.experts.gate_up_proj": torch.zeros(2, 4, 3), "mlp.experts.down_proj": torch.zeros(2, 3, 2)})
        ('mlp.experts.2.down_proj.weight', 'is expert 2, but the config has 2 experts (n_routed_experts)')
    """
    for key, tensor in weights.items():
        match = _EXPERT.match(key)
        if match is None or f"{match.group(1)}.gate_up_proj" not in expected:
            continue
        stem, index, part = match.group(1), int(match.group(2)), match.group(3)
        count, double, hidden = expected[f"{stem}.gate_up_proj"].shape
        if index >= count:
            return key, f"is expert {index}, but the config has {count} experts (n_routed_experts)"
        want = tuple(expected[f"{stem}.down_proj"].shape[1:]) if part == "down_proj" else (double // 2, hidden)
        if tuple(tensor.shape) != want:
            return key, f"has shape {tuple(tensor.shape)}, the config calls for {want} per expert"
    return None
