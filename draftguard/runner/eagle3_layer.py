"""The decoder layer of an EAGLE-3 head as vLLM 0.32 builds it, and the RoPE it rotates with.

- the layer's kind, read as vLLM picks the head's class: a speculators head's
  ``transformer_layer_config.model_type`` (``update_eagle3``: llama or qwen3), else the config's
  ``architectures`` named as ``EAGLEConfig`` names them (``Qwen3ForCausalLM`` -> ``Eagle3Qwen3ForCausalLM``)
  and looked up as vLLM's registry does (``Eagle3Qwen3ForCausalLM`` builds ``qwen3_eagle3.py``'s
  Qwen3 layer; every other EAGLE-3 name ``llama_eagle3.py``'s LLaMA layer);
- the Qwen3 layer differs from the LLaMA one in its attention only: an RMSNorm over each head of q
  and of k (``q_norm``, ``k_norm``, width ``head_dim``) before the rotation, and no ``o_proj`` bias;
- RoPE: plain, or scaled (``linear``, ``dynamic``, ``yarn``, ``llama3``) with the inverse frequencies
  and the cos/sin factor transformers computes (``ROPE_INIT_FUNCTIONS``), which equal vLLM's
  ``get_rope`` caches; vLLM's dynamic NTK is static (its base grows by ``max_position_embeddings`` /
  ``max_trained_positions``, 1 unless the file states the latter), so it is computed at that length;
  with an ``alpha`` (Hunyuan) vLLM's NTK-alpha base, which transformers lacks.

In: the layer's config keys (a dict: the head's config.json, or a speculators head's
``transformer_layer_config``) and the head's spec.
Out: ``layer_kind``, ``rope_parameters``, ``rope_tables`` (inverse frequencies and the cos/sin factor),
and the layer's modules (``MidLayer``, ``RMSNorm``). A RoPE that neither builds raises ``BadInput``
naming the key. Needs the ``runner`` extra (torch).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from draftguard.check.drafter.detect import PLAIN_ROPE, SCALED_ROPE
from draftguard.runner.dflash_model import _rotate_half
from draftguard.snapshot import BadInput

# The architectures vLLM 0.32's registry builds as qwen3_eagle3's Qwen3 layer (after EAGLEConfig's renaming).
QWEN3_EAGLE3_ARCHITECTURES = ("Eagle3Qwen3ForCausalLM", "PeagleQwen3ForCausalLM")


def layer_kind(raw: dict[str, Any], layers: dict[str, Any], speculators: bool) -> str:
    """"qwen3" or "llama": the decoder layer vLLM builds for this head.

    Example: ``layer_kind({"architectures": ["Qwen3ForCausalLM"]}, {}, False) == "qwen3"``."""
    if speculators:
        return "qwen3" if layers.get("model_type", "llama") == "qwen3" else "llama"
    archs = raw.get("architectures") if isinstance(raw.get("architectures"), list) else []
    named = [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}" for a in archs if isinstance(a, str)]
    return "qwen3" if named and named[0] in QWEN3_EAGLE3_ARCHITECTURES else "llama"


def rope_parameters(layers: dict[str, Any], path: Path, where: str = "") -> dict[str, Any]:
    """The layer's RoPE parameters as transformers' config classes standardise them (``rope_parameters``,
    else the older ``rope_scaling`` with ``rope_theta`` beside it; ``type`` read as ``rope_type``)."""
    rope = layers.get("rope_parameters") or layers.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        raise BadInput(f"{path}: `{where}rope_parameters` must be an object, got {rope!r}", file=str(path),
                       key=f"{where}rope_parameters")
    rope = dict(rope)
    rope.setdefault("rope_type", rope.get("type") or "default")
    rope.setdefault("rope_theta", layers.get("rope_theta") or 10000.0)
    kind = rope["rope_type"]
    if kind not in PLAIN_ROPE + SCALED_ROPE:
        raise BadInput(f"{path}: `{where}rope_parameters.rope_type` is {kind!r}; the reference head builds plain RoPE "
                       f"and {', '.join(SCALED_ROPE)} scaling (--backend vllm measures it)", file=str(path),
                       key=f"{where}rope_parameters.rope_type")
    return rope


def rope_tables(rope: dict[str, Any], head_dim: int, max_position: int, path: Path, where: str = ""
                ) -> tuple[torch.Tensor, float]:
    """The inverse frequencies (head_dim / 2) and the factor on cos and sin, as transformers' RoPE
    functions compute them for this config (equal to vLLM's ``get_rope`` cache, checked by a test).

    Example: ``rope_tables({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}, 32, 128, p)[0][1]``
    is half of plain RoPE's."""
    kind = rope["rope_type"]
    if kind in PLAIN_ROPE or (kind == "dynamic" and rope.get("alpha") is not None):
        theta = float(rope["rope_theta"])
        if kind == "dynamic":  # vLLM's NTK-alpha (Hunyuan; transformers has no such kind): a larger base
            theta *= float(rope["alpha"]) ** (head_dim / (head_dim - 2))
        return 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim)), 1.0
    params, seq_len = {k: v for k, v in rope.items() if k != "type"}, None
    length = max_position
    if kind == "dynamic" and params.get("max_trained_positions"):  # vLLM's static NTK at max_position
        length, seq_len = int(params["max_trained_positions"]), max_position
    try:
        config = LlamaConfig(hidden_size=head_dim, num_attention_heads=1, head_dim=head_dim,
                             max_position_embeddings=length, rope_parameters=params)
        inv, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu", *([seq_len] if seq_len else []))
    except (KeyError, ValueError, TypeError) as exc:
        raise BadInput(f"{path}: `{where}rope_parameters` ({kind}) cannot be built: {exc}", file=str(path),
                       key=f"{where}rope_parameters") from None
    return inv.float(), float(factor)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


class Attention(nn.Module):
    """q/k/v over 2 x hidden (the normed embedding beside the normed hidden state); Qwen3's per-head
    q/k norms where the spec's ``layer_kind`` is qwen3; RoPE from the spec's ``inv_freq`` and
    ``rope_factor``."""

    def __init__(self, s: Any):
        super().__init__()
        inp, b = 2 * s.hidden_size, s.attention_bias
        self.q_proj = nn.Linear(inp, s.num_heads * s.head_dim, bias=b)
        self.k_proj = nn.Linear(inp, s.num_kv_heads * s.head_dim, bias=b)
        self.v_proj = nn.Linear(inp, s.num_kv_heads * s.head_dim, bias=b)
        self.o_proj = nn.Linear(s.num_heads * s.head_dim, s.hidden_size, bias=b and s.layer_kind != "qwen3")
        if s.layer_kind == "qwen3":
            self.q_norm = RMSNorm(s.head_dim, s.rms_norm_eps)
            self.k_norm = RMSNorm(s.head_dim, s.rms_norm_eps)
        self.s = s

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        s = self.s
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, s.num_heads, s.head_dim)
        k = self.k_proj(x).view(b, n, s.num_kv_heads, s.head_dim)
        v = self.v_proj(x).view(b, n, s.num_kv_heads, s.head_dim).transpose(1, 2)
        if s.layer_kind == "qwen3":
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        freqs = positions.float()[..., None] * s.inv_freq.to(x.device)
        emb = torch.cat([freqs, freqs], -1)
        cos, sin = (emb.cos() * s.rope_factor).to(x.dtype)[:, None], (emb.sin() * s.rope_factor).to(x.dtype)[:, None]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        rep = s.num_heads // s.num_kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if s.sliding_window:  # causal within the window: a query at p sees keys at p - w + 1 .. p
            gap = positions[:, :, None] - positions[:, None, :]
            allowed = (gap >= 0) & (gap < s.sliding_window)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class Mlp(nn.Module):
    def __init__(self, s: Any):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    def __init__(self, s: Any):
        super().__init__()
        self.input_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.hidden_norm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = Attention(s)
        self.post_attention_layernorm = RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = Mlp(s)
