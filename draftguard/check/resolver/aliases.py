"""Unread aliases: keys a class ignores that other transformers classes read as another name of
one of its fields (a Mamba file's ``n_layer`` beside ``num_hidden_layers``).

In: a config class, the raw dict and the built config; transformers' own configuration sources.
Out: ``unread_aliases`` ({file key: the field the model code reads instead}) and
``alias_vocabulary`` (every attribute_map pair, both ways round), cached on disk per install.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

from .nodes import MISSING, copy_tree, plain, same
from .budget import spend, unmetered
from .tracing import FLAG_CACHE, build_quietly, class_voice, file_shape, storage


_DECLARED_CACHE: dict[type, frozenset[str]] = {}


def _declared(cls: type) -> frozenset[str]:
    """Names a config class reads: its fields or __init__ parameters, its aliases, and the base
    class's own attributes."""
    if cls not in _DECLARED_CACHE:
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
            # transformers: after hide_torch(), else it imports torch
            from transformers import PretrainedConfig

            with class_voice(None):
                names.update(vars(PretrainedConfig()))
        except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
            raise
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
        with unmetered():  # once per process, whatever the file: not the file's time budget
            cached = _read_vocabulary_cache()
            _ALIAS_PAIRS = cached if cached is not None else _scan_vocabulary()
    return _ALIAS_PAIRS


def _scan_vocabulary() -> dict[str, set[str]]:
    """Read the attribute_map pairs from transformers' configuration sources, and keep them on disk."""
    import transformers.models  # transformers: after hide_torch(), else it imports torch

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
    _write_vocabulary_cache(pairs)
    return pairs


def _vocabulary_cache_file() -> Any:
    """Where the alias vocabulary of this transformers install is kept between runs: the draftguard
    cache dir (as check/matrix.py finds it), keyed by version and install path."""
    import transformers  # transformers: after hide_torch(), else it imports torch

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


def unread_aliases(cls: type, raw: dict[str, Any], config: Any) -> dict[str, str]:
    """Keys of the file the class does not read that other classes read as another name for one of
    this class's fields: {file key: the field the model code reads instead}."""
    own = vars(config)
    # Unread keys are kept verbatim as extra attributes; a key the class pops is read.
    unread = [k for k, v in raw.items() if isinstance(k, str) and not k.startswith("_")
              and isinstance(v, int) and not isinstance(v, bool) and own.get(k, MISSING) == v]
    if unread:
        declared = _declared(cls)
        unread = [k for k in unread if k not in declared]
    if not unread:
        return {}
    vocabulary = alias_vocabulary()
    out = {}
    for key in unread:
        spend()
        for field_name in sorted(vocabulary.get(key, ())):
            if field_name in declared and field_name not in getattr(cls, "attribute_map", {}) and hasattr(config, field_name):
                out[key] = field_name
                break
    memo = ("unread", cls, file_shape(raw), tuple(sorted(out.items())))
    if out and memo in FLAG_CACHE:
        return dict(FLAG_CACHE[memo])
    if out:
        FLAG_CACHE[memo] = _unread_for_certain(cls, raw, config, out)
        return dict(FLAG_CACHE[memo])
    return out


def _unread_for_certain(cls: type, raw: dict[str, Any], config: Any, out: dict[str, str]) -> dict[str, str]:
    """The candidates of ``out`` that the class does not read at all."""
    if out:
        # Unread for certain: set to sentinels, they change nothing but their own stored copy. A key
        # the class pops and computes from (DeepSeek-V4's qk_rope_head_dim) is read.
        trial = copy_tree(raw)
        sentinels = {key: 7920 + 240 * i for i, key in enumerate(out)}
        trial.update(sentinels)
        try:
            before, after = storage(config), storage(build_quietly(cls, trial))
        except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
            raise
        except Exception:
            return {}
        # A key whose sentinel does not reach its own stored copy is computed by the class (Swin's
        # hidden_size from embed_dim and the stages; M2M100 4.52's num_hidden_layers from
        # encoder_layers): what getattr returns is the class's value, and the file's equals it.
        out = {key: f for key, f in out.items() if same(after.get(key, MISSING), sentinels[key])}
        if out:
            # A key the class sets itself when the file leaves it out, to the file's value (Swin's
            # hidden_size in 5.x, computed and then overwritten by the file's equal value), is the
            # class's own attribute, read by code that asks getattr: not an unread alias.
            without = {k: v for k, v in raw.items() if k not in out}
            try:
                own = storage(build_quietly(cls, without))
            except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
                raise
            except Exception:
                own = {}
            out = {key: f for key, f in out.items() if not same(plain(own.get(key, MISSING), None), raw[key])}
        moved = {path for path, value in after.items() if not same(plain(value, None), plain(before.get(path, MISSING), None))}
        if moved - set(out):
            read = {key for key in out if any(same(after[path], sentinels[key]) or path not in out for path in moved)}
            out = {key: f for key, f in out.items() if key not in read}
    return out
