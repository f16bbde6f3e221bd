"""Which speculative-decoding drafter format a config.json is, recognised by what it is.

This module is all the light check needs to tell a drafter from any other model: it imports nothing
heavier than the standard library. The rules live in the format modules beside it.

Formats, in the order they are tried (``detect_drafter``):

- speculators (vLLM's speculators library): ``speculators_model_type`` with a
  ``transformer_layer_config`` (the decoder layers' own config), ``aux_hidden_state_layer_ids`` or
  ``eagle_aux_hidden_state_layer_ids`` (target layer id + 1) and
  ``speculators_config.verifier.name_or_path`` (the target).
- DFlash (z-lab) and its relatives: ``architectures`` naming ``DFlashDraftModel``,
  ``DFlash2DraftModel`` (DFlash2), ``DSparkDraftModel`` or ``DominoDraftModel``, or a
  ``dflash_config``, or top-level ``target_layer_ids`` beside ``mask_token_id`` and ``block_size``
  (z-lab's Muse assistant). Target layer ids are 0-based.
- EAGLE-3: an ``*Eagle3*`` architecture (``LlamaForCausalLMEagle3``, ``Eagle3DraftModel``), P-EAGLE
  (``PEagleDraftModel``, parallel drafting on EAGLE-3 features), a ``draft_vocab_size``, or
  ``eagle_aux_hidden_state_layer_ids`` at the top level or in ``eagle_config``. Published heads
  often state no ids at all: engines then use defaults (``engines.py``).
- EAGLE 1 and 2 (one checkpoint format): an ``Eagle`` architecture that is not EAGLE-3
  (``EagleLlamaForCausalLM``, ``LlamaForCausalLMEagle``), ``model_type: "eagle"`` (vLLM's wrapper),
  or, when a target is named, a one-layer decoder of the target's width: the SafeAILab heads are
  plain ``LlamaForCausalLM`` configs with ``num_hidden_layers: 1``.
- MTP: a model that declares its own multi-token-prediction heads (``num_nextn_predict_layers``,
  ``mtp_num_hidden_layers``). Recognised, so that ``--target`` is not refused; no draft rule exists
  for it yet.

Layer-id forms. The reference reads ``hidden_states[id + 1]``, because index 0 is the embedding
output; engines and the speculators format store that index, ``aux = id + 1``. So a target layer id
lies in [0, N) and an aux id in [1, N], where N is the target's ``num_hidden_layers``.

In: a config.json as parsed (a dict), and optionally the target's ``hidden_size``.
Out: ``detect_drafter`` -> a ``DrafterFormat`` (family, label, every ``Stated`` key the rules read)
or None; ``layer_config`` -> (the part a config class resolves, its key prefix). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from draftguard.check.findings import is_int as _is_int

LAYER_CONFIG_KEY = "transformer_layer_config"
DFLASH_ARCHITECTURES = {
    "DFlashDraftModel": "z-lab DFlash",
    "DFlash2DraftModel": "z-lab DFlash2",
    "DSparkDraftModel": "DSpark",
    "DominoDraftModel": "Domino",
    "DFlareDraftModel": "DFlare",
}
# Other trainers' names for the same family (TorchSpec's and DeepSpec's Qwen3DSparkModel, AngelSlim's
# QwenDFlareDraftModel): a marker in the architecture, most specific first.
DFLASH_MARKERS = (("dflash2", "z-lab DFlash2"), ("dflare", "DFlare"), ("dspark", "DSpark"), ("domino", "Domino"),
                  ("dflash", "DFlash"))
# Trainers that pick target layers with z-lab's build_target_layer_ids: only their ids have a usual list
# that a shifted list can be told from (DG115). SpecForge's DSpark for Qwen3.6-27B uses [2, 17, ...]
# on purpose.
ZLAB_DEFAULT_IDS = ("DFlashDraftModel", "DFlash2DraftModel")
# The architectures whose MTP layer draftguard accept's reference builds, each -> its layout in
# runner/mtp_weights.py's LAYOUTS: the one list of what the reference builds (the light check and the GPU
# path read it here, without torch). A new family is one line here and one LAYOUTS entry.
MTP_REFERENCE_LAYOUTS = {
    "MiMoForCausalLM": "mimo",
    # DeepSeek-V3's MTP layer, MoE or dense, its block-FP8 weights under a declared quantization_config
    # dequantized (runner/mtp_dsv3.py), as every released DeepSeek-V3/R1 checkpoint ships it.
    "DeepseekV3ForCausalLM": "deepseek_v3",
    # DeepSeek-V3.2 and GLM-5: DeepSeek-V3's layer with sparse attention (the indexer; runner/mtp_dsa.py).
    "DeepseekV32ForCausalLM": "deepseek_v32",
    "GlmMoeDsaForCausalLM": "glm_moe_dsa",
    # Released Qwen3.5/3.6 checkpoints are multimodal exports (``text_config`` beside ``vision_config``, the
    # text model's tensors under ``model.language_model.``); their MTP layer is the text class's (``mtp.*``,
    # vLLM 0.32's Qwen3_5MTP / Qwen3_5MoeMTP for all four). The reference runs the text model only
    # (runner/mtp_model.py's ``load_mtp_target``), as the drafting never reads an image.
    "Qwen3_5ForCausalLM": "qwen3_5",
    "Qwen3_5MoeForCausalLM": "qwen3_5",
    "Qwen3_5ForConditionalGeneration": "qwen3_5",
    "Qwen3_5MoeForConditionalGeneration": "qwen3_5",
    "Qwen3NextForCausalLM": "qwen3_next",
    # GLM-4.5/4.6/4.7: DeepSeek-V3's names with their own decoder layer.
    "Glm4MoeForCausalLM": "glm4_moe",
    # MiMo-V2-Flash states no MTP key: vLLM 0.32 builds its MTP layers by architecture (MTP_BY_ARCHITECTURE).
    "MiMoV2FlashForCausalLM": "mimo_v2_flash",
    # MiMo-V2-Pro / MiMo-V2.5-Pro and the omni export (MiMo-V2.5; vLLM's MiMoV2OmniForCausalLM): Flash's MTP
    # layer, 1 by architecture in vLLM 0.32 as Flash's; the fused qkv_proj, the Pro's geometry and the omni
    # export's text model in runner/mtp_mimo2.py.
    "MiMoV2ForCausalLM": "mimo_v2",
    "MiMoV2OmniForCausalLM": "mimo_v2",
    # ERNIE-4.5 MoE (vLLM 0.32 serves the MoE class's MTP layer only).
    "Ernie4_5_MoeForCausalLM": "ernie4_5_moe",
    # GLM-4.7-Flash (the same names, an MLA layer) and GLM-4.5V/4.6V's exports (GLM-4.5's layer under
    # ``model.language_model.``).
    "Glm4MoeLiteForCausalLM": "glm4_moe_lite",
    "Glm4vMoeForConditionalGeneration": "glm4v_moe",
    # GLM-OCR's export: a dense GLM-4 text model, its MTP layer GLM-4.5V's names (runner/mtp_glm_ocr.py).
    "GlmOcrForConditionalGeneration": "glm_ocr",
    # EXAONE-MoE / K-EXAONE and EXAONE-4.5 (its multimodal export): Qwen3.5's names (``mtp.*``), own layers.
    "ExaoneMoeForCausalLM": "exaone_moe",
    "Exaone4_5_ForConditionalGeneration": "exaone4_5",
    "LongcatFlashForCausalLM": "longcat_flash",
    "NemotronHForCausalLM": "nemotron_h",
    # Step-3.5/3.7 (3.7's MTP key under text_config): runner/mtp_step.py.
    "Step3p5ForCausalLM": "step3p5",
    "Step3p7ForConditionalGeneration": "step3p5",
    # Tencent HY-V3 / Hy3: DeepSeek-V3's names at N, a final_layernorm, the target's head (runner/mtp_hyv3.py).
    "HYV3ForCausalLM": "hy_v3",
    # Tencent HY-V4: HY-V3's names, vLLM's own MLA + iHC target, dense attention only (runner/mtp_hyv4.py).
    "HYV4ForCausalLM": "hy_v4",
    # dots3 (Dots3Note): vLLM 0.32 drafts for it by model_type dots3_note (runner/mtp_dots3.py).
    "Dots3NoteForCausalLM": "dots3_note",
    # Ling-3.0 / Ring-3.0 (model_type bailing_hybrid, which Ling-2.5 shares: by architecture only).
    "BailingMoeV3ForCausalLM": "bailing_moe_v3",
}
# model_type where no architecture is named: the multimodal export's and its text config's.
MTP_LAYOUT_MODEL_TYPES = {
    "qwen3_5_text": "qwen3_5",
    "qwen3_5_moe": "qwen3_5",
    "qwen3_5_moe_text": "qwen3_5",
    "step3p7": "step3p5",
    "exaone4_5_vision": "exaone4_5",  # vLLM 0.32 drafts for either EXAONE-4.5 model_type
    "dots3_note": "dots3_note",
}
MTP_REFERENCE_ARCHITECTURES = tuple(MTP_REFERENCE_LAYOUTS)
# Architectures whose MTP layer count is the engine's, not the config's: vLLM 0.32's
# ``config/speculative.py`` sets n_predict from ``_MIMO_V2_FLASH_NUM_MTP_LAYERS`` (1) in mimo_v2_mtp.py,
# the checkpoint's config.json naming no MTP key. ``mtp_declared`` reports it under the key "architectures".
# LongCat-Flash (LongcatFlashForCausalLM): n_predict is ``num_nextn_predict_layers``, 1 where the file states
# none (``getattr(hf_config, "num_nextn_predict_layers", 1)``); its released config.json states none.
MTP_BY_ARCHITECTURE = {"MiMoV2FlashForCausalLM": 1, "MiMoV2ForCausalLM": 1, "MiMoV2OmniForCausalLM": 1,
                       "LongcatFlashForCausalLM": 1}
# MTP drafters shipped as their own checkpoint beside the target: Gemma 4's assistant, which vLLM 0.32
# serves with method mtp and the assistant as the speculative model (config rewritten to gemma4_mtp). The
# reference runs it (runner/mtp_gemma4.py) with --drafter <assistant> --target <the Gemma 4 model>.
MTP_ASSISTANT_TYPES = ("gemma4_assistant", "gemma4_unified_assistant")
MTP_ASSISTANT_ARCHITECTURES = ("Gemma4AssistantForCausalLM",)
# MiniMax writes num_mtp_modules (M2, with use_mtp and mtp_transformer_layers); M3 under text_config.
MTP_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers", "num_mtp_modules")
MEDUSA_KEYS = ("medusa_num_heads", "num_heads")
# DFlash relatives the acceptance backends do not run, by the label detection gives them (see
# DrafterFormat.acceptance_testable): DFlash2's candidate heads, DSpark, Domino, DFlare.
UNTESTABLE_DFLASH = frozenset({"z-lab DFlash2", "DSpark", "Domino", "DFlare"})

# What a user is told when --target names a pair but the checked file is none of these.
RECOGNISED_FORMATS = (
    "z-lab DFlash / DFlash2 (DFlashDraftModel, DFlash2DraftModel or a dflash_config)",
    "speculators (speculators_model_type with transformer_layer_config)",
    "EAGLE-3 (an *Eagle3* architecture, draft_vocab_size or eagle_aux_hidden_state_layer_ids)",
    "EAGLE 1/2 (an Eagle architecture, model_type eagle, or a one-layer head of the target's width)",
    "MTP heads declared by a model (num_nextn_predict_layers, mtp_num_hidden_layers, num_mtp_modules)",
    "MTP assistants (Gemma 4's: model_type gemma4_assistant)",
    "Medusa heads (medusa_num_heads, or vLLM's model_type medusa with num_heads)",
)


@dataclass(frozen=True)
class Stated:
    """A value as config.json states it, with its dotted key."""

    key: str
    value: Any


@dataclass
class DrafterFormat:
    """What ``detect_drafter`` found: the format and every key the rules read.

    ``family`` picks the rules: "dflash", "eagle3", "eagle" (EAGLE 1/2) or "mtp". ``kind`` is the
    exact format ("dflash", "speculators-eagle3", ...) and ``label`` how messages name it."""

    kind: str
    family: str
    label: str
    layer_prefix: str = ""  # where the decoder layers' config lives: "" or "transformer_layer_config."
    target_ids: list[Stated] = field(default_factory=list)  # target layer ids, [0, N)
    aux_ids: list[Stated] = field(default_factory=list)  # hidden-state indices, id + 1, [1, N]
    block_sizes: list[Stated] = field(default_factory=list)
    mask_tokens: list[Stated] = field(default_factory=list)
    num_target_layers: Stated | None = None
    target_hidden: Stated | None = None
    verifier: str | None = None
    architecture: str | None = None
    eagle3_refusal: str | None = None  # why the reference's EAGLE-3 head cannot be built (``_eagle3_refusal``)

    @property
    def is_dflash(self) -> bool:
        return self.family == "dflash"

    @property
    def acceptance_testable(self) -> bool:
        """Whether ``draftguard accept`` runs this drafter: DFlash (z-lab's, with or without its
        architecture name, and the speculators form) and EAGLE-3 heads in the layout its reference
        backend builds (``acceptance_refusal`` says why any other is not). The bot and the Action
        both ask this, so they agree on which drafters get a GPU test.

        Example::

            >>> [detect_drafter(c).acceptance_testable for c in ({"dflash_config": {}},
            ...     {"architectures": ["DFlash2DraftModel"]}, {"architectures": ["Qwen3DSparkModel"]},
            ...     {"architectures": ["LlamaForCausalLMEagle3"]}, {"architectures": ["EagleLlamaForCausalLM"]})]
            [True, False, False, True, False]
        """
        return self.acceptance_refusal is None

    @property
    def acceptance_refusal(self) -> str | None:
        """Why ``draftguard accept`` does not run this drafter, in a sentence the bot's comment and
        the Action's summary show; None when it does. DFlash2's candidate heads, DSpark, Domino and
        DFlare draft otherwise than DFlash's block; EAGLE 1/2, Medusa and MTP heads are not run; an
        EAGLE-3 head runs when it is the one-layer LLaMA head that SpecForge, the EAGLE authors and
        AngelSlim publish (``midlayer.*`` weights) or the speculators library does (``layers.0.*``,
        read as vLLM's speculators adapter reads its config) (``runner/eagle3_model.py``).

        Example::

            >>> detect_drafter({"architectures": ["EagleLlamaForCausalLM"]}).acceptance_refusal
            'EAGLE 1/2 heads are not run: draftguard accept runs DFlash block drafters and EAGLE-3 heads'
        """
        if self.family == "dflash":
            if self.kind in ("dflash", "speculators-dflash") and self.label not in UNTESTABLE_DFLASH:
                return None
            return (f"{self.label} drafters are not run: draftguard accept runs DFlash's block drafting, "
                    "which DFlash2's candidate heads, DSpark, Domino and DFlare do not follow")
        if self.family == "eagle3":
            return self.eagle3_refusal
        if self.family == "mtp" and self.architecture in MTP_REFERENCE_ARCHITECTURES:
            return None  # the model's own MTP layer, run as its own target (runner/mtp_model.py)
        if self.kind == "mtp-assistant":
            return None  # Gemma 4's assistant beside its target (runner/mtp_gemma4.py)
        return {
            "eagle": "EAGLE 1/2 heads are not run: draftguard accept runs DFlash block drafters and EAGLE-3 heads",
            "mtp": (f"MTP heads are not run for {self.architecture or 'this architecture'}: draftguard accept's "
                    f"reference builds the MTP layers of {', '.join(MTP_REFERENCE_ARCHITECTURES)} only, so it has no "
                    "MTP drafting of its own to judge vLLM's against (docs/acceptance.md)"),
            "medusa": "Medusa heads are not run: draftguard accept runs DFlash block drafters and EAGLE-3 heads",
        }.get(self.family, f"{self.label} drafters are not run by draftguard accept")
    @property
    def article(self) -> str:
        """"a" or "an" before the label: "an EAGLE-3 drafter", "a z-lab DFlash drafter"."""
        return "an" if self.label[:1].upper() in "AEIOU" or self.label.startswith(("MTP", "SGL")) else "a"


def get_key(raw: dict[str, Any], key: str) -> Any:
    """The value at a dotted key of a config dict, or None.

    Example::

        >>> get_key({"dflash_config": {"mask_token_id": 9}}, "dflash_config.mask_token_id")
        9
    """
    node: Any = raw
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def stated(raw: dict[str, Any], keys: tuple[str, ...]) -> list[Stated]:
    """Each of ``keys`` that config.json states (not null), in order."""
    return [Stated(k, get_key(raw, k)) for k in keys if get_key(raw, k) is not None]


def _first(raw: dict[str, Any], keys: tuple[str, ...]) -> Stated | None:
    return next(iter(stated(raw, keys)), None)


def _architectures(raw: dict[str, Any]) -> list[str]:
    archs = raw.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def detect_drafter(raw: dict[str, Any], *, target_hidden_size: int | None = None) -> DrafterFormat | None:
    """Recognise a drafter's config.json; None when it is not one.

    ``target_hidden_size`` (given when a target is named) also recognises EAGLE 1/2 heads that are
    plain one-layer decoders of the target's width, which nothing else in their config marks.

    Example::

        >>> fmt = detect_drafter({"architectures": ["DFlashDraftModel"], "block_size": 16,
        ...                       "dflash_config": {"target_layer_ids": [1, 5], "mask_token_id": 9}})
        >>> fmt.kind, [s.key for s in fmt.target_ids], fmt.block_sizes[0].value
        ('dflash', ['dflash_config.target_layer_ids'], 16)
        >>> detect_drafter({"architectures": ["LlamaForCausalLMEagle3"], "draft_vocab_size": 32000}).label
        'EAGLE-3'
    """
    if not isinstance(raw, dict):
        return None
    archs = _architectures(raw)
    spec_type = raw.get("speculators_model_type")
    if isinstance(spec_type, str) and isinstance(raw.get(LAYER_CONFIG_KEY), dict):
        return _speculators(raw, spec_type, archs)
    dflash_arch = next((a for a in archs if a in DFLASH_ARCHITECTURES or _dflash_marker(a)), None)
    zlab_flat = all(raw.get(k) is not None for k in ("target_layer_ids", "mask_token_id", "block_size"))
    if dflash_arch or any(isinstance(raw.get(k), dict) for k in ("dflash_config", "dflare_config")) or zlab_flat:
        return _dflash(raw, dflash_arch or (archs[0] if archs else None))
    eagle3_arch = next((a for a in archs if "eagle3" in a.lower() or "peagle" in a.lower()), None)
    aux = stated(raw, ("eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids"))
    if eagle3_arch or aux or raw.get("draft_vocab_size") is not None:
        label = "P-EAGLE" if eagle3_arch and "peagle" in eagle3_arch.lower() else "EAGLE-3"
        fmt = DrafterFormat(kind="eagle3", family="eagle3", label=label, aux_ids=aux, architecture=eagle3_arch)
        fmt.eagle3_refusal = _eagle3_refusal(raw, label, eagle3_arch)
        fmt.target_hidden = _first(raw, ("target_hidden_size",))
        # DeepSpec's Qwen3Eagle3Model states 0-based `target_layer_ids` (any number) and the target's depth.
        fmt.target_ids = stated(raw, ("target_layer_ids",))
        if fmt.target_ids:
            fmt.num_target_layers = _first(raw, ("target_num_hidden_layers", "num_target_layers"))
        return fmt
    medusa = _first(raw, MEDUSA_KEYS) if raw.get("model_type") == "medusa" else _first(raw, MEDUSA_KEYS[:1])
    if medusa is not None:
        return DrafterFormat(kind="medusa", family="medusa", label="Medusa", architecture=archs[0] if archs else None)
    eagle_arch = next((a for a in archs if "eagle" in a.lower()), None)
    one_layer_head = (target_hidden_size is not None and raw.get("num_hidden_layers") == 1
                      and raw.get("hidden_size") == target_hidden_size)
    if eagle_arch or raw.get("model_type") == "eagle" or one_layer_head:
        return DrafterFormat(kind="eagle", family="eagle", label="EAGLE 1/2", architecture=eagle_arch)
    if is_mtp_assistant(raw):
        return DrafterFormat(kind="mtp-assistant", family="mtp", label="Gemma 4 MTP assistant",
                             architecture=archs[0] if archs else MTP_ASSISTANT_ARCHITECTURES[0])
    mtp = _first(raw, MTP_KEYS) or _first(raw, tuple(f"text_config.{k}" for k in MTP_KEYS))
    if mtp is None and archs and archs[0] in MTP_BY_ARCHITECTURE:  # no key: the engine's count for the class
        mtp = Stated("architectures", MTP_BY_ARCHITECTURE[archs[0]])
    if mtp is not None and _is_int(mtp.value) and mtp.value > 0:
        return DrafterFormat(kind="mtp", family="mtp", label="MTP", num_target_layers=mtp,
                             architecture=archs[0] if archs else None)
    return None


def is_mtp_assistant(raw: dict[str, Any]) -> bool:
    """Whether a config.json is an MTP drafter shipped as its own checkpoint (Gemma 4's assistant).

    Example::

        >>> is_mtp_assistant({"model_type": "gemma4_assistant"}), is_mtp_assistant({"model_type": "gemma4"})
        (True, False)
    """
    archs = _architectures(raw)
    return raw.get("model_type") in MTP_ASSISTANT_TYPES or any(a in MTP_ASSISTANT_ARCHITECTURES for a in archs)


def _speculators(raw: dict[str, Any], spec_type: str, archs: list[str]) -> DrafterFormat:
    family = "dflash" if spec_type in ("dflash", "dspark", "dflare") else "eagle3"
    fmt = DrafterFormat(kind=f"speculators-{spec_type}", family=family, label=f"speculators {spec_type}",
                        layer_prefix=LAYER_CONFIG_KEY + ".", architecture=archs[0] if archs else None)
    fmt.aux_ids = stated(raw, ("aux_hidden_state_layer_ids", "eagle_aux_hidden_state_layer_ids"))
    fmt.target_ids = stated(raw, ("dflash_config.target_layer_ids", "target_layer_ids"))
    fmt.block_sizes = stated(raw, ("block_size", "dflash_config.block_size", f"{LAYER_CONFIG_KEY}.block_size"))
    fmt.mask_tokens = stated(raw, ("mask_token_id", "dflash_config.mask_token_id"))
    fmt.num_target_layers = _first(raw, ("num_target_layers",))
    fmt.target_hidden = _first(raw, ("target_hidden_size",))
    verifier = get_key(raw, "speculators_config.verifier.name_or_path")
    fmt.verifier = verifier if isinstance(verifier, str) and verifier else None
    if family == "eagle3":
        fmt.eagle3_refusal = _speculators_eagle3_refusal(raw, spec_type)
    return fmt


# vLLM 0.32's speculators eagle3 adapter builds the head's class from the layer's model_type
# (``transformers_utils/configs/speculators/algos.py``) and refuses any other.
SPECULATORS_EAGLE3_ARCHITECTURES = {"llama": "Eagle3LlamaForCausalLM", "qwen3": "Eagle3Qwen3ForCausalLM"}


def _speculators_eagle3_refusal(raw: dict[str, Any], spec_type: str) -> str | None:
    """Why the reference does not build a speculators-format head, or None: the config vLLM builds from
    the file (``transformer_layer_config`` with the top level's norm options, defaulting as vLLM's
    adapter does) judged as a plain EAGLE-3 head's (``_eagle3_refusal``). Its ``layers.0.*`` weights
    load as ``midlayer.*`` (``runner/eagle3_model.py``)."""
    if spec_type == "peagle":
        return _eagle3_refusal(raw, "P-EAGLE", None)
    if spec_type != "eagle3":
        return (f"speculators {spec_type} heads are not run: draftguard accept runs DFlash block drafters and "
                "EAGLE-3 heads")
    layer = dict(raw.get(LAYER_CONFIG_KEY) or {})
    model_type = layer.get("model_type", "llama")
    arch = SPECULATORS_EAGLE3_ARCHITECTURES.get(model_type)
    if arch is None:
        return (f"a speculators eagle3 head of model_type {model_type!r}, which vLLM also refuses (it builds "
                "llama and qwen3 heads only)")
    for key in SPECULATORS_NORM_OPTIONS:
        layer[key] = raw.get(key, False)
    layer.pop("eagle_config", None)
    return _eagle3_refusal(layer, "EAGLE-3", arch)


# The norm options vLLM's speculators adapter copies from the top level, false unless stated; the
# reference head builds each (``runner/eagle3_model.py``).
SPECULATORS_NORM_OPTIONS = ("norm_before_fc", "fc_norm", "norm_output")
# The architectures vLLM builds as llama_eagle3's one LLaMA layer, whatever model_type the file copied
# from its target (SpecForge's phi4 and QwQ heads say phi3 and qwen2): the head the reference builds.
LLAMA_EAGLE3_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM")
# And those vLLM builds as qwen3_eagle3's Qwen3 layer (q/k norms), which the reference builds too; vLLM's
# EAGLEConfig names a plain ``Qwen3ForCausalLM`` head Eagle3Qwen3ForCausalLM.
QWEN3_EAGLE3_ARCHITECTURES = ("Eagle3Qwen3ForCausalLM", "Qwen3ForCausalLM")
# And those vLLM builds as deepseek_eagle3's DeepSeek layer (MLA attention over 2 x hidden, a dense MLP),
# which the reference builds too (``runner/eagle3_mla.py``); a plain DeepseekV2/V3ForCausalLM head is renamed so.
MLA_EAGLE3_ARCHITECTURES = ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")
MLA_MODEL_TYPES = ("deepseek_v2", "kimi_k2")
# Draft model_types vLLM 0.32 reads as DeepSeek's MTP model whatever the method (SpeculativeConfig.hf_config_override
# sets architectures to DeepSeekMTPModel), so an EAGLE-3 head of one cannot start ("Model architectures
# ['Eagle3DeepSeekMTPModel'] are not supported"); Kimi's kimi_k2 (DeepseekV3Config) is not rewritten.
VLLM_MTP_DRAFT_TYPES = ("deepseek_v3", "deepseek_v32", "glm_moe_dsa")


def mtp_model_type_refusal(model_type: Any) -> str | None:
    """Why vLLM 0.32 cannot start an EAGLE-3 head of this ``model_type``, or None."""
    if model_type not in VLLM_MTP_DRAFT_TYPES:
        return None
    return (f"its model_type {model_type!r} makes vLLM 0.32 read the head as DeepSeek's MTP model (it rewrites the "
            "architectures of a draft of that model_type to DeepSeekMTPModel), so vLLM cannot start it as an EAGLE-3 "
            "head (Eagle3DeepSeekMTPModel is not supported); deepseek_v2 or kimi_k2 (TorchSpec's Kimi heads) run")
# RoPE the reference head builds: plain RoPE (an mrope section is plain RoPE on text-only prompts) and the
# scaled kinds whose tables transformers computes as vLLM does (``runner/eagle3_layer.py``).
PLAIN_ROPE = (None, "default", "mrope")
DEEPSEEK_ROPE = ("deepseek_yarn", "deepseek_llama_scaling")  # vLLM's DeepseekScalingRotaryEmbedding
SCALED_ROPE = ("linear", "dynamic", "yarn", "llama3", "longrope", "su", "ntk") + DEEPSEEK_ROPE


def _eagle3_refusal(raw: dict[str, Any], label: str, arch: str | None) -> str | None:
    """Why the reference backend's EAGLE-3 head (one LLaMA decoder layer, plain RoPE,
    ``runner/eagle3_model.py``) cannot be built from this config, or None. Read from the config alone,
    as the bot decides before it fetches any weights: a head whose weights then do not fit is refused
    by the run (exit 2, its reason in the comment)."""
    if label == "P-EAGLE":
        return "P-EAGLE heads draft in parallel; draftguard accept runs EAGLE-3's chain drafting only"
    model_type = raw.get("model_type", "llama")
    if mtp_model_type_refusal(model_type):
        return mtp_model_type_refusal(model_type)
    built = LLAMA_EAGLE3_ARCHITECTURES + QWEN3_EAGLE3_ARCHITECTURES + MLA_EAGLE3_ARCHITECTURES
    if arch not in built and (arch is not None or model_type not in ("llama", "qwen3") + MLA_MODEL_TYPES):
        return (f"an EAGLE-3 head with a {arch or model_type} decoder layer (model_type {model_type!r}); "
                "draftguard accept builds the LLaMA, Qwen3 and DeepSeek MLA layers vLLM builds for EAGLE-3 heads "
                "only")
    if (arch in MLA_EAGLE3_ARCHITECTURES or (arch is None and model_type in MLA_MODEL_TYPES)) \
            and "q_lora_rank" in raw and raw["q_lora_rank"] is None:
        return ("a DeepSeek MLA EAGLE-3 head without a q LoRA (q_lora_rank null), which vLLM 0.32 refuses at load (its "
                "loader maps kv_a_proj_with_mqa into fused_qkv_a_proj, which such a layer lacks)")
    layer_count = raw.get("num_hidden_layers", 1)
    if layer_count != 1:
        return (f"an EAGLE-3 head of {layer_count} decoder layers; draftguard accept builds EAGLE-3's "
                "one-layer head only")
    rope = raw.get("rope_parameters") or raw.get("rope_scaling")
    rope_type = (rope.get("rope_type") or rope.get("type")) if isinstance(rope, dict) else None
    if rope_type not in PLAIN_ROPE + SCALED_ROPE or (isinstance(rope, dict) and rope.get("use_fope")):
        return (f"its RoPE is {'Fourier (use_fope)' if rope_type in PLAIN_ROPE else rope_type}, and draftguard "
                f"accept's reference head builds plain RoPE and {', '.join(SCALED_ROPE)} scaling only, so its τ "
                "would not be the head's")
    return None


def _dflash_marker(arch: str) -> str | None:
    """The family label an architecture name carries ("Qwen3DSparkModel" -> "DSpark"), or None."""
    return next((label for marker, label in DFLASH_MARKERS if marker in arch.lower()), None)


def _dflash(raw: dict[str, Any], arch: str | None) -> DrafterFormat:
    label = DFLASH_ARCHITECTURES.get(arch or "") or (_dflash_marker(arch) if arch else None)
    if label is None:
        label = "DFlare" if isinstance(raw.get("dflare_config"), dict) else "z-lab DFlash"
    fmt = DrafterFormat(kind="dflash", family="dflash", label=label, architecture=arch)
    fmt.target_ids = stated(raw, ("dflash_config.target_layer_ids", "dflare_config.target_layer_ids",
                                  "target_layer_ids", "dspark_target_layer_ids"))
    fmt.aux_ids = stated(raw, ("eagle_aux_hidden_state_layer_ids", "aux_hidden_state_layer_ids"))
    fmt.block_sizes = stated(raw, ("block_size", "dflash_config.block_size"))
    fmt.mask_tokens = stated(raw, ("dflash_config.mask_token_id", "dflare_config.mask_token_id", "mask_token_id",
                                   "dspark_noise_token_id"))
    # TorchSpec writes the target's depth as target_num_hidden_layers and the number of ids read as
    # num_target_layers; z-lab and SpecForge write the depth as num_target_layers.
    fmt.num_target_layers = _first(raw, ("target_num_hidden_layers", "num_target_layers"))
    fmt.target_hidden = _first(raw, ("target_hidden_size",))
    return fmt


def layer_config(raw: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The part of a config.json that a transformers config class resolves, and its key prefix.

    The speculators format keeps the decoder layers' config in ``transformer_layer_config``, under
    a top-level ``model_type`` that transformers does not know; the layers default to Qwen3 (DFlash)
    or LLaMA (EAGLE-3), as in the speculators library.

    Example::

        >>> layer_config({"speculators_model_type": "dflash", "transformer_layer_config": {"hidden_size": 8}})
        ({'hidden_size': 8, 'model_type': 'qwen3'}, 'transformer_layer_config.')
    """
    fmt = detect_drafter(raw)
    if fmt is None or not fmt.layer_prefix:
        return raw, ""
    layers = dict(raw[LAYER_CONFIG_KEY])
    if "model_type" not in layers:
        layers["model_type"] = "llama" if fmt.family == "eagle3" else "qwen3"
    return layers, fmt.layer_prefix
