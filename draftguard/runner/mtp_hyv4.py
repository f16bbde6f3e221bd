"""Tencent HY-V4's target and MTP layer as vLLM 0.32 builds them (``models/hy_v4/nvidia/``: ``model.py``,
``attention.py``, ``hc.py``, ``moe.py``, ``mtp.py``; its own config class, ``transformers_utils/configs/hy_v4.py``),
for configs whose attention layers are all ``full_attention`` (dense MLA): vLLM 0.32's CPU build runs those;
a DSA sparse layer is refused here as that build refuses it.

Written from vLLM's code, not from transformers 5.24's ``hy_v4`` class, which differs where it matters: it
rotates NeoX style (vLLM: GPT-J, interleaved pairs), always runs the lightning indexer and the sinks, and fills
``layer_types`` with ``indexed_attention`` (sparse) where the file states none (vLLM's class keeps None: dense).

- iHC (``enable_ihc``, default true): ``hc_mult`` residual streams, the embedding copied to each. Each
  sub-block (attention, MLP) reduces them: RMS of the flattened streams (fp32, ``rms_norm_eps``), ``hc_fn``
  (2 x hc_mult rows) times it, pre gates ``sigmoid(mix * hc_scale[0] + hc_base[:hc]) + hc_eps``, post gates
  ``hc_magnitude * sigmoid(mix * hc_scale[1] + hc_base[hc:]) + hc_eps``; the sub-block reads the pre-gated sum
  and each stream gets ``post * output`` added. ``model.hc_head`` merges the streams the same way (no
  magnitude) before ``model.norm``. Stored as ``hc_attn_layer.hc_pre.{hc_fn, hc_scale, hc_base}`` (``hc_fn``
  without ``.weight``), ``hc_mlp_layer.hc_pre.*``, ``model.hc_head.{hc_head_fn, hc_head_base, hc_head_scale}``.
- Attention: MLA (``q_a_proj`` -> ``q_a_layernorm`` -> ``q_b_proj``, or ``q_proj``; ``kv_a_proj_with_mqa``,
  ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``), RoPE over ``qk_rope_head_dim`` in interleaved pairs, scale
  qk_head_dim^-0.5, then the output gate (``gated_mla``: ``linear_gate``, sigmoid, ``gating_type``
  elementwise or headwise). The learnable sinks (``learnable_sink_param``) are loaded and not applied: vLLM
  0.32 binds them only through its sparse MLA backend, so no dense layer applies them on any platform ("the
  sink bias is disabled", its warning).
- MLP: dense SwiGLU where ``mlp_layer_types[i]`` is "dense", else MoE: fp32 router (``mlp.gate.weight``),
  sigmoid scores, ``e_score_correction_bias`` (also stored as ``mlp.expert_bias``) added for the choice only,
  top ``num_experts_per_tok``, renormalised under ``norm_topk_prob``, times ``routed_scaling_factor``; the
  routed experts' SwiGLU clamped at ``swiglu_limit`` (> 0; vLLM's CPU experts skip the clamp, its GPU ones
  apply it); shared experts ``moe_intermediate_size`` x ``n_shared_experts`` wide, not clamped.
- Precision as vLLM holds it in a bfloat16 run: the router and the iHC mixes and gates stay float32 (``Fp32``),
  and the logits are float32 (``enable_lm_head_fp32``, default true).
- The MTP layer (``HYV4MTP``): ``model.layers.{N}.{enorm, hnorm, eh_proj, final_layernorm}`` and a decoder
  layer at N beside them without iHC (its names under ``mtp_block.`` in vLLM), MoE or dense by
  ``mlp_layer_types`` extended with its last entry (vLLM's ``_extend_layer_types``); the embedding zeroed at
  position 0, [embedding, hidden] into ``eh_proj``, the layer, ``final_layernorm`` of output + residual,
  which feeds the next step and the target's ``lm_head``; the target's ``embed_tokens`` shared (the layer's
  own ``embed_tokens`` / ``shared_head`` skipped). The hidden state it reads is the target's output after
  ``hc_head`` and ``model.norm``.

In: a target folder whose config.json is ``HYV4ForCausalLM`` / ``hy_v4``.
Out: ``hyv4_config``, ``build_hyv4_target`` (untrained), ``load_hyv4_target``, ``hyv4_block`` (the MTP
decoder layer at N). Needs torch and transformers (imported where used).
"""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F

from draftguard.errors import MissingWeights
from draftguard.runner.eagle3_layer import RMSNorm, rope_parameters, rope_tables
from draftguard.runner.eagle3_mla import MlaAttention, MlaDims
from draftguard.runner.mtp_qwen35 import fuse_experts
from draftguard.snapshot import BadInput

# vLLM 0.32's HYV4Config defaults for the keys it reads and transformers' class does not declare.
VLLM_DEFAULTS = {"enable_ihc": True, "gated_mla": True, "gating_type": "elementwise", "learnable_sink": True,
                 "num_nextn_predict_layers": 1, "enable_lm_head_fp32": True}
SPARSE_KINDS = ("sparse_attention", "sparse", "indexed_attention", "deepseek_sparse_attention")  # attention.py's
SPARSE_REFUSAL = ("vLLM 0.32 builds HY-V4's DSA sparse attention (the lightning indexer's top-k) for CUDA and ROCm; "
                  "its CPU build refuses it (\"Sparse Attention is not supported on CPU\") and the reference does not "
                  "build it; run --backend vllm alone on a GPU")
# The checkpoint's names -> the reference's (under each layer): vLLM's loader reads both.
RENAMES = (("mlp.router.gate.", "mlp.gate."), ("mlp.expert_bias", "mlp.gate.e_score_correction_bias"))


def _extend(kinds: list[str] | None, index: int) -> list[str] | None:
    """vLLM's ``_extend_layer_types``: a per-layer list padded with its last entry up to ``index``."""
    if kinds is None or len(kinds) > index:
        return kinds
    return list(kinds) + [kinds[-1]] * (index + 1 - len(kinds))


def hyv4_config(raw: dict[str, Any], where: str = "config.json") -> Any:
    """transformers' ``HYV4Config`` holding what vLLM 0.32's own class reads of the file (its defaults for
    ``enable_ihc``, ``gated_mla``, ``gating_type``, ``learnable_sink``; ``layer_types`` None meaning dense).
    Bad input, naming the key, for what the reference does not build: a sparse attention layer (the MTP
    layer's included), an activation other than silu, a gating type vLLM does not know."""
    from transformers import HYV4Config  # transformers: only a model run pays it

    n = int(raw.get("num_hidden_layers", 34))
    kinds = raw.get("layer_types")
    if kinds is not None and not isinstance(kinds, list):
        raise BadInput(f"{where}: `layer_types` must be a list, got {kinds!r}", file=where, key="layer_types")
    for i, kind in enumerate(_extend(kinds, n) or []):
        if kind in SPARSE_KINDS:
            which = f"layer {i}" + (" (the MTP layer: layer_types extended with its last entry)" if i >= n else "")
            raise BadInput(f"{where}: `layer_types` makes {which} {kind!r}: {SPARSE_REFUSAL}", file=where,
                           key="layer_types")
        if kind != "full_attention":
            raise BadInput(f"{where}: `layer_types[{i}]` is {kind!r}; vLLM 0.32's HY-V4 layers are full_attention or "
                           "sparse", file=where, key="layer_types")
    if raw.get("hidden_act", "silu") != "silu":
        raise BadInput(f"{where}: hidden_act {raw['hidden_act']!r}: vLLM 0.32 builds HY-V4 with silu only",
                       file=where, key="hidden_act")
    if raw.get("gating_type", "elementwise") not in ("elementwise", "headwise"):
        raise BadInput(f"{where}: `gating_type` is {raw['gating_type']!r}; vLLM 0.32 gates MLA elementwise or "
                       "headwise", file=where, key="gating_type")
    mlp = raw.get("mlp_layer_types")
    if mlp is not None and (not isinstance(mlp, list) or len(mlp) < n or set(mlp) - {"dense", "sparse"}):
        raise BadInput(f"{where}: `mlp_layer_types` must list \"dense\" or \"sparse\" for each of the {n} layers, "
                       f"got {mlp!r}", file=where, key="mlp_layer_types")
    keys = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "quantization_config",
                                                      "auto_map", "layer_types", "transformers_version")}
    config = HYV4Config(**keys, layer_types=["full_attention"] * n)
    for key, default in VLLM_DEFAULTS.items():
        setattr(config, key, raw.get(key, default))
    config.rope = rope_parameters(raw, Path(where))
    config._attn_implementation = "eager"
    return config


def _dims(config: Any, where: str) -> MlaDims:
    rope = dict(config.rope)
    inv_freq, factor = rope_tables(rope, int(config.qk_rope_head_dim), int(config.max_position_embeddings), Path(where))
    if 2 * inv_freq.numel() != int(config.qk_rope_head_dim):
        raise BadInput(f"{where}: RoPE turns {2 * inv_freq.numel()} of qk_rope_head_dim {config.qk_rope_head_dim} "
                       "dims; the reference rotates all of them", file=where, key="rope_parameters")
    q_lora = config.q_lora_rank
    return MlaDims(num_heads=int(config.num_attention_heads), q_lora_rank=int(q_lora) if q_lora else None,
                   kv_lora_rank=int(config.kv_lora_rank), qk_nope_head_dim=int(config.qk_nope_head_dim),
                   qk_rope_head_dim=int(config.qk_rope_head_dim), v_head_dim=int(config.v_head_dim),
                   inv_freq=inv_freq, rope_factor=factor,
                   scaling=(int(config.qk_nope_head_dim) + int(config.qk_rope_head_dim)) ** -0.5)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """GPT-J RoPE on x (batch, heads, n, rope dim): pair (2i, 2i + 1) turned by cos/sin (batch, n, rope dim / 2)."""
    cos, sin = cos[:, None].to(x.dtype), sin[:, None].to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack([even * cos - odd * sin, odd * cos + even * sin], -1).flatten(-2)


class HyV4Rotary(nn.Module):
    """(x, positions) -> (cos, sin), each (batch, n, qk_rope_head_dim / 2), times the rope type's factor."""

    def __init__(self, d: MlaDims):
        super().__init__()
        self.register_buffer("inv_freq", d.inv_freq.float(), persistent=False)
        self.factor = d.rope_factor

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[..., None] * self.inv_freq.to(x.device)
        return freqs.cos() * self.factor, freqs.sin() * self.factor


class HyV4Attention(MlaAttention):
    """MLA with the output gate, over a KV cache (transformers' ``DynamicCache``) or causally without one."""

    def __init__(self, config: Any, d: MlaDims, layer_idx: int):
        super().__init__(d, int(config.hidden_size), int(config.hidden_size), float(config.rms_norm_eps))
        self.layer_idx, self.gating = layer_idx, str(config.gating_type)
        if config.gated_mla:
            width = d.num_heads * (1 if self.gating == "headwise" else d.v_head_dim)
            self.linear_gate = nn.Linear(int(config.hidden_size), width, bias=False)
        if config.learnable_sink:  # loaded, never applied (the module docstring says why)
            self.learnable_sink_param = nn.Parameter(torch.zeros(d.num_heads))

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor,
                cache: Any = None) -> torch.Tensor:
        d = self.d
        b, n, _ = x.shape
        q_nope, q_pe, k_nope, k_pe, v = self.project(x)
        q_pe = _rotate(q_pe, *rope)
        k_pe = _rotate(k_pe[:, None], *rope).expand(-1, d.num_heads, -1, -1)
        q, k = torch.cat([q_nope, q_pe], -1), torch.cat([k_nope, k_pe], -1)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.to(q.dtype), scale=d.scaling)
        out = out.transpose(1, 2).reshape(b, n, -1)
        if hasattr(self, "linear_gate"):
            gate = torch.sigmoid(self.linear_gate(x))
            out = (out.view(b, n, d.num_heads, -1) * gate[..., None]).reshape(b, n, -1) if self.gating == "headwise" \
                else out * gate
        return self.o_proj(out)


class SwiGlu(nn.Module):
    """The dense MLP and the shared experts: ``down(silu(gate(x)) * up(x))``, never clamped."""

    def __init__(self, hidden: int, width: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, width, bias=False)
        self.up_proj = nn.Linear(hidden, width, bias=False)
        self.down_proj = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Fp32(nn.Module):
    """A module whose own parameters stay float32 whatever dtype the model is moved to (vLLM holds the router,
    the iHC mixes and gates so: ``params_dtype=torch.float32``); moved between devices as the rest."""

    def _apply(self, fn: Callable, recurse: bool = True) -> nn.Module:
        if recurse:
            for child in self.children():
                child._apply(fn)
        for p in self.parameters(recurse=False):  # where ``fn`` would put it, in its own dtype
            p.data = p.data.to(fn(torch.empty(0, dtype=p.dtype, device=p.device)).device)
        return self


class HyV4Lm(nn.Linear):
    """The LM head: logits in float32 from the model-dtype weight (vLLM's ``enable_lm_head_fp32``, its
    ``head_dtype``); a plain head where the config turns it off."""

    def __init__(self, size: int, vocab: int, fp32: bool):
        super().__init__(size, vocab, bias=False)
        self.fp32 = fp32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x.float(), self.weight.float()) if self.fp32 else super().forward(x)


class HyV4Router(Fp32):
    """vLLM's grouped top-k with one group: sigmoid of fp32 logits, the bias for the choice only."""

    def __init__(self, config: Any):
        super().__init__()
        experts, hidden = int(config.n_routed_experts), int(config.hidden_size)
        self.weight = nn.Parameter(torch.zeros(experts, hidden, dtype=torch.float32))
        self.e_score_correction_bias = nn.Parameter(torch.zeros(experts, dtype=torch.float32))
        self.top_k, self.renormalize = int(config.num_experts_per_tok), bool(config.norm_topk_prob)
        self.scale = float(config.routed_scaling_factor)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = F.linear(x.float(), self.weight.float()).sigmoid()
        ids = (scores + self.e_score_correction_bias.float()).topk(self.top_k, dim=-1)[1]
        weights = scores.gather(1, ids)
        if self.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        return weights * self.scale, ids


class HyV4Experts(nn.Module):
    """Routed experts stacked as transformers stacks them (gate rows, then up rows), SwiGLU clamped at
    ``limit`` where it is > 0 (gate above, up both ways)."""

    def __init__(self, config: Any):
        super().__init__()
        e, h, i = int(config.n_routed_experts), int(config.hidden_size), int(config.moe_intermediate_size)
        self.gate_up_proj = nn.Parameter(torch.zeros(e, 2 * i, h))
        self.down_proj = nn.Parameter(torch.zeros(e, h, i))
        self.limit = float(config.swiglu_limit or 0)

    def forward(self, x: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(x)
        for e in ids.unique().tolist():
            rows, slot = torch.where(ids == e)
            gate, up = F.linear(x[rows], self.gate_up_proj[e]).chunk(2, -1)
            if self.limit > 0:
                gate, up = gate.clamp(max=self.limit), up.clamp(-self.limit, self.limit)
            y = F.linear(F.silu(gate) * up, self.down_proj[e]) * weights[rows, slot, None].to(x.dtype)
            out.index_add_(0, rows, y)
        return out


class HyV4MoE(nn.Module):
    def __init__(self, config: Any):
        super().__init__()
        self.gate, self.experts = HyV4Router(config), HyV4Experts(config)
        shared = int(config.moe_intermediate_size) * int(config.n_shared_experts)
        self.shared_experts = SwiGlu(int(config.hidden_size), shared) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        out = self.experts(flat, *self.gate(flat))
        if self.shared_experts is not None:
            out = out + self.shared_experts(flat)
        return out.view(x.shape)


class HcPre(Fp32):
    """One iHC boundary's reduction: (streams (b, n, hc, d)) -> (pre-gated sum (b, n, d), post gates (b, n, hc))."""

    def __init__(self, config: Any, head: bool = False):
        super().__init__()
        hc, size = int(config.hc_mult), int(config.hidden_size)
        self.hc, self.eps, self.norm_eps = hc, float(config.hc_eps), float(config.rms_norm_eps)
        self.magnitude, self.head = float(config.hc_magnitude), head
        rows = hc if head else 2 * hc
        self.fn = nn.Parameter(torch.zeros(rows, hc * size, dtype=torch.float32))
        self.scale = nn.Parameter(torch.full((1 if head else 2,), 0.01, dtype=torch.float32))
        self.base = nn.Parameter(torch.zeros(rows, dtype=torch.float32))
        if hc > 1:  # vLLM's reset_parameters: the pre (and head) gates' bias -log(hc - 1), the post gates' 0
            self.base.data[:hc] = -math.log(hc - 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        flat = x.flatten(-2).float()
        mix = F.linear(flat, self.fn.float()) * torch.rsqrt(flat.square().mean(-1, keepdim=True) + self.norm_eps)
        hc = self.hc
        pre = torch.sigmoid(mix[..., :hc] * self.scale[0] + self.base[:hc]) + self.eps
        post = None if self.head else \
            self.magnitude * torch.sigmoid(mix[..., hc:] * self.scale[1] + self.base[hc:]) + self.eps
        return (pre[..., None] * x).sum(-2).to(x.dtype), post


def _post(out: torch.Tensor, streams: torch.Tensor, post: torch.Tensor) -> torch.Tensor:
    return (post[..., None] * out.float()[..., None, :] + streams.float()).to(streams.dtype)


class HyV4Layer(nn.Module):
    """One decoder layer: on ``hc_mult`` streams (b, n, hc, d) under iHC, else one residual stream; called
    as transformers' layers are (hidden, attention_mask=, position_embeddings=, cache=)."""

    def __init__(self, config: Any, layer_idx: int, ihc: bool, d: MlaDims):
        super().__init__()
        self.ihc = ihc
        eps, size = float(config.rms_norm_eps), int(config.hidden_size)
        self.self_attn = HyV4Attention(config, d, layer_idx)
        kinds = _extend(list(config.mlp_layer_types), layer_idx)
        self.mlp = SwiGlu(size, int(config.intermediate_size)) if kinds[layer_idx] == "dense" else HyV4MoE(config)
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(size, eps), RMSNorm(size, eps)
        if ihc:
            self.hc_attn_layer = nn.Module()
            self.hc_attn_layer.hc_pre = HcPre(config)
            self.hc_mlp_layer = nn.Module()
            self.hc_mlp_layer.hc_pre = HcPre(config)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor, position_embeddings: Any,
                cache: Any = None, **_: Any) -> torch.Tensor:
        if not self.ihc:
            x = x + self.self_attn(self.input_layernorm(x), position_embeddings, attention_mask, cache)
            return x + self.mlp(self.post_attention_layernorm(x))
        reduced, post = self.hc_attn_layer.hc_pre(x)
        out = self.self_attn(self.input_layernorm(reduced), position_embeddings, attention_mask, cache)
        x = _post(out, x, post)
        reduced, post = self.hc_mlp_layer.hc_pre(x)
        return _post(self.mlp(self.post_attention_layernorm(reduced)), x, post)


def stored_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The reference's names -> the checkpoint's (``hc_fn`` and friends as vLLM's loader reads them)."""
    out = {}
    for k, v in state.items():
        k = (k.replace("hc_pre.fn", "hc_pre.hc_fn").replace("hc_pre.scale", "hc_pre.hc_scale")
             .replace("hc_pre.base", "hc_pre.hc_base").replace("hc_head.fn", "hc_head.hc_head_fn")
             .replace("hc_head.scale", "hc_head.hc_head_scale").replace("hc_head.base", "hc_head.hc_head_base"))
        out[k] = v
    return out


def reference_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint's names -> the reference's (``stored_names`` reversed, the MoE's renames)."""
    out = {}
    for k, v in state.items():
        for stored, built in RENAMES + (("hc_pre.hc_", "hc_pre."), ("hc_head.hc_head_", "hc_head.")):
            k = k.replace("." + stored, "." + built)
        out[k] = v
    return out


def _model_class() -> type:
    from transformers import PreTrainedModel  # transformers: a model run only
    from transformers.modeling_outputs import CausalLMOutputWithPast

    class HYV4ForCausalLM(PreTrainedModel):
        """vLLM 0.32's ``HYV4ForCausalLM`` (dense attention): ``forward`` as transformers' causal LMs take it,
        ``hidden_states`` the embedding, each layer's streams flattened, and the normed output."""

        config_class = type(None)
        _supports_cache_class = True

        def __init__(self, config: Any):
            super().__init__(config)
            d = _dims(config, "config.json")
            n, size = int(config.num_hidden_layers), int(config.hidden_size)
            self.model = nn.Module()
            self.model.embed_tokens = nn.Embedding(int(config.vocab_size), size)
            self.model.layers = nn.ModuleList(HyV4Layer(config, i, bool(config.enable_ihc), d) for i in range(n))
            if config.enable_ihc:
                self.model.hc_head = HcPre(config, head=True)
            self.model.norm = RMSNorm(size, float(config.rms_norm_eps))
            self.model.rotary_emb = HyV4Rotary(d)
            self.lm_head = HyV4Lm(size, int(config.vocab_size), bool(config.enable_lm_head_fp32))

        def get_input_embeddings(self) -> nn.Module:
            return self.model.embed_tokens

        def get_output_embeddings(self) -> nn.Module:
            return self.lm_head

        def forward(self, input_ids=None, position_ids=None, cache=None, past_key_values=None, use_cache=None,
                    output_hidden_states=None, labels=None, attention_mask=None, **_):
            cache = cache if cache is not None else past_key_values
            x = self.model.embed_tokens(input_ids)
            b, n = input_ids.shape
            past = cache.get_seq_length() if cache is not None else 0
            if position_ids is None:
                position_ids = torch.arange(past, past + n, device=x.device)[None].expand(b, -1)
            keys = torch.arange(past + n, device=x.device)
            mask = torch.where(keys[None] <= (past + torch.arange(n, device=x.device))[:, None], 0.0, float("-inf"))
            rope = self.model.rotary_emb(x, position_ids)
            hidden = [x]
            if self.config.enable_ihc:
                x = x[:, :, None].expand(-1, -1, int(self.config.hc_mult), -1)
            for layer in self.model.layers:
                x = layer(x, attention_mask=mask[None, None], position_embeddings=rope, cache=cache)
                hidden.append(x.flatten(-2) if self.config.enable_ihc else x)
            if self.config.enable_ihc:
                x = self.model.hc_head(x)[0]
            x = self.model.norm(x)
            hidden[-1] = x  # transformers' convention: the last entry normed
            logits = self.lm_head(x)
            if getattr(self.config, "soft_logits_capping", False):  # vLLM's compute_logits
                cap = float(self.config.soft_logits_capping_logits)
                logits = cap * torch.tanh(logits / cap)
            loss = None
            if labels is not None:
                loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1))
            return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=cache,
                                          hidden_states=tuple(hidden) if output_hidden_states else None)

    return HYV4ForCausalLM


def build_hyv4_target(raw: dict[str, Any], where: str = "config.json") -> nn.Module:
    """The target of the file (weights zero, the iHC gates' scale 0.01) as vLLM 0.32 builds it.
    Example: ``model = build_hyv4_target(json.loads(Path("config.json").read_text()))``."""
    return _model_class()(hyv4_config(raw, where))


def hyv4_block(text: Any, _layer_class: Any, index: int) -> nn.Module:
    """The MTP decoder layer at ``index`` (N): vLLM's ``HYV4DecoderLayer`` built with iHC off, its MLP kind
    from ``mlp_layer_types`` extended with its last entry."""
    config = copy.deepcopy(text)
    return HyV4Layer(config, index, False, _dims(config, "config.json"))


def load_hyv4_target(folder: Path, raw: dict[str, Any], device: str, dtype: torch.dtype | None,
                     weights: dict[str, torch.Tensor], dequantize: Callable[[dict[str, torch.Tensor]], dict],
                     finish: Callable[..., tuple[nn.Module, Any]]) -> tuple[nn.Module, Any]:
    """The target as vLLM's ``HYV4ForCausalLM`` runs it: every tensor but the MTP layers' (``model.layers.{j}``
    for j >= N, ``model.mtp_layers.*``), the experts stacked; ``MissingWeights`` naming what the model lacks
    or what it does not name."""
    model = build_hyv4_target(raw, str(folder / "config.json"))
    n = int(model.config.num_hidden_layers)

    def own(key: str) -> bool:
        head, _, rest = key.partition("model.layers.")
        index = rest.split(".")[0]
        return not key.startswith("model.mtp_layers.") and not (not head and index.isdigit() and int(index) >= n)

    state = reference_names(dequantize({k: v for k, v in weights.items() if own(k)}))
    state = fuse_experts(state, model.state_dict())
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or unexpected:
        raise MissingWeights(f"{folder}: the target's weights " + (f"lack {', '.join(missing[:4])}" if missing else
                             f"hold tensors hy_v4 does not name: {', '.join(unexpected[:4])}"), file=str(folder))
    return finish(model, folder, device, dtype)


__all__ = ["SPARSE_REFUSAL", "build_hyv4_target", "hyv4_block", "hyv4_config", "load_hyv4_target", "reference_names",
           "stored_names"]
