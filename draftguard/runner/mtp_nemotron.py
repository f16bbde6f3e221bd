"""Nemotron-H's MTP layer (Nemotron 3 Super/Ultra style: ``NemotronHForCausalLM``, model_type ``nemotron_h``)
as vLLM 0.32's ``nemotron_h_mtp.py`` runs it.

- The count: ``num_nextn_predict_layers`` (vLLM asserts exactly 1); the layer is a short stack of
  sublayers by ``mtp_hybrid_override_pattern`` (transformers 5.x: ``mtp_layers_block_type``; default
  ``*E``: attention then MoE). vLLM builds ``*`` (attention) and ``E`` (MoE) only and refuses any other
  character (``NotImplementedError``); so does the reference (bad input, exit 2).
- The checkpoint: ``mtp.layers.{j}.*`` for sublayer j; sublayer 0 holds ``enorm``, ``hnorm`` and ``eh_proj``,
  the last ``final_layernorm``; each its own ``norm`` and ``mixer.*`` (attention ``q/k/v/o_proj``;
  MoE ``gate.weight``, ``gate.e_score_correction_bias``, ``experts.{e}.{up,down}_proj.weight`` stored one
  by one, non-gated, and ``shared_experts.{up,down}_proj``). No copy of the embeddings or head: vLLM
  loads the target's ``backbone.embeddings`` and ``lm_head`` into the MTP model.
- The forward: ``eh_proj([enorm(embedding), hnorm(hidden)])`` (the embedding not zeroed at position 0;
  the hidden state the target's output after ``norm_f``), then each sublayer pre-norm with a residual
  (vLLM's fused add-norm chain: the same sum), attention without rotary (Nemotron-H's attention has no
  position encoding), MoE routed with sigmoid scores, the correction bias for the choice, top-k
  renormalised, times ``routed_scaling_factor``, relu² experts plus the shared expert; then
  ``final_layernorm`` of the sum. That normed output gives the logits (the target's ``lm_head``) and
  feeds the next chain step.

The sublayers are transformers' own ``NemotronHBlock`` (its ``NemotronHTopkRouter`` routes as vLLM's
grouped top-k does; tests/test_mtp_nemotron.py compares them).

In: the target's text config and the target (its block class), the MTP layer's per-expert tensors.
Out: ``nemotron_block`` (the MTP sublayers and final norm as one module) and ``stack_plain_experts``
(per-expert up/down tensors stacked as transformers' ``NemotronHExperts`` holds them). Needs torch.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import torch
from torch import nn

from draftguard.snapshot import BadInput

BUILT = {"*": "full_attention", "E": "moe"}  # what vLLM 0.32's NemotronHMultiTokenPredictor builds
_EXPERT = re.compile(r"^(.*\.experts)\.(\d+)\.(up_proj|down_proj)\.weight$")


def mtp_pattern(text: Any) -> str:
    """The MTP sublayers' pattern as vLLM reads it (``config.mtp_hybrid_override_pattern``)."""
    pattern = getattr(text, "mtp_hybrid_override_pattern", None)
    return str(pattern) if pattern else "*E"


class NemotronMtpBlock(nn.Module):
    """The MTP layer's sublayers (``layers.{j}``, transformers' ``NemotronHBlock``), the last holding
    ``final_layernorm``; ``forward`` runs them causally and returns the normed output."""

    def __init__(self, text: Any, block_class: type, norm_class: type):
        super().__init__()
        pattern = mtp_pattern(text)
        wrong = sorted({c for c in pattern if c not in BUILT})
        if wrong:
            raise BadInput(f"config.json: mtp_hybrid_override_pattern {pattern!r} has sublayer(s) {wrong}; vLLM 0.32 "
                           "builds attention (*) and MoE (E) MTP sublayers only (NotImplementedError), and so does "
                           "the reference", key="mtp_hybrid_override_pattern")
        config = copy.deepcopy(text)
        config.layers_block_type = [BUILT[c] for c in pattern]  # NemotronHBlock reads its type by index
        self.layers = nn.ModuleList([block_class(config, layer_idx=j) for j in range(len(pattern))])
        self.layers[-1].final_layernorm = norm_class(int(text.hidden_size), eps=float(text.layer_norm_epsilon))

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, **_: Any) -> torch.Tensor:
        for layer in self.layers:
            mask = attention_mask if layer.block_type == "full_attention" else None
            x = layer(x, attention_mask=mask, position_ids=position_ids)
        return self.layers[-1].final_layernorm(x)


def nemotron_block(text: Any, target: nn.Module) -> NemotronMtpBlock:
    """The MTP layer of a Nemotron-H target, built with the target's own block and norm classes."""
    base = getattr(target, "model", target)
    return NemotronMtpBlock(text, type(base.layers[0]), type(base.norm_f))


def stack_plain_experts(weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor],
                        where: str = "the checkpoint") -> dict[str, torch.Tensor]:
    """Per-expert ``...experts.{e}.{up_proj,down_proj}.weight`` stacked into ``...experts.up_proj`` /
    ``down_proj`` [E, out, in] where the layer holds them so (Nemotron-H's non-gated experts); other
    tensors pass through. A stack missing an expert is left out (the caller zero-fills it as absent);
    experts of unequal shapes are bad input.

    Example::

        >>> import torch
        >>> w = {f"m.experts.{e}.up_proj.weight": torch.full((4, 3), float(e)) for e in range(2)}
        >>> out = stack_plain_experts(w, {"m.experts.up_proj": torch.zeros(2, 4, 3)})
        >>> tuple(out["m.experts.up_proj"].shape), out["m.experts.up_proj"][1, 0, 0].item()
        ((2, 4, 3), 1.0)
    """
    out: dict[str, torch.Tensor] = {}
    parts: dict[str, dict[int, torch.Tensor]] = {}
    for key, tensor in weights.items():
        match = _EXPERT.match(key)
        stack = f"{match.group(1)}.{match.group(3)}" if match else None
        if stack is None or stack not in expected or expected[stack].dim() != 3:
            out[key] = tensor
            continue
        parts.setdefault(stack, {})[int(match.group(2))] = tensor
    for stack, experts in parts.items():
        count, *shape = expected[stack].shape
        for index, tensor in experts.items():
            if index >= count or list(tensor.shape) != shape:
                raise BadInput(f"{where}: expert {index} of `{stack}` has shape {tuple(tensor.shape)}; the config "
                               f"calls for {count} experts (n_routed_experts) of {tuple(shape)}", key=stack)
        if all(e in experts for e in range(count)):
            out[stack] = torch.stack([experts[e] for e in range(count)])
    return out
