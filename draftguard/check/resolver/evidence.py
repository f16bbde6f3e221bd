"""The evidence of a resolved config: what the class itself shows about each value it changed.

In: a config class, the raw dict, the built config, its node and what the class said while building.
Out: ``gather_evidence``, one plain-JSON dict (messages, landed, flags, gates, ignored, serialised,
generation, unread, deciders, translations, stored_tables) that check/judges.py reads.
"""

from __future__ import annotations

import json
from typing import Any

from .aliases import unread_aliases
from .modeling import unread_by_model_code
from .budget import unmetered
from .nodes import MISSING, copy_tree, get_path, node_values, plain, same
from .probes import deciders, flag_switches, translations
from .tracing import FLAG_CACHE, MAX_TRACED, TRACE_CACHE, LazyStorage, changed_leaves, class_voice, file_shape, trace_leaves


_GENERATION_NAMES: frozenset[str] | None = None
# GenerationConfig built from one dict's exact content (a process that checks a config twice).
_GENERATION_CACHE: dict[str, Any] = {}


def _generation_kept(raw: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """The dropped keys that are generation parameters: GenerationConfig, built from the dict that
    holds them (config.json itself, or a nested config), carries them with the same value. This is
    what transformers does with config.json when a repo has no generation_config.json."""
    with unmetered():  # importing it is the process's time, once
        from transformers import GenerationConfig  # transformers: after hide_torch(), else it imports torch

    global _GENERATION_NAMES
    if _GENERATION_NAMES is None:
        with class_voice(None), unmetered():
            _GENERATION_NAMES = frozenset(k for k in vars(GenerationConfig()) if not k.startswith("_"))
    out: dict[str, Any] = {}
    built: dict[str, Any] = {}
    for leaf in dropped:
        if leaf.rsplit(".", 1)[-1] not in _GENERATION_NAMES:
            continue
        holder_path, _, name = leaf.rpartition(".")
        holder = get_path(raw, holder_path) if holder_path else raw
        if not isinstance(holder, dict):
            continue
        if holder_path not in built:
            content = json.dumps(holder, sort_keys=True, default=str)
            if content not in _GENERATION_CACHE:
                try:
                    with class_voice(None):
                        _GENERATION_CACHE[content] = GenerationConfig.from_model_config(copy_tree(holder))
                except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
                    raise
                except Exception:
                    _GENERATION_CACHE[content] = None
            built[holder_path] = _GENERATION_CACHE[content]
        generation = built[holder_path]
        value = getattr(generation, name, MISSING) if generation is not None else MISSING
        if value is not MISSING and same(holder[name], plain(value, None)):
            out[leaf] = holder[name]
    return out


def _serialised(config: Any, raw: dict[str, Any], leaves: list[str]) -> dict[str, Any]:
    """Leaves whose file value the class writes back in to_dict() although it reads another: a
    deliberate conversion (the class keeps what it converted from, so a reload converts again)."""
    top = [leaf for leaf in leaves if "." not in leaf]
    if not top:
        return {}
    try:
        with class_voice(None):
            saved = config.to_dict()
    except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
        raise
    except Exception:
        return {}
    return {leaf: raw[leaf] for leaf in top if leaf in saved and same(raw[leaf], plain(saved[leaf], None))}


def gather_evidence(cls: type, raw: dict[str, Any], config: Any, node: dict[str, Any], messages: list[str]) -> dict[str, Any]:
    """What the class shows about the values it changed. Plain JSON:

    - ``messages``: what it logged or warned while building;
    - ``landed``: {file path: [[where the class stored it, "same" | "converted"], ...]} from tracing;
    - ``flags``: {file path: the flag the file sets to false, whose flip keeps the value};
    - ``gates``: {file path: a flag the file does not set, whose flip to true keeps the value};
    - ``ignored``: file paths whose value the class replaces whatever it is (tracing moved nothing);
    - ``serialised``: {file key: value}, keys the class writes back unchanged in to_dict();
    - ``generation``: {file key: value}, dropped keys that GenerationConfig rebuilds;
    - ``unread``: {file key: field}, keys the class ignores that name one of its fields elsewhere;
    - ``model_code_unread``: file keys the class keeps that its model code never reads
      (``sliding_window`` in Llama: see ``modeling``);
    - ``deciders``: {file path: [other file path, stored path, how, is_input, value]}, another
      value of the file that decides what is stored in the leaf's place (``deciders``);
    - ``translations``: {file path: {old name: new name}}, name lists the class translates;
    - ``stored_tables``: the dicts the traced values landed in, as stored.

    Example::

        >>> from transformers import GPTNeoXConfig
        >>> from draftguard.check.resolver.nodes import config_node
        >>> raw = {"model_type": "gpt_neox", "rotary_pct": 0.25}
        >>> config = GPTNeoXConfig(**raw)
        >>> gather_evidence(GPTNeoXConfig, raw, config, config_node(config, raw), [])["landed"]["rotary_pct"][0][0]
        'rope_parameters.partial_rotary_factor'
    """
    for cache, limit in ((TRACE_CACHE, 4096), (FLAG_CACHE, 8192), (_GENERATION_CACHE, 256)):
        if len(cache) > limit:  # a long-running bot meets new shapes for ever: start afresh
            cache.clear()
    # Judged without evidence (fidelity's _class_label and _private_key): a nested config's model_type
    # label and private state such as _attn_implementation. Tracing them would cost builds for nothing.
    leaves = [leaf for leaf in changed_leaves(raw, node)
              if not (leaf.endswith(".model_type") or leaf.rsplit(".", 1)[-1].startswith("_"))]
    evidence: dict[str, Any] = {"messages": [m for m in messages if m.strip()][:20], "landed": {}, "flags": {},
                                "serialised": {}, "generation": {}, "unread": {}, "deciders": {},
                                "translations": {}, "gates": {}, "ignored": []}
    values = node_values(node) if leaves else {}
    dropped = [leaf for leaf in leaves if get_path(values, leaf) is MISSING]
    if dropped:
        # Generation parameters first: a file may carry dozens, and they need no tracing.
        evidence["generation"] = _generation_kept(raw, dropped)
        leaves = [leaf for leaf in leaves if leaf not in evidence["generation"]]
    leaves = leaves[:MAX_TRACED]
    if leaves:
        stored = LazyStorage(config)
        key = (cls, file_shape(raw), tuple(leaves))
        cached = TRACE_CACHE.get(key)
        if cached is not None and any(path not in stored for leaf, places in cached.items() if leaf != "__ignored__"
                                      for path, _ in places):
            # The shape leaves numbers out; where they decide a place (per-layer override indices),
            # a cached place this file lacks means: trace this file afresh.
            cached = None
            FLAG_CACHE.pop(key, None)
            FLAG_CACHE.pop(("deciders", key), None)
        if cached is None:
            TRACE_CACHE[key] = trace_leaves(cls, raw, leaves, stored.full())
        landed = dict(TRACE_CACHE[key])
        ignored = landed.pop("__ignored__", [])
        evidence["landed"] = {
            leaf: [[path, how, plain(stored.get(path), None)] for path, how in places if path in stored]
            for leaf, places in landed.items()
        }
        # Kept where the class stores a value anyway, or for a dropped boolean: a compatibility
        # switch that neither its removal nor its opposite changes (DETR's use_timm_backbone).
        evidence["ignored"] = [leaf for leaf in ignored if get_path(values, leaf) is not MISSING
                               or isinstance(get_path(raw, leaf), bool)]
        tables = {path.rsplit(".", 1)[0] for places in landed.values() for path, how in places if "." in path}
        refused = [leaf for leaf in leaves if "." in leaf and not landed.get(leaf)]
        evidence["stored_tables"] = {  # for values the class refused to trace: see judges._traced
            table: {name: plain(value, None) for name, value in stored.table(table).items()}
            for table in sorted(tables) if refused
        }
        unexplained = [leaf for leaf in leaves if not any(
            how == "same" and path in stored and same(get_path(raw, leaf), plain(stored[path], None))
            for path, how in landed.get(leaf, []))]
        if unexplained:
            if key not in FLAG_CACHE:
                FLAG_CACHE[key] = flag_switches(cls, raw, unexplained, landed, stored.full())
            switches = {k: v for k, v in FLAG_CACHE[key].items() if k in unexplained}
            evidence["flags"] = {k: flag for k, (flag, in_file) in switches.items() if in_file}
            evidence["gates"] = {k: flag for k, (flag, in_file) in switches.items() if not in_file}
            rest = [leaf for leaf in unexplained if leaf not in switches]
            if rest:
                if ("deciders", key) not in FLAG_CACHE:
                    FLAG_CACHE[("deciders", key)] = deciders(cls, raw, rest, stored.full(), node)
                evidence["deciders"] = {
                    leaf: [rival, place, how, is_input, plain(stored.get(place), None)]
                    for leaf, (rival, place, how, is_input) in FLAG_CACHE[("deciders", key)].items()
                    if place in stored
                }
            evidence["translations"] = translations(cls, raw, rest, node)
            rest = [leaf for leaf in rest if leaf not in evidence["deciders"] and leaf not in evidence["translations"]]
            evidence["serialised"] = _serialised(config, raw, rest)
    evidence["unread"] = unread_aliases(cls, raw, config)
    evidence["model_code_unread"] = unread_by_model_code(cls, raw)
    return evidence
