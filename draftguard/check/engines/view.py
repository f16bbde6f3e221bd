"""What one engine serves for one config: the shape both tiers fill, so that rules and tests compare
them field by field.

In: values from either tier: the light tier's rules (``check.engines.light``) or the real engine's
answer (``check.engines.real``, a JSON object per config).
Out: ``EngineView`` (``to_json``, ``from_json``) and ``windows_from_attention`` (transformers' per-layer
windows from a ``TargetResult``'s attention rows). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

LIGHT, ENGINE = "light", "engine"  # which tier made a view


@dataclass
class EngineView:
    """One engine version's view of one config (a target, or a drafter with its target), for one
    model runner where runners differ (vLLM's V1 and V2; "" when they agree or do not apply)."""

    engine: str  # "vLLM 0.32.0"
    transformers: str  # the transformers version the view is for
    tier: str  # LIGHT or ENGINE
    runner: str = ""
    architecture: str | None = None  # the architecture the engine builds
    max_model_len: int | None = None
    max_len_why: str = ""
    dtype: str | None = None  # "bfloat16", "float16", ... None: decided at load from the weights
    dtype_why: str = ""
    head_size: int | None = None  # the attention head size the engine sizes its KV cache by
    num_kv_heads: int | None = None
    windows: list[int | None] | None = None  # per layer: the window it runs, None for full attention
    windows_why: str = ""
    # A drafter: the 0-based target layers it is fed, and whether the last one is before the final norm.
    layers_read: list[int] | None = None
    layers_why: str = ""
    refusal: str | None = None  # the engine's own words when it will not serve this
    refusal_where: str = ""  # where in the engine's code, or how it fails when it says nothing
    notes: list[str] = field(default_factory=list)
    # A light view standing in for a real engine that ran and failed on this config: what it said.
    fallback: str = ""

    @property
    def who(self) -> str:
        """"vLLM 0.32.0 (V2 runner, light tier, transformers 5.19.0)"."""
        runner = f"{self.runner} runner{'s' if ' and ' in self.runner else ''}, " if self.runner else ""
        instead = f"; {self.fallback}" if self.fallback else ""
        return f"{self.engine} ({runner}{self.tier} tier, transformers {self.transformers}{instead})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EngineView":
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def text_values(values: dict[str, Any]) -> dict[str, Any]:
    """The decoder's values: the top level, or a multimodal model's ``text_config`` (the engines read
    ``hf_text_config``, transformers' ``get_text_config()``), with the top level's architectures and
    model_type kept for lookups. The text config wins even where the top level keeps decoder keys of
    its own: Qwen2.5-VL's class keeps a file's top-level ``sliding_window`` 32768 while its
    ``text_config``, the one vLLM reads, has none (allenai/olmOCR-2-7B-1025)."""
    text = values.get("text_config")
    if (isinstance(text, dict) and isinstance(text.get("values"), dict)
            and ("num_hidden_layers" not in values or "num_hidden_layers" in text["values"])):
        return {**text["values"], "architectures": values.get("architectures"),
                "model_type": values.get("model_type"), "text_model_type": text["values"].get("model_type")}
    return values


_SLIDING = re.compile(r"^sliding\((\d+)\)$")


def windows_from_attention(rows: list[Any]) -> tuple[list[int | None], list[int | None]]:
    """Declared and effective per-layer windows (None: full) from ``LayerAttention`` rows.

    Example::

        >>> from draftguard.check.findings import LayerAttention
        >>> windows_from_attention([LayerAttention(0, "sliding(8)", "full"), LayerAttention(1, "full", "full")])
        ([8, None], [None, None])
    """
    def window(text: str) -> int | None:
        match = _SLIDING.match(text)
        return int(match.group(1)) if match else None

    return [window(r.declared) for r in rows], [window(r.effective) for r in rows]


def transformers_windows(result: Any) -> list[int | None]:
    """The window each layer runs in transformers: the attention rows where the class has
    ``layer_types``, else the model-level ``sliding_window`` on every layer (Mistral, Phi-3, StarCoder2
    apply it to all layers), else full attention.

    Example::

        >>> from types import SimpleNamespace
        >>> transformers_windows(SimpleNamespace(attention=[], values={"sliding_window": 8, "num_hidden_layers": 2}))
        [8, 8]
    """
    if result.attention:
        return windows_from_attention(result.attention)[1]
    values = text_values(result.values or {})
    count, window = values.get("num_hidden_layers"), values.get("sliding_window")
    types = values.get("layer_types")
    if isinstance(types, list) and types and isinstance(window, int) and not isinstance(window, bool):
        return [window if t == "sliding_attention" else None for t in types if "attention" in str(t)
                and not str(t).startswith(("linear", "mamba"))]
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return []
    usable = isinstance(window, int) and not isinstance(window, bool) and values.get("use_sliding_window") is not False
    return [window if usable else None] * count
