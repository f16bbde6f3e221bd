"""Resolving one config.json, and the script protocol the version matrix speaks.

In: a raw config.json dict (and, with trust_remote_code, the repo to load its own class from); as a
script, one JSON request on stdin.
Out: ``resolve`` returns the node of what the model code reads, with its evidence, or raises
``ResolveError``; ``main`` writes ``{"transformers_version", "results"}`` to stdout and returns 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

from . import budget
from .classes import ResolveError, config_class, hide_torch, transformers_version
from .evidence import gather_evidence
from .tracing import class_voice
from .nodes import config_node, copy_tree, get_path, key_in_message, refuse_implausible


def resolve(
    raw: dict[str, Any],
    *,
    trust_remote_code: bool = False,
    pretrained: str | None = None,
    revision: str | None = None,
    trace: bool = True,
) -> dict[str, Any]:
    """Resolve ``raw`` through its transformers config class and return the node of what the model
    code reads. Raises ResolveError when no class applies or the class rejects the values.

    With ``trace`` (the default) the node also holds ``evidence``: what the class itself shows about
    each value that changed (``gather_evidence``). ``trace=False`` skips that work, for benchmarks.

    ``pretrained`` (a folder or Hub repo id) is used only with ``trust_remote_code``, to load the
    repo's own config class.

    The check of one config has a time budget (``budget``: ``DRAFTGUARD_CHECK_SECONDS``, 20 s by
    default); past it, ResolveError ``over_budget``, never a partial node.

    Example::

        >>> resolve({"model_type": "qwen3", "sliding_window": 2048})["values"]["sliding_window"] is None
        True
    """
    try:
        with budget.per_config():
            return _resolve(raw, trust_remote_code, pretrained, revision, trace)
    except budget.BudgetSpent as spent:
        raise ResolveError(budget.OVER_BUDGET, budget.over_budget_message(spent)) from None
    except budget.BadBudget as exc:  # the setting, said on the file rather than ignored
        raise ResolveError(budget.BAD_BUDGET, str(exc)) from None


def _resolve(raw: dict[str, Any], trust_remote_code: bool, pretrained: str | None, revision: str | None,
             trace: bool) -> dict[str, Any]:
    refuse_implausible(raw)
    remote = trust_remote_code and isinstance(raw.get("auto_map"), dict) and "AutoConfig" in raw["auto_map"]
    cls = None
    messages: list[str] = []
    try:
        if remote and pretrained is not None:
            from transformers import AutoConfig  # transformers: after hide_torch(), else it imports torch

            config = AutoConfig.from_pretrained(pretrained, revision=revision, trust_remote_code=True)
        else:
            cls = config_class(raw, trust_remote_code)
            # Same as cls.from_dict(raw) when no kwargs are passed, which is what from_pretrained
            # does, minus from_dict's eager f-string log of the whole config (half its cost). What the
            # class says while it builds is kept: it is the evidence of a deliberate correction.
            with class_voice(messages) if trace else contextlib.nullcontext():
                config = cls(**copy_tree(raw))
    except ResolveError:
        raise
    except KeyError as exc:
        nested = _nested_model_type(raw, exc.args[0] if exc.args else None)
        if nested is None:
            raise _remote_hint(_rejected(exc, raw, cls), raw, cls, remote) from None
        raise _remote_hint(ResolveError(
            "model_type_unknown",
            f"`{nested}` {get_path(raw, nested)!r} is unknown to transformers {transformers_version()}: the "
            "nested config names a model type this version does not ship.",
            key=nested,
        ), raw, cls, remote) from None
    except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
        raise
    except Exception as exc:  # the class's own validation: any exception type is possible
        raise _remote_hint(_rejected(exc, raw, cls), raw, cls, remote) from None
    node = config_node(config, raw)
    if trace and cls is not None:
        try:
            node["evidence"] = gather_evidence(cls, raw, config, node, messages)
        except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
            raise
        except Exception as exc:  # evidence is extra: a class that breaks under tracing is still judged
            # (BudgetSpent is no Exception: a spent budget is an error on the file, not missing evidence)
            node["evidence"] = {"messages": messages[:20], "failed": f"{type(exc).__name__}: {exc}"[:300]}
    return node


def _nested_model_type(raw: dict[str, Any], name: Any, prefix: str = "") -> str | None:
    """The dotted path of a nested config's model_type equal to ``name``, if the file has one."""
    for key, value in raw.items():
        if isinstance(value, dict):
            if value.get("model_type") == name and isinstance(name, str):
                return f"{prefix}{key}.model_type"
            deeper = _nested_model_type(value, name, f"{prefix}{key}.")
            if deeper:
                return deeper
    return None


def _rejected(exc: Exception, raw: dict[str, Any], cls: Any) -> ResolveError:
    """The class's own refusal, as a ResolveError that names the file's key where the message does."""
    text = str(exc).strip()
    lines = text.splitlines()[:2] if text else [type(exc).__name__]
    # A class that quotes the file's value quotes all of it: one line each, cut (a 1 MB value is no message).
    first_line, detail = (_cut(line.strip()) for line in (lines + [""])[:2])
    message = f"{type(exc).__name__}: {first_line}" + (f" {detail}" if detail else "")
    aliases = getattr(cls, "attribute_map", None)
    return ResolveError("class_rejected", message, key=key_in_message(text, raw, aliases))


def _remote_hint(error: ResolveError, raw: dict[str, Any], cls: Any, remote: bool) -> ResolveError:
    """A built-in class that refuses a file naming its own config class (``auto_map.AutoConfig``): a
    remote-code file whose model_type transformers later took over (Florence-2's ``florence2``, its
    ``text_config.model_type`` "florence2_language" unknown to the built-in class). The refusal is
    the built-in class's, not the file's fault: say so, and that --trust-remote-code reads it with
    the repo's class (issue 34's fourth look)."""
    auto_map = raw.get("auto_map")
    if remote or not isinstance(auto_map, dict) or "AutoConfig" not in auto_map:
        return error
    name = getattr(cls, "__name__", None) or "config class"
    said = _cut(str(error), 300)
    return ResolveError(
        error.kind,
        f"the built-in {name} of transformers {transformers_version()} cannot read this file, which names "
        f"its own config class (`auto_map.AutoConfig`: {str(auto_map['AutoConfig'])[:100]}): {said} Pass "
        "--trust-remote-code to check it with the repo's own class, only if you trust this repo's code.",
        key=error.key,
    )


def _cut(line: str, limit: int = 1000) -> str:
    return line if len(line) <= limit else line[:limit] + " [...]"


def main() -> int:
    hide_torch()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    request = json.load(sys.stdin)
    results = []
    for item in request.get("configs", []):
        try:
            results.append(
                resolve(
                    item["raw"],
                    trust_remote_code=bool(item.get("trust_remote_code")),
                    pretrained=item.get("pretrained"),
                    revision=item.get("revision"),
                    trace=item.get("trace", True) is not False,
                )
            )
        except ResolveError as exc:
            results.append({"error": exc.to_json()})
    json.dump({"transformers_version": transformers_version(), "results": results}, sys.stdout)
    return 0
