"""Where each MTP family keeps its MTP layer's tensors and how its forward concatenates: one ``MtpLayout``
a layout, named as ``check/drafter/detect.py``'s ``MTP_REFERENCE_LAYOUTS`` names them (the architecture ->
layout map the light check reads). Data only: no torch, nothing read.

In: nothing (constants).
Out: ``MtpLayout``, ``LAYOUTS`` (layout name -> MtpLayout) and ``layer_prefix``, read by ``mtp_weights`` (faults, the layout
of a target) and ``mtp_model`` (the reference's forward).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable


@dataclass(frozen=True)
class MtpLayout:
    """Where a family keeps its MTP layer's tensors and how its forward concatenates."""

    name: str
    prefix: str  # with {i}: the MTP layer's index in the checkpoint
    enorm: str
    hnorm: str
    proj: str
    final_norm: str  # "": none (ERNIE-4.5: the logits read the layer's output as it is)
    embeds_first: bool
    base_model_type: str | None = None  # the transformers family the target is built as, when its own is remote code
    # Qwen3.5 / Qwen3-Next: the decoder layer's names sit under their own prefix inside the MTP
    # prefix (``mtp.layers.{i}.``), the norms are zero-centred ("gemma-style": x * (1 + w), the
    # target's own RMSNorm class), and the embedding is not zeroed at position 0.
    block: str = ""
    gemma_norms: bool = False
    zero_first: bool = True
    # DeepSeek-V3: the decoder layer is built at its own index N (MoE or dense by first_k_dense_replace,
    # as vLLM's DeepseekV2DecoderLayer and transformers build layer N); MiMo: as the target's layer 0.
    block_at_n: bool = False
    # The layer's own copies of tensors the family shares, and the target tensor each must equal.
    copies: tuple[tuple[str, str], ...] = ()
    # GLM-4.5: the next chain step reads the layer's output before ``shared_head.norm`` (vLLM 0.32's
    # glm4_moe_mtp.py returns it, and applies the norm for the logits only); the others read it normed.
    recycle_prenorm: bool = False
    # MiMo-V2-Flash: checkpoint names (under the prefix) the decoder layer's class names otherwise, and an
    # MTP layer that attends as the target's sliding-window layers do (``swa_*`` keys, sinks; mtp_dsv3.py).
    renames: tuple[tuple[str, str], ...] = ()
    sliding: bool = False
    # Step-3.5/3.7: the logits read the layer's own head (``shared_head.head``), not the target's lm_head.
    own_head: str = ""
    # HY-V3: names under the prefix the engine's loader skips (the layer's own ``embed_tokens`` and
    # ``shared_head``: vLLM maps the target's tensors in their place), neither read nor refused.
    skipped: tuple[str, ...] = ()
    # dots3: a table of the layer's own outside its prefix, which vLLM drafts with (has_own_embed_tokens).
    own_embed: str = ""
    # HY-V4: the checkpoint's own name for layer i, which vLLM's loader maps to ``prefix`` (``layer_prefix``).
    alt_prefix: str = ""


def layer_prefix(layout: MtpLayout, n: int, names: Iterable[str]) -> str:
    """Where MTP layer 0's tensors are in a checkpoint holding ``names``: ``layout.prefix``, or the layout's
    ``alt_prefix`` where the checkpoint holds tensors there and none under the prefix.

    Example::

        >>> layer_prefix(LAYOUTS["hy_v4"], 2, ["model.mtp_layers.0.enorm.weight"])
        'model.mtp_layers.0.'
    """
    prefix = layout.prefix.format(i=0, n=n)
    if layout.alt_prefix:
        names = list(names)
        alt = layout.alt_prefix.format(i=0, n=n)
        if not any(k.startswith(prefix) for k in names) and any(k.startswith(alt) for k in names):
            return alt
    return prefix


LAYOUTS = {
    "mimo": MtpLayout("mimo", "model.mtp_layers.{i}.", "token_layernorm", "hidden_layernorm", "input_proj",
                      "final_layernorm", embeds_first=False, base_model_type="qwen2"),
    "deepseek_v3": MtpLayout("deepseek_v3", "model.layers.{n}.", "enorm", "hnorm", "eh_proj", "shared_head.norm",
                             embeds_first=True, block_at_n=True,
                             copies=(("embed_tokens.weight", "model.embed_tokens.weight"),
                                     ("shared_head.head.weight", "lm_head.weight"))),
}
# GLM-4.5/4.6/4.7 (vLLM 0.32's glm4_moe_mtp.py): DeepSeek-V3's names and forward (embedding zeroed at
# position 0, [embedding, hidden], ``shared_head.norm``, the target's embeddings and head shared) with a
# Glm4Moe decoder layer at N (GQA, partial rotary; runner/mtp_dsv3.py's ``glm4_block``), whose output
# before the final norm feeds the next step.
LAYOUTS["glm4_moe"] = MtpLayout("glm4_moe", "model.layers.{n}.", "enorm", "hnorm", "eh_proj", "shared_head.norm",
                                embeds_first=True, block_at_n=True, copies=LAYOUTS["deepseek_v3"].copies,
                                recycle_prenorm=True)
# GLM-4.7-Flash (vLLM 0.32's glm4_moe_lite_mtp.py): GLM-4.5's names and forward (the chain fed the output
# before ``shared_head.norm``) with DeepSeek-V3's MLA decoder layer and GLM's sigmoid-routed MoE
# (runner/mtp_glm_lite.py's ``glm4_lite_block``).
LAYOUTS["glm4_moe_lite"] = MtpLayout("glm4_moe_lite", "model.layers.{n}.", "enorm", "hnorm", "eh_proj",
                                     "shared_head.norm", embeds_first=True, block_at_n=True,
                                     copies=LAYOUTS["deepseek_v3"].copies, recycle_prenorm=True)
# GLM-4.5V / GLM-4.6V (``Glm4vMoeForConditionalGeneration``): GLM-4.5's MTP layer in the multimodal export,
# its text model's tensors (the MTP layer's with them) under ``model.language_model.``, ``text_config``
# beside ``vision_config``; the target is the text model as vLLM builds it (``Glm4MoeForCausalLM`` from
# ``text_config``; runner/mtp_glm_lite.py's ``load_glm4v_target``), the vision tower neither built nor read.
LAYOUTS["glm4v_moe"] = MtpLayout("glm4v_moe", "model.language_model.layers.{n}.", "enorm", "hnorm", "eh_proj",
                                 "shared_head.norm", embeds_first=True, block_at_n=True, recycle_prenorm=True,
                                 base_model_type="glm4_moe",
                                 copies=(("embed_tokens.weight", "model.language_model.embed_tokens.weight"),
                                         ("shared_head.head.weight", "lm_head.weight")))
# GLM-OCR (``GlmOcrForConditionalGeneration``; vLLM 0.32's glm_ocr_mtp.py): GLM-4.5V's names under
# ``model.language_model.layers.{N}.`` and GLM-4.5's forward (embedding zeroed at position 0, [embedding,
# hidden], ``shared_head.norm`` for the logits only, the pre-norm output fed on, the target's embeddings and
# head shared) with a dense Glm4 decoder layer (sandwich norms); the target is the text model as vLLM builds it
# (``Glm4ForCausalLM`` from ``text_config``; runner/mtp_glm_ocr.py).
LAYOUTS["glm_ocr"] = MtpLayout("glm_ocr", "model.language_model.layers.{n}.", "enorm", "hnorm", "eh_proj",
                               "shared_head.norm", embeds_first=True, block_at_n=True, recycle_prenorm=True,
                               base_model_type="glm4", copies=LAYOUTS["glm4v_moe"].copies)

# DeepSeek-V3.2 / GLM-5 (vLLM 0.32's DeepseekV32MTPModel, models/deepseek_v32/nvidia/mtp.py): DeepSeek-V3's
# names and forward (zeroed position 0, [embedding, hidden], the normed output fed on, the target's embeddings
# and head shared) with transformers' sparse-attention decoder layer at N, its indexer under
# ``self_attn.indexer.*`` (runner/mtp_dsa.py).
for _name in ("deepseek_v32", "glm_moe_dsa"):
    LAYOUTS[_name] = MtpLayout(_name, "model.layers.{n}.", "enorm", "hnorm", "eh_proj", "shared_head.norm",
                               embeds_first=True, block_at_n=True, copies=LAYOUTS["deepseek_v3"].copies)
# MiMo-V2-Flash (vLLM 0.32's mimo_v2_mtp.py): ``model.mtp.layers.{i}.{enorm, hnorm, eh_proj, final_layernorm}``,
# [embedding, hidden], the embedding NOT zeroed at position 0 (unlike MiMo's and DeepSeek-V3's), the target's
# embed_tokens and lm_head shared; a dense decoder layer attending as the sliding-window layers (``swa_*``
# heads and rope theta, ``sliding_window_size``, ``attention_sink_bias``), its post-attention norm stored
# as ``pre_mlp_layernorm``; the output normed feeds the next step.
LAYOUTS["mimo_v2_flash"] = MtpLayout("mimo_v2_flash", "model.mtp.layers.{i}.", "enorm", "hnorm", "eh_proj",
                                     "final_layernorm", embeds_first=True, zero_first=False, sliding=True,
                                     renames=(("pre_mlp_layernorm.", "post_attention_layernorm."),
                                              ("self_attn.attention_sink_bias", "self_attn.sinks")))
# MiMo-V2-Pro / MiMo-V2.5-Pro (MiMoV2ForCausalLM) and the omni export (MiMoV2OmniForCausalLM): Flash's layer and
# names (vLLM 0.32's MiMoV2MTP / MiMoV2OmniMTP), the target built as transformers' MiMo-V2-Flash with vLLM's
# geometry and keys, a fused ``qkv_proj`` split, the omni export's towers not read (runner/mtp_mimo2.py).
LAYOUTS["mimo_v2"] = replace(LAYOUTS["mimo_v2_flash"], name="mimo_v2", base_model_type="mimo_v2_flash")
# ERNIE-4.5 MoE (vLLM 0.32's ernie_mtp.py): ``model.mtp_{emb_norm,hidden_norm,linear_proj}.0`` and a Llama
# decoder layer under ``model.mtp_block.0.`` (vLLM's LlamaDecoderLayer: neox RoPE where the target's is
# interleaved, no bias, the dense ``intermediate_size``); embedding zeroed at position 0, [embedding,
# hidden]; no final norm: the logits are ``lm_head`` of the layer's output, which feeds the next step;
# the target's embed_tokens and lm_head shared (runner/mtp_dsv3.py's ``ernie_block``).
LAYOUTS["ernie4_5_moe"] = MtpLayout("ernie4_5_moe", "model.mtp_", "emb_norm.0", "hidden_norm.0", "linear_proj.0", "",
                                    embeds_first=True, block="block.{i}.", recycle_prenorm=True)
# LongCat-Flash (vLLM 0.32's longcat_flash_mtp.py): ``model.mtp.layers.0.{enorm.m, hnorm.m, eh_proj}``,
# ``model.mtp.norm`` and the decoder layer under ``model.mtp.layers.0.`` (its MLP under
# ``transformer_layer.mlp.``); [embedding, hidden], the embedding not zeroed at position 0, the output
# normed feeds the next step; a dense MLA layer (runner/mtp_longcat.py); ``model.mtp.embed_tokens`` is a
# copy of the target's embeddings, which vLLM's proposer puts in its place.
LAYOUTS["longcat_flash"] = MtpLayout("longcat_flash", "model.mtp.", "layers.0.enorm.m", "layers.0.hnorm.m",
                                     "layers.0.eh_proj", "norm", embeds_first=True, zero_first=False,
                                     block="layers.{i}.", renames=(("layers.0.transformer_layer.", "layers.0."),),
                                     copies=(("embed_tokens.weight", "model.embed_tokens.weight"),))
# Step-3.5/3.7 (vLLM 0.32's step3p5_mtp.py; runner/mtp_step.py): ``model.layers.{N}.{enorm, hnorm, eh_proj,
# shared_head.norm, shared_head.head}`` and a Step3p5 decoder layer at N beside them; zero-centred norms,
# [embedding, hidden], the embedding not zeroed at position 0 and shared with the target, the layer's OWN
# head (the Step proposer shares no lm_head), the output before ``shared_head.norm`` fed to the next step.
LAYOUTS["step3p5"] = MtpLayout("step3p5", "model.layers.{n}.", "enorm", "hnorm", "eh_proj", "shared_head.norm",
                               embeds_first=True, block_at_n=True, gemma_norms=True, zero_first=False,
                               copies=(LAYOUTS["deepseek_v3"].copies[0],), recycle_prenorm=True,
                               own_head="shared_head.head")
# HY-V3 / Hy3 (vLLM 0.32's hy_v3_mtp.py; runner/mtp_hyv3.py): ``model.layers.{N}.{enorm, hnorm, eh_proj,
# final_layernorm}`` and a HYV3 decoder layer at N (MoE by ``first_k_dense_replace``) beside them, its MoE
# under the checkpoint's names (``mlp.router.gate``, ``mlp.expert_bias``, ``mlp.shared_mlp``); embedding
# zeroed at position 0, [embedding, hidden], the output normed feeds the next step; the target's
# embed_tokens and lm_head read in place of the layer's own ``embed_tokens`` / ``shared_head``, skipped.
LAYOUTS["hy_v3"] = MtpLayout("hy_v3", "model.layers.{n}.", "enorm", "hnorm", "eh_proj", "final_layernorm",
                             embeds_first=True, block_at_n=True, skipped=("embed_tokens.", "shared_head."),
                             renames=(("mlp.router.gate.", "mlp.gate."),
                                      ("mlp.expert_bias", "mlp.e_score_correction_bias"),
                                      ("mlp.shared_mlp.", "mlp.shared_experts.")))
# HY-V4 (vLLM 0.32's models/hy_v4/nvidia/mtp.py; runner/mtp_hyv4.py): HY-V3's names and forward (or the layer
# stored as ``model.mtp_layers.{i}.*``, Tencent's name, which vLLM's loader maps to layer N + i), the decoder
# layer at N vLLM's HYV4DecoderLayer without iHC (MLA with an output gate, MoE), its router stored as
# ``mlp.gate.{weight, e_score_correction_bias}`` (or ``mlp.router.gate``, ``mlp.expert_bias``: vLLM reads both).
LAYOUTS["hy_v4"] = replace(LAYOUTS["hy_v3"], name="hy_v4", alt_prefix="model.mtp_layers.{i}.",
                           renames=(("mlp.router.gate.", "mlp.gate."),
                                    ("mlp.expert_bias", "mlp.gate.e_score_correction_bias")))

# dots3 (rednote-hilab's Dots3Note; vLLM 0.32's models/dots3_note/nvidia/mtp.py; runner/mtp_dots3.py):
# DeepSeek-V3's names at N and forward (embedding zeroed at position 0, [embedding, hidden], the normed output
# fed on, the target's lm_head), a Dots3Note decoder layer at N attending by ``mtp_layer_types`` (default
# sliding window), and the layer's OWN embedding ``model.mtp.embed_tokens``, which vLLM keeps.
LAYOUTS["dots3_note"] = MtpLayout("dots3_note", "model.layers.{n}.", "enorm", "hnorm", "eh_proj", "shared_head.norm",
                                  embeds_first=True, block_at_n=True, copies=(LAYOUTS["deepseek_v3"].copies[1],),
                                  own_embed="model.mtp.embed_tokens.weight")
# Qwen3.5/3.6 (vLLM's qwen3_5_mtp.py) and Qwen3-Next (qwen3_next_mtp.py): one layout, ``mtp.{fc,
# pre_fc_norm_embedding, pre_fc_norm_hidden, norm}`` and ``mtp.layers.{i}.*`` (a full-attention decoder
# layer of the target's class), [embedding, hidden] concatenated; the target's embed_tokens and lm_head
# are shared (``mtp_use_dedicated_embeddings`` false). runner/mtp_qwen35.py builds the layer.
for _name in ("qwen3_5", "qwen3_next"):
    LAYOUTS[_name] = MtpLayout(_name, "mtp.", "pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm",
                               embeds_first=True, block="layers.{i}.", gemma_norms=True, zero_first=False)
# EXAONE-MoE / K-EXAONE (vLLM 0.32's exaone_moe_mtp.py, ``num_nextn_predict_layers``): Qwen3.5's names and
# forward, the norms plain RMSNorm, the decoder layer the target's pre-norm class built dense at index 0,
# always rotated (runner/mtp_exaone.py).
LAYOUTS["exaone_moe"] = MtpLayout("exaone_moe", "mtp.", "pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm",
                                  embeds_first=True, block="layers.{i}.", zero_first=False)
# EXAONE-4.5 (vLLM 0.32's exaone4_5_mtp.py): the same names and forward; its text model's post-norm
# Exaone4DecoderLayer built at index 0 as any of its layers; the multimodal export's text model the target.
LAYOUTS["exaone4_5"] = MtpLayout("exaone4_5", "mtp.", "pre_fc_norm_embedding", "pre_fc_norm_hidden", "fc", "norm",
                                 embeds_first=True, block="layers.{i}.", zero_first=False)
# Nemotron-H (vLLM 0.32's nemotron_h_mtp.py; runner/mtp_nemotron.py): ``mtp.layers.{j}.*``, one sublayer per
# character of ``mtp_hybrid_override_pattern`` (``*E``: attention, MoE), ``enorm``/``hnorm``/``eh_proj`` in
# sublayer 0 and ``final_layernorm`` in the last (the block applies it: no final norm here); [embedding,
# hidden], the embedding not zeroed; the normed output feeds the next step; the target's embeddings and
# head loaded into the MTP model (no copies of its own).
LAYOUTS["nemotron_h"] = MtpLayout("nemotron_h", "mtp.", "layers.0.enorm", "layers.0.hnorm", "layers.0.eh_proj", "",
                                  embeds_first=True, zero_first=False)
# Ling-3.0 / Ring-3.0 (BailingMoeV3ForCausalLM, model_type bailing_hybrid; vLLM 0.32's bailing_moe_v3_mtp.py,
# runner/mtp_bailing.py): ``model.layers.{N}.{enorm, hnorm, eh_proj, final_layernorm}`` and an MLA + MoE decoder
# layer beside them (stored as Ling names it: ``attention.``, ``attention.dense``, ``mlp.gate.expert_bias``);
# [embedding, hidden], the embedding not zeroed, the output normed feeds the next step; the target's embeddings
# and head shared. Not named ``bailing_hybrid``: Ling-2.5 (BailingMoeV2_5ForCausalLM, another MTP model) has
# that model_type too, and ``mtp_layout`` falls back on the model_type.
LAYOUTS["bailing_moe_v3"] = MtpLayout("bailing_moe_v3", "model.layers.{n}.", "enorm", "hnorm", "eh_proj",
                                      "final_layernorm", embeds_first=True, zero_first=False, block_at_n=True,
                                      copies=(("embed_tokens.weight", "model.word_embeddings.weight"),
                                              ("shared_head.head.weight", "lm_head.weight")),
                                      renames=(("attention.dense.", "self_attn.o_proj."), ("attention.", "self_attn."),
                                               ("mlp.gate.expert_bias", "mlp.gate.e_score_correction_bias")))


__all__ = ["LAYOUTS", "MtpLayout", "layer_prefix"]
