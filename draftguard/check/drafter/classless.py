"""A drafter whose ``model_type`` transformers has no class for: read it anyway.

The drafter rules read keys of config.json, not attributes of transformers' class, so a drafter
with a remote-code or engine-only ``model_type`` (TorchSpec's ``kimi_k2`` EAGLE-3 heads, MiMo's
``mimo`` MTP, TorchSpec's ``qwen3_dspark``) can still be checked. Where an engine maps the
``model_type`` to a transformers class of its own choosing (vLLM's ``_CONFIG_REGISTRY``), the config
rules run against that class, which is what the engine reads; otherwise they cannot run, and the
check says so (DG126) instead of refusing the whole file.

In: a parsed config.json (a dict) and the ``ResolveError`` transformers' lookup raised for it.
Out: ``engine_alias`` -> the model_type an engine reads it as, with who says so, or None;
``classless_finding`` -> the DG126 ``Finding`` (None when the file is no drafter: still refused);
``is_readable_drafter`` -> whether the rules can run.
"""

from __future__ import annotations

from typing import Any

from draftguard.check.drafter.detect import detect_drafter
from draftguard.check.findings import RULES, Finding

# model_type -> (the transformers model_type the engines build it with, where that is decided).
# Read from vLLM 0.32 (vllm/transformers_utils/config.py `_CONFIG_REGISTRY`, where kimi_k2 maps to
# transformers' DeepseekV3Config) and SGLang 0.5.23 (utils/hf_transformers/common.py, a
# DeepseekV3Config alias). Only aliases onto a class transformers ships are listed: vLLM's own config
# classes (deepseek_v32, speculators, ...) are not importable without vLLM.
ENGINE_ALIASES: dict[str, tuple[str, str]] = {
    "kimi_k2": ("deepseek_v3", "vLLM 0.32 (`_CONFIG_REGISTRY`) and SGLang 0.5.23 read it with DeepseekV3Config"),
}

# Resolve failures that mean "no class to read this with", as opposed to a file that is wrong.
CLASSLESS_KINDS = ("model_type_unknown", "remote_code_required", "model_type_missing")


def is_readable_drafter(raw: Any, kind: str) -> bool:
    """Whether a config that transformers could not resolve (``kind``) is still a drafter whose
    rules can run on its raw keys.

    Example::

        >>> is_readable_drafter({"model_type": "kimi_k2", "draft_vocab_size": 8}, "model_type_unknown")
        True
        >>> is_readable_drafter({"model_type": "kimi_k2"}, "model_type_unknown")
        False
    """
    return kind in CLASSLESS_KINDS and isinstance(raw, dict) and detect_drafter(raw) is not None


def engine_alias(raw: dict[str, Any]) -> tuple[str, str] | None:
    """The transformers model_type an engine reads this config's ``model_type`` as, and the source.

    Example::

        >>> engine_alias({"model_type": "kimi_k2"})[0]
        'deepseek_v3'
    """
    model_type = raw.get("model_type")
    return ENGINE_ALIASES.get(model_type) if isinstance(model_type, str) else None


def classless_note(model_type: Any, version: str, *, alias: tuple[str, str] | None, remote: bool) -> str:
    """DG126: what was and was not checked for a drafter transformers has no class for."""
    shown = repr(model_type)
    if not isinstance(model_type, str) or not model_type:
        return (f"config.json has no `model_type`, so no config class of transformers {version} reads it "
                "(FasterDecoding's Medusa heads ship such a file). The config rules did not run; the drafter "
                "rules read config.json's keys and ran. Fix: nothing for the drafter rules.")
    if alias is not None:
        return (f"No config class for model_type {shown} in transformers {version}; {alias[1]}, so the config "
                f"rules ran against that class (model_type {alias[0]!r}), as the engines read the file. The "
                "drafter rules read config.json's keys and ran in full. Fix: nothing, unless the drafter is "
                "meant to load in transformers itself.")
    why = ("the repo ships its own config class, which draftguard does not run without --trust-remote-code"
           if remote else "nor does any engine map it onto one of transformers' classes")
    fix = ("; pass --trust-remote-code to also check the config class, only if you trust this repo's code"
           if remote else "")
    return (f"No config class for model_type {shown} in transformers {version} ({why}). So the config rules "
            "(what the class keeps or changes) did not run; the drafter rules read config.json's keys and ran. "
            f"Fix: nothing for the drafter rules{fix}.")


def classless_finding(full_raw: Any, raw: dict[str, Any], kind: str, key: str | None, version: str, *,
                      file: str, line: int | None, alias: tuple[str, str] | None = None) -> Finding | None:
    """DG126 for a drafter transformers could not resolve (``kind``), or None for any other file,
    which stays bad input. ``raw`` is the part a class would read (``transformer_layer_config`` for
    the speculators format); ``alias`` the engine class the config rules ran against, if any."""
    if not is_readable_drafter(full_raw, kind):
        return None
    model_type = raw.get("model_type")
    return Finding(rule="DG126", severity=RULES["DG126"].severity, key=key or "model_type", raw=model_type,
                   resolved=alias[0] if alias else None, file=file, line=line,
                   message=classless_note(model_type, version, alias=alias, remote=kind == "remote_code_required"))
