"""LongCat-Flash's MTP layer (``LongcatFlashForCausalLM``, ``model_type`` longcat_flash) as vLLM 0.32's
``longcat_flash_mtp.py`` builds and runs it, and its target as the checkpoint stores it.

The layer (vLLM's ``LongCatMultiTokenPredictorLayer``, checkpoint names under ``model.mtp.``):

- ``layers.0.enorm.m`` and ``layers.0.hnorm.m`` (RMSNorm, ``rms_norm_eps``) of the token's embedding and of
  the target's hidden state, ``layers.0.eh_proj`` of [embedding, hidden]; the embedding is NOT zeroed at
  position 0 (DeepSeek-V3's layer zeroes it; LongCat's forward does not);
- one decoder layer, vLLM's ``DeepseekV2DecoderLayer`` built with ``n_routed_experts`` cleared ("LongCat MTP
  has no MoE layers"), so dense: MLA attention (``layers.0.self_attn.{q_a_proj, q_a_layernorm, q_b_proj,
  kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj}``, the query through its LoRA: vLLM's rename table
  names ``q_a_proj`` only), interleaved ("GPT-J") RoPE on the ``qk_rope_head_dim`` dims, and the MLP of
  ``ffn_hidden_size`` under ``layers.0.transformer_layer.mlp.{gate,up,down}_proj``; pre-norms
  ``layers.0.{input,post_attention}_layernorm``. LongCat's MLA LoRA scaling (``mla_scale_q_lora``,
  ``mla_scale_kv_lora``): vLLM multiplies the ``q_a_layernorm`` / ``kv_a_layernorm`` weights by
  sqrt(hidden_size / rank) at load (``scale_mla_lora_norms_on_load``); ``LongcatMla`` multiplies the
  norms' outputs, the same thing, where the config sets the flag;
- ``model.mtp.norm`` (vLLM's ``final_layernorm``) of the layer's output: the logits are the target's
  ``lm_head`` of it, and it feeds the next chain step (normed). vLLM 0.32 builds one MTP layer and runs it
  for every step; its count is ``num_nextn_predict_layers``, 1 where the config states none.
- ``model.mtp.embed_tokens`` (a copy of the target's embeddings) is loaded, then replaced by the target's
  (the proposer shares both embeddings and head with every MTP model), as for DeepSeek-V3.

The target: transformers 5.24's ``LongcatFlashForCausalLM`` holds ``experts.gate_up_proj`` for every
expert, zero-computation ones included (n_routed_experts + zero_expert_num rows, the identity experts'
never read), where checkpoints, as LongCat-Flash ships them and as vLLM loads them, store the routed
experts only (``mlp.experts.{e}.{gate,up,down}_proj.weight``, e < n_routed_experts); its own
``from_pretrained`` refuses that size. ``load_longcat_target`` stacks the routed experts and fills the
identity experts' rows with zeros, and dequantizes a declared FP8 checkpoint as vLLM reads it.

In: the target's config (``text``) and folder.
Out: ``longcat_block`` (the dense MLA decoder layer), ``load_longcat_target``, ``checkpoint_names`` (an
``MtpHead``'s state under the checkpoint's names, for fixtures). Needs torch.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.nn import functional as F

from draftguard.errors import MissingWeights
from draftguard.runner.dflash_model import _read_weights, finish_target
from draftguard.runner.eagle3_layer import RMSNorm
from draftguard.runner.mtp_quant import dequantize_declared, fp8_scheme
from draftguard.snapshot import BadInput, parse_json_object

_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.(\d+)\.(gate_proj|up_proj|down_proj)\.weight$")


def _rotate_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """GPT-J RoPE (pairs (x0, x1), (x2, x3), ... each turned by one frequency), written de-interleaved
    (evens then odds): the same dot products as vLLM's in-place rotation, for the query and key alike."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class LongcatMla(nn.Module):
    """vLLM's ``DeepseekV2MLAAttention`` as LongCat's MTP layer builds it (a query LoRA, ``rms_norm_eps`` on
    both latent norms, the LoRA scaling where the config asks for it), computed unabsorbed: the same maths."""

    def __init__(self, text: Any):
        super().__init__()
        hidden, eps = int(text.hidden_size), float(text.rms_norm_eps)
        self.heads = int(text.num_attention_heads)
        self.nope, self.rope = int(text.qk_nope_head_dim), int(text.qk_rope_head_dim)
        self.v_dim, self.kv_rank = int(text.v_head_dim), int(text.kv_lora_rank)
        q_rank = getattr(text, "q_lora_rank", None)
        if not q_rank:
            raise BadInput("q_lora_rank is null: vLLM 0.32's LongCat MTP loader renames only `q_a_proj` "
                           "(a query LoRA), so it cannot load a layer without one", key="q_lora_rank")
        self.q_a_proj = nn.Linear(hidden, int(q_rank), bias=False)
        self.q_a_layernorm = RMSNorm(int(q_rank), eps)
        self.q_b_proj = nn.Linear(int(q_rank), self.heads * (self.nope + self.rope), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(hidden, self.kv_rank + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.kv_rank, eps)
        self.kv_b_proj = nn.Linear(self.kv_rank, self.heads * (self.nope + self.v_dim), bias=False)
        self.o_proj = nn.Linear(self.heads * self.v_dim, hidden, bias=False)
        self.q_scale = math.sqrt(hidden / int(q_rank)) if getattr(text, "mla_scale_q_lora", False) else 1.0
        self.kv_scale = math.sqrt(hidden / self.kv_rank) if getattr(text, "mla_scale_kv_lora", False) else 1.0
        self.scaling = (self.nope + self.rope) ** -0.5
        rope = dict(getattr(text, "rope_parameters", None) or {})
        if rope.get("rope_type", "default") != "default" and rope.get("attention_factor") != 1.0:
            mscale_all_dim = float(rope.get("mscale_all_dim", 0) or 0)
            factor = float(rope.get("factor", 1.0))
            if mscale_all_dim and factor > 1:  # vLLM's deepseek_yarn: the softmax scale times mscale squared
                self.scaling *= (0.1 * mscale_all_dim * math.log(factor) + 1.0) ** 2

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)) * self.q_scale).view(b, n, self.heads, -1).transpose(1, 2)
        q_nope, q_rot = q.split([self.nope, self.rope], -1)
        latent, k_rot = self.kv_a_proj_with_mqa(x).split([self.kv_rank, self.rope], -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent) * self.kv_scale).view(b, n, self.heads, -1).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.v_dim], -1)
        cos, sin = cos[..., : self.rope // 2].unsqueeze(1), sin[..., : self.rope // 2].unsqueeze(1)
        q_rot = _rotate_interleaved(q_rot, cos, sin)
        k_rot = _rotate_interleaved(k_rot.unsqueeze(1), cos, sin).expand(-1, self.heads, -1, -1)
        out = F.scaled_dot_product_attention(torch.cat([q_nope, q_rot], -1), torch.cat([k_nope, k_rot], -1), v,
                                             attn_mask=mask, scale=self.scaling)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class LongcatMlp(nn.Module):
    def __init__(self, hidden: int, inner: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LongcatMtpBlock(nn.Module):
    """The MTP layer's decoder layer: pre-norm MLA, then the dense MLP, each added to its residual. The
    call signature is a transformers decoder layer's, as ``MtpHead`` calls it."""

    def __init__(self, text: Any):
        super().__init__()
        hidden, eps = int(text.hidden_size), float(text.rms_norm_eps)
        self.input_layernorm = RMSNorm(hidden, eps)
        self.self_attn = LongcatMla(text)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = LongcatMlp(hidden, int(text.intermediate_size))  # ffn_hidden_size (the config's attribute map)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                position_embeddings: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        cos, sin = position_embeddings
        x = x + self.self_attn(self.input_layernorm(x), attention_mask, cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


def longcat_block(text: Any) -> LongcatMtpBlock:
    """LongCat-Flash's MTP decoder layer from the target's config; bad input where the target's rotary
    (``head_dim``) does not cover the ``qk_rope_head_dim`` dims the layer rotates.
    Example: ``block = longcat_block(text_config(target))``."""
    rotary = int(getattr(text, "head_dim", 0) or 0)
    if rotary != int(text.qk_rope_head_dim):
        raise BadInput(f"head_dim {rotary} differs from qk_rope_head_dim {text.qk_rope_head_dim}: transformers' "
                       "LongcatFlash rotary turns head_dim dims, vLLM's qk_rope_head_dim", key="head_dim")
    return LongcatMtpBlock(text)


def load_longcat_target(folder: Path, device: str = "cpu", dtype: torch.dtype | None = None,
                        file_of: Callable[[str], str] | None = None) -> tuple[nn.Module, Any]:
    """The target as transformers 5.24 builds ``LongcatFlashForCausalLM``, from a checkpoint storing the
    routed experts one by one (the zero-computation experts' rows of the fused stack zero: never read),
    without the MTP layer's tensors; a declared FP8 checkpoint (LongCat-Flash-Chat-FP8's block FP8) dequantized
    as vLLM reads it (``runner/mtp_quant.py``), another declared quantization refused (bad input).
    ``file_of`` names the shard a key is in, for the messages. Example:
    ``target, tok = load_longcat_target(Path("longcat"))``."""
    from transformers import AutoConfig, AutoModelForCausalLM  # transformers: only a model run pays it

    raw = parse_json_object((folder / "config.json").read_bytes(), str(folder / "config.json"))
    if "quantization_config" in raw and fp8_scheme(raw) is None:
        raise BadInput(f"{folder / 'config.json'}: the reference dequantizes a LongCat-Flash target stored in an FP8 "
                       "scheme only (runner/mtp_quant.py); this one declares another quantization_config; "
                       "run --backend vllm alone", file=str(folder / "config.json"), key="quantization_config")
    config = AutoConfig.from_pretrained(str(folder))
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # built unquantized; the weights are dequantized below
    config._attn_implementation = "sdpa"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    expected = model.state_dict()
    weights = {k: v for k, v in _read_weights(folder).items() if not k.startswith("model.mtp.")}
    weights = dequantize_declared(raw, weights, "", file_of or (lambda _key: str(folder)))
    state: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[int, dict[str, torch.Tensor]]] = {}
    for key, tensor in weights.items():
        match = _EXPERT.match(key)
        if match is None:
            state[key] = tensor
        else:
            experts.setdefault(match.group(1), {}).setdefault(int(match.group(2)), {})[match.group(3)] = tensor
    for stem, parts in experts.items():
        stack, routed = expected.get(f"{stem}.gate_up_proj"), int(config.n_routed_experts)
        lacking = [f"{stem}.{e}.{p}.weight" for e in range(routed) for p in ("gate_proj", "up_proj", "down_proj")
                   if p not in parts.get(e, {})]
        extra = sorted(e for e in parts if e >= routed)
        if stack is None or lacking or extra:
            why = (f"lack `{lacking[0]}`" if lacking else f"hold expert {extra[0]} under `{stem}`, past "
                   f"n_routed_experts {routed}" if extra else "hold experts the config does not build")
            raise MissingWeights(f"{folder}: the target's weights {why}", file=str(folder))
        gate_up = [torch.cat([parts[e]["gate_proj"], parts[e]["up_proj"]]) for e in range(routed)]
        gate_up += [torch.zeros_like(gate_up[0])] * (stack.shape[0] - routed)  # identity experts: never read
        state[f"{stem}.gate_up_proj"] = torch.stack(gate_up)
        state[f"{stem}.down_proj"] = torch.stack([parts[e]["down_proj"] for e in range(routed)])
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise MissingWeights(f"{folder}: the target's weights " + (f"lack {', '.join(missing[:4])}" if missing else
                             f"hold tensors longcat_flash does not name: {', '.join(unexpected[:4])}"),
                             file=str(folder))
    return finish_target(model, folder, device, dtype)


def checkpoint_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An ``MtpHead``'s state dict under LongCat-Flash's checkpoint names (``model.mtp.*``), as a
    fixture stores it. Example: ``checkpoint_names(head.state_dict())["model.mtp.norm.weight"]``."""
    roles = {"enorm": "layers.0.enorm.m", "hnorm": "layers.0.hnorm.m", "proj": "layers.0.eh_proj",
             "final_norm": "norm"}
    out = {}
    for key, tensor in state.items():
        role, _, rest = key.partition(".")
        if role in roles:
            name = f"{roles[role]}.{rest}"
        elif rest.startswith("mlp."):
            name = "layers.0.transformer_layer." + rest
        else:
            name = "layers.0." + rest
        out["model.mtp." + name] = tensor.detach().contiguous()
    return out
