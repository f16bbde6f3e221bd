"""Speculative-decoding drafters checked against their target model (rules DG100-DG199).

A drafter can resolve cleanly under transformers and still be wrong for its target: it reads the
wrong target layers, its sizes or vocabulary do not match, its mask token is a word the target uses,
or its weights do not have the shapes its config claims. One module per job:

- ``detect``: which format a config.json is (stdlib only: the light check imports this alone);
- ``target``: finding and loading the target, locally and on the Hub;
- ``files``: tokenizer and other optional files beside config.json;
- ``engines``: what vLLM, SGLang and the trainers do with layer ids, and what they refuse;
- ``rules`` and ``weight_rules``: the rules every format shares;
- ``dflash``, ``eagle``: one module per format family whose rules differ;
- ``check``: the entry point, ``check_drafter``.

Names used elsewhere are importable from here; everything but detection loads on first use.

In: a drafter's ``Snapshot``, its ``TargetResult`` from the light check, and optionally a target name.
Out: ``check_drafter`` -> a list of ``Finding``; ``detect_drafter`` -> a ``DrafterFormat`` or None.
"""

from __future__ import annotations

from typing import Any

from draftguard.check.drafter.detect import DrafterFormat, Stated, detect_drafter, layer_config

_LAZY = {
    "check_drafter": "check", "TargetModel": "target", "find_target": "target", "load_target": "target",
    "TokenizerFiles": "files", "HubUnreachable": "files", "read_optional": "files", "DrafterCheck": "rules",
}

__all__ = ["DrafterFormat", "Stated", "detect_drafter", "layer_config", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"draftguard.check.drafter.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
