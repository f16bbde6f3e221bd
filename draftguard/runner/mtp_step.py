"""Step-3.5/3.7's MTP layers (StepFun ``Step3p5ForCausalLM``, and ``Step3p7ForConditionalGeneration``'s text
model), built as vLLM 0.32's ``step3p5_mtp.py`` and ``step3p5.py`` run them, with the target built from
transformers 5.24's Step-3.7 text classes (``models/step3p7``: ``model_type`` step3p5 is
``Step3p7TextConfig``; transformers has no text-only causal LM class for it, so ``Step3p5ForCausalLM``
here is its ``Step3p7TextModel`` plus ``lm_head``).

What vLLM 0.32 runs (``Step3p5MTP``, proposer ``v1/spec_decode/step3p5.py``):

- MTP layer k is ``model.layers.{N + k}.*`` (N = ``num_hidden_layers``; ``num_nextn_predict_layers`` of
  them): ``enorm``, ``hnorm`` (zero-centred "Gemma" norms, x * (1 + w)), ``eh_proj`` of [embedding, hidden],
  then ``Step3p5DecoderLayer`` at index N + k (its names beside: ``self_attn.{q,k,v,o,g}_proj``, ``q_norm``,
  ``k_norm``, ``input_layernorm``, ``post_attention_layernorm``, ``mlp.*``), and ``shared_head.norm``;
- the embedding is the target's (shared by the proposer) and NOT zeroed at position 0;
- the logits are the layer's OWN ``shared_head.head`` (``has_own_lm_head``; the Step3.5 proposer's
  ``_maybe_share_lm_head`` shares nothing), of the normed output; the next step reads the output before
  ``shared_head.norm``;
- draft step j runs layer j mod ``num_nextn_predict_layers`` (``spec_step_idx``; the other families run
  layer 0 for every step). The reference runs layer 0 for every step (what ``MtpHead`` holds); a target
  of more than one MTP layer is drafted with layer 0 at K = 1 only (``check_steps``).
- the decoder layer at N + k as vLLM builds it: MoE where ``moe_layers_enum`` names N + k (default
  ``1 .. N - 1``: never), else dense with ``intermediate_size``; attention ``sliding_attention`` per
  ``layer_types[N + k]`` (vLLM's own Step3p5Config truncates ``layer_types`` to N and then indexes it at
  N + k, an IndexError; without ``layer_types`` a layer whose index is even is sliding where
  ``sliding_window`` is set), the ``attention_other_setting`` heads for its type, rope theta and
  partial rotary factor at index N + k of their per-layer lists (neox rotation of the first part),
  ``use_rope_layers[N + k]``, the head-wise sigmoid gate (``use_head_wise_attn_gate``).

The target as vLLM 0.32's ``Step3p5ForCausalLM`` builds it: the MoE layers where vLLM puts them
(``moe_layers_enum``, else 1 .. N - 1; transformers' own default is 3 .. N - 1), its checkpoint names
mapped as transformers' ``step3p7`` conversion maps them (``moe.gate.weight``, ``moe.router_bias``,
``moe.{gate,up,down}_proj.weight`` stacked per layer, ``share_expert.*``), routed with
``moe_router_activation`` (sigmoid as released; softmax, vLLM's default) and ``norm_expert_weight`` (``StepRouter``).

Not built (bad input, exit 2, naming the key): ``use_head_wise_attn_gate`` false (transformers' class
always gates), an MTP layer with MoE or with ``rope_scaling`` applied to it.

In: the target folder's config.json and tensors.
Out: ``load_step_target`` (the target), ``step_block`` (the MTP decoder layer, with its own rotary and
window), ``check_steps`` (bad input for K draft steps over layers the reference does not hold).
Needs torch and transformers (imported where used).
"""

from __future__ import annotations

import copy
import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

from draftguard.errors import MissingWeights
from draftguard.snapshot import BadInput

STEP_ARCHITECTURES = ("Step3p5ForCausalLM", "Step3p7ForConditionalGeneration")


def text_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """The language model's keys: ``text_config`` (Step-3.7's multimodal file) or the file itself."""
    text = raw.get("text_config")
    return text if isinstance(text, dict) else raw


def vllm_moe_layers(text: dict[str, Any]) -> set[int]:
    """The layers vLLM 0.32's ``Step3p5DecoderLayer`` builds as MoE."""
    enum = text.get("moe_layers_enum")
    if enum is not None:
        items = enum.split(",") if isinstance(enum, str) else enum
        return {int(i) for i in items if str(i).strip()}
    return set(range(1, int(text.get("num_hidden_layers", 0))))


def _at(value: Any, index: int, default: Any) -> Any:
    """A per-layer list's entry (vLLM indexes them by the layer's own index), a scalar as it is."""
    if isinstance(value, list):
        return value[index] if index < len(value) else default
    return default if value is None else value


def text_config_of(raw: dict[str, Any], where: str) -> Any:
    """transformers' ``Step3p7TextConfig`` of the target's language model, its MLP kinds as vLLM builds them."""
    from transformers.models.step3p7.configuration_step3p7 import Step3p7TextConfig  # transformers: a model run only

    text = copy.deepcopy(text_raw(raw))
    if not text.get("use_head_wise_attn_gate", False):
        raise BadInput(f"{where}: `use_head_wise_attn_gate` is false; the reference builds Step-3.5/3.7 layers with "
                       "the head-wise attention gate (transformers' Step3p7Attention always gates), as released; run "
                       "--backend vllm alone", file=where, key="use_head_wise_attn_gate")
    n = int(text.get("num_hidden_layers", 0))
    moe = vllm_moe_layers(text)
    text.pop("moe_layers_enum", None)
    text["mlp_layer_types"] = ["sparse" if i in moe else "dense" for i in range(n)]
    if not text.get("layer_types") and text.get("sliding_window") is not None:  # vLLM: the even layers slide
        text["layer_types"] = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    if "mtp_mlp_layer_types" in text:
        text.pop("mtp_mlp_layer_types")
    for key in ("model_type", "architectures", "auto_map", "quantization_config"):
        text.pop(key, None)
    config = Step3p7TextConfig(**text)
    if config.sliding_window is None:  # vLLM: no window; transformers' model builds a sliding mask always
        config.sliding_window = int(config.max_position_embeddings)
    config._attn_implementation = "eager"
    return config


def _step3p5_class() -> type:
    from transformers.modeling_outputs import CausalLMOutputWithPast  # transformers: a model run only
    from transformers.models.step3p7.modeling_step3p7 import (  # transformers: a model run only
        Step3p7PreTrainedModel, Step3p7TextModel)

    class Step3p5ForCausalLM(Step3p7PreTrainedModel):
        """``Step3p7TextModel`` and an untied ``lm_head``: vLLM's ``Step3p5ForCausalLM``."""

        config_class = type(None)  # set per instance

        def __init__(self, config: Any):
            super().__init__(config)
            self.model = Step3p7TextModel(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

        def get_input_embeddings(self) -> nn.Module:
            return self.model.embed_tokens

        def get_output_embeddings(self) -> nn.Module:
            return self.lm_head

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None, use_cache=None,
                    output_hidden_states=None, past_key_values=None, **kwargs):
            # transformers 5.2x names the cache ``cache`` where 5.19 (vLLM's venv) names it ``past_key_values``
            name = "cache" if "cache" in inspect.signature(self.model.forward).parameters else "past_key_values"
            kwargs[name] = cache if cache is not None else past_key_values
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=use_cache, output_hidden_states=output_hidden_states, **kwargs)
            kept = getattr(out, "cache", None) if hasattr(out, "cache") else getattr(out, "past_key_values", None)
            return CausalLMOutputWithPast(logits=self.lm_head(out.last_hidden_state), past_key_values=kept,
                                          hidden_states=out.hidden_states)

    return Step3p5ForCausalLM


def target_names(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Checkpoint names as the built target holds them (transformers' ``step3p7`` conversion)."""
    out: dict[str, torch.Tensor] = {}
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for k, v in weights.items():
        if k.startswith("model.language_model."):
            k = "model." + k[len("model.language_model."):]
        if k.endswith((".moe.gate_proj.weight", ".moe.up_proj.weight")):
            pairs.setdefault(k.rsplit(".moe.", 1)[0], {})[k.rsplit(".", 2)[-2]] = v
            continue
        k = (k.replace(".moe.gate.weight", ".mlp.gate.weight")
             .replace(".moe.router_bias", ".mlp.gate.e_score_correction_bias")
             .replace(".moe.down_proj.weight", ".mlp.experts.down_proj")
             .replace(".share_expert.", ".mlp.shared_experts."))
        out[k] = v
    for layer, parts in pairs.items():
        if set(parts) != {"gate_proj", "up_proj"}:
            raise BadInput(f"`{layer}.moe.*`: the checkpoint holds {sorted(parts)} of gate_proj and up_proj",
                           key=f"{layer}.moe")
        out[layer + ".mlp.experts.gate_up_proj"] = torch.cat([parts["gate_proj"], parts["up_proj"]], 1)
    return out


def build_step_target(raw: dict[str, Any], where: str) -> nn.Module:
    """The target's module (random weights), routed as vLLM routes it."""
    config = text_config_of(raw, where)
    config.num_nextn_predict_layers = 0
    model = _step3p5_class()(config)
    text = text_raw(raw)
    scoring = str(text.get("moe_router_activation", "softmax"))  # vLLM's Step3p5Config default
    if scoring not in ("softmax", "sigmoid"):
        raise BadInput(f"{where}: `moe_router_activation` {scoring!r}: vLLM 0.32 routes Step experts with softmax "
                       "or sigmoid", file=where, key="moe_router_activation")
    for layer in model.model.layers:
        if hasattr(layer.mlp, "gate"):
            layer.mlp.gate = StepRouter(layer.mlp.gate, scoring, bool(text.get("norm_expert_weight", True)))
    return model


def load_step_target(folder: Path, raw: dict[str, Any], device: str, dtype: torch.dtype | None,
                     weights: dict[str, torch.Tensor]) -> nn.Module:
    """The target (every tensor but the MTP layers' and a multimodal file's vision tower), as vLLM builds it."""
    model = build_step_target(raw, str(folder / "config.json"))
    n = int(model.config.num_hidden_layers)
    own = {}
    for k, v in target_names(weights).items():
        head, _, rest = k.partition("model.layers.")
        if not head and rest.split(".")[0].isdigit() and int(rest.split(".")[0]) >= n:
            continue  # the MTP layers
        if k.startswith(("model.", "lm_head.")):
            own[k] = v.float()
    missing, unexpected = model.load_state_dict(own, strict=False)
    if missing or unexpected:
        raise MissingWeights(f"{folder}: the target's weights " + (f"lack {', '.join(missing[:4])}" if missing else
                             f"hold tensors Step3p5ForCausalLM does not name: {', '.join(unexpected[:4])}"),
                             file=str(folder))
    dtype = dtype or (torch.float32 if device == "cpu" else torch.bfloat16)
    return model.to(device=device, dtype=dtype).eval()


class StepRouter(nn.Module):
    """vLLM's routing of a Step MoE layer: the top k of the ``moe_router_activation`` scores (softmax or
    sigmoid; ``router_bias`` added for the choice only), renormalised only when ``norm_expert_weight``;
    transformers' ``Step3p7TopKRouter`` scores with sigmoid and renormalises always. Same names and outputs."""

    def __init__(self, gate: nn.Module, scoring: str, renormalize: bool):
        super().__init__()
        self.top_k, self.scoring, self.renormalize = gate.top_k, scoring, renormalize
        self.weight = gate.weight
        self.e_score_correction_bias = nn.Buffer(gate.e_score_correction_bias.clone())

    def forward(self, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hidden = hidden.reshape(-1, self.weight.shape[1])
        logits = nn.functional.linear(hidden.to(self.weight.dtype), self.weight)
        scores = logits.float().softmax(-1) if self.scoring == "softmax" else logits.float().sigmoid()
        _, index = torch.topk(scores + self.e_score_correction_bias, self.top_k, dim=-1)
        weights = scores.gather(1, index)
        if self.renormalize:
            weights = weights / weights.sum(-1, keepdim=True)
        return logits, weights, index


def check_steps(raw: dict[str, Any], k: int, where: str) -> None:
    """Bad input where K draft steps would run MTP layers the reference does not hold (vLLM's step j runs
    layer j mod the layer count; the reference holds layer 0)."""
    layers = int(text_raw(raw).get("num_nextn_predict_layers") or 0)
    if layers > 1 and k > 1:
        raise BadInput(f"{where}: vLLM 0.32 drafts step j of a Step-3.5/3.7 target with MTP layer j mod "
                       f"{layers}; the reference runs layer 0 only, so it measures K = 1 here (--num-speculative-"
                       "tokens 1), or run --backend vllm alone", file=where, key="num_nextn_predict_layers")


def step_block(text: Any, raw: dict[str, Any], index: int, where: str = "config.json") -> nn.Module:
    """MTP layer ``index`` - N's decoder layer at index ``index``, as vLLM's ``Step3p5DecoderLayer`` builds it:
    transformers' ``Step3p7DecoderLayer`` with that layer's heads, MLP, rotary and window."""
    from transformers.models.step3p7.modeling_step3p7 import Step3p7DecoderLayer  # transformers: a model run only

    src = text_raw(raw)
    kinds = src.get("layer_types")
    window = src.get("sliding_window")
    if isinstance(kinds, list) and index < len(kinds):
        kind = kinds[index]
    else:
        kind = "sliding_attention" if window is not None and index % 2 == 0 and not kinds else "full_attention"
    if index in vllm_moe_layers(src):
        raise BadInput(f"{where}: `moe_layers_enum` makes MTP layer {index} MoE; the reference builds dense Step "
                       "MTP layers (as released); run --backend vllm alone", file=where, key="moe_layers_enum")
    rope_scaling = src.get("rope_scaling")
    yarn_only = src.get("yarn_only_types") or []
    if rope_scaling and (not yarn_only or kind in yarn_only):
        raise BadInput(f"{where}: `rope_scaling` applies to MTP layer {index}; the reference rotates Step MTP layers "
                       "without scaling; run --backend vllm alone", file=where, key="rope_scaling")
    other = src.get("attention_other_setting") or {}
    heads, groups, head_dim = text.num_attention_heads, text.num_key_value_heads, text.head_dim
    if other and other.get("attention_type") == kind:
        heads, groups, head_dim = other["num_attention_heads"], other["num_attention_groups"], other["head_dim"]
    config = copy.deepcopy(text)
    config.layer_types, config.mlp_layer_types = [kind], ["dense"]
    config.num_attention_heads, config.num_key_value_heads, config.head_dim = heads, groups, head_dim
    config.query_pre_attn_scalar = head_dim
    config.per_layer_config = {0: {"num_attention_heads": heads}}
    config.swiglu_limits_shared = [_at(src.get("swiglu_limits_shared"), index, None)]
    config.swiglu_limits = [None]
    layer = Step3p7DecoderLayer(config, 0)
    theta = float(_at(src.get("rope_theta"), index, 10000.0))
    partial = float(_at(src.get("partial_rotary_factors"), index, 1.0))
    use_rope = bool(_at(src.get("use_rope_layers") or None, index, True))
    return StepMtpBlock(layer, head_dim, theta, partial, use_rope, window if kind == "sliding_attention" else None)


def no_rotary(_x: torch.Tensor, _positions: torch.Tensor) -> None:
    """``MtpHead``'s shared rotary for a Step layer: none (``StepMtpBlock`` rotates with its own)."""
    return None


class StepMtpBlock(nn.Module):
    """The decoder layer with its own rotary (vLLM's per-layer theta and partial factor) and window; the
    layer's parameters under the layer's own names (``self_attn.*``, ``mlp.*``, the norms)."""

    def __init__(self, layer: nn.Module, head_dim: int, theta: float, partial: float, use_rope: bool,
                 window: int | None):
        super().__init__()
        for name, module in layer.named_children():
            self.add_module(name, module)
        self._layer = [layer]  # not a submodule: its children are this module's
        rot = int(head_dim * partial)
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot),
                             persistent=False)
        self.head_dim, self.use_rope, self.window = head_dim, use_rope, window

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                position_embeddings: Any = None) -> torch.Tensor:
        if self.use_rope:
            freqs = position_ids[..., None].float() * self.inv_freq
            emb = torch.cat([freqs, freqs], -1)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        else:
            shape = (*position_ids.shape, self.head_dim)
            cos = torch.ones(shape, dtype=x.dtype, device=x.device)
            sin = torch.zeros(shape, dtype=x.dtype, device=x.device)
        if self.window:
            n = x.shape[1]
            far = torch.ones(n, n, dtype=torch.bool, device=x.device).tril(-int(self.window))
            attention_mask = attention_mask.masked_fill(far, float("-inf"))
        return self._layer[0](x, attention_mask=attention_mask, position_ids=position_ids,
                              position_embeddings=(cos, sin))


__all__ = ["STEP_ARCHITECTURES", "StepMtpBlock", "check_steps", "load_step_target", "no_rotary", "step_block",
           "text_config_of"]
