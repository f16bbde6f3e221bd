"""MTP heads as torch modules: the multi-token-prediction layers a target ships inside its own
checkpoint (``num_nextn_predict_layers`` and its kin), served by vLLM with ``"method": "mtp"``.

The forward, as vLLM 0.32's ``deepseek_mtp.py`` and ``mimo_mtp.py`` run it, for the token at
position i + 1 and the target's hidden state at position i:

- the embedding (the target's own ``model.embed_tokens``: the family shares it) is zeroed at
  position 0 (not in Qwen3.5's or MiMo-V2-Flash's layout), then ``enorm``-ed; the hidden state (the target's last layer after its final norm)
  is ``hnorm``-ed;
- ``eh_proj`` of the two concatenated (DeepSeek-V3, Qwen3.5: [embedding, hidden]; MiMo: [hidden, embedding]),
  then one decoder layer of the target's own class (RoPE at the target's positions, causal);
- the final norm (DeepSeek-V3: ``shared_head.norm``; MiMo: ``final_layernorm``; Qwen3.5: ``mtp.norm``) gives the hidden
  state fed back to the next chain step, and the target's ``lm_head`` of it the draft logits.
  vLLM 0.32 runs MTP layer 0 for every chain step (the proposer passes no step index).

Which embeddings and head: DeepSeek-V3's layer ships copies of its own (``embed_tokens``,
``shared_head.head``) and ``deepseek_mtp.py`` computes the logits with ``shared_head.head``, but in
vLLM 0.32 the proposer replaces both after loading with the target's (``llm_base_proposer``:
"Detected MTP model. Sharing target model embedding weights" / "Shared target model lm_head with MTP
shared_head.head"; the copies are loaded, then dropped). The reference therefore uses the target's
``model.embed_tokens`` and ``lm_head`` for every layout; copies that differ from them are a fault
(``runner/mtp_weights.py``).

The layouts (weight names) this module builds, ``LAYOUTS``:

- ``mimo`` (MiMoForCausalLM, a Qwen2 target, ``model_type`` mimo or qwen2): ``model.mtp_layers.{i}.{token_layernorm,
  hidden_layernorm, input_proj, final_layernorm}`` and the decoder layer's own names beside them; the
  decoder layer as the target's layer 0 (its attention type).
- ``deepseek_v3`` (DeepseekV3ForCausalLM, MLA attention): ``model.layers.{N}.{enorm, hnorm, eh_proj,
  shared_head.norm, shared_head.head, embed_tokens}`` and the decoder layer's names beside them, N =
  ``num_hidden_layers``; the decoder layer built at index N, MoE or dense as vLLM's ``DeepseekV2DecoderLayer``
  builds layer N, routed as vLLM routes, its block-FP8 weights under a declared ``quantization_config``
  dequantized (``runner/mtp_quant.py``, which reads the other declared FP8 schemes too). vLLM's CPU build runs MLA with ``--attention-backend CPU_MLA``
  in float32 (its AMX backend packs bf16 only).
- ``deepseek_v32`` / ``glm_moe_dsa`` (DeepseekV32ForCausalLM, GlmMoeDsaForCausalLM; vLLM's ``DeepseekV32MTPModel``):
  DeepSeek-V3's names and forward with transformers' sparse-attention decoder layer at N, its indexer under
  ``self_attn.indexer.*`` (``runner/mtp_dsa.py``).
- ``glm4_moe`` (Glm4MoeForCausalLM: GLM-4.5/4.6/4.7, vLLM's ``glm4_moe_mtp.py``): DeepSeek-V3's names and
  forward with transformers' ``Glm4MoeDecoderLayer`` at N (GQA with partial rotary, optional qk-norm and
  q/k/v bias; MoE as vLLM builds it, sigmoid-routed with the correction bias always), and the chain fed
  the layer's output before ``shared_head.norm``, as vLLM's GLM layer returns it (DeepSeek-V3's, MiMo's
  and Qwen3.5's return it normed).
- ``glm4_moe_lite`` (Glm4MoeLiteForCausalLM: GLM-4.7-Flash, vLLM's ``glm4_moe_lite_mtp.py``): GLM-4.5's names and
  chain with an MLA decoder layer (``runner/mtp_glm_lite.py``); ``glm4v_moe`` (Glm4vMoeForConditionalGeneration:
  GLM-4.5V/4.6V exports): GLM-4.5's layer at ``model.language_model.layers.{N}.``, the target their text model.
- ``glm_ocr`` (GlmOcrForConditionalGeneration, vLLM's ``glm_ocr_mtp.py``): GLM-4.5V's names and GLM-4.5's chain
  with a dense Glm4 decoder layer (sandwich norms), the target the export's text model as ``Glm4ForCausalLM``
  (``runner/mtp_glm_ocr.py``).
- ``mimo_v2_flash`` (MiMoV2FlashForCausalLM, vLLM's ``mimo_v2_mtp.py``; 1 layer by architecture, the config
  names no count): ``model.mtp.layers.{i}.{enorm, hnorm, eh_proj, final_layernorm}``, [embedding, hidden], the
  embedding not zeroed at position 0; transformers' ``MiMoV2FlashDecoderLayer`` built dense with the
  sliding-window attention's ``swa_*`` geometry, sinks and window (``pre_mlp_layernorm`` is its
  ``post_attention_layernorm``, ``attention_sink_bias`` its ``sinks``), rotated with ``swa_rope_theta``.
  ``mimo_v2`` (MiMoV2ForCausalLM: MiMo-V2-Pro; MiMoV2OmniForCausalLM): the same layer; the fused ``qkv_proj``,
  vLLM's per-kind geometry and the omni export's text model in ``runner/mtp_mimo2.py``.
- ``ernie4_5_moe`` (Ernie4_5_MoeForCausalLM: ERNIE-4.5-21B-A3B / 300B-A47B, vLLM's ``ernie_mtp.py``):
  ``model.mtp_{emb_norm,hidden_norm,linear_proj}.0`` and ``model.mtp_block.0.*`` (vLLM's LlamaDecoderLayer:
  neox RoPE, dense MLP), embedding zeroed at position 0, [embedding, hidden]; no final norm (the logits
  and the next step read the layer's output); the target's embeddings and head shared.
- ``longcat_flash`` (LongcatFlashForCausalLM, vLLM's ``longcat_flash_mtp.py``): ``model.mtp.layers.0.{enorm.m,
  hnorm.m, eh_proj}`` and ``model.mtp.norm``, [embedding, hidden], the embedding not zeroed at position 0, a
  dense MLA decoder layer (vLLM's ``DeepseekV2DecoderLayer`` without experts; ``runner/mtp_longcat.py``), the
  output normed feeds the next step; the target built from its routed experts (``load_longcat_target``).
- ``step3p5`` (Step3p5ForCausalLM, Step3p7ForConditionalGeneration; vLLM's ``step3p5_mtp.py``): DeepSeek-V3's
  names at N plus the layer's OWN ``shared_head.head`` for the logits (the Step proposer shares no lm_head),
  zero-centred norms, no zeroing at position 0, the pre-norm output fed on; a dense ``Step3p7DecoderLayer``
  with its own per-layer rotary (``runner/mtp_step.py``, which also builds the target).
- ``hy_v3`` (HYV3ForCausalLM: Tencent Hy3, vLLM's ``hy_v3_mtp.py``): DeepSeek-V3's names at N with
  ``final_layernorm``, the embedding zeroed at position 0, the normed output fed on, the target's embeddings
  and head (the layer's own ``embed_tokens`` / ``shared_head`` skipped, as vLLM's loader skips them); a MoE
  ``HYV3DecoderLayer`` routed as vLLM routes it, the target too (``runner/mtp_hyv3.py``).
- ``qwen3_5`` (Qwen3_5ForCausalLM, ``mtp_num_hidden_layers``) and ``qwen3_next`` (Qwen3NextForCausalLM,
  ``num_nextn_predict_layers``), vLLM's ``qwen3_5_mtp.py`` / ``qwen3_next_mtp.py``: ``mtp.{pre_fc_norm_embedding,
  pre_fc_norm_hidden, fc, norm}`` and the decoder layer under ``mtp.layers.{i}.``; [embedding, hidden], the
  embedding not zeroed at position 0, zero-centred (1 + w) norms, a full-attention layer
  (``runner/mtp_qwen35.py``). Released Qwen3.5/3.6 checkpoints are multimodal exports
  (``Qwen3_5ForConditionalGeneration``, ``Qwen3_5MoeForConditionalGeneration``: ``text_config``, the text
  model under ``model.language_model.``, the vision tower under ``model.visual.``); the target is then
  their text class (transformers' ``AutoModelForCausalLM`` builds ``Qwen3_5ForCausalLM`` /
  ``Qwen3_5MoeForCausalLM`` and maps the prefix), the vision tower neither built nor read, and the MTP
  layer the same (its tensors read from the shards that hold them only). MoE experts load stored one
  by one or fused (``experts.gate_up_proj``), as vLLM loads both.
- ``exaone_moe`` (ExaoneMoeForCausalLM: K-EXAONE, vLLM's ``exaone_moe_mtp.py``, ``num_nextn_predict_layers``):
  Qwen3.5's names and forward with plain RMS norms; the target's pre-norm decoder layer built dense at
  index 0, always rotated, its window from ``mtp_layer_types`` / ``mtp_sliding_windows`` (``runner/mtp_exaone.py``).
  ``exaone4_5`` (Exaone4_5_ForConditionalGeneration, vLLM's ``exaone4_5_mtp.py``): the same names, the text
  model's post-norm ``Exaone4DecoderLayer`` at index 0 as any of its layers; the target its text model.
- ``bailing_moe_v3`` (BailingMoeV3ForCausalLM: Ling-3.0, vLLM's ``bailing_moe_v3_mtp.py``): DeepSeek-V3's place
  (``model.layers.{N}.``) with ``final_layernorm``, no zeroing, an MLA + MoE layer (``runner/mtp_bailing.py``).

A head whose tensors are absent (dropped at save) or stored quantized where the config declares no
quantization is still built, as an engine that loads it would hold it (absent tensors zero, a
quantized tensor read as its raw values), and ``MtpSpec.faults`` names each such tensor (``runner/mtp_weights.py``): the run
measures what the fault costs, and the diagnosis names ``mtp-weights``.

In: a target folder whose config declares MTP layers.
Out: the target (``load_mtp_target``, as
transformers builds its family) and an ``MtpHead`` with the ``Eagle3Head`` interface, so that
``runner/eagle3.py``'s chain drafting runs it (``MtpBackend``). Needs the ``runner`` extra (torch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn

from draftguard.errors import MissingWeights
from draftguard.runner.dflash_model import (_local_folder, _read_weights, finish_target,
                                             folder_tokenizer, load_target, text_config)
from draftguard.runner.eagle3 import Eagle3Backend
from draftguard.runner.eagle3_model import _RMSNorm
from draftguard.runner.mtp_dots3 import dots3_block, dots3_embedding, load_dots3_target
from draftguard.runner.mtp_bailing import bailing_block, load_bailing_target
from draftguard.runner.mtp_dsa import check_dsa, dsa_block
from draftguard.runner.mtp_dsv3 import dsv3_block, ernie_block, glm4_block, mimo_v2_block, mimo_v2_rope
from draftguard.runner.mtp_hyv3 import hyv3_block, load_hyv3_target
from draftguard.runner.mtp_hyv4 import hyv4_block, load_hyv4_target
from draftguard.runner.mtp_glm_lite import glm4_lite_block, load_glm4v_target
from draftguard.runner.mtp_glm_ocr import glm_ocr_block, load_glm_ocr_target
from draftguard.runner.mtp_longcat import load_longcat_target, longcat_block
from draftguard.runner.mtp_mimo2 import (fix_target, split_qkv, target_layer_sliding, text_keys, text_weights,
                                         untile_qkv)
from draftguard.runner.mtp_quant import dequantize_declared, fp8_scheme
from draftguard.runner.reference import open_target, stop_token_ids
from draftguard.runner.mtp_exaone import exaone_block, load_exaone45_target
from draftguard.runner.mtp_nemotron import nemotron_block, stack_plain_experts
from draftguard.runner.mtp_qwen35 import expert_mismatch, fuse_experts, mtp_block, mtp_norm
from draftguard.runner.mtp_step import check_steps, load_step_target, no_rotary, step_block
from draftguard.runner.mtp_layouts import LAYOUTS, MtpLayout
from draftguard.runner.mtp_weights import mtp_count, mtp_faults, mtp_layout, read_config
from draftguard.snapshot import BadInput


def load_mtp_target(name: str, device: str = "cpu", dtype: torch.dtype | None = None) -> tuple[nn.Module, Any]:
    """The target as transformers builds its family: its own class (``load_target``), or for a
    family transformers has as remote code only (MiMo) the base class it extends (Qwen2), loaded
    with every tensor but the MTP layers'; a declared FP8 checkpoint (DeepSeek-V3's block FP8, a per-tensor
    or per-channel one) is built unquantized and its weights dequantized as vLLM reads them
    (``runner/mtp_quant.py``; transformers'
    own FP8 loader needs accelerate, and a GPU to run FP8). Example:
    ``target, tok = load_mtp_target("tests/fixtures/mtp-models/mimo")``."""
    folder = _local_folder(name, "target")
    raw = read_config(folder)
    layout = mtp_layout(raw, f"{name}/config.json")
    qc = raw.get("quantization_config")
    if qc is not None and fp8_scheme(raw) is None:  # transformers would want that scheme's own library
        method = qc.get("quant_method") if isinstance(qc, dict) else None
        raise BadInput(f"{folder / 'config.json'}: the target declares quantization_config (quant_method {method!r}), "
                       "which the reference does not dequantize (it dequantizes FP8 weights: quant_method fp8, "
                       "fbgemm_fp8, modelopt FP8 and compressed-tensors float 8-bit groups); run --backend vllm alone",
                       file=str(folder / "config.json"), key="quantization_config")
    if layout.name == "glm4v_moe":  # GLM-4.5V/4.6V: the text model alone (runner/mtp_glm_lite.py)
        return load_glm4v_target(folder, raw, device, dtype)
    if layout.name == "glm_ocr":  # GLM-OCR: the text model alone, Glm4ForCausalLM (runner/mtp_glm_ocr.py)
        return load_glm_ocr_target(folder, raw, device, dtype)
    if layout.name == "exaone4_5":  # the export's text model only (runner/mtp_exaone.py)
        return load_exaone45_target(folder, raw, device, dtype)
    if layout.name == "longcat_flash":  # routed experts stored one by one, the zero experts none (runner/mtp_longcat.py)
        return load_longcat_target(folder, device, dtype, _file_of(folder))
    if layout.name == "hy_v3":  # the checkpoint's names, vLLM's routing and layer kinds (runner/mtp_hyv3.py)
        return load_hyv3_target(folder, raw, device, dtype, _read_weights(folder),
                                lambda w: dequantize_declared(raw, w, "", _file_of(folder)))
    if layout.name == "hy_v4":  # vLLM's own model, not transformers' hy_v4 class (runner/mtp_hyv4.py)
        return load_hyv4_target(folder, raw, device, dtype, _read_weights(folder),
                                lambda w: dequantize_declared(raw, w, "", _file_of(folder)), finish_target)
    if layout.name == "dots3_note":  # the text model, its MTP tensors left out (runner/mtp_dots3.py)
        return load_dots3_target(folder, raw, device, dtype, _file_of(folder))
    if layout.name == "step3p5":  # no transformers causal LM class for it (runner/mtp_step.py)
        target = load_step_target(folder, raw, device, dtype, _read_weights(folder))
        return target, folder_tokenizer(folder)
    if layout.name == "bailing_moe_v3":  # vLLM's routing and attention rule (runner/mtp_bailing.py)
        return load_bailing_target(folder, load_target, device, dtype)
    if layout.base_model_type is None and qc is None:
        return load_target(str(folder), device, dtype)
    from transformers import AutoConfig, AutoModelForCausalLM  # transformers: only a model run pays it

    dtype = dtype or (torch.float32 if device == "cpu" else torch.bfloat16)
    keys = {k: v for k, v in raw.items() if k not in ("model_type", "architectures", "auto_map", "quantization_config")}
    mimo_v2 = layout.name == "mimo_v2"  # MiMo-V2-Pro, the omni export: vLLM's reading of the keys (runner/mtp_mimo2.py)
    keys = text_keys(keys) if mimo_v2 else keys
    config = AutoConfig.for_model(layout.base_model_type or str(raw.get("model_type")), **keys)
    # MiMo-V2-Flash: transformers' class refuses sdpa (no sinks there); eager runs its sinks.
    config._attn_implementation = "eager" if layout.sliding else "sdpa"
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    if mimo_v2:  # each attention in vLLM's own geometry for its kind
        fix_target(model, raw)
    weights = _read_weights(folder)
    own = {k: v for k, v in weights.items() if not _in_mtp(layout, k, int(raw.get("num_hidden_layers", 0)))}
    for stored, built in layout.renames:  # MiMo-V2-Flash's ``attention_sink_bias``, as transformers' loader renames it
        own = {k.replace("." + stored, "." + built): v for k, v in own.items()}
    if mimo_v2:  # a block-FP8 fused qkv_proj stored pre-sharded
        own = untile_qkv(raw, own, target_layer_sliding(raw), str(folder / "config.json"))
    own = dequantize_declared(raw, own, "", _file_of(folder))
    if mimo_v2:  # the text model's tensors, a fused qkv_proj split
        own = split_qkv(text_weights(own), raw, target_layer_sliding(raw), str(folder / "config.json"))
    own = fuse_experts(own, model.state_dict())
    missing, unexpected = model.load_state_dict(own, strict=False)
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise MissingWeights(f"{folder}: the target's weights " + (f"lack {', '.join(missing[:4])}" if missing else
                             f"hold tensors {config.model_type} does not name: {', '.join(unexpected[:4])}"),
                             file=str(folder))
    return finish_target(model, folder, device, dtype)


def _in_mtp(layout: MtpLayout, key: str, n: int) -> bool:
    """Whether a checkpoint key is an MTP layer's (DeepSeek-V3: ``model.layers.{j}.`` for j >= N)."""
    if layout.block_at_n:
        head, _, rest = key.partition("model.layers.")
        index = rest.split(".")[0]
        return not head and index.isdigit() and int(index) >= n
    return key.startswith(layout.prefix.split("{")[0])


def _file_of(folder: Path) -> Callable[[str], str]:
    """The safetensors file a checkpoint key is in (the index's weight map, else model.safetensors)."""
    index = folder / "model.safetensors.index.json"
    weight_map: dict[str, str] = {}
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text()).get("weight_map") or {}
        except (ValueError, AttributeError):
            weight_map = {}
    return lambda key: str(folder / weight_map.get(key, "model.safetensors"))


@dataclass
class MtpSpec:
    """What the head is built from. ``aux_ids`` [N] (the target's last layer, as ``aux_features``
    reads it before the final norm: ``MtpHead.fc`` is that norm) lets the EAGLE-3 chain run it."""

    source: str
    layout: MtpLayout
    key: str
    layers: int
    aux_ids: list[int]
    faults: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)  # config.json, where a head is built without a folder


class MtpHead(nn.Module):
    """MTP layer 0 of a target (the one vLLM 0.32 runs for every chain step), with the target's
    embeddings, final norm and ``lm_head`` shared, not owned. ``forward(hidden, embeds, positions)``
    runs causally over a whole sequence (no cache: the reference recomputes, which is exact) and
    returns the logits and the normed output that feeds the next chain step."""

    def __init__(self, spec: MtpSpec, target: nn.Module):
        super().__init__()
        self.spec = spec
        text = text_config(target)
        size = int(text.hidden_size)
        eps = float(text.rms_norm_eps if hasattr(text, "rms_norm_eps") else text.layer_norm_epsilon)  # Nemotron-H's name
        if spec.layout.gemma_norms:  # Qwen3.5 / Qwen3-Next (runner/mtp_qwen35.py): the target's own norm class
            self.enorm, self.hnorm, self.final_norm = (mtp_norm(target, size, eps) for _ in range(3))
        else:
            self.enorm, self.hnorm, self.final_norm = _RMSNorm(size, eps), _RMSNorm(size, eps), _RMSNorm(size, eps)
        if not spec.layout.final_norm:  # ERNIE-4.5: none, the logits read the layer's output
            self.final_norm = nn.Identity()
        self.proj = nn.Linear(2 * size, size, bias=False)
        rotary = getattr(target.model, "rotary_emb", None)  # Nemotron-H: none (its attention has no rotary)
        self.window = 0  # a sliding window the layer attends within (dots3), else none
        if spec.layout.name == "nemotron_h":  # the MTP sublayers and final norm (runner/mtp_nemotron.py)
            self.block = nemotron_block(text, target)
        elif spec.layout.name == "step3p5":  # vLLM's Step3p5DecoderLayer at N, own rotary and head (runner/mtp_step.py)
            self.block = step_block(text, spec.raw, int(text.num_hidden_layers), f"{spec.source}/config.json")
            self.own_head = nn.Linear(size, int(text.vocab_size), bias=False)
            rotary = no_rotary
        elif spec.layout.name == "ernie4_5_moe":  # vLLM's LlamaDecoderLayer (runner/mtp_dsv3.py)
            self.block, self.rotary = ernie_block(text)  # its own (neox) rotary, moved with the head
            rotary = self.rotary
        elif spec.layout.name == "dots3_note":  # Dots3Note's layer at N, its window (runner/mtp_dots3.py)
            self.block, self.rotary, kind, self.window = dots3_block(spec.raw, f"{spec.source}/config.json")
            rotary = lambda x, pos, turn=self.rotary: turn(x, pos, kind)  # noqa: E731
        elif spec.layout.block_at_n:
            # DeepSeek-V3: the family's own decoder layer at index N, as it builds it by its index (MoE or dense).
            # Its router is vLLM's (runner/mtp_dsv3.py).
            layers = getattr(target, "model", target).layers
            build = {"glm4_moe": glm4_block, "glm4v_moe": glm4_block,  # GLM-4.7-Flash: runner/mtp_glm_lite.py
                     "glm4_moe_lite": glm4_lite_block, "hy_v3": hyv3_block, "hy_v4": hyv4_block,
                     "glm_ocr": glm_ocr_block, "bailing_moe_v3": bailing_block,
                     "deepseek_v32": dsa_block, "glm_moe_dsa": dsa_block,  # V3.2, GLM-5: runner/mtp_dsa.py
                     }.get(spec.layout.name, dsv3_block)
            if build is dsa_block:
                check_dsa(spec.raw, f"{spec.source}/config.json")
            self.block = build(text, type(layers[0]), int(text.num_hidden_layers))
        elif spec.layout.name in ("exaone_moe", "exaone4_5"):  # its own window and RoPE rule (runner/mtp_exaone.py)
            self.block = exaone_block(text, target, mtp_keys=spec.layout.name == "exaone_moe")
        elif spec.layout.name == "longcat_flash":  # a dense MLA layer as vLLM builds it (runner/mtp_longcat.py)
            self.block = longcat_block(text)
        elif spec.layout.sliding:  # MiMo-V2-Flash: a dense sliding-window layer with sinks (runner/mtp_dsv3.py)
            self.block = mimo_v2_block(text, type(target.model.layers[0]))
        else:  # layer_idx 0, full attention (a hybrid target's layer 0 may not be)
            self.block = mtp_block(text, target)
        base = getattr(target, "model", target)
        self._shared = {"norm": base.norm if hasattr(base, "norm") else base.norm_f, "rotary": rotary,
                        "head": getattr(self, "own_head", None) or target.get_output_embeddings(), "text": text}
        # The chain (runner.eagle3) embeds draft tokens with a head's own table where it has one; an MTP
        # layer shares the target's, as vLLM's MTP models do.
        self.own_embed: nn.Module | None = None

    @property
    def fc(self) -> nn.Module:
        return self._shared["norm"]

    def combine(self, features: torch.Tensor) -> torch.Tensor:
        """What the chain (runner.eagle3.chain_draft) feeds the first step: the target's features
        through ``fc`` (an EAGLE-3 head's ``combine`` adds its optional norms)."""
        return self.fc(features)

    def forward(self, hidden: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.spec.layout.zero_first:  # DeepSeek-V3, MiMo; not Qwen3.5 / Qwen3-Next
            embeds = torch.where(positions[..., None] == 0, torch.zeros_like(embeds), embeds)
        e, h = self.enorm(embeds), self.hnorm(hidden)
        x = self.proj(torch.cat([e, h] if self.spec.layout.embeds_first else [h, e], -1))
        n = x.shape[1]
        mask = torch.full((n, n), float("-inf"), device=x.device, dtype=x.dtype).triu(1)
        window = self.window
        if self.spec.layout.sliding:  # MiMo-V2-Flash: its window and rope from the swa_* keys
            text = self._shared["text"]
            window = int(getattr(text, "sliding_window_size", -1) or -1)
            rope = tuple(t.to(x.dtype) for t in mimo_v2_rope(text, positions))
        else:
            rope = self._shared["rotary"](x, positions) if self._shared["rotary"] is not None else None
        if window > 0:  # vLLM's window: the query and the window - 1 tokens before it
            mask = mask.masked_fill(torch.ones(n, n, dtype=torch.bool, device=x.device).tril(-window), float("-inf"))
        out = self.block(x, attention_mask=mask[None, None], position_ids=positions, position_embeddings=rope)
        out = out[0] if isinstance(out, tuple) else out
        normed = self.final_norm(out)
        return self._shared["head"](normed), out if self.spec.layout.recycle_prenorm else normed

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids


def _module_key(layout: MtpLayout, key: str) -> str | None:
    """A checkpoint key under the MTP layer's prefix (prefix removed) as ``MtpHead`` names it."""
    for role, name in (("enorm", layout.enorm), ("hnorm", layout.hnorm), ("proj", layout.proj),
                       ("final_norm", layout.final_norm), ("own_head", layout.own_head)):
        if name and key.startswith(name + "."):
            return role + key[len(name):]
    for stored, built in layout.renames:  # MiMo-V2-Flash: ``pre_mlp_layernorm``, ``attention_sink_bias``
        if key.startswith(stored):
            key = built + key[len(stored):]
    block = layout.block.format(i=0)
    if block and not key.startswith(block):
        return None
    key = key[len(block):]
    if key.split(".")[0] in ("self_attn", "mlp", "input_layernorm", "post_attention_layernorm",
                             "post_feedforward_layernorm", "layers",  # EXAONE-4.5: post-norm; Nemotron-H: sublayers
                             "post_self_attn_layernorm", "post_mlp_layernorm"):  # GLM-OCR's sandwich norms
        return "block." + key
    return None


def load_mtp(name: str, target: nn.Module, device: str | None = None) -> MtpHead:
    """Build MTP layer 0 of the target folder ``name`` and load its tensors as an engine would:
    absent ones stay zero, quantized ones are read as their raw values; each is named in
    ``head.spec.faults``. Example: ``head = load_mtp("tests/fixtures/mtp-models/mimo", target)``."""
    folder = _local_folder(name, "target")
    raw = read_config(folder)
    where = f"{name}/config.json"
    layout = mtp_layout(raw, where)
    key, count = mtp_count(raw, str(folder / "config.json"))
    n = int(text_config(target).num_hidden_layers)
    # the last decoder layer's output: LongCat-Flash's num_hidden_layers counts two attention sublayers per layer
    last = len(getattr(target, "model", target).layers) if layout.name == "longcat_flash" else n
    spec = MtpSpec(source=str(name), layout=layout, key=key, layers=count, aux_ids=[last], raw=raw)
    head = MtpHead(spec, target)
    prefix = layout.prefix.format(i=0, n=n)
    found = _read_prefixed(folder, prefix)
    alt = layout.alt_prefix.format(i=0, n=n)
    if not found and alt and (stored := _read_prefixed(folder, alt)):  # HY-V4: Tencent's name for the layer
        prefix, found = alt, stored
    weights = {k[len(prefix):]: v for k, v in found.items()}
    file_of = _file_of(folder)
    if layout.sliding:  # MiMo-V2: a block-FP8 fused qkv_proj stored pre-sharded (runner/mtp_mimo2.py)
        weights = untile_qkv(raw, weights, lambda key: True, str(folder / "config.json"))
    weights = dequantize_declared(raw, weights, prefix, file_of)  # a declared FP8 scheme (runner/mtp_quant.py)
    if layout.sliding:  # MiMo-V2: a fused qkv_proj (the Pro, the omni export) split as vLLM loads it
        weights = split_qkv(weights, raw, lambda key: True, str(folder / "config.json"))
    expected = head.state_dict()
    state: dict[str, torch.Tensor] = {}
    names = {mk: k for k in weights if (mk := _module_key(layout, k)) is not None}
    bad = expert_mismatch({mk: weights[k] for mk, k in names.items()}, expected)
    if bad is not None:
        name = prefix + names[bad[0]]
        raise BadInput(f"{file_of(name)}: `{name}` {bad[1]}", file=file_of(name), key=name)
    # Experts (Qwen3-Next, DeepSeek-V3), stored one by one, stacked as the layer holds them (runner/mtp_qwen35.py).
    fused = stack_plain_experts(fuse_experts({mk: weights[k] for mk, k in names.items()}, expected), expected, str(folder))
    _refuse_unbuilt(folder, raw, layout, prefix, weights, expected, {names[mk] for mk in names if mk not in fused})
    for mk, tensor in fused.items():
        if mk not in expected:
            continue
        k = names.get(mk, layout.block.format(i=0) + mk[len("block."):])  # a stack: the name it would have
        if tuple(tensor.shape) != tuple(expected[mk].shape):
            raise BadInput(f"{file_of(prefix + k)}: `{prefix}{k}` has shape {tuple(tensor.shape)}, the config calls "
                           f"for {tuple(expected[mk].shape)}", file=file_of(prefix + k), key=prefix + k)
        state[mk] = tensor.to(torch.float32)  # a quantized tensor: its raw values, as an engine reads them
    for k in set(expected) - set(state):
        state[k] = torch.zeros_like(expected[k])  # absent: zeros, as an engine holds them
    spec.faults.extend(mtp_faults(folder))
    head.load_state_dict(state)
    if layout.own_embed:  # dots3: the layer's own table, as vLLM keeps it (runner/mtp_dots3.py)
        head.own_embed = dots3_embedding(_read_prefixed(folder, layout.own_embed), target, str(folder))
    param = next(target.parameters())
    return head.to(device=device or param.device, dtype=param.dtype).eval()


def _read_prefixed(folder: Path, prefix: str) -> dict[str, torch.Tensor]:
    """The tensors whose names start with ``prefix``, read one by one from the shards the index puts them
    in: the target's own tensors (transformers loads them) and a multimodal export's vision tower
    (``model.visual.*``) are not read. A shard the index names for one of them and that is missing:
    ``MissingWeights``, as ``_read_weights``."""
    from safetensors import safe_open  # safetensors: the runner extra only

    index = folder / "model.safetensors.index.json"
    if (folder / "model.safetensors").is_file():
        shards = ["model.safetensors"]
    elif index.is_file():
        shards = sorted({f for k, f in json.loads(index.read_text())["weight_map"].items() if k.startswith(prefix)})
    else:
        return _read_weights(folder)  # names what is missing
    out: dict[str, torch.Tensor] = {}
    for shard in shards:
        if not (folder / shard).is_file():
            raise MissingWeights(f"{folder / shard}: shard named in {index.name} is missing", file=str(index))
        with safe_open(str(folder / shard), "pt") as f:
            out.update({k: f.get_tensor(k) for k in f.keys() if k.startswith(prefix)})
    return out


def _refuse_unbuilt(folder: Path, raw: dict[str, Any], layout: MtpLayout, prefix: str,
                    weights: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], stacked: set[str]) -> None:
    """Bad input, not a silently zeroed tensor, for what the reference does not build: a checkpoint
    tensor under the layer's prefix that maps to no parameter (per-expert weights of a layer the config
    makes dense) other than the layer's copies of shared tensors, quantization scales and per-expert
    tensors stacked into a fused parameter (``stacked``), or a quantized tensor under a declared
    quantization other than the FP8 schemes ``runner/mtp_quant.py`` dequantizes."""
    copies = {own for own, _shared in layout.copies}
    unbuilt = [k for k in weights if k not in copies and k not in stacked and not k.endswith(("_scale_inv", "_scale"))
               and not k.startswith(layout.skipped) and _module_key(layout, k) not in expected]
    if unbuilt:
        dense = ("; the config makes the layer dense (n_routed_experts, first_k_dense_replace, moe_layer_freq), "
                 "so it has no experts") if ".experts." in unbuilt[0] else ""
        raise BadInput(f"{folder}: the reference does not build the MTP layer's `{prefix}{unbuilt[0]}` "
                       f"({len(unbuilt)} such tensor(s){dense}); run --backend vllm alone", file=str(folder),
                       key=prefix + unbuilt[0])
    quantized = [k for k, t in weights.items() if not t.is_floating_point() or t.element_size() == 1]
    if quantized and "quantization_config" in raw:
        qc = raw["quantization_config"]
        method = qc.get("quant_method") if isinstance(qc, dict) else None
        raise BadInput(f"{folder}: `{prefix}{quantized[0]}` is stored {weights[quantized[0]].dtype} under the declared "
                       f"quantization_config (quant_method {method!r}), which the reference does not dequantize (it "
                       "dequantizes FP8 weights: quant_method fp8, fbgemm_fp8, modelopt FP8 and compressed-tensors "
                       "float 8-bit groups); run --backend vllm alone",
                       file=str(folder), key="quantization_config")


class MtpBackend(Eagle3Backend):
    """The reference backend for a target's own MTP layer: ``Eagle3Backend``'s chain drafting and
    interface, with the head built by ``load_mtp`` from the target folder itself. K (the draft
    length) defaults to the number of MTP layers the config declares, as vLLM's recipes set it.

    Example::

        backend = MtpBackend("tests/fixtures/mtp-models/mimo")
        result, tokens = backend.run_prompt(0, [40, 3, 6, 9], max_new_tokens=32)
    """

    def __init__(self, target: str, *, device: str = "cpu", dtype: torch.dtype | None = None,
                 num_speculative_tokens: int | None = None):
        self.device, self.views = device, ("resolved",)
        self.target, self.tokenizer = open_target(load_mtp_target, target, device, dtype)
        self.drafter = load_mtp(target, self.target, device)
        self.drafters = {"resolved": self.drafter}
        self.k = num_speculative_tokens or self.drafter.spec.layers
        if self.drafter.spec.layout.name == "step3p5":
            check_steps(read_config(_local_folder(target, "target")), self.k, f"{target}/config.json")
        self.stop_ids = stop_token_ids(self.target, self.tokenizer)
        self.replayed_steps = 0


__all__ = ["LAYOUTS", "MtpBackend", "MtpHead", "MtpLayout", "load_mtp", "load_mtp_target",
           "mtp_layout"]
