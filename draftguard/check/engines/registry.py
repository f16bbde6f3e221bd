"""Which architectures an engine version serves at all: its model registry and what its Transformers
backend can build, read from the engine's own code by ``scripts/gen_engine_registry.py`` into
``data/<engine>-<version>.json`` (never written by hand; ``tests/test_engines_vllm.py`` checks the
shipped files equal the installed engines').

In: an ``EngineSpec`` and a raw config.json (a target or plain model; drafters are renamed by the
engines' speculative config and are not judged here).
Out: ``unserved`` -> (the engine's own refusal, where in its code) or None; ``data`` (the file's
contents, or None for a version without one). Reads only the shipped JSON.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from draftguard.check.engines.specs import EngineSpec

DATA = Path(__file__).resolve().parent / "data"
# vLLM's default launch does not run a config's own code; the refusal holds unless it is trusted.
REMOTE = " (the config's auto_map names its own code: only `--trust-remote-code` lets vLLM try it)"


@lru_cache(maxsize=None)
def data(name: str, version: str) -> dict[str, Any] | None:
    """The registry facts of one engine version (``vllm``, ``0.32.0``), or None where none is shipped."""
    path = DATA / f"{name}-{version}.json"
    if not path.is_file():
        return None
    loaded = json.loads(path.read_text())
    return {k: (frozenset(v) if isinstance(v, list) and k != "suffixes" else v) for k, v in loaded.items()}


def _archs(raw: dict[str, Any]) -> list[str]:
    archs = raw.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def _remote(raw: dict[str, Any], prefix: str) -> bool:
    auto_map = raw.get("auto_map")
    return isinstance(auto_map, dict) and any(str(k).startswith(prefix) for k in auto_map)


def _normalized(arch: str, facts: dict[str, Any]) -> bool:
    """vLLM's ``_normalize_arch``: an ``XForSequenceClassification`` is served by converting a
    registered ``XForCausalLM`` (the suffixes of ``vllm/config/model.py _SUFFIX_TO_DEFAULTS``)."""
    for suffix in facts.get("suffixes", ()):
        if arch.endswith(suffix):
            stem = arch[: -len(suffix)]
            return any(stem + other in facts["architectures"] for other in facts["suffixes"])
    return False


def unserved(spec: EngineSpec, raw: dict[str, Any]) -> tuple[str, str] | None:
    """The engine version's refusal of a config it has no model for, in its own words, and where it is
    raised; None where it serves it (or the rules cannot tell: remote code, no architectures).

    Example::

        >>> from draftguard.check.engines.specs import parse_engines
        >>> [vllm] = parse_engines("vllm==0.32.0")
        >>> unserved(vllm, {"model_type": "gpt_neo", "architectures": ["GPTNeoForCausalLM"]})[0]
        "Model architectures ['GPTNeoForCausalLM'] are not supported for now."
        >>> unserved(vllm, {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}) is None
        True
    """
    facts = data(spec.name, spec.version)
    archs = _archs(raw)
    if facts is None or not archs:
        return None
    if spec.name == "vllm":
        return _vllm(spec, raw, archs, facts)
    return _sglang(spec, archs, facts)


def _vllm(spec: EngineSpec, raw: dict[str, Any], archs: list[str], facts: dict[str, Any]) -> tuple[str, str] | None:
    model_type = raw.get("model_type")
    tf = facts.get("transformers")
    if (isinstance(model_type, str) and model_type not in facts["config_model_types"]
            and model_type not in facts["transformers_model_types"]):
        return (f"The checkpoint you are trying to load has model type `{model_type}` but Transformers does not "
                "recognize this architecture.",
                f"vllm/transformers_utils/config.py get_config: neither transformers {tf} (which vLLM "
                f"{spec.version} installs) nor vLLM's _CONFIG_REGISTRY has a config class for it, at configuration"
                + (REMOTE if _remote(raw, "AutoConfig") else ""))
    if any(a in facts["architectures"] or _normalized(a, facts) for a in archs):
        return None
    first = archs[0]
    where = (f"vllm/model_executor/models/registry.py inspect_model_cls: not in vLLM {spec.version}'s registry")
    if first in facts["transformers_classes"]:
        if first in facts["no_attention_backend"] and first in facts["cannot_set_attn_implementation"]:
            return (f"Model architectures {archs} are not supported for now.",
                    f"{where}, and transformers {tf}'s {first} cannot run under its Transformers backend "
                    "(_supports_attention_backend is False and its attention is not settable), at configuration")
        return None  # the Transformers backend builds it
    remote = REMOTE if _remote(raw, "AutoModel") else ""
    if first in facts["previously_supported"]:
        return (f"Model architecture {first} was supported in vLLM until v{facts['previously_supported'][first]}, "
                "and is not supported anymore.", where + ", at configuration" + remote)
    if first in facts["out_of_tree"]:
        return (f"Model architecture {first} is not supported in-tree anymore. Please install the plugin at "
                f"{facts['out_of_tree'][first]} if you want to use this model architecture.", where + ", at configuration" + remote)
    return (f"Model architectures {archs} are not supported for now.",
            f"{where}, nor a transformers {tf} model class its Transformers backend could build, at configuration"
            + remote)


def _sglang(spec: EngineSpec, archs: list[str], facts: dict[str, Any]) -> tuple[str, str] | None:
    if any(a in facts["architectures"] for a in archs):
        return None
    first = archs[0]
    # Unknown architectures fall back to TransformersForCausalLM, which refuses a class without
    # attention-backend support; a name transformers does not export is built by AutoModel (no claim).
    if first in facts["transformers_classes"] and first in facts["no_attention_backend"]:
        return (f"Model <class 'transformers.{first}'> does not support custom attention backends "
                "(_supports_attention_backend=False). The Transformers backend requires custom attention support.",
                f"not in SGLang {spec.version}'s registry (python/sglang/srt/models/registry.py): its "
                f"TransformersForCausalLM fallback refuses transformers {facts.get('transformers')}'s {first} "
                "(models/transformers.py), at model load")
    return None


def draft_architecture(arch: str, method: str) -> str:
    """vLLM's ``EAGLEConfig`` renames a draft's architecture for its method
    (vllm/transformers_utils/configs/eagle.py).

    Example::

        >>> draft_architecture("LlamaForCausalLM", "eagle3"), draft_architecture("DFlashDraftModel", "dflash")
        ('Eagle3LlamaForCausalLM', 'DFlashDraftModel')
    """
    if method == "eagle3":
        return arch if arch.startswith("Eagle3") or arch.endswith("Eagle3") else f"Eagle3{arch}"
    if method == "dflash":
        return arch if arch.startswith("DFlash") or arch.endswith("DFlash") or arch == "LiLiCorrDraftModel" \
            else f"DFlash{arch}"
    return arch if arch.startswith("Eagle") else f"Eagle{arch}"


def unserved_draft(spec: EngineSpec, raw: dict[str, Any], method: str) -> tuple[str, str] | None:
    """vLLM's refusal of a drafter under ``method`` ("dflash", "eagle3") at configuration: a model type its
    transformers cannot parse, or an architecture that, renamed for the method, is not in its registry.
    None for SGLang (not modelled) or where it serves it."""
    facts = data(spec.name, spec.version)
    archs = _archs(raw)
    if facts is None or spec.name != "vllm" or not archs:
        return None
    model_type = raw.get("model_type")
    # The draft's own ModelConfig comes first (vllm/config/speculative.py): its architectures as they are.
    first = _vllm(spec, raw, archs, facts)
    if first is not None:
        return first[0], first[1].replace("inspect_model_cls", "inspect_model_cls on the draft's own ModelConfig")
    if raw.get("speculators_model_type") or model_type in facts["config_model_types"]:
        return None  # vLLM's own config class (speculators, eagle) names the architecture itself
    renamed = [draft_architecture(a, method) for a in archs]
    if any(a in facts["architectures"] for a in renamed):
        return None
    return (f"Model architectures {renamed} are not supported for now.",
            f"vllm/transformers_utils/configs/eagle.py renames the draft's {archs} for method '{method}', and "
            f"vLLM {spec.version}'s registry (model_executor/models/registry.py) has none of them, at configuration")
