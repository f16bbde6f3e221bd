"""EXAONE-MoE's (K-EXAONE, ``ExaoneMoeForCausalLM``) MTP decoder layer, as vLLM 0.32's ``exaone_moe_mtp.py``
builds it with ``ExaoneMoeDecoderLayer(..., is_mtp=True)``.

The forward (``runner/mtp_model.py`` ``MtpHead``, layout ``exaone_moe``) is Qwen3.5's, with plain norms::

    x = fc(cat([pre_fc_norm_embedding(embed(token)), pre_fc_norm_hidden(hidden)]))   # embedding first
    h = layers[0](x)                 # the target's pre-norm decoder layer class, built as below
    out = norm(h); logits = lm_head(out)   # out feeds the next chain step; embed_tokens, lm_head shared

- the norms are plain RMSNorm (``x * w``; vLLM's ``RMSNorm``, transformers' ``ExaoneMoeRMSNorm``), not
  Qwen3.5's zero-centred ones; the embedding is not zeroed at position 0;
- the layer sits at index 0 (vLLM's prefix ``mtp.layers.0``): its attention kind is ``mtp_layer_types[0]``
  where the config has it, else ``layer_types[0]``; its window ``mtp_sliding_windows[0]``, else
  ``sliding_windows[0]``, else ``sliding_window``; a full-attention layer has none;
- it always rotates q and k (vLLM: "the MTP layer, which is trained with RoPE"), where the target's
  full-attention layers beside sliding ones are NoPE; transformers' ``ExaoneMoeAttention`` rotates when
  the config's ``sliding_window`` is None or the layer slides, so a full MTP layer is built with none;
- its MLP is dense (``intermediate_size``) whatever ``mlp_layer_types`` says at index 0;
- ``swiglu_limits[0]`` > 0 clamps the gate (above) and the up projection (both sides) before
  ``silu(gate) * up``, as vLLM's ``SiluAndMulWithClamp``.

In: the target (transformers' ``ExaoneMoeForCausalLM``) and its text config.
Out: ``exaone_block`` (the decoder layer, its window applied to the causal mask it is given) and
``exaone_window`` (that window, None for none); bad input naming the key for an MTP attention kind or
window the reference cannot read. Needs torch.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from draftguard.snapshot import BadInput


def _first(text: Any, *keys: str) -> tuple[str, Any] | None:
    """The first of ``keys`` the config has as a non-empty list, and its entry at index 0."""
    for key in keys:
        value = getattr(text, key, None)
        if isinstance(value, (list, tuple)) and value:
            return key, value[0]
    return None


def exaone_kind(text: Any) -> str:
    """The MTP layer's attention kind, ``full_attention`` or ``sliding_attention``, as vLLM reads it."""
    found = _first(text, "mtp_layer_types", "layer_types")
    kind = found[1] if found else "full_attention"
    if kind not in ("full_attention", "sliding_attention"):
        raise BadInput(f"config.json: `{found[0] if found else 'layer_types'}[0]` is {kind!r}; the EXAONE-MoE MTP "
                       "layer is full_attention or sliding_attention", file="config.json",
                       key=found[0] if found else "layer_types")
    return kind


def exaone_window(text: Any) -> int | None:
    """The MTP layer's sliding window (the query and the window - 1 tokens before it), None where it has none."""
    if exaone_kind(text) == "full_attention":
        return None
    found = _first(text, "mtp_sliding_windows", "sliding_windows")
    window = found[1] if found else getattr(text, "sliding_window", None)
    if window is not None and (not isinstance(window, int) or isinstance(window, bool) or window < 0):
        key = found[0] + "[0]" if found else "sliding_window"
        raise BadInput(f"config.json: `{key}` is {window!r}; the MTP layer's window is a whole number",
                       file="config.json", key=key)
    return window or None


class _ClampedSwiGLU(nn.Module):
    """``down(silu(min(gate, L)) * clamp(up, -L, L))``: vLLM's ``SiluAndMulWithClamp`` (alpha 1, beta 0)."""

    def __init__(self, mlp: nn.Module, limit: float):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj, self.limit = mlp.gate_proj, mlp.up_proj, mlp.down_proj, limit

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.clamp(self.gate_proj(x), max=self.limit)
        up = torch.clamp(self.up_proj(x), min=-self.limit, max=self.limit)
        return self.down_proj(F.silu(gate) * up)


def exaone_block(text: Any, target: nn.Module) -> nn.Module:
    """MTP layer 0 as vLLM builds it (see the module docstring); its forward takes the causal mask
    ``MtpHead`` builds and narrows it to the layer's window. Example: ``block = exaone_block(text, target)``."""
    layers = getattr(target, "model", target).layers
    kind, window = exaone_kind(text), exaone_window(text)
    config = copy.deepcopy(text)
    config.layer_types = [kind] + list(getattr(text, "layer_types", None) or [])[1:]
    config.mlp_layer_types = ["dense"] + list(getattr(text, "mlp_layer_types", None) or [])[1:]
    if kind == "full_attention":
        config.sliding_window = None  # transformers then rotates, as vLLM's MTP layer does
    base = type(layers[0])

    class ExaoneMtpLayer(base):  # type: ignore[misc, valid-type]
        def forward(self, hidden_states, attention_mask=None, **kwargs):  # noqa: ANN001
            if window and attention_mask is not None:
                n = hidden_states.shape[-2]
                far = torch.ones(n, n, dtype=torch.bool, device=hidden_states.device).tril(-window)
                attention_mask = attention_mask.masked_fill(far, float("-inf"))
            return super().forward(hidden_states, attention_mask=attention_mask, **kwargs)

    block = ExaoneMtpLayer(config, layer_idx=0)
    limits = getattr(text, "swiglu_limits", None)
    if isinstance(limits, (list, tuple)) and limits and isinstance(limits[0], (int, float)) and limits[0] > 0:
        block.mlp = _ClampedSwiGLU(block.mlp, float(limits[0]))
    return block
