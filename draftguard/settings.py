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

import functools
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from draftguard.snapshot import SETTINGS_NAME, BadInput
MAX_SETTINGS_BYTES = 256 * 1024


@dataclass
class Settings:
    """Parsed .draftguard.yml. Add a field here (with its type in ``_TYPES``) to add a key."""

    target: str | None = None
    transformers: list[str] = field(default_factory=list)
    fail_on: str = "error"
    paths: list[str] = field(default_factory=list)
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
    source: str | None = None  # where these settings came from, for messages


_TYPES: dict[str, tuple[type, ...]] = {
    "target": (str,),
    "transformers": (list,),
    "engines": (list,),
    "launch": (list,),
    "fail_on": (str,),
    "paths": (list,),
    "min_acceptance_length": (int, float),
    "baseline": (str,),
    "tolerance": (int, float),
    "num_prompts": (int,),
    "max_new_tokens": (int,),
    "block_size": (int,),
    "backend": (str,),
    "prompts": (str,),
    "fix_pull_request": (bool,),
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
    lines = {}
    if isinstance(root, yaml.MappingNode):
        for key_node, _ in root.value:
            lines[str(key_node.value)] = _line(text, key_node.start_mark)
    values: dict[str, Any] = {}
    known = {f.name for f in fields(Settings)} - {"source"}
    for key, value in data.items():
        line = lines.get(str(key))
        where = f"{source}:{line}" if line else source
        if key not in known:
            raise BadInput(
                f"{where}: unknown key `{key}` (known: {', '.join(sorted(known))})", file=source, line=line, key=str(key)
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
        if key in ("transformers", "paths", "engines", "launch"):
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
        if key in _CHOICES and value not in _CHOICES[key]:
            raise BadInput(
                f"{where}: `{key}` must be one of {', '.join(_CHOICES[key])}, got {value!r}",
                file=source, line=line, key=key,
            )
        values[key] = value
    return Settings(source=source, **values)


def load_settings(folder: str | Path) -> Settings:
    """Read ``.draftguard.yml`` from a folder; defaults when there is none."""
    path = Path(folder) / SETTINGS_NAME
    if not path.is_file():
        return Settings()
    if path.stat().st_size > MAX_SETTINGS_BYTES:
        raise BadInput(f"{path}: over {MAX_SETTINGS_BYTES // 1024} KB; refused", file=str(path))
    return parse_settings(path.read_text(encoding="utf-8", errors="replace"), str(path))
