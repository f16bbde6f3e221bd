"""Tracing: where a config class puts each value of the file, found by building it again.

In: a config class, the raw dict, and the dotted paths of the values that changed.
Out: ``trace_leaves`` ({file path: [[stored path, "same" | "converted"], ...], "__ignored__": [...]}),
``class_voice`` (what the class logged or warned while building), the flattened ``storage`` of a
config object, and the caches the evidence modules share (``TRACE_CACHE``, ``FLAG_CACHE``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import threading
import types
import typing
import warnings
from typing import Any

from .budget import spend
from .classes import BOOKKEEPING_KEYS
from .nodes import MISSING, copy_tree, get_path, is_config, plain, same, set_path

# --- evidence: what the class itself shows about a value it changed --------------------------------
#
# A value that differs between config.json and the resolved config is judged from the class's own
# behaviour, not from tables of known renames that lag behind transformers:
#
# - tracing: the changed keys are set to unique sentinels and the class is built again; where a
#   sentinel lands is where the class moved the value (rope_theta -> rope_parameters.rope_theta,
#   rotary_pct -> partial_rotary_factor, a flat key -> text_config.key, a list into a nested dict);
# - the class's own voice: what it logged or warned while building ("Setting hidden_act=...");
# - flags: a value that survives when a boolean the file sets to false is flipped depends on a
#   feature the file switched off (use_sliding_window: false);
# - serialisation: a class that writes the file's value back in to_dict() converted it on purpose;
# - generation settings: GenerationConfig.from_model_config(config.json) rebuilds what the model
#   config pops;
# - unread aliases: a key the class does not declare that another transformers class declares as an
#   attribute_map alias of a field this class does have (a Mamba file's n_layer beside
#   num_hidden_layers).

TRACE_CACHE: dict[Any, Any] = {}
FLAG_CACHE: dict[Any, Any] = {}
MAX_TRACED = 48


class _Collect:
    """A logging handler that keeps each record's text."""

    def __init__(self, into: list[str] | None):
        self.handler = logging.Handler()
        self.handler.emit = self.emit  # type: ignore[method-assign]
        self.into = into

    def emit(self, record: Any) -> None:
        if self.into is not None:
            try:
                self.into.append(record.getMessage())
            except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
                raise
            except Exception:  # a malformed log call in the class must not stop the check
                pass


# What class_voice changes is the process's: the transformers logger, logging.Logger's methods, the
# warnings filters (catch_warnings is not thread-safe) and, through setLevel, every logger's cache,
# whose clearing iterates the logger dict that an import in another thread grows ("dictionary changed
# size during iteration" failed a bot job with two workers). One block at a time, process-wide.
_VOICE_LOCK = threading.RLock()


@contextlib.contextmanager
def class_voice(messages: list[str] | None):
    """Collect what transformers logs (warnings and up) and warns while the block runs, into
    ``messages``; with None, keep it quiet. Nothing reaches stderr either way. Blocks in other
    threads wait: each hears only its own class (the bot's workers check in threads)."""
    with _VOICE_LOCK:
        yield from _class_voice(messages)


def _class_voice(messages: list[str] | None):
    logger = logging.getLogger("transformers")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    collect = _Collect(messages)
    logger.handlers = [collect.handler]
    logger.propagate = False
    # Warnings are how a class says it corrected a value. setLevel clears every logger's cache, so it
    # is called only where the verbosity hides warnings (the matrix subprocess runs at "error").
    relevel = messages is not None and logger.getEffectiveLevel() > logging.WARNING
    if relevel:
        logger.setLevel(logging.WARNING)
    # warning_once is lru-cached process-wide: while the class builds, say it every time (a second
    # config of a family must be judged like the first), without touching the cache outside.
    once = {name: getattr(logging.Logger, name) for name in ("warning_once", "info_once")
            if hasattr(getattr(logging.Logger, name, None), "__wrapped__")}
    for name, cached in once.items():
        setattr(logging.Logger, name, cached.__wrapped__)
    with warnings.catch_warnings(record=True) as caught, _quick_unions():
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for name, cached in once.items():
                setattr(logging.Logger, name, cached)
            logger.handlers, _, logger.propagate = saved[0], None, saved[2]
            if relevel:
                logger.setLevel(saved[1])
            if messages is not None:
                messages.extend(str(w.message) for w in caught)


@contextlib.contextmanager
def _quick_unions():
    """While a class builds (under ``_VOICE_LOCK``): huggingface_hub's strict dataclasses check a
    field typed ``dict | PreTrainedConfig | None`` arm by arm, and an arm that fails writes the value
    into its error, a sub-config's whole JSON (``to_json_string``), thrown away when a later arm
    passes: a tenth of a check's CPU. Here a union passes at once when the value is an instance of
    one of its plain-class arms (the same test that arm makes); any other goes to huggingface_hub's
    own check. What passes and what fails, with which message, is the same."""
    validators = getattr(sys.modules.get("huggingface_hub.dataclasses"), "_BASIC_TYPE_VALIDATORS", None)
    keys = [key for key in (typing.Union, types.UnionType)
            if isinstance(validators, dict) and getattr(validators.get(key), "__name__", "") == "_validate_union"]
    if not keys:
        yield
        return
    original = validators[keys[0]]

    def union(name: str, value: Any, args: tuple) -> None:
        for arm in args:
            if isinstance(arm, type) and typing.get_origin(arm) is None and not (arm is int and isinstance(value, bool)):
                try:
                    if isinstance(value, arm):
                        return
                except TypeError:  # a TypedDict arm: huggingface_hub's own check says
                    pass
        original(name, value, args)

    for key in keys:
        validators[key] = union
    try:
        yield
    finally:
        for key in keys:
            validators[key] = original


def changed_leaves(raw: dict[str, Any], node: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the file's values that the model code does not read as written."""
    out: list[str] = []
    values = node["values"]
    for key, raw_value in raw.items():
        if not isinstance(key, str) or key in BOOKKEEPING_KEYS:
            continue
        resolved = values.get(key, MISSING)
        if isinstance(resolved, dict) and "__config__" in resolved:
            if isinstance(raw_value, dict):
                out += changed_leaves(raw_value, resolved, f"{prefix}{key}.")
            continue
        out += _changed_values(raw_value, resolved, prefix + key)
    return out


def _changed_values(raw_value: Any, resolved: Any, path: str) -> list[str]:
    if resolved is not MISSING and same(raw_value, plain(resolved, None)):
        return []
    if isinstance(raw_value, dict) and raw_value:
        sub = resolved if isinstance(resolved, dict) else {}
        return [p for k, v in raw_value.items() if isinstance(k, str)
                for p in _changed_values(v, sub.get(k, MISSING), f"{path}.{k}")]
    return [path]


def sentinel_for(value: Any, index: int) -> Any:
    """A value of the same type as ``value`` that no config holds, unique per index; None when the
    value cannot be traced this way (booleans, None, mixed lists)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        # Even and highly divisible: classes check that head sizes are even and that heads divide.
        return 7920 + 240 * index
    if isinstance(value, float):
        # Ratios stay ratios: a class may check 0 < partial_rotary_factor <= 1.
        return round(0.0917 + 0.0013 * index, 4) if 0 < value <= 1 else 7919.375 + 104 * index
    if isinstance(value, str):
        return f"{value}~dg{index}"
    if isinstance(value, list) and value and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        kind = float if any(isinstance(v, float) for v in value) else int
        return [kind(50000 + 1000 * index + 2 * j) for j in range(len(value))]
    return None


def storage(config: Any, prefix: str = "", out: dict[str, Any] | None = None, depth: int = 0) -> dict[str, Any]:
    """Every stored value of a config object, private attributes included, by dotted path. Nested
    configs and dicts are walked; lists are kept whole, and walked too when they hold dicts."""
    out = {} if out is None else out
    if depth > 6:
        return out
    items = config.items() if isinstance(config, dict) else vars(config).items()
    for name, value in items:
        name = str(name)
        if name in BOOKKEEPING_KEYS:
            continue
        path = prefix + name
        if value is None or isinstance(value, (str, int, float)):
            out[path] = value
        elif is_config(value) or isinstance(value, dict) or _is_record(value):
            storage(value, path + ".", out, depth + 1)
        else:
            out[path] = value
            if isinstance(value, (list, tuple)) and any(is_config(v) or isinstance(v, dict) for v in value):
                for i, item in enumerate(value):
                    if is_config(item) or isinstance(item, dict):
                        storage(item, f"{path}.{i}.", out, depth + 1)
    return out


class LazyStorage:
    """``storage(config)`` read path by path: a file shape seen before needs only the few paths its
    cached trace names, and walking those is cheaper than flattening the whole config."""

    def __init__(self, config: Any):
        self.config = config
        self._full: dict[str, Any] | None = None
        self._seen: dict[str, Any] = {}

    def full(self) -> dict[str, Any]:
        if self._full is None:
            self._full = storage(self.config)
        return self._full

    def get(self, path: str, default: Any = None) -> Any:
        if self._full is not None:
            return self._full.get(path, default)
        if path not in self._seen:
            self._seen[path] = self._walk(path)
        value = self._seen[path]
        return default if value is MISSING else value

    def _walk(self, path: str) -> Any:
        default = MISSING
        node: Any = self.config
        for part in path.split("."):
            if isinstance(node, dict):
                if part in node:
                    node = node[part]
                elif part.isdigit() and int(part) in node:
                    node = node[int(part)]
                else:
                    return default
            elif isinstance(node, (list, tuple)) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif is_config(node) or _is_record(node):
                own = vars(node)
                if part not in own:
                    return default
                node = own[part]
            else:
                return default
        if is_config(node) or isinstance(node, dict) or _is_record(node):
            return default  # a table, not a stored value
        return node

    def __contains__(self, path: str) -> bool:
        return self.get(path, MISSING) is not MISSING

    def __getitem__(self, path: str) -> Any:
        value = self.get(path, MISSING)
        if value is MISSING:
            raise KeyError(path)
        return value

    def table(self, path: str) -> dict[str, Any]:
        """The stored values directly under ``path``."""
        full = self.full()
        return {p[len(path) + 1:]: v for p, v in full.items() if p.startswith(path + ".") and "." not in p[len(path) + 1:]}


def _is_record(value: Any) -> bool:
    """A plain dataclass a config keeps its structure in (per-layer override specs)."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, "__dict__")


def _comparable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def file_shape(value: Any) -> Any:
    """The part of a file that decides where a class puts things: keys, flags and names, not numbers
    (what the trace cache is keyed by)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), file_shape(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", len(value), tuple(sorted({type(v).__name__ for v in value})))
    if isinstance(value, (bool, str)) or value is None:
        return value
    return type(value).__name__


def build_quietly(cls: type, raw: dict[str, Any]) -> Any:
    """One more build of the class, for tracing: each is where the config's time budget is looked
    at (``budget.spend``), before and after, since builds are what tracing spends its time on."""
    spend()
    with class_voice(None):
        config = cls(**copy_tree(raw))
    spend()
    return config


def trace_leaves(cls: type, raw: dict[str, Any], leaves: list[str], original: dict[str, Any]) -> dict[str, list[list[str]]]:
    """Where the class puts each of ``leaves``: [[storage path, "same" | "converted"], ...]."""
    assigned = {leaf: sentinel_for(get_path(raw, leaf), i) for i, leaf in enumerate(leaves)}
    assigned = {leaf: s for leaf, s in assigned.items() if s is not None}
    landed: dict[str, list[list[str]]] = {leaf: [] for leaf in leaves}
    ignored: set[str] = set()

    def run(batch: dict[str, Any], unattributed: list[bool] | None = None) -> bool:
        trial = copy_tree(raw)
        for leaf, value in batch.items():
            set_path(trial, leaf, value)
        try:
            traced = storage(build_quietly(cls, trial))
        except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
            raise
        except Exception:
            return False
        owner = {_comparable(s): leaf for leaf, s in batch.items()}
        moved = False
        for path, value in traced.items():
            before = original.get(path, MISSING)
            if before is not MISSING and same(plain(before, None), plain(value, None)):
                continue
            try:
                leaf = owner.get(_comparable(value))
            except TypeError:  # unhashable: a dict or a nested list
                leaf = None
            if leaf is not None:
                landed[leaf].append([path, "same"])
            elif len(batch) == 1:
                landed[next(iter(batch))].append([path, "converted"])
            else:
                moved = True
        if not moved:  # every change is accounted for: a leaf that moved nothing is ignored
            ignored.update(leaf for leaf in batch if not landed[leaf])
        elif unattributed is not None:
            unattributed.append(True)
        return True

    refused = [leaf for leaf in leaves if leaf not in assigned]
    unattributed: list[bool] = []
    if assigned and not run(assigned, unattributed):
        for leaf, value in list(assigned.items())[:8]:  # the class refused a sentinel: one at a time
            if not run({leaf: value}):
                refused.append(leaf)
    elif any(unattributed) and len(assigned) > 1:
        # Something moved that no sentinel explains (a legacy key folded into a structure: Cohere2's
        # sliding_window_pattern into layer_types): each leaf that landed nowhere, on its own.
        for leaf in [leaf for leaf in assigned if not landed[leaf]][:8]:
            run({leaf: assigned[leaf]})
    for leaf in [leaf for leaf in refused if isinstance(get_path(raw, leaf), bool)][:8]:
        # A boolean has one sentinel: its opposite. Where the opposite lands, the value was kept
        # (VideoMAE's qkv_bias read as qv_bias); what else it changes, it was read into.
        if _flip(cls, raw, leaf, original, landed):
            refused.remove(leaf)
    for leaf in refused[:8]:
        # No sentinel fits (a flag, a name the class validates): take the key out instead, and see
        # which stored values move away from the file's value.
        trial = copy_tree(raw)
        parts = leaf.split(".")
        holder = get_path(trial, ".".join(parts[:-1])) if len(parts) > 1 else trial
        if not isinstance(holder, dict):
            continue
        holder.pop(parts[-1], None)
        try:
            traced = storage(build_quietly(cls, trial))
        except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
            raise
        except Exception:
            continue
        want = get_path(raw, leaf)
        for path, value in original.items():
            after = plain(traced.get(path, MISSING), None)
            if same(want, plain(value, None)) and not same(after, want):
                landed[leaf].append([path, "same"])
            elif not same(after, plain(value, None)) and not path.rsplit(".", 1)[-1].startswith("_"):
                landed[leaf].append([path, "converted"])  # read, and stored in another form
        if not landed[leaf] and set(traced) == set(original):
            ignored.add(leaf)
    landed["__ignored__"] = sorted(ignored)  # type: ignore[assignment]
    return landed


def _flip(cls: type, raw: dict[str, Any], leaf: str, original: dict[str, Any], landed: dict[str, list[list[str]]]) -> bool:
    """Trace a boolean leaf by building with its opposite: a stored boolean that turns from the
    file's value to the opposite is where the value landed ("same"); any other stored value that
    changes or disappears is what the class read it into ("converted"). False when nothing moved."""
    want = get_path(raw, leaf)
    trial = copy_tree(raw)
    set_path(trial, leaf, not want)
    try:
        traced = storage(build_quietly(cls, trial))
    except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
        raise
    except Exception:
        return False
    found = []
    for path, before in original.items():
        if path.rsplit(".", 1)[-1].startswith("_"):
            continue
        after = traced.get(path, MISSING)
        if after is not MISSING and same(plain(before, None), plain(after, None)):
            continue
        if before is want and after is (not want):
            found.append([path, "same"])
        else:
            found.append([path, "converted"])
    same_places = [item for item in found if item[1] == "same"]
    landed[leaf].extend(same_places or found[:12])
    return bool(found)
