"""Which engines a check asks about (``--engine vllm==0.32.0,sglang==0.5.23``), and the versions whose
code the light tier's rules were read from.

In: engine specs as text, from the CLI, .draftguard.yml ``engines:`` or the Action's ``engines`` input.
Out: ``EngineSpec`` (engine, version, the transformers that version installs, the facts' source), or
``BadInput`` naming the bad spec. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from packaging.version import InvalidVersion, Version

from draftguard.check.engines import releases
from draftguard.snapshot import BadInput

# The engine releases the light tier knows, and the transformers each installs: every release whose data
# was generated from its own code (``releases``: the serve parser, methods, quantization; one file per
# engine) or whose model registry was (``registry``: data/<engine>-<version>.json).
@lru_cache(maxsize=None)
def known() -> dict[str, dict[str, str]]:
    """engine -> {release: the transformers it installs}, oldest first."""
    registries = Path(__file__).resolve().parent / "data"  # registry.DATA (registry imports this module)
    out: dict[str, dict[str, str]] = {}
    for name in SHOWN:
        versions: dict[str, str] = {}
        for version in releases.known(name):
            versions[version] = releases.facts(name, version).transformers or ""
        for path in registries.glob(f"{name}-*.json"):  # the registry's: read with the transformers it installs
            version = path.stem[len(name) + 1:]
            facts = json.loads(path.read_text())
            versions[version] = str(facts.get("transformers") or versions.get(version) or "")
        out[name] = dict(sorted(versions.items(), key=lambda kv: sort_key(kv[0])))
    return out


SHOWN = {"vllm": "vLLM", "sglang": "SGLang"}
_SPEC_RE = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_-]*)\s*(==\s*(?P<version>[0-9][0-9A-Za-z.+-]*))?$")


@dataclass(frozen=True)
class EngineSpec:
    """One engine version a check asks about."""

    name: str  # "vllm" or "sglang"
    version: str
    transformers: str  # the transformers version that engine version installs

    @property
    def shown(self) -> str:
        """How messages name it: "vLLM 0.32.0"."""
        return f"{SHOWN[self.name]} {self.version}"


def parse_engines(values: Iterable[str] | str, *, source: str = "--engine") -> list[EngineSpec]:
    """Engine specs from ``name==version`` items (a comma-separated string or a list); a bare name
    means the newest version the light tier knows. Raises BadInput for an unknown engine or a version
    whose code was not read (the light tier has no facts for it, and guessing would be a quiet lie).

    Raises:
        BadInput: An unknown engine, or a version the light tier has no facts for.

    Example::

        >>> [s.shown for s in parse_engines("vllm==0.32.0, sglang")]
        ['vLLM 0.32.0', 'SGLang 0.5.23']
    """
    items = values.split(",") if isinstance(values, str) else list(values)
    out: list[EngineSpec] = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        match = _SPEC_RE.match(text)
        name = match.group("name").lower() if match else None
        if not match or name not in known():
            raise BadInput(f"{source}: {text!r} is not an engine spec; give vllm==0.32.0 or sglang==0.5.23 "
                           "(comma-separated)", key="engines")
        version = match.group("version") or newest(name)
        if version not in known()[name]:
            raise BadInput(f"{source}: {SHOWN[name]} {version} is not one whose code draftguard has read; the "
                           f"engine rules know {name}=={oldest(name)} to {name}=={newest(name)} "
                           f"({len(known()[name])} releases: `draftguard engines list`)", key="engines")
        spec = EngineSpec(name, version, known()[name][version])
        if spec not in out:
            out.append(spec)
    if not out:
        raise BadInput(f"{source}: no engine given", key="engines")
    return out


def __getattr__(name: str) -> object:  # ``KNOWN``: read on first use (the data files are not read at import)
    if name == "KNOWN":
        return known()
    raise AttributeError(name)


def sort_key(version: str) -> Version:
    """A release's place in time (``packaging``'s ordering: 0.9.2 < 0.10.1.1 < 0.34.0rc1 < 0.34.0); a
    version packaging cannot read sorts first."""
    try:
        return Version(version)
    except InvalidVersion:
        return Version("0")


def newest(name: str) -> str:
    """The newest release of an engine the light tier knows."""
    return max(known()[name], key=sort_key)


def oldest(name: str) -> str:
    """The oldest release of an engine the light tier knows."""
    return min(known()[name], key=sort_key)
