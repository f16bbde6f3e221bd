"""Keys a config class keeps but its model code never reads: transformers' Llama keeps a file's
``sliding_window`` as an attribute, and modeling_llama.py never looks at it (every layer runs full
causal attention, logits identical with and without the key), while vLLM reads the key by name and
slides every layer.

Judged by mechanism, on the installed transformers' own sources: the model code of a config class is
the ``modeling_*`` module beside its ``configuration_*`` module, plus the sibling modeling modules it
imports from (``from ..llama.modeling_llama import ...``); a key is unread when no such source names
it. The sources are read as text, never imported (importing them imports torch).

In: a config class and the raw dict.
Out: ``unread_by_model_code`` -> the keys of ``KEYS`` the file
sets that the model code never reads; an empty list where the code cannot be found (remote code that
is not on disk, a class outside transformers): unknown is never reported as unread.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

# Keys that change what an engine runs when it reads them by name (vLLM's
# ModelConfig.get_sliding_window reads sliding_window for every architecture).
KEYS = ("sliding_window",)

_SIBLING = re.compile(r"^\s*from\s+\.\.(\w+)\.(modeling_\w+)\s+import", re.MULTILINE)
_SOURCES: dict[str, str | None] = {}


def _module_file(name: str) -> Path | None:
    """The file of module ``name`` without importing it (its packages may be imported: transformers'
    are lazy and import no torch)."""
    module = sys.modules.get(name)
    origin = getattr(module, "__file__", None) if module is not None else None
    if origin is None:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError, AttributeError):
            return None
        origin = spec.origin if spec is not None else None
    if not origin or not origin.endswith(".py"):
        return None
    return Path(origin)


def _model_code(config_module: str) -> str | None:
    """The text of the modeling module beside ``config_module`` and of the sibling modeling modules
    it imports from; None where there is none."""
    if config_module in _SOURCES:
        return _SOURCES[config_module]
    package, _, leaf = config_module.rpartition(".")
    text: str | None = None
    if package and leaf.startswith("configuration_"):
        path = _module_file(f"{package}.modeling_{leaf[len('configuration_'):]}")
        if path is not None and path.is_file():
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = None
            if text is not None:
                models = package.rpartition(".")[0]
                for folder, module in set(_SIBLING.findall(text)):
                    sibling = _module_file(f"{models}.{folder}.{module}") if models else None
                    if sibling is not None and sibling.is_file():
                        try:
                            text += "\n" + sibling.read_text(encoding="utf-8", errors="replace")
                        except OSError:
                            pass
    _SOURCES[config_module] = text
    return text


def unread_by_model_code(cls: type, raw: dict[str, Any]) -> list[str]:
    """The keys of ``KEYS`` that ``raw`` sets and the model code of ``cls`` never names.

    Example::

        >>> from transformers import LlamaConfig, MistralConfig
        >>> unread_by_model_code(LlamaConfig, {"sliding_window": 4096})
        ['sliding_window']
        >>> unread_by_model_code(MistralConfig, {"sliding_window": 4096})
        []
    """
    wanted = [key for key in KEYS if key in raw]
    if not wanted:
        return []
    text = _model_code(getattr(cls, "__module__", "") or "")
    if text is None:
        return []
    return [key for key in wanted if not re.search(rf"\b{re.escape(key)}\b", text)]
