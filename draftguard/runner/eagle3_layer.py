"""The decoder layer of an EAGLE-3 head as vLLM 0.32 builds it, and the RoPE it rotates with.

- the layer's kind, read as vLLM picks the head's class: a speculators head's
  ``transformer_layer_config.model_type`` (``update_eagle3``: llama or qwen3), else the config's
  ``architectures`` named as ``EAGLEConfig`` names them (``Qwen3ForCausalLM`` -> ``Eagle3Qwen3ForCausalLM``)
  and looked up as vLLM's registry does (``Eagle3Qwen3ForCausalLM`` builds ``qwen3_eagle3.py``'s
  Qwen3 layer; every other EAGLE-3 name ``llama_eagle3.py``'s LLaMA layer);
- the Qwen3 layer differs from the LLaMA one in its attention only: an RMSNorm over each head of q
  and of k (``q_norm``, ``k_norm``, width ``head_dim``) before the rotation, and no ``o_proj`` bias;
- RoPE: plain, or scaled (``linear``, ``dynamic``, ``yarn``, ``llama3``, ``longrope`` (legacy ``su``),
  ``deepseek_yarn``/``deepseek_llama_scaling``, ``ntk``) with the inverse frequencies and the cos/sin
  factor transformers computes (``ROPE_INIT_FUNCTIONS``), which equal vLLM's ``get_rope`` caches;
  vLLM's dynamic NTK is static (its base grows by ``max_position_embeddings`` /
  ``max_trained_positions``, 1 unless the file states the latter), so it is computed at that length;
  with an ``alpha`` (Hunyuan) vLLM's NTK-alpha base, and vLLM's ``ntk`` (fixed, or ``mixed_b``),
  which transformers lacks (our code). LongRoPE as vLLM's Phi3LongRoPE: the long factors for every
  position when the engine's length exceeds ``original_max_position_embeddings`` (``engine_len``),
  its factor ``max_position_embeddings`` / that (the file's ``factor`` unread), ``short_mscale`` /
  ``long_mscale`` where stated; YaRN with an ``mrope_section`` as vLLM's MRotaryEmbedding (its
  correction range over 4 x ``original_max_position_embeddings``); DeepSeek's YaRN as transformers'
  yarn with vLLM's factor on cos/sin (``mscale`` 1 and ``mscale_all_dim`` 0 unless stated); each over
  get_rope's rotary dims (``rope_dim``, else ``partial_rotary_factor`` of the head; the first ones,
  DeepSeek-V4's scaling the last ones).

In: the layer's config keys (a dict: the head's config.json, or a speculators head's
``transformer_layer_config``) and the head's spec.
Out: ``layer_kind``, ``rope_parameters``, ``rope_tables`` (inverse frequencies and the cos/sin factor),
and the layer's modules (``MidLayer``, ``RMSNorm``). A RoPE that neither builds raises ``BadInput``
naming the key. Needs the ``runner`` extra (torch).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from draftguard.check.drafter.detect import DEEPSEEK_ROPE, PLAIN_ROPE, SCALED_ROPE
from draftguard.runner.dflash_model import _rotate_half
from draftguard.snapshot import BadInput

# The architectures vLLM 0.32's registry builds as qwen3_eagle3's Qwen3 layer (after EAGLEConfig's renaming).
QWEN3_EAGLE3_ARCHITECTURES = ("Eagle3Qwen3ForCausalLM", "PeagleQwen3ForCausalLM")
# ... and as deepseek_eagle3's DeepSeek-V2/V3 layer (MLA attention over 2 x hidden, a dense MLP).
MLA_EAGLE3_ARCHITECTURES = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")


def layer_kind(raw: dict[str, Any], layers: dict[str, Any], speculators: bool) -> str:
    """"qwen3", "llama" or "mla": the decoder layer vLLM builds for this head ("mla": deepseek_eagle3.py's
    DeepSeek-V2/V3 layer, MLA attention and a dense MLP, which the reference does not build).

    Example: ``layer_kind({"architectures": ["Qwen3ForCausalLM"]}, {}, False) == "qwen3"``."""
    if speculators:
        return "qwen3" if layers.get("model_type", "llama") == "qwen3" else "llama"
    archs = raw.get("architectures") if isinstance(raw.get("architectures"), list) else []
    named = [a if a.startswith("Eagle3") or a.endswith("Eagle3") else f"Eagle3{a}" for a in archs if isinstance(a, str)]
    if named and named[0] in MLA_EAGLE3_ARCHITECTURES:
        return "mla"
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
    rope["rope_type"] = {"su": "longrope"}.get(rope["rope_type"], rope["rope_type"])  # vLLM's legacy patch
    rope.setdefault("rope_theta", layers.get("rope_theta") or 10000.0)
    for name in ("partial_rotary_factor", "rotary_pct", "rotary_emb_fraction"):  # vLLM's patch_rope_parameters
        if layers.get(name) is not None:
            rope.setdefault("partial_rotary_factor", layers[name])
            break
    kind = rope["rope_type"]
    if kind == "default" and rope.get("use_fope"):  # vLLM's FourierRotaryEmbedding: weights of its own, not a table
        raise BadInput(f"{path}: `{where}rope_parameters.use_fope` is set; the reference head does not build "
                       "Fourier RoPE (--backend vllm measures it)", file=str(path),
                       key=f"{where}rope_parameters.use_fope")
    if kind not in PLAIN_ROPE + SCALED_ROPE:
        raise BadInput(f"{path}: `{where}rope_parameters.rope_type` is {kind!r}; the reference head builds plain RoPE "
                       f"and {', '.join(SCALED_ROPE)} scaling (--backend vllm measures it)", file=str(path),
                       key=f"{where}rope_parameters.rope_type")
    return rope


def _plain(theta: float, head_dim: int) -> torch.Tensor:
    return 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))


def _ntk(rope: dict[str, Any], head_dim: int) -> torch.Tensor:
    """vLLM's NTKScalingRotaryEmbedding (transformers has no ``ntk``): fixed, base x factor and the
    frequencies / factor^(2 / dim); or mixed (``mixed_b``), frequency i / exp(a i^b), a = ln factor / (dim/2)^b."""
    factor, theta, mixed_b = float(rope["factor"]), float(rope["rope_theta"]), rope.get("mixed_b")
    if mixed_b is None:
        return _plain(theta * factor, head_dim) / factor ** (2 / head_dim)
    a = torch.tensor(factor).log() / (head_dim / 2) ** float(mixed_b)
    return _plain(theta, head_dim) / (a * torch.arange(1, head_dim // 2 + 1).float() ** float(mixed_b)).exp()


def _as_transformers(rope: dict[str, Any], kind: str, max_position: int, engine_len: int | None
                     ) -> tuple[dict[str, Any], str, int, int | None]:
    """The parameters, kind, length and seq_len to hand transformers' RoPE function for vLLM's table."""
    params, length, seq_len = {k: v for k, v in rope.items() if k != "type"}, max_position, None
    if kind == "dynamic" and params.get("max_trained_positions"):  # vLLM's static NTK at max_position
        length, seq_len = int(params["max_trained_positions"]), max_position
    elif kind == "longrope":  # vLLM's Phi3LongRoPE: the factor from the lengths; long factors past the original
        original = int(params["original_max_position_embeddings"])
        params["factor"] = max_position / original
        params.pop("attention_factor", None)
        seq_len = engine_len or max_position
        scale = params.get("long_mscale" if seq_len > original else "short_mscale")
        if scale is not None:
            params["attention_factor"] = float(scale)
    elif kind == "yarn" and params.get("mrope_section"):  # vLLM's MRotaryEmbedding: YaRN's range over a
        # cache of 4 x the original length (get_rope's mrope_positions_factor), where YaRNScaling reads 1 x
        params["original_max_position_embeddings"] = 4 * int(params["original_max_position_embeddings"])
    elif kind in DEEPSEEK_ROPE:  # vLLM's DeepseekScalingRotaryEmbedding: YaRN, cos/sin times its mscale ratio
        factor = float(params["factor"])
        params = {"rope_type": "yarn", "rope_theta": params["rope_theta"], "factor": factor,
                  "original_max_position_embeddings": params["original_max_position_embeddings"],
                  "beta_fast": params.get("beta_fast", 32), "beta_slow": params.get("beta_slow", 1),
                  "attention_factor": _mscale(factor, float(params.get("mscale", 1)))
                  / _mscale(factor, float(params.get("mscale_all_dim", 0)))}
        kind = "yarn"
    return params, kind, length, seq_len


def _mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def rope_tables(rope: dict[str, Any], head_dim: int, max_position: int, path: Path, where: str = "",
                engine_len: int | None = None) -> tuple[torch.Tensor, float]:
    """The inverse frequencies (rotary dim / 2) and the factor on cos and sin, as transformers' RoPE
    functions compute them for this config (equal to vLLM's ``get_rope`` cache, checked by a test);
    ``engine_len`` is the engine's max_model_len (LongRoPE's choice of factors; else ``max_position``).
    The rotary dim is get_rope's: ``rope_dim``, else head_dim x ``partial_rotary_factor``.

    Example: ``rope_tables({"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}, 32, 128, p)[0][1]``
    is half of plain RoPE's."""
    kind = rope["rope_type"]
    fraction = rope.get("partial_rotary_factor", 1.0)
    if not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise BadInput(f"{path}: `{where}partial_rotary_factor` is {fraction!r}; vLLM's get_rope takes 0 < it <= 1",
                       file=str(path), key=f"{where}partial_rotary_factor")
    head_dim = int(rope.get("rope_dim") or int(head_dim * fraction))
    rope = {k: v for k, v in rope.items() if k not in ("partial_rotary_factor", "rope_dim")}
    if kind in PLAIN_ROPE or (kind == "dynamic" and rope.get("alpha") is not None):
        theta = float(rope["rope_theta"])
        if kind == "dynamic":  # vLLM's NTK-alpha (Hunyuan; transformers has no such kind): a larger base
            theta *= float(rope["alpha"]) ** (head_dim / (head_dim - 2))
        return _plain(theta, head_dim), 1.0
    try:
        if kind == "ntk":
            return _ntk(rope, head_dim), 1.0
        params, kind, length, seq_len = _as_transformers(rope, kind, max_position, engine_len)
        config = LlamaConfig(hidden_size=head_dim, num_attention_heads=1, head_dim=head_dim,
                             max_position_embeddings=length, rope_parameters=params)
        inv, factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu", *([seq_len] if seq_len else []))
    except (KeyError, ValueError, TypeError, ZeroDivisionError) as exc:
        raise BadInput(f"{path}: `{where}rope_parameters` ({rope['rope_type']}) cannot be built: {exc}", file=str(path),
                       key=f"{where}rope_parameters") from None
    return inv.float(), float(factor)


def rotate(x: torch.Tensor, positions: torch.Tensor, s: Any) -> torch.Tensor:
    """NeoX-style RoPE on the rotary dims of x (batch, heads, n, head_dim): the first ones, as vLLM's
    get_rope rotates them, or the last ones under DeepSeek-V4's scaling (``is_deepseek_v4``)."""
    freqs = positions.float()[..., None] * s.inv_freq.to(x.device)
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = (emb.cos() * s.rope_factor).to(x.dtype)[:, None], (emb.sin() * s.rope_factor).to(x.dtype)[:, None]
    dim = emb.shape[-1]
    if dim == x.shape[-1]:
        return x * cos + _rotate_half(x) * sin
    last = s.rope["rope_type"] in DEEPSEEK_ROPE and bool(s.rope.get("is_deepseek_v4"))
    part, rest = (x[..., -dim:], x[..., :-dim]) if last else (x[..., :dim], x[..., dim:])
    part = part * cos + _rotate_half(part) * sin
    return torch.cat([rest, part] if last else [part, rest], -1)


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
        q, k = rotate(q, positions, s), rotate(k, positions, s)
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
