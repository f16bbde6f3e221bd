"""The DeepSeek EAGLE-3 head's attention: MLA over 2 x hidden, as vLLM 0.32's ``deepseek_eagle3.py``
builds it (``Eagle3DeepseekV2ForCausalLM``, also registered as ``Eagle3DeepseekV3ForCausalLM``; the
layout of TorchSpec's and SpecForge's Kimi-K2 / DeepSeek heads).

What differs from the LLaMA head (``eagle3_layer``), read from vLLM's code:

- the decoder layer's attention is ``DeepseekV2MLAAttention`` with ``input_size`` 2 x hidden: the
  normed token embedding beside the normed hidden state feed ``q_proj`` (or ``q_a_proj`` ->
  ``q_a_layernorm`` -> ``q_b_proj`` where ``q_lora_rank`` is set) and ``kv_a_proj_with_mqa``
  (kv_lora_rank + qk_rope_head_dim: the latent, normed by ``kv_a_layernorm`` and expanded by
  ``kv_b_proj`` to each head's nope key and value, and one rotary key shared by all heads);
  ``o_proj`` maps heads x v_head_dim back to hidden; the MLP is dense (gate/up/down, silu);
- RoPE over ``qk_rope_head_dim`` only, interleaved pairs (``is_neox_style=False``); a non-default
  rope type is rewritten as vLLM does: ``deepseek_llama_scaling`` where ``attention_factor`` is 1,
  else ``deepseek_yarn`` (cos/sin times the mscale ratio, ``eagle3_layer.rope_tables``); the softmax
  scale is qk_head_dim^-0.5, times yarn_get_mscale(factor, ``mscale_all_dim``)^2 under deepseek_yarn;
- the head's dims default as transformers' ``DeepseekV3Config`` (the class vLLM reads the head's
  config with): q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim and
  v_head_dim 128;
- ``q_lora_rank`` null is refused as vLLM refuses it at load (its mapper renames ``kv_a_proj_with_mqa``
  to ``fused_qkv_a_proj``, which only a q-LoRA layer has); the module still builds either form;
- no ``norm_before_fc`` (vLLM builds no ``input_norm``: such a tensor is refused at load), and ``fc``
  is sized by ``num_aux_hidden_states``, else the length of ``eagle_config``'s aux ids, else 3 (a
  top-level id list is not read there), which must equal the number of aux states the target feeds
  (``fc_inputs``).

In: the head's config keys (a dict) and its path.
Out: ``MlaDims`` (``mla_dims``), ``fc_inputs``, and ``MlaAttention``, the module ``Eagle3Head`` puts in
its layer for a ``layer_kind`` "mla" head. A dim that is not a positive int raises ``BadInput`` naming
the key. Needs the ``runner`` extra (torch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from draftguard.runner.eagle3_layer import RMSNorm, rope_parameters, rope_tables
from draftguard.snapshot import BadInput

# transformers' DeepseekV3Config (and DeepseekV2Config) defaults, which vLLM reads for a key the file lacks.
MLA_DEFAULTS = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                "v_head_dim": 128}


@dataclass
class MlaDims:
    """The MLA layer's widths, its rotary tables (over ``qk_rope_head_dim``) and softmax scale."""

    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    inv_freq: torch.Tensor
    rope_factor: float
    scaling: float


def _yarn_mscale(scale: float, mscale: float) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def mla_dims(raw: dict[str, Any], path: Path, max_position: int) -> MlaDims:
    """The head's MLA dims, RoPE and scale, read as vLLM's ``DeepseekV2MLAAttention`` reads its config.

    Example: ``mla_dims({"num_attention_heads": 2, "q_lora_rank": None, ...}, path, 128).qk_rope_head_dim``."""
    dims: dict[str, Any] = {}
    for key, default in MLA_DEFAULTS.items():
        value = raw.get(key, default)
        if key == "q_lora_rank" and value is None:
            dims[key] = None
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise BadInput(f"{path}: `{key}` is {value!r}; an MLA EAGLE-3 head needs a positive int", file=str(path),
                           key=key)
        dims[key] = value
    if dims["q_lora_rank"] is None:
        raise BadInput(f"{path}: `q_lora_rank` is null: vLLM 0.32's deepseek_eagle3 loader maps `kv_a_proj_with_mqa` "
                       "into `fused_qkv_a_proj`, which MLA without a q LoRA lacks, and refuses the head at load (\"no "
                       "module or parameter named 'layers.0.self_attn.fused_qkv_a_proj'\"); so does the reference",
                       file=str(path), key="q_lora_rank")
    rope = rope_parameters(raw, path)
    rope.pop("partial_rotary_factor", None)  # vLLM rotates qk_rope_head_dim, whatever the fraction
    if rope["rope_type"] != "default":  # DeepseekV2MLAAttention's rewrite of the config's rope type
        rope["rope_type"] = "deepseek_llama_scaling" if rope.get("attention_factor") == 1.0 else "deepseek_yarn"
    inv_freq, factor = rope_tables(rope, dims["qk_rope_head_dim"], max_position, path)
    scaling = (dims["qk_nope_head_dim"] + dims["qk_rope_head_dim"]) ** -0.5
    if rope["rope_type"] == "deepseek_yarn":
        scaling *= _yarn_mscale(float(rope["factor"]), float(rope.get("mscale_all_dim") or 0)) ** 2
    return MlaDims(num_heads=int(raw["num_attention_heads"]), inv_freq=inv_freq, rope_factor=factor,
                   scaling=scaling, **dims)


def fc_inputs(raw: dict[str, Any]) -> int:
    """How many aux states vLLM's ``DeepseekV2Eagle3Model`` sizes ``fc`` for: ``num_aux_hidden_states``,
    else the length of ``eagle_config.eagle_aux_hidden_state_layer_ids``, else 3.

    Example: ``fc_inputs({"eagle_aux_hidden_state_layer_ids": [1]}) == 3``."""
    if raw.get("num_aux_hidden_states") is not None:
        return int(raw["num_aux_hidden_states"])
    eagle = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    ids = eagle.get("eagle_aux_hidden_state_layer_ids")
    return len(ids) if isinstance(ids, list) and ids else 3


def rotate_interleaved(x: torch.Tensor, positions: torch.Tensor, d: MlaDims) -> torch.Tensor:
    """GPT-J style RoPE (vLLM's ``is_neox_style=False``) on x (batch, heads, n, qk_rope_head_dim):
    each pair (2i, 2i + 1) turned by position x inv_freq[i], cos and sin times ``rope_factor``."""
    freqs = positions.float()[..., None] * d.inv_freq.to(x.device)
    cos = (freqs.cos() * d.rope_factor).to(x.dtype)[:, None]
    sin = (freqs.sin() * d.rope_factor).to(x.dtype)[:, None]
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, odd * cos + even * sin], -1).flatten(-2)


class MlaAttention(nn.Module):
    """Multi-head latent attention over ``input_size`` (2 x hidden in the head), causal, no cache
    (the reference recomputes the whole sequence, which is exact)."""

    def __init__(self, d: MlaDims, input_size: int, hidden_size: int, eps: float):
        super().__init__()
        h, qk = d.num_heads, d.qk_nope_head_dim + d.qk_rope_head_dim
        if d.q_lora_rank is None:
            self.q_proj = nn.Linear(input_size, h * qk, bias=False)
        else:
            self.q_a_proj = nn.Linear(input_size, d.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(d.q_lora_rank, eps)
            self.q_b_proj = nn.Linear(d.q_lora_rank, h * qk, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(input_size, d.kv_lora_rank + d.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(d.kv_lora_rank, eps)
        self.kv_b_proj = nn.Linear(d.kv_lora_rank, h * (d.qk_nope_head_dim + d.v_head_dim), bias=False)
        self.o_proj = nn.Linear(h * d.v_head_dim, hidden_size, bias=False)
        self.d = d

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(q_nope, q_pe, k_nope, k_pe, v) of x (batch, n, input), each (batch, heads, n, dim), k_pe one head
        (batch, n, rope dim), before RoPE."""
        d = self.d
        b, n, _ = x.shape
        q = self.q_proj(x) if d.q_lora_rank is None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))
        q = q.view(b, n, d.num_heads, -1).transpose(1, 2)
        q_nope, q_pe = q.split([d.qk_nope_head_dim, d.qk_rope_head_dim], -1)
        latent, k_pe = self.kv_a_proj_with_mqa(x).split([d.kv_lora_rank, d.qk_rope_head_dim], -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(b, n, d.num_heads, -1).transpose(1, 2)
        k_nope, v = kv.split([d.qk_nope_head_dim, d.v_head_dim], -1)
        return q_nope, q_pe, k_nope, k_pe, v

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        d = self.d
        b, n, _ = x.shape
        q_nope, q_pe, k_nope, k_pe, v = self.project(x)
        q_pe = rotate_interleaved(q_pe, positions, d)
        k_pe = rotate_interleaved(k_pe[:, None], positions, d).expand(-1, d.num_heads, -1, -1)
        q, k = torch.cat([q_nope, q_pe], -1), torch.cat([k_nope, k_pe], -1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=d.scaling)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))
