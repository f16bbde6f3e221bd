""".draftguard.yml: a repo's settings for draftguard, read from the default branch.

Every key is optional. Unknown keys and wrong types are errors that name the file, line and key,
so a typo never silently turns a check off.

In: the text of a .draftguard.yml and its name (``parse_settings``), or a folder (``load_settings``).
Out: ``Settings`` (defaults for every key missing; all defaults when there is no file), or
``BadInput`` naming the file, line and key. YAML aliases and files over 256 KB are refused.

Example .draftguard.yml::

    target: Qwen/Qwen3-8B            # the drafter's target model (folder or Hub repo id)
    transformers: ["4.52.4", "5.24.0"]
    fail_on: error
    min_acceptance_length: 3.0
    launch: ["deploy/*.sh", "docker-compose.yml"]   # engine launches to check (globs)
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from draftguard import RAW_HOME
from draftguard.snapshot import SETTINGS_NAME, BadInput
MAX_SETTINGS_BYTES = 256 * 1024


SEVERITIES = ("off", "info", "warning", "error")  # what `rules:` may set a rule to
RULE_ID_PATTERN = r"^DG[0-9]{3}$"


@dataclass(frozen=True)
class Ignore:
    """One ``ignore:`` entry: findings of ``rule`` (an id or a rule name), in files matching ``path``
    (a glob against the path from the repository root; any file when None), on ``key`` (a dotted
    key; any key when None), are silenced, for ``reason`` (required)."""

    rule: str
    reason: str
    path: str | None = None
    key: str | None = None
    line: int | None = None

    def covers(self, file: str, key: str) -> bool:
        """Whether a finding in ``file`` (relative to the repository root) on ``key`` is in this
        entry's place (which rule, ``check.policy`` says). A path glob matches the file or a folder
        above it (``drafters/*`` covers ``drafters/a/config.json``).

        Example::

            >>> Ignore("DG001", "known", path="drafters/*/config.json").covers("drafters/a/config.json", "k")
            True
            >>> Ignore("DG001", "known", path="drafters", key="k").covers("drafters/a/config.json", "other")
            False
        """
        if self.key is not None and self.key != key:
            return False
        if self.path is None:
            return True
        pattern = self.path.strip("/")
        return fnmatch.fnmatchcase(file, pattern) or fnmatch.fnmatchcase(file, pattern + "/*")


@dataclass
class Settings:
    """Parsed .draftguard.yml. Add a field here (with its type in ``_TYPES``) to add a key."""

    target: str | None = None
    transformers: list[str] = field(default_factory=list)
    fail_on: str = "error"
    paths: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)  # globs `check` with no TARGET leaves out
    min_acceptance_length: float | None = None
    baseline: str | None = None
    tolerance: float = 0.95
    num_prompts: int | None = None
    max_new_tokens: int | None = None
    block_size: int | None = None
    backend: str | None = None
    prompts: str | None = None  # acceptance prompts: "builtin" or a JSONL file in the repo
    fix_pull_request: bool = False  # the Hub bot opens a Hub PR with the proven fix of main's findings
    engines: list[str] = field(default_factory=list)  # "vllm==0.32.0": engine views (check.engines)
    launch: list[str] = field(default_factory=list)  # launch files (globs): serve scripts, compose, k8s
    rules: dict[str, str] = field(default_factory=dict)  # rule id or name -> off | info | warning | error
    ignore: list[Ignore] = field(default_factory=list)  # findings silenced, each with a reason
    source: str | None = None  # where these settings came from, for messages
    lines: dict[str, int] = field(default_factory=dict, repr=False)  # key (and "rules.DG005") -> its line

    def line_of(self, key: str) -> str:
        """``file:line`` of a key (``rules.DG005`` for a rule's entry), for messages."""
        line = self.lines.get(key)
        return f"{self.source or SETTINGS_NAME}:{line}" if line else (self.source or SETTINGS_NAME)


_TYPES: dict[str, tuple[type, ...]] = {
    "target": (str,),
    "transformers": (list,),
    "engines": (list,),
    "launch": (list,),
    "fail_on": (str,),
    "paths": (list,),
    "exclude": (list,),
    "min_acceptance_length": (int, float),
    "baseline": (str,),
    "tolerance": (int, float),
    "num_prompts": (int,),
    "max_new_tokens": (int,),
    "block_size": (int,),
    "backend": (str,),
    "prompts": (str,),
    "fix_pull_request": (bool,),
    "rules": (dict,),
    "ignore": (list,),
}
# Fields of Settings that are not keys of the file.
INTERNAL = ("source", "lines")
# One line per key: the JSON Schema's descriptions and docs/settings.md (a test keeps them in step).
HELP = {
    "target": "A drafter's target model: a folder (relative to this file) or a Hub repo id (owner/name).",
    "transformers": "Check under each of these transformers versions (the version matrix).",
    "engines": "Also say what these engines serve, e.g. vllm==0.32.0 (check --engine).",
    "launch": "Engine launches to check (globs, relative to the repository root): serve scripts, compose files, "
              "Kubernetes manifests (check --launch-file).",
    "fail_on": "The severity that fails a check: error, warning or never.",
    "paths": "Folders the bot also checks on every pull request, and the only ones `check` with no TARGET "
             "searches for model configs (relative to the repository root).",
    "exclude": "Globs (relative to the repository root) `check` with no TARGET leaves out when it searches "
               "for model configs: a folder's glob leaves out everything below it.",
    "min_acceptance_length": "The acceptance test's bar on the mean acceptance length (tau).",
    "baseline": "The acceptance test's baseline: a result JSON to compare with.",
    "tolerance": "The share of the baseline's tau a run must reach (0.95).",
    "num_prompts": "How many prompts the acceptance test runs.",
    "max_new_tokens": "Tokens generated per prompt in the acceptance test.",
    "block_size": "The drafter's block size for the acceptance test, where its config does not say.",
    "backend": "The acceptance test's backend: reference, vllm or both.",
    "prompts": "The acceptance test's prompts: builtin or a JSONL file in the repository.",
    "fix_pull_request": "Hub bot: open a Hub PR with the proven fix of main's configs.",
    "rules": "A severity per rule (id or name): off, info, warning or error.",
    "ignore": "Findings silenced, each with a reason: rule (required), path (a glob), key, reason (required).",
}
_CHOICES = {"fail_on": ("error", "warning", "never"), "backend": ("reference", "vllm", "both")}


_NONE = object()


@functools.lru_cache(maxsize=1)
def _no_alias_loader() -> type:
    """Built on first use: yaml is imported only when settings are read."""
    import yaml  # yaml: only a .draftguard.yml pays its import

    class NoAliasLoader(yaml.SafeLoader):
        """A SafeLoader that refuses aliases (``*name``). Settings never need them, and a few hundred
        bytes of nested aliases expand to gigabytes (a "billion laughs"): untrusted YAML is read
        without any expansion at all."""

        def compose_node(self, parent, index):  # type: ignore[no-untyped-def]
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in settings",
                                                  event.start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node, deep=False):  # type: ignore[no-untyped-def]
            """Refuse a key written twice in one mapping: YAML would keep the last silently, and a
            setting that silently loses is a check silently turned off."""
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark)
                except TypeError:  # an unhashable key: SafeLoader's own error says so
                    break
                if first is not key_node.start_mark:
                    raise DuplicateKey(key, first, key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

    class DuplicateKey(yaml.constructor.ConstructorError):
        def __init__(self, key: Any, first: Any, again: Any):
            super().__init__(None, None, f"duplicate key `{key}`", again)
            self.key, self.first = key, first

    NoAliasLoader.DuplicateKey = DuplicateKey  # type: ignore[attr-defined]
    return NoAliasLoader


def _line(text: str, mark: Any) -> int:
    """The line of a YAML mark as GitHub counts it (only \\n ends a line): YAML also breaks lines at
    U+0085, U+2028 and U+2029, so its own line number can point below the key (B1 of issue 32)."""
    return text.count("\n", 0, mark.index) + 1


def parse_settings(text: str, source: str = SETTINGS_NAME) -> Settings:
    """Parse the text of a .draftguard.yml. Raises BadInput naming the file, line and key.

    Raises:
        BadInput: The text is not YAML, holds an alias, or a key or value is not a setting.

    Example::

        >>> parse_settings("transformers: [4.52.4, 5.24.0]\\nfail_on: warning\\n").transformers
        ['4.52.4', '5.24.0']
    """
    import yaml  # yaml: only a .draftguard.yml pays its import

    if len(text) > MAX_SETTINGS_BYTES:
        raise BadInput(f"{source}: over {MAX_SETTINGS_BYTES // 1024} KB; refused", file=source)
    try:
        root = yaml.compose(text, Loader=_no_alias_loader())
        data = yaml.load(text, Loader=_no_alias_loader())
    except _no_alias_loader().DuplicateKey as exc:  # type: ignore[attr-defined]
        line = _line(text, exc.problem_mark)
        raise BadInput(f"{source}:{line}: duplicate key `{exc.key}` (first on line {_line(text, exc.first)}); "
                       "YAML would keep the last one silently: keep one", file=source, line=line,
                       key=str(exc.key)) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = _line(text, mark) if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        where = f"{source}:{line}" if line else source
        raise BadInput(f"{where}: invalid YAML: {problem}", file=source, line=line) from None
    if data is None:
        return Settings(source=source)
    if not isinstance(data, dict):
        raise BadInput(f"{source}:1: the top level must be a mapping of settings", file=source, line=1)
    lines: dict[str, int] = {}
    items: dict[str, list[int]] = {}  # a list key -> the line of each item
    if isinstance(root, yaml.MappingNode):
        for key_node, value_node in root.value:
            lines[str(key_node.value)] = _line(text, key_node.start_mark)
            if isinstance(value_node, yaml.MappingNode):
                for sub, _ in value_node.value:
                    lines[f"{key_node.value}.{sub.value}"] = _line(text, sub.start_mark)
            elif isinstance(value_node, yaml.SequenceNode):
                items[str(key_node.value)] = [_line(text, item.start_mark) for item in value_node.value]
    values: dict[str, Any] = {}
    known = settings_keys()
    for key, value in data.items():
        line = lines.get(str(key))
        where = f"{source}:{line}" if line else source
        if key not in known:
            near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
            hint = f"; did you mean `{near[0]}`?" if near else ""
            raise BadInput(
                f"{where}: unknown key `{key}`{hint} (known: {', '.join(sorted(known))})",
                file=source, line=line, key=str(key),
            )
        if value is None:
            continue
        types = _TYPES[key]
        if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
            want = " or ".join(t.__name__ for t in types)
            raise BadInput(
                f"{where}: `{key}` must be {want}, got {type(value).__name__} {value!r}",
                file=source, line=line, key=key,
            )
        if key in ("transformers", "paths", "engines", "launch", "exclude"):
            bad = next((v for v in value if isinstance(v, (list, dict, bool)) or v is None), _NONE)
            if bad is not _NONE:
                raise BadInput(f"{where}: `{key}` must be a list of strings, got an item {type(bad).__name__}",
                               file=source, line=line, key=key)
            value = [str(v) for v in value]
            if key == "paths":
                for folder in value:
                    if folder.startswith("/") or "\\" in folder or ".." in folder.split("/"):
                        raise BadInput(f"{where}: `paths` entries are folders inside the repo; {folder!r} is not",
                                       file=source, line=line, key=key)
        if key == "rules":
            value = _rules(value, source, lines)
        if key == "ignore":
            value = _ignores(value, source, items.get("ignore", []), line)
        if key in _CHOICES and value not in _CHOICES[key]:
            raise BadInput(
                f"{where}: `{key}` must be one of {', '.join(_CHOICES[key])}, got {value!r}",
                file=source, line=line, key=key,
            )
        values[key] = value
    return Settings(source=source, lines=lines, **values)


def settings_keys() -> list[str]:
    """The keys a .draftguard.yml may hold: every field of Settings but the internal ones."""
    return [f.name for f in fields(Settings) if f.name not in INTERNAL]


def _rules(value: dict, source: str, lines: dict[str, int]) -> dict[str, str]:
    """``rules:``: rule (an id or a name; which exist, ``check.policy`` says) -> a severity or off.
    YAML reads a bare ``off`` as False: it means off."""
    out = {}
    for rule, level in value.items():
        line = lines.get(f"rules.{rule}") or lines.get("rules")
        where = f"{source}:{line}" if line else source
        if level is False:
            level = "off"
        if not isinstance(rule, str) or level not in SEVERITIES:
            raise BadInput(f"{where}: `rules` maps a rule id or name to one of {', '.join(SEVERITIES)}; "
                           f"got {rule!r}: {level!r}", file=source, line=line, key=f"rules.{rule}")
        out[rule] = level
    return out


_IGNORE_KEYS = ("rule", "path", "key", "reason")


def _ignores(value: list, source: str, item_lines: list[int], line: int | None) -> list[Ignore]:
    """``ignore:``: each entry a mapping of rule (required), path, key and reason (required)."""
    out = []
    for index, entry in enumerate(value):
        at = item_lines[index] if index < len(item_lines) else line
        where = f"{source}:{at}" if at else source
        if not isinstance(entry, dict):
            raise BadInput(f"{where}: each `ignore` entry is a mapping with rule, reason and path or key",
                           file=source, line=at, key="ignore")
        unknown = [k for k in entry if k not in _IGNORE_KEYS]
        if unknown:
            near = difflib.get_close_matches(str(unknown[0]), _IGNORE_KEYS, n=1, cutoff=0.6)
            hint = f"; did you mean `{near[0]}`?" if near else ""
            raise BadInput(f"{where}: unknown key `{unknown[0]}` in an `ignore` entry{hint} (known: "
                           f"{', '.join(_IGNORE_KEYS)})", file=source, line=at, key=f"ignore.{unknown[0]}")
        for name in _IGNORE_KEYS:
            if entry.get(name) is not None and not isinstance(entry[name], str):
                raise BadInput(f"{where}: `ignore` entry's `{name}` must be str, got {type(entry[name]).__name__}",
                               file=source, line=at, key=f"ignore.{name}")
        for name in ("rule", "reason"):
            if not (entry.get(name) or "").strip():
                raise BadInput(f"{where}: an `ignore` entry needs a `{name}`"
                               + (" (say why this finding may stand)" if name == "reason" else ""),
                               file=source, line=at, key=f"ignore.{name}")
        out.append(Ignore(rule=entry["rule"].strip(), reason=entry["reason"].strip(), path=entry.get("path"),
                          key=entry.get("key"), line=at))
    return out


def find_settings(start: str | Path) -> Path | None:
    """The .draftguard.yml a local check reads, by one rule (the Action's: the repository's own file):
    the nearest folder from ``start`` (a folder or a file) upward that holds .draftguard.yml, never
    above the repository root (the folder holding ``.git``); None when there is none."""
    here = Path(os.path.abspath(start))
    if not here.is_dir():
        here = here.parent
    for folder in (here, *here.parents):
        if (folder / SETTINGS_NAME).is_file():
            return folder / SETTINGS_NAME
        if (folder / ".git").exists():
            return None
    return None


def repository_root(start: str | Path) -> Path | None:
    """The git repository holding ``start`` (the nearest folder upward holding ``.git``), else None."""
    here = Path(os.path.abspath(start))
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return None


def settings_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of .draftguard.yml, made from Settings: every key, its type,
    its choices and its line of help. ``draftguard settings schema`` prints it; the package ships it
    as draftguard/data/draftguard.schema.json and docs/ publishes it for editors."""
    json_type = {str: "string", list: "array", int: "integer", float: "number", bool: "boolean", dict: "object"}
    props: dict[str, Any] = {}
    for name in settings_keys():
        types = _TYPES[name]
        kinds = sorted({json_type[t] for t in types} - ({"integer"} if float in types else set()))
        prop: dict[str, Any] = {"description": HELP.get(name, "")}
        prop["type"] = kinds[0] if len(kinds) == 1 else kinds
        if name in _CHOICES:
            prop["enum"] = list(_CHOICES[name])
        if prop["type"] == "array" and name != "ignore":
            prop["items"] = {"type": "string"}
        if name == "rules":
            prop["propertyNames"] = {"pattern": "^(DG[0-9]{3}|[a-z0-9-]+)$"}
            prop["additionalProperties"] = {"enum": [*SEVERITIES, False]}
        if name == "ignore":
            prop["items"] = {
                "type": "object", "required": ["rule", "reason"], "additionalProperties": False,
                "properties": {k: {"type": "string", "minLength": 1} for k in _IGNORE_KEYS},
            }
        props[name] = prop
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"{RAW_HOME}/main/docs/draftguard.schema.json",
        "title": ".draftguard.yml",
        "description": "draftguard's settings for a model repository (docs/settings.md).",
        "type": "object",
        "additionalProperties": False,
        "properties": props,
    }


def load_settings(folder: str | Path) -> Settings:
    """Read ``.draftguard.yml`` from a folder (or the file itself); defaults when there is none."""
    path = Path(folder) if str(folder).endswith(SETTINGS_NAME) or Path(folder).is_file() else Path(folder) / SETTINGS_NAME
    if not path.is_file():
        return Settings()
    if path.stat().st_size > MAX_SETTINGS_BYTES:
        raise BadInput(f"{path}: over {MAX_SETTINGS_BYTES // 1024} KB; refused", file=str(path))
    return parse_settings(path.read_text(encoding="utf-8", errors="replace"), str(path))
