"""What each known engine release's launcher accepts, read from data generated from that release's own code.

The one reader of ``data/releases/<engine>.json`` (written by ``scripts/gen_engine_releases.py``). Pure: no
engine is imported; versions are parsed and compared with ``packaging.version.Version`` (``v0.34.0rc1``,
``0.10.1.1``, ``0.12.0.post2`` all parse).

The file::

    {"engine": "vllm",
     "releases": {                          # oldest first (the reader sorts again, by Version)
       "0.10.1.1": {
         "source": "how the release was read (its parser's entrypoint, the interpreter, stand-ins)",
         "generated": "2026-12-04",          # the day the data was read
         "transformers": "4.57.6",           # the transformers on the path when it was read
         "stubbed": [],                      # modules stood in for while importing it (never a fact source)
         "options": {                        # every long option of the serve parser, without "--"
           "disable-log-requests": "switch", # takes no value (store_true/false, --x/--no-x)
           "max-model-len": "value",         # takes a value: "value", or its simple type "int"/"float"/"json"
           "dtype": ["auto", "bfloat16", ...] # takes one of these (argparse choices, as text)
         },
         "deprecated": {"task": "the release's own words"},
         "quantization_methods": [...],      # what the release accepts for --quantization
         "speculative_methods": [...],       # SpeculativeConfig's method names (vLLM) / --speculative-algorithm
         "mtp_drafters": {"architecture:Glm4MoeForCausalLM": "Glm4MoeMTPModel",
                          "model_type:deepseek_v3": "DeepSeekMTPModel", ...},
                                             # vLLM: the targets `method: mtp` drafts for, and the draft model
                                             # (SpeculativeConfig.hf_config_override run on probe configs)
         "missing": {"key": "why it could not be read"}   # only where a list could not be read
       }, ...}}

In: an engine name ("vllm", "sglang") and release texts as users write them.
Out: the known releases, their facts (``ReleaseFacts``), and answers about options, values and which MTP
targets a release drafts for (``mtp_drafter``, ``first_mtp_drafting``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from packaging.version import InvalidVersion, Version  # a base dependency through transformers and huggingface_hub

DATA = Path(__file__).resolve().parent / "data" / "releases"
NEWEST_WORDS = ("latest", "nightly")


@dataclass(frozen=True)
class ReleaseFacts:
    """One release's launcher, as its own code built it."""

    engine: str
    version: str
    source: str
    generated: str | None
    transformers: str | None
    options: Mapping[str, str | tuple[str, ...]]  # name -> "switch" | "value" | "int" | "float" | "json" | choices
    deprecated: Mapping[str, str]
    quantization_methods: frozenset[str] | None  # None: not read for this release
    speculative_methods: frozenset[str] | None
    stubbed: tuple[str, ...] = ()
    mtp_drafters: Mapping[str, str] | None = None  # "architecture:X" / "model_type:t" -> vLLM's MTP draft model


def parse_version(text: str) -> Version | None:
    """A release as written (``v0.10.1``, ``0.34.0rc1``, ``0.10.1.1+cpu``), or None if it is not one.

    >>> parse_version("v0.34.0rc1") < parse_version("0.34.0")
    True
    >>> parse_version("nightly") is None
    True
    """
    text = text.strip()
    if text[:1] in ("v", "V"):
        text = text[1:]
    try:
        return Version(text)
    except InvalidVersion:
        return None


@lru_cache(maxsize=None)
def _releases(engine: str) -> dict[str, ReleaseFacts]:
    path = DATA / f"{engine}.json"
    if not path.is_file():
        return {}
    raw = json.loads(path.read_text())["releases"]
    out = {}
    for version in sorted(raw, key=Version):
        r = raw[version]
        options = {k: tuple(v) if isinstance(v, list) else v for k, v in r["options"].items()}
        out[version] = ReleaseFacts(
            engine=engine, version=version, source=r["source"], generated=r.get("generated"),
            transformers=r.get("transformers"), options=MappingProxyType(options),
            deprecated=MappingProxyType(dict(r.get("deprecated", {}))),
            quantization_methods=frozenset(r["quantization_methods"]) if "quantization_methods" in r else None,
            speculative_methods=frozenset(r["speculative_methods"]) if "speculative_methods" in r else None,
            stubbed=tuple(r.get("stubbed", ())),
            mtp_drafters=MappingProxyType(dict(r["mtp_drafters"])) if "mtp_drafters" in r else None)
    return out


@lru_cache(maxsize=None)
def _parsed(engine: str) -> tuple[tuple[str, Version], ...]:
    return tuple((r, Version(r)) for r in _releases(engine))


def known(engine: str) -> list[str]:
    """The releases known for ``engine``, oldest first (empty for an engine with no data)."""
    return list(_releases(engine))


def newest(engine: str) -> str:
    releases = known(engine)
    if not releases:
        raise LookupError(f"no release data for engine {engine!r}")
    return releases[-1]


def resolve(engine: str, text: str) -> str | None:
    """The known release a pin means: ``latest``/``nightly`` the newest; an exact match (by Version:
    ``v0.20.0`` is ``0.20.0``); else the newest known release of the same base release (``0.10.1.post2``
    -> ``0.10.1``, ``0.34.0rc1`` -> ``0.34.0``: a pre-release or post-release of a known release is read as
    it), else of the same x.y.z (``0.10.1`` -> ``0.10.1.1`` where only 0.10.1.1 is known: 0.10.1.1 is
    0.10.1's fix release); else the newest known release older than it; None if older than all known or
    not a version.

    >>> resolve("vllm", "latest") == newest("vllm")
    True
    """
    releases = known(engine)
    if not releases:
        return None
    if text.strip().lower() in NEWEST_WORDS:
        return releases[-1]
    wanted = parse_version(text)
    if wanted is None:
        return None
    parsed = _parsed(engine)
    for rule in (lambda v: v == wanted, lambda v: v.release == wanted.release,
                 lambda v: v.release[:3] == wanted.release[:3]):
        same = [r for r, v in parsed if rule(v)]
        if same:
            return same[-1]
    older = [r for r, v in parsed if v < wanted]
    return older[-1] if older else None


def facts(engine: str, version: str) -> ReleaseFacts:
    """The facts of the release ``version`` means (see ``resolve``); LookupError if none."""
    release = resolve(engine, version)
    if release is None:
        raise LookupError(f"no known {engine} release for {version!r} (known: {', '.join(known(engine))})")
    return _releases(engine)[release]


def _option_name(engine: str, name: str) -> str:
    """``--max_model_len`` -> ``max-model-len`` (vLLM's parser reads underscores as dashes);
    ``--speculative-config.method`` -> ``speculative-config`` (its dotted keys)."""
    name = name.strip().lstrip("-").split("=", 1)[0].split(".", 1)[0]
    return name.replace("_", "-") if engine == "vllm" else name


def _option(release: ReleaseFacts, name: str) -> str | None:
    """The long option ``name`` stands for in ``release``'s parser: itself, or the one option it is an
    unambiguous prefix of (argparse's rule); None if the parser refuses it."""
    name = _option_name(release.engine, name)
    if not name:
        return None
    if name in release.options:
        return name
    longer = [o for o in release.options if o.startswith(name)]
    return longer[0] if len(longer) == 1 else None


def option_kind(engine: str, version: str, name: str) -> str | None:
    """"switch" (takes no value), "value", or None where the release's parser refuses the option."""
    release = facts(engine, version)
    option = _option(release, name)
    if option is None:
        return None
    return "switch" if release.options[option] == "switch" else "value"


def option_choices(engine: str, version: str, name: str) -> tuple[str, ...] | None:
    """The values the release's parser allows for an option (argparse choices), or None if any."""
    release = facts(engine, version)
    option = _option(release, name)
    kind = release.options[option] if option else None
    return kind if isinstance(kind, tuple) else None


def deprecation(engine: str, version: str, name: str) -> str | None:
    """The release's own words where it marks the option deprecated, else None."""
    release = facts(engine, version)
    option = _option(release, name)
    return release.deprecated.get(option) if option else None


def accepts(engine: str, version: str, name: str) -> bool:
    return option_kind(engine, version, name) is not None


def first_refusing(engine: str, option: str, after: str) -> str | None:
    """The first known release newer than ``after`` whose parser refuses ``option``, or None."""
    start = parse_version(resolve(engine, after) or after)
    if start is None:
        raise ValueError(f"not a release: {after!r}")
    for release in known(engine):
        if Version(release) > start and option_kind(engine, release, option) is None:
            return release
    return None


def last_accepting(engine: str, option: str) -> str | None:
    """The newest known release whose parser accepts ``option``, or None if none does."""
    for release in reversed(known(engine)):
        if option_kind(engine, release, option) is not None:
            return release
    return None


def refuses_value(engine: str, version: str, option: str, value: str) -> bool:
    """Whether the release's parser refuses ``value`` for ``option``: not among the option's choices, not a
    number where its type is int or float, or, for ``--quantization``, not among its quantization methods.
    False where the release puts no bound on the option's values, or does not know the option (that is
    ``option_kind``'s answer)."""
    release = facts(engine, version)
    name = _option(release, option)
    if name is None:
        return False
    kind = release.options[name]
    if isinstance(kind, tuple):
        if value in kind:
            return False
        if all(c.lstrip("-").isdigit() for c in kind if c != "None") and value.strip().lstrip("-").isdigit():
            return str(int(value)) not in kind  # choices of type int: argparse compares the number
        return True
    if name == "quantization" and release.quantization_methods is not None:
        return value not in release.quantization_methods
    if kind in ("int", "float"):  # argparse's type= conversion refuses what is not a number of that kind
        try:
            (int if kind == "int" else float)(value)
        except ValueError:
            return True
    return False


def mtp_keys(raw: Mapping[str, Any]) -> list[str]:
    """A config.json's keys into ``mtp_drafters``: each architecture, its ``model_type`` and its text
    config's. Example: ``mtp_keys({"architectures": ["MiMoForCausalLM"], "model_type": "qwen2"})`` is
    ``["architecture:MiMoForCausalLM", "model_type:qwen2"]``."""
    archs = raw.get("architectures") if isinstance(raw.get("architectures"), list) else []
    keys = [f"architecture:{a}" for a in archs if isinstance(a, str)]
    if isinstance(raw.get("model_type"), str):
        keys.append(f"model_type:{raw['model_type']}")
    text = raw.get("text_config")
    if isinstance(text, Mapping) and isinstance(text.get("model_type"), str):
        keys.append(f"model_type:{text['model_type']}")
    return keys


def mtp_drafter(version: str, raw: Mapping[str, Any]) -> tuple[str, str] | None | bool:
    """(matched key, draft model) where vLLM ``version`` drafts for this target with ``method: mtp``;
    None where it does not; False where the release's drafters were not read (no judgement)."""
    release = _releases("vllm").get(version)
    if release is None or release.mtp_drafters is None:
        return False
    for key in mtp_keys(raw):
        if key in release.mtp_drafters:
            return key, release.mtp_drafters[key]
    return None


def first_mtp_drafting(raw: Mapping[str, Any], after: str | None = None) -> str | None:
    """The oldest known vLLM release (newer than ``after``) that drafts for this target with ``method: mtp``."""
    for version, parsed in _parsed("vllm"):
        if after is not None and parsed <= Version(after):
            continue
        if mtp_drafter(version, raw):
            return version
    return None
