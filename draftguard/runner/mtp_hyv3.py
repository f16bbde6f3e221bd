"""Tencent HY-V3's (Hy3) target and MTP layer as vLLM 0.32 builds them (``hy_v3.py``, ``hy_v3_mtp.py``),
from transformers' own ``hy_v3`` classes.

- The MTP layer (``HYV3MTPModel``): ``model.layers.{N}.{enorm, hnorm, eh_proj, final_layernorm}`` and a
  ``HYV3DecoderLayer`` at index N beside them (its names under ``mtp_block.`` in vLLM, the checkpoint's
  beside the norms); the embedding zeroed at position 0, [embedding, hidden] into ``eh_proj``, the layer,
  then ``final_layernorm``, whose output feeds the next chain step and the logits. The logits are the
  target's ``lm_head`` and the embedding the target's ``model.embed_tokens``: vLLM's loader maps those two
  target tensors into the MTP model and skips the layer's own ``embed_tokens`` / ``shared_head`` (as
  Tencent's own ``infer_mtp`` uses ``lm_head``), so copies there are never read (``MtpLayout.skipped``).
- The decoder layer at index i is MoE where i >= ``first_k_dense_replace`` (vLLM's rule; transformers
  reads ``mlp_layer_types``, which ``hyv3_config`` writes from it), so the MTP layer at N is MoE. Experts:
  ``expert_hidden_dim`` wide (transformers' ``moe_intermediate_size``), a shared expert of
  ``expert_hidden_dim`` x ``num_shared_experts``, routed as vLLM's ``FusedMoE`` does (``HyV3Router``):
  sigmoid scores, ``expert_bias`` added for the choice only, the chosen scores renormalised only under
  ``route_norm`` (transformers' router always renormalises), times ``router_scaling_factor`` (1.0 where
  the file states none: transformers' class default is 2.826).
- Attention: GQA, the q/k RMS norms only where ``qk_norm`` (transformers' class always builds them), no
  q/k/v bias (vLLM's ``QKVParallelLinear`` has none and its loader skips biases), RoPE neox.
- Checkpoint names (vLLM's and Tencent's): ``mlp.router.gate.weight``, ``mlp.expert_bias``,
  ``mlp.shared_mlp.*``, experts one by one (``mlp.experts.{e}.{gate,up,down}_proj.weight``); the loader
  maps them to transformers' (``mlp.gate``, ``mlp.e_score_correction_bias``, ``mlp.shared_experts``,
  fused experts), as transformers' own conversion mapping for hy_v3 does.

In: a target folder whose config.json is ``HYV3ForCausalLM`` / ``hy_v3``; the target's text config.
Out: ``hyv3_config`` (transformers' config as vLLM reads the file), ``load_hyv3_target`` (the target),
``build_hyv3_target`` (the same, untrained), ``hyv3_block`` (the MTP decoder layer at N) and ``HyV3Router``. Needs torch.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from draftguard.errors import MissingWeights
from draftguard.runner.dflash_model import finish_target
from draftguard.runner.mtp_qwen35 import fuse_experts
from draftguard.snapshot import BadInput

# The checkpoint's names -> transformers' (under each ``model.layers.{i}.``).
RENAMES = (("mlp.router.gate.", "mlp.gate."), ("mlp.expert_bias", "mlp.e_score_correction_bias"),
           ("mlp.shared_mlp.", "mlp.shared_experts."))


def hyv3_config(raw: dict[str, Any], where: str = "config.json") -> Any:
    """transformers' ``HYV3Config`` holding what vLLM 0.32 reads of the file: MoE layers from
    ``first_k_dense_replace``, the experts' width from ``expert_hidden_dim``, ``router_scaling_factor`` 1.0
    where unstated, no attention bias. Bad input naming the key vLLM requires and the file lacks."""
    from transformers import HYV3Config  # transformers: only a model run pays it

    for key in ("first_k_dense_replace", "num_experts", "num_shared_experts"):
        if key not in raw:
            raise BadInput(f"{where}: HYV3ForCausalLM needs `{key}` (vLLM 0.32's hy_v3.py reads it)", file=where, key=key)
    if raw.get("hidden_act", "silu") != "silu":
        raise BadInput(f"{where}: hidden_act {raw['hidden_act']!r}: vLLM 0.32 builds HY-V3 with silu only",
                       file=where, key="hidden_act")
    keys = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "quantization_config")}
    n, first = int(raw.get("num_hidden_layers", 0)), int(raw["first_k_dense_replace"])
    keys.update(mlp_layer_types=["dense" if i < first else "sparse" for i in range(n)], attention_bias=False,
                mlp_bias=False, router_scaling_factor=float(raw.get("router_scaling_factor", 1.0)))
    if raw.get("expert_hidden_dim") is not None:
        keys["moe_intermediate_size"] = int(raw["expert_hidden_dim"])
    config = HYV3Config(**keys)
    config._attn_implementation = "sdpa"
    return config


class HyV3Router(nn.Module):
    """vLLM 0.32's routing for HY-V3 (``grouped_topk``, one group): sigmoid scores, the correction bias
    added for the choice only, renormalised under ``route_norm``, times ``router_scaling_factor``; called
    as transformers' ``HYV3TopKRouter`` is (hidden, bias) -> (logits, weights, ids)."""

    def __init__(self, text: Any):
        super().__init__()
        self.top_k, self.renormalize = int(text.num_experts_per_tok), bool(getattr(text, "route_norm", True))
        self.scale = float(text.router_scaling_factor)
        self.weight = nn.Parameter(torch.zeros(int(text.num_experts), int(text.hidden_size), dtype=torch.float32))

    def forward(self, hidden: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = hidden.reshape(-1, self.weight.shape[1])
        logits = nn.functional.linear(hidden.float(), self.weight.float())
        scores = logits.sigmoid()
        ids = (scores + bias.float()).topk(self.top_k, dim=-1)[1]
        weights = scores.gather(1, ids)
        if self.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        return logits, weights * self.scale, ids


def _as_vllm(layer: nn.Module, text: Any) -> nn.Module:
    """A transformers ``HYV3DecoderLayer`` made vLLM's: its router ``HyV3Router``, no q/k norms without ``qk_norm``."""
    if hasattr(layer.mlp, "e_score_correction_bias"):
        layer.mlp.gate = HyV3Router(text)
    if not getattr(text, "qk_norm", False):
        layer.self_attn.q_norm, layer.self_attn.k_norm = nn.Identity(), nn.Identity()
    return layer


def hyv3_block(text: Any, layer_class: Callable[..., nn.Module], index: int) -> nn.Module:
    """The MTP decoder layer at ``index`` (N) as vLLM's ``HYV3DecoderLayer`` builds it (MoE where N >=
    ``first_k_dense_replace``). Example: ``hyv3_block(text_config(target), type(target.model.layers[0]), n)``."""
    config = copy.deepcopy(text)
    first = int(getattr(text, "first_k_dense_replace", 1))
    config.mlp_layer_types = ["dense" if i < first else "sparse" for i in range(index + 1)]
    return _as_vllm(layer_class(config, layer_idx=index), text)


def checkpoint_to_transformers(key: str) -> str:
    """A target key under the checkpoint's names as transformers' class names it."""
    for stored, built in RENAMES:
        key = key.replace("." + stored, "." + built)
    return key


def build_hyv3_target(raw: dict[str, Any], where: str = "config.json") -> nn.Module:
    """transformers' ``HYV3ForCausalLM`` of the file, its layers made vLLM's (router, q/k norms); weights as
    initialised. Example: ``model = build_hyv3_target(json.loads(Path("config.json").read_text()))``."""
    from transformers.models.hy_v3.modeling_hy_v3 import HYV3ForCausalLM  # a model run pays it

    config = hyv3_config(raw, where)
    model = HYV3ForCausalLM(config)
    for layer in model.model.layers:
        _as_vllm(layer, config)
    return model


def load_hyv3_target(folder: Path, raw: dict[str, Any], device: str, dtype: torch.dtype | None,
                     weights: dict[str, torch.Tensor], dequantize: Callable[[dict[str, torch.Tensor]], dict]
                     ) -> tuple[nn.Module, Any]:
    """The target as vLLM's ``HYV3ForCausalLM`` runs it, built as transformers' class: every tensor but the
    MTP layers' (``model.layers.{j}`` for j >= N), renamed and the experts stacked; ``MissingWeights``
    naming what the model lacks or what it does not name."""
    model = build_hyv3_target(raw, str(folder / "config.json"))
    config = model.config
    n = int(config.num_hidden_layers)

    def own(key: str) -> bool:
        head, _, rest = key.partition("model.layers.")
        index = rest.split(".")[0]
        return not (not head and index.isdigit() and int(index) >= n)

    # vLLM skips q/k/v/o biases its layers do not have ("Skip loading extra bias")
    state = {checkpoint_to_transformers(k): v for k, v in dequantize({k: v for k, v in weights.items() if own(k)}).items()
             if not (".self_attn." in k and k.endswith("_proj.bias"))}
    state = fuse_experts(state, model.state_dict())
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise MissingWeights(f"{folder}: the target's weights " + (f"lack {', '.join(missing[:4])}" if missing else
                             f"hold tensors hy_v3 does not name: {', '.join(unexpected[:4])}"), file=str(folder))
    return finish_target(model, folder, device, dtype)


__all__ = ["HyV3Router", "build_hyv3_target", "checkpoint_to_transformers", "hyv3_block", "hyv3_config", "load_hyv3_target"]
