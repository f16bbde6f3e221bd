"""Resolve a raw config.json the way transformers' model code will read it.

This module is standalone on purpose: the transformers version matrix copies it into environments
that hold nothing but transformers and runs it as a script. It imports nothing from draftguard and
nothing outside the standard library except transformers.

The output is plain JSON: for every key of the raw file, and every public attribute of the resolved
object, the value that ``getattr(config, key)`` returns. ``getattr`` is what modeling code reads, and
it follows ``attribute_map`` aliases; ``to_dict()`` would not show that, and ``to_diff_dict()`` drops
values equal to the defaults. Nested configs (``text_config``...) become nested nodes.

Script protocol (one JSON document each way)::

    stdin:  {"configs": [{"raw": {...}, "trust_remote_code": false, "pretrained": null, "revision": null}]}
    stdout: {"transformers_version": "5.24.0", "results": [<node> | {"error": {...}}, ...]}
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any

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
    return True


def transformers_version() -> str:
    import transformers

    return transformers.__version__


class ResolveError(Exception):
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
    return _config_class(raw, trust_remote_code=False).__name__


def _config_class(raw: dict[str, Any], trust_remote_code: bool):
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
            f"`model_type` must be a string, got {type(model_type).__name__} {model_type!r}.",
            key="model_type",
        )
    try:
        return CONFIG_MAPPING[model_type]
    except KeyError:
        pass
    auto_map = raw.get("auto_map")
    if isinstance(auto_map, dict) and "AutoConfig" in auto_map and not trust_remote_code:
        built_in = built_in_reader(raw)
        raise ResolveError(
            "remote_code_required",
            f"model_type {model_type!r} is not built into transformers {transformers_version()}; the "
            f"repo ships its own config class ({auto_map['AutoConfig']}). Pass --trust-remote-code "
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
        f"model_type {model_type!r} is unknown to transformers {transformers_version()}.{hint}",
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
    import re

    def bare(text: str) -> str:
        return re.sub(r"[-_\s]", "", text.lower())

    def undoubled(text: str) -> str:
        return re.sub(r"(.)\1+", r"\1", bare(text))

    digits = re.findall(r"\d+", name)
    found = []
    for k in known:
        if undoubled(k) == undoubled(name):  # separators, case or a doubled key: qwen3moe, Qwen3-MoE, qwen33
            found.append((0, k))
            continue
        if re.findall(r"\d+", k) != digits:
            continue
        if bare(k) == bare(name):
            found.append((0, k))
        elif len(name) >= 5 and (d := _edits(name.lower(), k.lower())) <= 1:  # one slip: lamma, qwne3
            found.append((d, k))
    return [k for _, k in sorted(found)[:3]]


def _architecture_types() -> dict[str, str]:
    """Model class name -> model_type for every class transformers' auto mappings name, read from
    modeling_auto's source text (importing it costs seconds and may pull in torch)."""
    import re
    from pathlib import Path

    import transformers.models.auto as auto

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


def _plain(value: Any, raw: Any) -> Any:
    """A JSON-safe copy of a resolved value. Nested configs become nodes."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, None) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v, None) for k, v in value.items()}
    if _is_config(value):
        return _node(value, raw if isinstance(raw, dict) else {})
    # torch.dtype, enums and the like: their text is what a reader compares.
    text = str(value)
    return text[len("torch.") :] if text.startswith("torch.") else text


def _is_config(value: Any) -> bool:
    return hasattr(value, "attribute_map") and hasattr(value, "to_dict") and hasattr(value, "model_type")


# Keys whose class default the judge compares against (was a missing key filled by a default, or
# derived from another key of the file?).
DEFAULTED_KEYS = ("head_dim", "sliding_window", "hidden_size", "num_attention_heads")
_DEFAULTS_CACHE: dict[type, dict[str, Any]] = {}


def _class_defaults(cls: type) -> dict[str, Any]:
    if cls not in _DEFAULTS_CACHE:
        import dataclasses
        import inspect

        found: dict[str, Any] = {}
        if dataclasses.is_dataclass(cls):  # transformers 5.x config classes
            for f in dataclasses.fields(cls):
                if f.name in DEFAULTED_KEYS and f.default is not dataclasses.MISSING:
                    found[f.name] = f.default
        else:  # 4.x: defaults live in __init__'s signature
            try:
                params = inspect.signature(cls.__init__).parameters
            except (TypeError, ValueError):
                params = {}
            for name in DEFAULTED_KEYS:
                if name in params and params[name].default is not inspect.Parameter.empty:
                    found[name] = params[name].default
        _DEFAULTS_CACHE[cls] = {k: _plain(v, None) for k, v in found.items()}
    return _DEFAULTS_CACHE[cls]


_DESCRIPTORS_CACHE: dict[type, frozenset[str]] = {}


def _class_descriptors(cls: type) -> frozenset[str]:
    """Names a class serves through data descriptors (properties), which win over the instance dict."""
    if cls not in _DESCRIPTORS_CACHE:
        names = set()
        for klass in cls.__mro__:
            for name, attr in vars(klass).items():
                if hasattr(attr, "__get__") and (hasattr(attr, "__set__") or hasattr(attr, "__delete__")):
                    names.add(name)
        _DESCRIPTORS_CACHE[cls] = frozenset(names)
    return _DESCRIPTORS_CACHE[cls]


def _per_layer_values(config: Any, raw: Any) -> Any:
    """What each layer named in the file's per_layer_config reads, in the file's own shape
    ({"1": {"intermediate_size": 256}}), so the judge compares it key by key."""
    if not isinstance(raw, dict):
        return _plain(getattr(config, "per_layer_config", None), None)
    view = config.per_layer_config
    out: dict[str, Any] = {}
    for layer, overrides in raw.items():
        try:
            layer_config = view[int(layer)]
        except (ValueError, IndexError, KeyError, TypeError):
            continue  # a layer the class did not keep: the judge reports it dropped
        if isinstance(overrides, dict):
            out[str(layer)] = {k: _plain(getattr(layer_config, k, None), None) for k in overrides}
    return out


def _node(config: Any, raw: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    own = vars(config)
    keys = [k for k in raw if isinstance(k, str)]
    keys += [k for k in own if not k.startswith("_") and k not in raw]
    # getattr through PreTrainedConfig.__getattribute__ costs more than building the config; for a
    # plain instance attribute (no alias, no property, no per-layer config) it returns own[key].
    aliases = getattr(type(config), "attribute_map", None) or {}
    special = _class_descriptors(type(config))
    plain = own.get("_heterogeneity_spec") is None
    per_layer = set() if plain else set(getattr(own.get("_heterogeneity_spec"), "per_layer_attributes", ()) or ())
    for key in keys:
        if key in BOOKKEEPING_KEYS:
            continue
        if key == "per_layer_config" and not plain:
            values[key] = _per_layer_values(config, raw.get(key))
            continue
        if (plain or key in per_layer) and key in own and key not in aliases and key not in special:
            # A per-layer attribute of a heterogeneous config refuses global reads; its global value
            # (the one layers without an override use) is the instance attribute.
            value = own[key]
        else:
            try:
                value = getattr(config, key)
            except Exception:  # a dropped key: AttributeError, or a property that raises
                continue
        values[key] = _plain(value, raw.get(key))
    return {
        "__config__": type(config).__name__,
        "attribute_map": dict(getattr(type(config), "attribute_map", {}) or {}),
        "values": values,
        "defaults": _class_defaults(type(config)),
    }


# Config classes build per-layer lists from these; a forged value of 10**12 would exhaust memory.
_LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
MAX_LAYERS = 10_000


def _refuse_implausible(raw: dict[str, Any], prefix: str = "") -> None:
    for key, value in raw.items():
        if isinstance(value, dict):
            _refuse_implausible(value, f"{prefix}{key}.")
        elif key in _LAYER_COUNT_KEYS and isinstance(value, int) and not isinstance(value, bool) and value > MAX_LAYERS:
            raise ResolveError(
                "class_rejected",
                f"`{prefix}{key}` is {value}; more than {MAX_LAYERS} layers is not a real model "
                "(refused before the config class builds per-layer lists of that length).",
                key=prefix + key,
            )


def _copy(value: Any) -> Any:
    # Classes normalise nested dicts in place (rope_parameters); the caller's raw must stay raw.
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# Attributes a class validates under another name than the file's key.
_FILE_KEYS_OF = {"rope_parameters": ("rope_scaling", "rope_theta", "partial_rotary_factor"), "dtype": ("torch_dtype",)}


def _key_in_message(message: str, raw: dict[str, Any], aliases: dict[str, str] | None = None) -> str | None:
    """The key of the file that a class's error message is about, so the error can point at its line."""
    quoted = lambda key: f"'{key}'" in message or f"`{key}`" in message or f'"{key}"' in message  # noqa: E731
    for key in sorted(raw, key=len, reverse=True):
        if isinstance(key, str) and quoted(key):
            return key
    # The class may name its own attribute: an attribute_map target, or a key it folds others into.
    for alias, attribute in (aliases or {}).items():
        if alias in raw and quoted(attribute):
            return alias
    for attribute, file_keys in _FILE_KEYS_OF.items():
        if quoted(attribute):
            return next((k for k in file_keys if k in raw), None)
    return None



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

_TRACE_CACHE: dict[Any, Any] = {}
_FLAG_CACHE: dict[Any, Any] = {}
_MAX_TRACED = 48


class _Collect:
    """A logging handler that keeps each record's text."""

    def __init__(self, into: list[str] | None):
        import logging

        self.handler = logging.Handler()
        self.handler.emit = self.emit  # type: ignore[method-assign]
        self.into = into

    def emit(self, record: Any) -> None:
        if self.into is not None:
            try:
                self.into.append(record.getMessage())
            except Exception:  # a malformed log call in the class must not stop the check
                pass


@contextlib.contextmanager
def class_voice(messages: list[str] | None):
    """Collect what transformers logs (warnings and up) and warns while the block runs, into
    ``messages``; with None, keep it quiet. Nothing reaches stderr either way."""
    import logging
    import warnings

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
    with warnings.catch_warnings(record=True) as caught:
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


def _same(a: Any, b: Any) -> bool:
    """Equal as model code uses them (fidelity.same's rules, repeated here: this module is standalone)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


_MISSING: Any = object()


def _changed_leaves(raw: dict[str, Any], node: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted paths of the file's values that the model code does not read as written."""
    out: list[str] = []
    values = node["values"]
    for key, raw_value in raw.items():
        if not isinstance(key, str) or key in BOOKKEEPING_KEYS:
            continue
        resolved = values.get(key, _MISSING)
        if isinstance(resolved, dict) and "__config__" in resolved:
            if isinstance(raw_value, dict):
                out += _changed_leaves(raw_value, resolved, f"{prefix}{key}.")
            continue
        out += _changed_values(raw_value, resolved, prefix + key)
    return out


def _changed_values(raw_value: Any, resolved: Any, path: str) -> list[str]:
    if resolved is not _MISSING and _same(raw_value, _plain(resolved, None)):
        return []
    if isinstance(raw_value, dict) and raw_value:
        sub = resolved if isinstance(resolved, dict) else {}
        return [p for k, v in raw_value.items() if isinstance(k, str)
                for p in _changed_values(v, sub.get(k, _MISSING), f"{path}.{k}")]
    return [path]


def _get(tree: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        else:
            return _MISSING
    return tree


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        tree = tree[part]
    tree[parts[-1]] = value


def _sentinel(value: Any, index: int) -> Any:
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


def _storage(config: Any, prefix: str = "", out: dict[str, Any] | None = None, depth: int = 0) -> dict[str, Any]:
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
        elif _is_config(value) or isinstance(value, dict) or _is_record(value):
            _storage(value, path + ".", out, depth + 1)
        else:
            out[path] = value
            if isinstance(value, (list, tuple)) and any(_is_config(v) or isinstance(v, dict) for v in value):
                for i, item in enumerate(value):
                    if _is_config(item) or isinstance(item, dict):
                        _storage(item, f"{path}.{i}.", out, depth + 1)
    return out


class _LazyStorage:
    """``_storage(config)`` read path by path: a file shape seen before needs only the few paths its
    cached trace names, and walking those is cheaper than flattening the whole config."""

    def __init__(self, config: Any):
        self.config = config
        self._full: dict[str, Any] | None = None
        self._seen: dict[str, Any] = {}

    def full(self) -> dict[str, Any]:
        if self._full is None:
            self._full = _storage(self.config)
        return self._full

    def get(self, path: str, default: Any = None) -> Any:
        if self._full is not None:
            return self._full.get(path, default)
        if path not in self._seen:
            self._seen[path] = self._walk(path)
        value = self._seen[path]
        return default if value is _MISSING else value

    def _walk(self, path: str) -> Any:
        default = _MISSING
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
            elif _is_config(node) or _is_record(node):
                own = vars(node)
                if part not in own:
                    return default
                node = own[part]
            else:
                return default
        if _is_config(node) or isinstance(node, dict) or _is_record(node):
            return default  # a table, not a stored value
        return node

    def __contains__(self, path: str) -> bool:
        return self.get(path, _MISSING) is not _MISSING

    def __getitem__(self, path: str) -> Any:
        value = self.get(path, _MISSING)
        if value is _MISSING:
            raise KeyError(path)
        return value

    def table(self, path: str) -> dict[str, Any]:
        """The stored values directly under ``path``."""
        full = self.full()
        return {p[len(path) + 1:]: v for p, v in full.items() if p.startswith(path + ".") and "." not in p[len(path) + 1:]}


def _is_record(value: Any) -> bool:
    """A plain dataclass a config keeps its structure in (per-layer override specs)."""
    import dataclasses

    return dataclasses.is_dataclass(value) and not isinstance(value, type) and hasattr(value, "__dict__")


def _comparable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _shape(value: Any) -> Any:
    """The part of a file that decides where a class puts things: keys, flags and names, not numbers
    (what the trace cache is keyed by)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _shape(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("list", len(value), tuple(sorted({type(v).__name__ for v in value})))
    if isinstance(value, (bool, str)) or value is None:
        return value
    return type(value).__name__


def _build_quietly(cls: type, raw: dict[str, Any]) -> Any:
    with class_voice(None):
        return cls(**_copy(raw))


def _trace(cls: type, raw: dict[str, Any], leaves: list[str], original: dict[str, Any]) -> dict[str, list[list[str]]]:
    """Where the class puts each of ``leaves``: [[storage path, "same" | "converted"], ...]."""
    assigned = {leaf: _sentinel(_get(raw, leaf), i) for i, leaf in enumerate(leaves)}
    assigned = {leaf: s for leaf, s in assigned.items() if s is not None}
    landed: dict[str, list[list[str]]] = {leaf: [] for leaf in leaves}
    ignored: set[str] = set()

    def run(batch: dict[str, Any]) -> bool:
        trial = _copy(raw)
        for leaf, value in batch.items():
            _set(trial, leaf, value)
        try:
            traced = _storage(_build_quietly(cls, trial))
        except Exception:
            return False
        owner = {_comparable(s): leaf for leaf, s in batch.items()}
        moved = False
        for path, value in traced.items():
            before = original.get(path, _MISSING)
            if before is not _MISSING and _same(_plain(before, None), _plain(value, None)):
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
        return True

    refused = [leaf for leaf in leaves if leaf not in assigned]
    if assigned and not run(assigned):
        for leaf, value in list(assigned.items())[:8]:  # the class refused a sentinel: one at a time
            if not run({leaf: value}):
                refused.append(leaf)
    for leaf in refused[:8]:
        # No sentinel fits (a flag, a name the class validates): take the key out instead, and see
        # which stored values move away from the file's value.
        trial = _copy(raw)
        parts = leaf.split(".")
        holder = _get(trial, ".".join(parts[:-1])) if len(parts) > 1 else trial
        if not isinstance(holder, dict):
            continue
        holder.pop(parts[-1], None)
        try:
            traced = _storage(_build_quietly(cls, trial))
        except Exception:
            continue
        want = _get(raw, leaf)
        for path, value in original.items():
            after = _plain(traced.get(path, _MISSING), None)
            if _same(want, _plain(value, None)) and not _same(after, want):
                landed[leaf].append([path, "same"])
            elif not _same(after, _plain(value, None)) and not path.rsplit(".", 1)[-1].startswith("_"):
                landed[leaf].append([path, "converted"])  # read, and stored in another form
        if not landed[leaf] and set(traced) == set(original):
            ignored.add(leaf)
    landed["__ignored__"] = sorted(ignored)  # type: ignore[assignment]
    return landed


def _translations(cls: type, raw: dict[str, Any], leaves: list[str], node: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Lists of names the class rewrites element by element into its own vocabulary (NemotronH's
    "mamba" -> "linear_attention"), with the evidence that it is a translation: each old name maps to
    one new name and back, and the class keeps the new list unchanged when given it."""
    values = node_values(node)
    out: dict[str, dict[str, str]] = {}
    for leaf in leaves:
        old, new = _get(raw, leaf), _get(values, leaf)
        if not (isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and old
                and all(isinstance(v, str) for v in old + new)):
            continue
        forward: dict[str, str] = {}
        backward: dict[str, str] = {}
        if any(forward.setdefault(a, b) != b or backward.setdefault(b, a) != a for a, b in zip(old, new)):
            continue
        memo = (cls, leaf, _shape(raw), tuple(old), tuple(new))
        if memo not in _FLAG_CACHE:
            trial = _copy(raw)
            _set(trial, leaf, list(new))
            try:
                again = _get(node_values(_node(_build_quietly(cls, trial), trial)), leaf)
            except Exception:
                again = _MISSING
            _FLAG_CACHE[memo] = _same(again, new)
        if _FLAG_CACHE[memo]:
            out[leaf] = {a: b for a, b in forward.items() if a != b}
    return out


def _holder(path: str) -> str:
    return path.rsplit(".", 1)[0] + "." if "." in path else ""


def _switches(cls: type, raw: dict[str, Any], leaves: list[str], landed: dict[str, list[list[str]]],
              stored: dict[str, Any]) -> dict[str, list[Any]]:
    """For each leaf the class changed, a boolean whose flip to true makes the class keep the leaf's
    value: {leaf: [flag path, whether the file sets it]}.

    A flag the file sets to false switched the feature off on purpose (use_sliding_window: false).
    A flag the file does not set is the class's default gate, and the file's value is lost to it
    (the Qwen3 window: kept only when use_sliding_window, which defaults to false, is true)."""
    if not leaves:
        return {}
    candidates: dict[str, bool] = {}
    for leaf in leaves:
        holder = _holder(leaf)
        given = _get(raw, holder[:-1]) if holder else raw
        for name, value in (given.items() if isinstance(given, dict) else ()):
            if value is False:
                candidates[holder + name] = True
        for path, value in stored.items():
            if value is False and _holder(path) == holder and not path.rsplit(".", 1)[-1].startswith("_"):
                candidates.setdefault(path, _get(raw, path) is False)
    if not candidates:
        return {}

    def overlap(flag: str) -> int:
        words = set(flag.rsplit(".", 1)[-1].split("_"))
        return max(len(words & set(leaf.rsplit(".", 1)[-1].split("_"))) for leaf in leaves)

    # The file's own flags first, then the ones that share a word with a leaf (use_sliding_window).
    ordered = sorted(candidates, key=lambda f: (not candidates[f], -overlap(f)))[:12]

    def kept(flipped: list[str]) -> set[str] | None:
        trial = _copy(raw)
        for flag in flipped:
            if "." in flag and not isinstance(_get(trial, _holder(flag)[:-1]), dict):
                continue  # a nested config the file does not spell out
            _set(trial, flag, True)
        try:
            after = _storage(_build_quietly(cls, trial))
        except Exception:
            return None
        out = set()
        for leaf in leaves:
            want = _get(raw, leaf)
            name = leaf.rsplit(".", 1)[-1]
            # Where it goes when kept: its own place, a traced place, or a nested config that a
            # composite class moves flat keys into (qwen2_vl's text_config).
            places = [leaf] + [path for path, how in landed.get(leaf, []) if how == "same"]
            places += [path for path in after if path.endswith("." + name) and path.count(".") == leaf.count(".") + 1]
            if any(path in after and _same(want, _plain(after[path], None))
                   and not _same(want, _plain(stored.get(path, _MISSING), None)) for path in places):
                out.add(leaf)
        return out

    found: dict[str, list[Any]] = {}
    together = kept(ordered)
    if together is not None and not together:
        return {}
    if len(ordered) == 1:
        return {leaf: [ordered[0], candidates[ordered[0]]] for leaf in together or ()}
    wanted = set(together) if together is not None else set(leaves)
    for flag in ordered[:6]:  # which one switches each leaf; the likeliest flags come first
        for leaf in kept([flag]) or ():
            found.setdefault(leaf, [flag, candidates[flag]])
        if wanted <= set(found):
            break
    return found


def _is_sub_config(node: dict[str, Any], path: str) -> bool:
    for part in path.split("."):
        value = node.get("values", {}).get(part) if isinstance(node, dict) else None
        if not (isinstance(value, dict) and "__config__" in value):
            return False
        node = value
    return True


def _delete(tree: dict[str, Any], path: str) -> None:
    holder = _get(tree, _holder(path)[:-1]) if "." in path else tree
    if isinstance(holder, dict):
        holder.pop(path.rsplit(".", 1)[-1], None)


def _leaves_of(tree: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(tree, dict):
        return [leaf for k, v in tree.items() if isinstance(k, str) for leaf in _leaves_of(v, f"{prefix}.{k}")]
    return [(prefix, tree)]


def _deciders(cls: type, raw: dict[str, Any], leaves: list[str], stored: dict[str, Any], node: dict[str, Any]) -> dict[str, list[Any]]:
    """For each leaf the class did not keep, another value of the file that decides what is stored
    in its place: {leaf: [other file path, stored path, how, leaf_is_input]}.

    ``how`` is "copies" (the place holds the other value) or "derives" (the place follows it through
    a computation: MiMo's sliding_window = sliding_window_size + 1). ``leaf_is_input`` says whether
    the class reads the leaf at all once the other key is gone: rope_theta beside
    rope_parameters.rope_theta is an input (two inputs that disagree), GLM-DSA's head_dim is not (the
    class always sets it from qk_rope_head_dim)."""
    found: dict[str, list[Any]] = {}
    builds = 0

    def build(trial: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal builds
        builds += 1
        try:
            return _storage(_build_quietly(cls, trial))
        except Exception:
            return None

    for index, leaf in enumerate(leaves):
        name, top = leaf.rsplit(".", 1)[-1], leaf.split(".", 1)[0]
        mine = _get(raw, leaf)
        here = stored.get(leaf, _MISSING)
        holder_path = _holder(leaf)[:-1]
        holder = _get(raw, holder_path) if holder_path else raw
        containers = [(f"{holder_path}.{k}" if holder_path else k) for k in holder if isinstance(k, str)]
        containers += [k for k in raw if isinstance(k, str) and k != top and k not in containers]
        for container in containers:
            if container == leaf or builds >= 12 or leaf in found or _is_sub_config(node, container):
                continue  # a whole nested config is no rival of one value: taking it out changes everything
            value = _get(raw, container)
            words = set(name.split("_")) - {""}
            rivals = [
                (path, v) for path, v in _leaves_of(value, container)
                if path.rsplit(".", 1)[-1] == name
                or (isinstance(v, (int, float, str)) and not isinstance(v, bool)
                    and ((here is not _MISSING and _same(v, _plain(here, None))) or _same(v, mine)
                         # a dropped key: where would it go? rivals share a word (rotary_pct,
                         # rope_parameters.partial_rotary_factor)
                         or (here is _MISSING and type(v) is type(mine)
                             and words & set(path.rsplit(".", 1)[-1].split("_")))))
            ]
            if not rivals:
                continue
            trial = _copy(raw)
            _delete(trial, container)
            sentinel = _sentinel(mine, index)
            if sentinel is not None:
                _set(trial, leaf, sentinel)
            without = build(trial)
            if without is None:
                continue
            want = sentinel if sentinel is not None else mine
            lands = [path for path, v in without.items() if _same(want, _plain(v, None))]
            place = leaf if here is not _MISSING else (lands[0] if lands else None)
            if place is None or place not in stored:
                continue
            is_input = place in lands
            for rival, rival_value in rivals:
                decides, how = is_input, None
                if _same(rival_value, _plain(stored[place], None)):
                    how = "copies"
                rival_sentinel = _sentinel(rival_value, index + 60)
                if rival_sentinel is not None:
                    trial = _copy(raw)
                    _set(trial, rival, rival_sentinel)
                    moved = build(trial)
                    if moved is not None and place in moved and not _same(_plain(moved[place], None), _plain(stored[place], None)):
                        decides = True
                        how = how or ("copies" if _same(_plain(moved[place], None), rival_sentinel) else "derives")
                if decides and how is None:
                    how = "derives"
                if decides:
                    found[leaf] = [rival, place, how, is_input]
                    break
    return found


_DECLARED_CACHE: dict[type, frozenset[str]] = {}


def _declared(cls: type) -> frozenset[str]:
    """Names a config class reads: its fields or __init__ parameters, its aliases, and the base
    class's own attributes."""
    if cls not in _DECLARED_CACHE:
        import dataclasses
        import inspect

        names: set[str] = set(getattr(cls, "attribute_map", {}) or {})
        for klass in cls.__mro__:
            if dataclasses.is_dataclass(klass):
                names.update(f.name for f in dataclasses.fields(klass))
            init = vars(klass).get("__init__")
            if init is not None:
                try:
                    names.update(inspect.signature(init).parameters)
                except (TypeError, ValueError):
                    pass
            names.update(k for k, v in vars(klass).items() if not k.startswith("__"))
        try:
            from transformers import PretrainedConfig

            with class_voice(None):
                names.update(vars(PretrainedConfig()))
        except Exception:
            pass
        _DECLARED_CACHE[cls] = frozenset(names)
    return _DECLARED_CACHE[cls]


_ALIAS_PAIRS: dict[str, set[str]] | None = None


def alias_vocabulary() -> dict[str, set[str]]:
    """Every attribute_map pair that transformers' config classes declare, both ways round (n_layer
    <-> num_hidden_layers), read from their source text: importing every class would take seconds."""
    global _ALIAS_PAIRS
    if _ALIAS_PAIRS is None:
        _ALIAS_PAIRS = _read_vocabulary_cache()
    if _ALIAS_PAIRS is None:
        import re
        from pathlib import Path

        import transformers.models

        pairs: dict[str, set[str]] = {}
        block = re.compile(r"attribute_map(?:\s*:\s*[^=]+)?\s*=\s*\{([^}]*)\}")
        pair = re.compile(r"[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']\s*:\s*[\"']([A-Za-z_][A-Za-z0-9_]*)[\"']")
        for folder in transformers.models.__path__:
            for path in Path(folder).glob("*/configuration_*.py"):
                try:
                    data = path.read_bytes()
                except OSError:
                    continue
                start = data.find(b"attribute_map")
                if start < 0:
                    continue
                text = data[start:].decode("utf-8", errors="replace")
                for match in block.finditer(text):
                    for a, b in pair.findall(match.group(1)):
                        pairs.setdefault(a, set()).add(b)
                        pairs.setdefault(b, set()).add(a)
        _ALIAS_PAIRS = pairs
        _write_vocabulary_cache(pairs)
    return _ALIAS_PAIRS


def _vocabulary_cache_file() -> Any:
    """Where the alias vocabulary of this transformers install is kept between runs: the draftguard
    cache dir (as check/matrix.py finds it), keyed by version and install path."""
    import hashlib
    from pathlib import Path

    import transformers

    base = os.environ.get("DRAFTGUARD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(str(Path.home()), ".cache"), "draftguard")
    where = hashlib.sha256(str(Path(transformers.__file__).resolve()).encode()).hexdigest()[:12]
    return Path(base) / "vocabulary" / f"attribute-maps-{transformers.__version__}-{where}.json"


def _read_vocabulary_cache() -> dict[str, set[str]] | None:
    try:
        data = json.loads(_vocabulary_cache_file().read_text())
        return {k: set(v) for k, v in data.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return None


def _write_vocabulary_cache(pairs: dict[str, set[str]]) -> None:
    try:
        path = _vocabulary_cache_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({k: sorted(v) for k, v in pairs.items()}))
        os.replace(temporary, path)  # atomic: parallel checks never read half a file
    except OSError:
        pass  # a read-only cache only costs the next run the scan again


def _unread_aliases(cls: type, raw: dict[str, Any], config: Any) -> dict[str, str]:
    """Keys of the file the class does not read that other classes read as another name for one of
    this class's fields: {file key: the field the model code reads instead}."""
    own = vars(config)
    # Unread keys are kept verbatim as extra attributes; a key the class pops is read.
    unread = [k for k, v in raw.items() if isinstance(k, str) and not k.startswith("_")
              and isinstance(v, int) and not isinstance(v, bool) and own.get(k, _MISSING) == v]
    if unread:
        declared = _declared(cls)
        unread = [k for k in unread if k not in declared]
    if not unread:
        return {}
    vocabulary = alias_vocabulary()
    out = {}
    for key in unread:
        for field_name in sorted(vocabulary.get(key, ())):
            if field_name in declared and field_name not in getattr(cls, "attribute_map", {}) and hasattr(config, field_name):
                out[key] = field_name
                break
    memo = ("unread", cls, _shape(raw), tuple(sorted(out.items())))
    if out and memo in _FLAG_CACHE:
        return dict(_FLAG_CACHE[memo])
    if out:
        _FLAG_CACHE[memo] = _unread_for_certain(cls, raw, config, out)
        return dict(_FLAG_CACHE[memo])
    return out


def _unread_for_certain(cls: type, raw: dict[str, Any], config: Any, out: dict[str, str]) -> dict[str, str]:
    """The candidates of ``out`` that the class does not read at all."""
    if out:
        # Unread for certain: set to sentinels, they change nothing but their own stored copy. A key
        # the class pops and computes from (DeepSeek-V4's qk_rope_head_dim) is read.
        trial = _copy(raw)
        sentinels = {key: 7920 + 240 * i for i, key in enumerate(out)}
        trial.update(sentinels)
        try:
            before, after = _storage(config), _storage(_build_quietly(cls, trial))
        except Exception:
            return {}
        moved = {path for path, value in after.items() if not _same(_plain(value, None), _plain(before.get(path, _MISSING), None))}
        if moved - set(out):
            read = {key for key in out if any(_same(after[path], sentinels[key]) or path not in out for path in moved)}
            out = {key: f for key, f in out.items() if key not in read}
    return out


def node_values(node: dict[str, Any]) -> dict[str, Any]:
    """A node's values with nested config nodes replaced by their own values, for dotted lookups."""
    return {k: node_values(v) if isinstance(v, dict) and "__config__" in v else v for k, v in node["values"].items()}


_GENERATION_NAMES: frozenset[str] | None = None
# GenerationConfig built from one dict's exact content (a process that checks a config twice).
_GENERATION_CACHE: dict[str, Any] = {}


def _generation_kept(raw: dict[str, Any], dropped: list[str]) -> dict[str, Any]:
    """The dropped keys that are generation parameters: GenerationConfig, built from the dict that
    holds them (config.json itself, or a nested config), carries them with the same value. This is
    what transformers does with config.json when a repo has no generation_config.json."""
    from transformers import GenerationConfig

    global _GENERATION_NAMES
    if _GENERATION_NAMES is None:
        with class_voice(None):
            _GENERATION_NAMES = frozenset(k for k in vars(GenerationConfig()) if not k.startswith("_"))
    out: dict[str, Any] = {}
    built: dict[str, Any] = {}
    for leaf in dropped:
        if leaf.rsplit(".", 1)[-1] not in _GENERATION_NAMES:
            continue
        holder_path, _, name = leaf.rpartition(".")
        holder = _get(raw, holder_path) if holder_path else raw
        if not isinstance(holder, dict):
            continue
        if holder_path not in built:
            content = json.dumps(holder, sort_keys=True, default=str)
            if content not in _GENERATION_CACHE:
                try:
                    with class_voice(None):
                        _GENERATION_CACHE[content] = GenerationConfig.from_model_config(_copy(holder))
                except Exception:
                    _GENERATION_CACHE[content] = None
            built[holder_path] = _GENERATION_CACHE[content]
        generation = built[holder_path]
        value = getattr(generation, name, _MISSING) if generation is not None else _MISSING
        if value is not _MISSING and _same(holder[name], _plain(value, None)):
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
    except Exception:
        return {}
    return {leaf: raw[leaf] for leaf in top if leaf in saved and _same(raw[leaf], _plain(saved[leaf], None))}


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
    - ``deciders``: {file path: [other file path, stored path, how, is_input, value]}, another
      value of the file that decides what is stored in the leaf's place (``_deciders``);
    - ``translations``: {file path: {old name: new name}}, name lists the class translates;
    - ``stored_tables``: the dicts the traced values landed in, as stored.

    Example::

        >>> from transformers import GPTNeoXConfig
        >>> raw = {"model_type": "gpt_neox", "rotary_pct": 0.25}
        >>> config = GPTNeoXConfig(**raw)
        >>> gather_evidence(GPTNeoXConfig, raw, config, _node(config, raw), [])["landed"]["rotary_pct"][0][0]
        'rope_parameters.partial_rotary_factor'
    """
    for cache, limit in ((_TRACE_CACHE, 4096), (_FLAG_CACHE, 8192), (_GENERATION_CACHE, 256)):
        if len(cache) > limit:  # a long-running bot meets new shapes for ever: start afresh
            cache.clear()
    # Judged without evidence (fidelity's _class_label and _private_key): a nested config's model_type
    # label and private state such as _attn_implementation. Tracing them would cost builds for nothing.
    leaves = [leaf for leaf in _changed_leaves(raw, node)
              if not (leaf.endswith(".model_type") or leaf.rsplit(".", 1)[-1].startswith("_"))]
    evidence: dict[str, Any] = {"messages": [m for m in messages if m.strip()][:20], "landed": {}, "flags": {},
                                "serialised": {}, "generation": {}, "unread": {}, "deciders": {},
                                "translations": {}, "gates": {}, "ignored": []}
    values = node_values(node) if leaves else {}
    dropped = [leaf for leaf in leaves if _get(values, leaf) is _MISSING]
    if dropped:
        # Generation parameters first: a file may carry dozens, and they need no tracing.
        evidence["generation"] = _generation_kept(raw, dropped)
        leaves = [leaf for leaf in leaves if leaf not in evidence["generation"]]
    leaves = leaves[:_MAX_TRACED]
    if leaves:
        stored = _LazyStorage(config)
        key = (cls, _shape(raw), tuple(leaves))
        cached = _TRACE_CACHE.get(key)
        if cached is not None and any(path not in stored for leaf, places in cached.items() if leaf != "__ignored__"
                                      for path, _ in places):
            # The shape leaves numbers out; where they decide a place (per-layer override indices),
            # a cached place this file lacks means: trace this file afresh.
            cached = None
            _FLAG_CACHE.pop(key, None)
            _FLAG_CACHE.pop(("deciders", key), None)
        if cached is None:
            _TRACE_CACHE[key] = _trace(cls, raw, leaves, stored.full())
        landed = dict(_TRACE_CACHE[key])
        ignored = landed.pop("__ignored__", [])
        evidence["landed"] = {
            leaf: [[path, how, _plain(stored.get(path), None)] for path, how in places if path in stored]
            for leaf, places in landed.items()
        }
        evidence["ignored"] = [leaf for leaf in ignored if _get(values, leaf) is not _MISSING]
        tables = {path.rsplit(".", 1)[0] for places in landed.values() for path, how in places if "." in path}
        refused = [leaf for leaf in leaves if "." in leaf and not landed.get(leaf)]
        evidence["stored_tables"] = {  # for values the class refused to trace: see fidelity._traced
            table: {name: _plain(value, None) for name, value in stored.table(table).items()}
            for table in sorted(tables) if refused
        }
        unexplained = [leaf for leaf in leaves if not any(
            how == "same" and path in stored and _same(_get(raw, leaf), _plain(stored[path], None))
            for path, how in landed.get(leaf, []))]
        if unexplained:
            if key not in _FLAG_CACHE:
                _FLAG_CACHE[key] = _switches(cls, raw, unexplained, landed, stored.full())
            switches = {k: v for k, v in _FLAG_CACHE[key].items() if k in unexplained}
            evidence["flags"] = {k: flag for k, (flag, in_file) in switches.items() if in_file}
            evidence["gates"] = {k: flag for k, (flag, in_file) in switches.items() if not in_file}
            rest = [leaf for leaf in unexplained if leaf not in switches]
            if rest:
                if ("deciders", key) not in _FLAG_CACHE:
                    _FLAG_CACHE[("deciders", key)] = _deciders(cls, raw, rest, stored.full(), node)
                evidence["deciders"] = {
                    leaf: [rival, place, how, is_input, _plain(stored.get(place), None)]
                    for leaf, (rival, place, how, is_input) in _FLAG_CACHE[("deciders", key)].items()
                    if place in stored
                }
            evidence["translations"] = _translations(cls, raw, rest, node)
            rest = [leaf for leaf in rest if leaf not in evidence["deciders"] and leaf not in evidence["translations"]]
            evidence["serialised"] = _serialised(config, raw, rest)
    evidence["unread"] = _unread_aliases(cls, raw, config)
    return evidence


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

    Example::

        >>> resolve({"model_type": "qwen3", "sliding_window": 2048})["values"]["sliding_window"] is None
        True
    """
    _refuse_implausible(raw)
    remote = trust_remote_code and isinstance(raw.get("auto_map"), dict) and "AutoConfig" in raw["auto_map"]
    cls = None
    messages: list[str] = []
    try:
        if remote and pretrained is not None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(pretrained, revision=revision, trust_remote_code=True)
        else:
            cls = _config_class(raw, trust_remote_code)
            # Same as cls.from_dict(raw) when no kwargs are passed, which is what from_pretrained
            # does, minus from_dict's eager f-string log of the whole config (half its cost). What the
            # class says while it builds is kept: it is the evidence of a deliberate correction.
            with class_voice(messages) if trace else contextlib.nullcontext():
                config = cls(**_copy(raw))
    except ResolveError:
        raise
    except KeyError as exc:
        nested = _nested_model_type(raw, exc.args[0] if exc.args else None)
        if nested is None:
            raise _rejected(exc, raw, cls) from None
        raise ResolveError(
            "model_type_unknown",
            f"`{nested}` {_get(raw, nested)!r} is unknown to transformers {transformers_version()}: the "
            "nested config names a model type this version does not ship.",
            key=nested,
        ) from None
    except Exception as exc:  # the class's own validation: any exception type is possible
        raise _rejected(exc, raw, cls) from None
    node = _node(config, raw)
    if trace and cls is not None:
        try:
            node["evidence"] = gather_evidence(cls, raw, config, node, messages)
        except Exception as exc:  # evidence is extra: a class that breaks under tracing is still judged
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
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    detail = " ".join(line.strip() for line in str(exc).strip().splitlines()[1:2])
    message = f"{type(exc).__name__}: {first_line}" + (f" {detail}" if detail else "")
    aliases = getattr(cls, "attribute_map", None)
    return ResolveError("class_rejected", message, key=_key_in_message(str(exc), raw, aliases))


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


if __name__ == "__main__":
    sys.exit(main())
