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
        raise ResolveError(
            "remote_code_required",
            f"model_type {model_type!r} is not built into transformers {transformers_version()}; the "
            f"repo ships its own config class ({auto_map['AutoConfig']}). Pass --trust-remote-code "
            "to run it, only if you trust this repo's code.",
            key="model_type",
        )
    import difflib

    close = difflib.get_close_matches(model_type, list(CONFIG_MAPPING.keys()), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ResolveError(
        "model_type_unknown",
        f"model_type {model_type!r} is unknown to transformers {transformers_version()}.{hint}",
        key="model_type",
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
DEFAULTED_KEYS = ("head_dim", "sliding_window")
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


def resolve(
    raw: dict[str, Any],
    *,
    trust_remote_code: bool = False,
    pretrained: str | None = None,
    revision: str | None = None,
) -> dict[str, Any]:
    """Resolve ``raw`` through its transformers config class and return the node of what the model
    code reads. Raises ResolveError when no class applies or the class rejects the values.

    ``pretrained`` (a folder or Hub repo id) is used only with ``trust_remote_code``, to load the
    repo's own config class.

    Example::

        >>> resolve({"model_type": "qwen3", "sliding_window": 2048})["values"]["sliding_window"] is None
        True
    """
    _refuse_implausible(raw)
    remote = trust_remote_code and isinstance(raw.get("auto_map"), dict) and "AutoConfig" in raw["auto_map"]
    cls = None
    try:
        if remote and pretrained is not None:
            from transformers import AutoConfig

            config = AutoConfig.from_pretrained(pretrained, revision=revision, trust_remote_code=True)
        else:
            cls = _config_class(raw, trust_remote_code)
            # Same as cls.from_dict(raw) when no kwargs are passed, which is what from_pretrained
            # does, minus from_dict's eager f-string log of the whole config (half its cost).
            config = cls(**_copy(raw))
    except ResolveError:
        raise
    except Exception as exc:  # the class's own validation: any exception type is possible
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        detail = " ".join(line.strip() for line in str(exc).strip().splitlines()[1:2])
        message = f"{type(exc).__name__}: {first_line}" + (f" {detail}" if detail else "")
        aliases = getattr(cls, "attribute_map", None)
        raise ResolveError("class_rejected", message, key=_key_in_message(str(exc), raw, aliases)) from None
    return _node(config, raw)


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
                )
            )
        except ResolveError as exc:
            results.append({"error": exc.to_json()})
    json.dump({"transformers_version": transformers_version(), "results": results}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
