"""The node of a resolved config: what ``getattr(config, key)`` returns for every key, as JSON.

In: a built config object and the raw dict it was built from.
Out: ``config_node`` (``{"__config__", "attribute_map", "values", "defaults"}``, nested configs as
nested nodes) and the small tree helpers every evidence module shares: ``plain``, ``same``,
``copy_tree``, ``get_path``/``set_path`` on dotted paths, ``MISSING``. ``refuse_implausible`` stops a
forged layer count before a class builds per-layer lists from it.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from .classes import BOOKKEEPING_KEYS, ResolveError


def plain(value: Any, raw: Any) -> Any:
    """A JSON-safe copy of a resolved value. Nested configs become nodes."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [plain(v, None) for v in value]
    if isinstance(value, dict):
        return {str(k): plain(v, None) for k, v in value.items()}
    if is_config(value):
        return config_node(value, raw if isinstance(raw, dict) else {})
    # torch.dtype, enums and the like: their text is what a reader compares.
    text = str(value)
    return text[len("torch.") :] if text.startswith("torch.") else text


def is_config(value: Any) -> bool:
    return hasattr(value, "attribute_map") and hasattr(value, "to_dict") and hasattr(value, "model_type")


# Keys whose class default the judge compares against (was a missing key filled by a default, or
# derived from another key of the file?).
DEFAULTED_KEYS = ("head_dim", "sliding_window", "hidden_size", "num_attention_heads")
_DEFAULTS_CACHE: dict[type, dict[str, Any]] = {}


def _class_defaults(cls: type) -> dict[str, Any]:
    if cls not in _DEFAULTS_CACHE:
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
        _DEFAULTS_CACHE[cls] = {k: plain(v, None) for k, v in found.items()}
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
        return plain(getattr(config, "per_layer_config", None), None)
    view = config.per_layer_config
    out: dict[str, Any] = {}
    for layer, overrides in raw.items():
        try:
            layer_config = view[int(layer)]
        except (ValueError, IndexError, KeyError, TypeError):
            continue  # a layer the class did not keep: the judge reports it dropped
        if isinstance(overrides, dict):
            out[str(layer)] = {k: plain(getattr(layer_config, k, None), None) for k in overrides}
    return out


def config_node(config: Any, raw: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    own = vars(config)
    keys = [k for k in raw if isinstance(k, str)]
    keys += [k for k in own if not k.startswith("_") and k not in raw]
    # getattr through PreTrainedConfig.__getattribute__ costs more than building the config; for a
    # plain instance attribute (no alias, no property, no per-layer config) it returns own[key].
    aliases = getattr(type(config), "attribute_map", None) or {}
    special = _class_descriptors(type(config))
    homogeneous = own.get("_heterogeneity_spec") is None
    per_layer = set() if homogeneous else set(getattr(own.get("_heterogeneity_spec"), "per_layer_attributes", ()) or ())
    for key in keys:
        if key in BOOKKEEPING_KEYS:
            continue
        if key == "per_layer_config" and not homogeneous:
            values[key] = _per_layer_values(config, raw.get(key))
            continue
        if (homogeneous or key in per_layer) and key in own and key not in aliases and key not in special:
            # A per-layer attribute of a heterogeneous config refuses global reads; its global value
            # (the one layers without an override use) is the instance attribute.
            value = own[key]
        else:
            try:
                value = getattr(config, key)
            except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
                raise
            except Exception:  # a dropped key: AttributeError, or a property that raises
                continue
        values[key] = plain(value, raw.get(key))
    return {
        "__config__": type(config).__name__,
        "attribute_map": dict(getattr(type(config), "attribute_map", {}) or {}),
        "values": values,
        "defaults": _class_defaults(type(config)),
    }


# Config classes build per-layer lists from layer counts; a forged value of 10**12 (or 3e7, a float)
# would exhaust memory or hold a worker for minutes. Any key that counts layers is capped, whatever
# its name (num_mtp_layers, num_nextn_predict_layers, n_layer, decoder_layers, first_k_dense_replace),
# not only the three common names: a class reads counts under names nobody lists in advance.
_LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "first_k_dense_replace")
MAX_LAYERS = 10_000


def counts_layers(key: str) -> bool:
    """Whether a config key names a count of layers (capped at MAX_LAYERS before a class sees it).

    Example::

        >>> [counts_layers(k) for k in ("num_mtp_layers", "first_k_dense_replace", "vocab_size_per_layer_input")]
        [True, True, False]
    """
    return key in _LAYER_COUNT_KEYS or ("layer" in key and not any(w in key for w in ("size", "dim", "input", "id")))


def refuse_implausible(raw: dict[str, Any], prefix: str = "") -> None:
    for key, value in raw.items():
        if isinstance(value, dict):
            refuse_implausible(value, f"{prefix}{key}.")
        elif (counts_layers(key) and isinstance(value, (int, float)) and not isinstance(value, bool)
              and not abs(value) <= MAX_LAYERS):  # NaN and infinities too
            raise ResolveError(
                "class_rejected",
                f"`{prefix}{key}` is {value}; more than {MAX_LAYERS} layers is not a real model "
                "(refused before the config class builds per-layer lists of that length).",
                key=prefix + key,
            )


def copy_tree(value: Any) -> Any:
    # Classes normalise nested dicts in place (rope_parameters); the caller's raw must stay raw.
    if isinstance(value, dict):
        return {k: copy_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_tree(v) for v in value]
    return value


# Attributes a class validates under another name than the file's key.
_FILE_KEYS_OF = {"rope_parameters": ("rope_scaling", "rope_theta", "partial_rotary_factor"), "dtype": ("torch_dtype",)}


def key_in_message(message: str, raw: dict[str, Any], aliases: dict[str, str] | None = None) -> str | None:
    """The key of the file that a class's error message is about, so the error can point at its line."""
    # What the message quotes, read once: a file of many keys and a message that repeats a long value
    # cost keys x message length when each key is searched for (18 s for 20,000 keys and 200 KB).
    between = {part for q in "'`\"" for part in message.split(q)[1:-1]}

    def quoted(key: str) -> bool:
        if "'" in key or "`" in key or '"' in key:  # the split above cannot see these: ask the text
            return f"'{key}'" in message or f"`{key}`" in message or f'"{key}"' in message
        return key in between

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



def same(a: Any, b: Any) -> bool:
    """Equal as model code uses them (fidelity.same's rules, repeated here: this module is standalone)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


MISSING: Any = object()


def get_path(tree: Any, path: str) -> Any:
    for part in path.split("."):
        if isinstance(tree, dict) and part in tree:
            tree = tree[part]
        else:
            return MISSING
    return tree


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        tree = tree[part]
    tree[parts[-1]] = value


def node_values(node: dict[str, Any]) -> dict[str, Any]:
    """A node's values with nested config nodes replaced by their own values, for dotted lookups."""
    return {k: node_values(v) if isinstance(v, dict) and "__config__" in v else v for k, v in node["values"].items()}
