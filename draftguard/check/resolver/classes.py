"""Which transformers config class reads a config.json, and the resolver's one error.

In: a raw config.json dict (its ``model_type``, ``auto_map`` and ``architectures``).
Out: the config class (``config_class``), ``ResolveError`` when none applies (with a "did you mean"
from ``plausible_typos`` and the built-in class a remote-code file names, ``built_in_reader``), and
``hide_torch``, which keeps transformers from importing torch for a config check.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from .budget import unmetered

# Keys every PretrainedConfig carries for bookkeeping. They say nothing about the model.
BOOKKEEPING_KEYS = frozenset(
    {"transformers_version", "_name_or_path", "_commit_hash", "_attn_implementation_autoset"}
)

_HIDDEN_PACKAGES = ("torch", "torchvision", "torchaudio")


def hide_torch() -> bool:
    """Make transformers' availability probe miss torch, so a config check never imports it.

    transformers 5.x imports torch eagerly when ``importlib.util.find_spec("torch")`` finds it,
    which makes a config load about 2.8 times slower. ``find_spec`` answers None for a name whose
    ``sys.modules`` entry is None. Does nothing, and returns False, when torch is already imported.
    """
    if "torch" in sys.modules and sys.modules["torch"] is not None:
        return False
    for name in _HIDDEN_PACKAGES:
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    # transformers imported before this (to read its version, say) may have asked already and cached
    # "torch is there": its config modules would then import torch and fail ("import of torch
    # halted"). Its next answer must see the hidden torch.
    probe = getattr(sys.modules.get("transformers.utils.import_utils"), "is_torch_available", None)
    if probe is not None and hasattr(probe, "cache_clear"):
        probe.cache_clear()
    return True


def transformers_version() -> str:
    import transformers  # transformers: after hide_torch(), else it imports torch

    return transformers.__version__


class ResolveError(Exception):  # not errors.DraftguardError: this file runs without draftguard
    """The config could not be resolved. ``kind`` is one of: model_type_missing, model_type_unknown,
    remote_code_required, class_rejected."""

    def __init__(self, kind: str, message: str, key: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.key = key

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "message": str(self), "key": self.key}


def config_class_name(raw: dict[str, Any]) -> str:
    """The transformers config class that ``model_type`` selects, without importing it."""
    return config_class(raw, trust_remote_code=False).__name__


def config_class(raw: dict[str, Any], trust_remote_code: bool):
    with unmetered():  # importing transformers and the model's config module: the process's time, once
        # transformers: after hide_torch(), else it imports torch
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = raw.get("model_type")
    if model_type is None or model_type == "":
        raise ResolveError(
            "model_type_missing",
            "config.json has no `model_type`, so no transformers config class can be chosen. "
            "Add the model family, for example \"model_type\": \"qwen3\".",
            key="model_type",
        )
    if not isinstance(model_type, str):
        raise ResolveError(
            "class_rejected",
            f"`model_type` must be a string, got {type(model_type).__name__} {shown(model_type)}.",
            key="model_type",
        )
    try:
        with unmetered():
            return CONFIG_MAPPING[model_type]
    except KeyError:
        pass
    auto_map = raw.get("auto_map")
    if isinstance(auto_map, dict) and "AutoConfig" in auto_map and not trust_remote_code:
        built_in = built_in_reader(raw)
        raise ResolveError(
            "remote_code_required",
            f"model_type {shown(model_type)} is not built into transformers {transformers_version()}; the "
            f"repo ships its own config class ({shown(auto_map['AutoConfig'], quote=False)}). Pass --trust-remote-code "
            "to run it, only if you trust this repo's code." + (f" {built_in}" if built_in else ""),
            key="model_type",
        )
    close = plausible_typos(model_type, list(CONFIG_MAPPING.keys()))
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    built_in = built_in_reader(raw)
    if built_in:
        hint += " " + built_in
    raise ResolveError(
        "model_type_unknown",
        f"model_type {shown(model_type)} is unknown to transformers {transformers_version()}.{hint}",
        key="model_type",
    )


def _edits(a: str, b: str) -> int:
    """Damerau-Levenshtein distance (adjacent swaps count once): how many keystrokes apart."""
    rows = [list(range(len(b) + 1))]
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(rows[-1][j] + 1, row[j - 1] + 1, rows[-1][j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], rows[-2][j - 2] + 1)
        rows.append(row)
    return rows[-1][-1]


# A name longer than this is no typo of a model type (the longest transformers ships is about 30).
MAX_TYPO_CHARS = 100


def shown(value: Any, limit: int = 80, quote: bool = True) -> str:
    """``repr(value)`` (``str`` without ``quote``), cut to ``limit`` characters: a file's value quoted
    in a message stays one line.

    Example::

        >>> shown("q" * 1000)[:12], len(shown("q" * 1000)), shown("a.B", quote=False)
        ("'qqqqqqqqqqq", 80, 'a.B')
    """
    text = repr(value) if quote else str(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def plausible_typos(name: str, known: list[str]) -> list[str]:
    """Known model types that ``name`` could be a typo of: one or two keystrokes apart (one for short
    names), with the same version digits. Model types that differ in a digit or a word are other
    architectures: chatglm is not glm, internlm2 is not internlm3, mimo is not mimi.

    Example::

        >>> plausible_typos("qwen3moe", ["qwen3_moe", "qwen2_moe", "qwen3"])
        ['qwen3_moe']
        >>> plausible_typos("chatglm", ["glm", "glm4"])
        []
        >>> plausible_typos("qwen33", ["qwen3", "qwen2"])
        ['qwen3']
    """

    def bare(text: str) -> str:
        return re.sub(r"[-_\s]", "", text.lower())

    def undoubled(text: str) -> str:
        return re.sub(r"(.)\1+", r"\1", bare(text))

    if len(name) > MAX_TYPO_CHARS:
        return []  # no model type is this long; comparing it with each would cost time in its square
    digits, name_bare, name_undoubled, lower = re.findall(r"\d+", name), bare(name), undoubled(name), name.lower()
    found = []
    for k in known:
        if undoubled(k) == name_undoubled:  # separators, case or a doubled key: qwen3moe, Qwen3-MoE, qwen33
            found.append((0, k))
            continue
        if re.findall(r"\d+", k) != digits:
            continue
        if bare(k) == name_bare:
            found.append((0, k))
        elif len(name) >= 5 and abs(len(name) - len(k)) <= 1 and (d := _edits(lower, k.lower())) <= 1:
            found.append((d, k))  # one slip: lamma, qwne3 (lengths further apart are more than one edit)
    return [k for _, k in sorted(found)[:3]]


def _architecture_types() -> dict[str, str]:
    """Model class name -> model_type for every class transformers' auto mappings name, read from
    modeling_auto's source text (importing it costs seconds and may pull in torch)."""
    import transformers.models.auto as auto  # transformers: after hide_torch(), else it imports torch

    found: dict[str, str] = {}
    for folder in auto.__path__:
        try:
            text = (Path(folder) / "modeling_auto.py").read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for model_type, names in re.findall(r'\(\s*"([\w-]+)"\s*,\s*(\([^)]*\)|"\w+")\s*\)', text):
            for name in re.findall(r'"(\w+)"', names):
                found.setdefault(name, model_type)
    return found


def built_in_reader(raw: dict[str, Any]) -> str | None:
    """For a model type transformers does not know: the built-in class that its ``auto_map`` or
    ``architectures`` names (DeepSeek-V3-based remote-code models), and how to check with it."""
    # transformers: after hide_torch(), else it imports torch
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    by_config = {name: model_type for model_type, name in CONFIG_MAPPING_NAMES.items()}
    auto_map = raw.get("auto_map") if isinstance(raw.get("auto_map"), dict) else {}
    named = str(auto_map.get("AutoConfig", "")).rsplit(".", 1)[-1]
    if named in by_config:
        model_type, what = by_config[named], f"Its auto_map names {named}"
    else:
        architectures = raw.get("architectures") if isinstance(raw.get("architectures"), list) else []
        types = _architecture_types()
        hits = [(a, types[a]) for a in architectures if isinstance(a, str) and a in types]
        if not hits:
            return None
        what, model_type = f"Its architectures name {hits[0][0]}", hits[0][1]
    cls = CONFIG_MAPPING_NAMES.get(model_type, "?")
    return (
        f"{what}, a name transformers {transformers_version()} ships: the built-in {cls} (model_type "
        f"{model_type!r}) would read this file. To check the file with it, check a copy that says "
        f"\"model_type\": \"{model_type}\"."
    )
