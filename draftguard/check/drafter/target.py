"""Finding and loading a drafter's target model, locally or on the Hub.

The target comes from ``--target``, else ``.draftguard.yml`` ``target:``, else the speculators
format's ``speculators_config.verifier.name_or_path``. A bot passes ``allow_local=False``: the name
then comes from repository content and must be a Hub repo id, never a path on the host.

In: the drafter's ``Snapshot`` and ``DrafterFormat`` and an explicit name (``find_target``); a name
and where it came from (``load_target``).
Out: (name, origin, base folder) or None; a ``TargetModel`` (resolved values, snapshot, tokenizer),
or ``BadInput`` naming the origin when the target cannot be read.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from draftguard.check import resolver
from draftguard.check.budget import raise_if_over_budget
from draftguard.check.drafter.detect import DrafterFormat
from draftguard.check.drafter.files import GENERATION_CONFIG, HubUnreachable, TokenizerFiles, _is_int, read_optional
from draftguard.settings import MAX_SETTINGS_BYTES, load_settings, parse_settings
from draftguard.snapshot import CONFIG_NAME, SETTINGS_NAME, BadInput, Snapshot, hub_snapshot, load_snapshot


@dataclass
class TargetModel:
    """The target's config values (resolved by its transformers class), where they came from,
    and its tokenizer when it ships one."""

    name: str
    origin: str  # "--target", ".draftguard.yml" or the speculators verifier key
    snapshot: Snapshot
    values: dict[str, Any]
    tokenizer: "TokenizerFiles | None" = None

    def value(self, key: str) -> Any:
        return self.values.get(key)

    @property
    def shown(self) -> str:
        return self.snapshot.path_of("config.json")


class NamedTarget(str):
    """A drafter's target name handed down as ``--target`` is, that carries where it was named
    (``origin``) when that is not ``--target`` itself: the CLI reads `target:` of a .draftguard.yml
    above the drafter's folder and passes it on, and a problem with it must name that file, not the
    flag nobody passed (issue 42)."""

    origin: str = "--target"

    def __new__(cls, name: str, origin: str = "--target") -> "NamedTarget":
        made = super().__new__(cls, name)
        made.origin = origin
        return made


def origin_of(target: str) -> str:
    """Where a target handed down as a name was named: ``--target``, or the settings file it came from."""
    return getattr(target, "origin", "--target")


def named_by(origin: str) -> str:
    """``origin`` for a message: a settings file's `target:` with its line, else as it is.

    Example::

        >>> named_by("--target")
        '--target'
    """
    if origin.endswith(SETTINGS_NAME):
        try:
            text = Path(origin).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return origin
        line = next((i for i, row in enumerate(text.split("\n"), 1) if re.match(r"target\s*:", row)), None)
        return f"`target:` of {origin}" + (f" line {line}" if line else "")
    return origin


def _text_values(node: dict[str, Any]) -> dict[str, Any]:
    """The values that describe the decoder stack: the top level, or ``text_config`` of a
    multimodal target (Qwen3.5, LLaVA), whose hidden states the drafter reads."""
    values = node.get("values", {})
    text = values.get("text_config")
    if "num_hidden_layers" not in values and isinstance(text, dict) and "values" in text:
        return text["values"]
    return values


def _split_revision(name: str) -> tuple[str, str | None]:
    if "@" in name and not Path(name).exists():
        repo, _, revision = name.rpartition("@")
        return repo, revision or None
    return name, None


def load_target(name: str, origin: str, *, base: Path | None = None, trust_remote_code: bool = False,
                allow_local: bool = True, anonymous: bool = False, confine: Path | None = None) -> TargetModel:
    """Fetch a target's config.json (a folder or a Hub repo id, ``owner/name@revision`` allowed)
    and resolve it. Raises BadInput, naming where the target came from, when it cannot be read.

    ``allow_local=False`` (the bots, where the name comes from repository content) accepts only a
    Hub repo id and never reads the host's files, even when a folder of that name exists.
    ``anonymous=True`` (a name from a pull request's files) reads it without the host's token: a
    public repo, or nothing. ``confine`` (the Action: a checkout on a runner) refuses a local path
    that resolves outside that folder unless the user named it (``--target``)."""
    if not allow_local:
        _require_hub_id(name, origin)
        repo, _, revision = name.partition("@")
        try:
            snapshot = hub_snapshot(repo, revision or None, (CONFIG_NAME,), token=False if anonymous else None)
        except BadInput as exc:
            why = (" (a target named in the pull request's files is read without the bot's token, so only a "
                   "public one; name a private target in `target:` of .draftguard.yml on the default branch)"
                   if anonymous else "")
            raise BadInput(f"target from {named_by(origin)}: {exc}{why}", file=exc.file, line=exc.line, key=exc.key) from None
        return _resolved_target(name, origin, snapshot, trust_remote_code)
    if base is not None and not Path(name).is_absolute() and (base / name).exists():
        name = os.path.normpath(base / name)
    if confine is not None and origin != "--target" and Path(name).exists() \
            and not Path(name).resolve().is_relative_to(Path(confine).resolve()):
        # A name from the checked files (a verifier, a drafter folder's settings) reads nothing of this
        # machine outside the repository, through a path or a symlink (R5 of issue 25).
        raise BadInput(f"target from {named_by(origin)}: {name!r} is outside the repository; only Hub repo ids and "
                       "folders inside the repository are read")
    repo, revision = _split_revision(name)
    try:
        snapshot = load_snapshot(repo, revision)
    except BadInput as exc:
        hint = ("" if origin == "--target" else " (or pass --target with a local folder of the target)"
                if origin.endswith(SETTINGS_NAME) else " (or name a folder of the target in the repository)")
        raise BadInput(f"target from {named_by(origin)}: {exc}{hint}", file=exc.file, line=exc.line, key=exc.key) from None
    return _resolved_target(name, origin, snapshot, trust_remote_code)


# Exactly owner/name (optionally @revision): a Hub repo, never something the host could read.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*(@[\w./-]+)?$")


def _require_hub_id(name: str, origin: str) -> None:
    repo, _, revision = name.partition("@")
    # A revision goes into the URL path (/resolve/<revision>/...): no `..` or empty parts (R4 of issue 25).
    bad_revision = bool(revision) and any(part in ("", ".", "..") for part in revision.split("/"))
    if not _HUB_ID.match(name) or ".." in repo or repo.endswith((".", "-")) or bad_revision:
        raise BadInput(f"target from {named_by(origin)}: {name!r} is not a Hub repo id (owner/name); only Hub "
                       "targets are read here, so name one in `target:` of .draftguard.yml")


def _resolved_target(name: str, origin: str, snapshot: Snapshot, trust_remote_code: bool) -> TargetModel:
    raw = snapshot.load_json()
    try:
        node = resolver.resolve(raw, trust_remote_code=trust_remote_code,
                                pretrained=snapshot.local_dir if not snapshot.is_hub else snapshot.source,
                                revision=snapshot.revision)
        values = _text_values(node)
    except resolver.ResolveError as exc:
        raise_if_over_budget(exc, f"target {name} ({origin})")  # never judged against raw values quietly
        # A target that transformers cannot resolve can still be compared by its raw values.
        text = raw.get("text_config")
        values = text if "num_hidden_layers" not in raw and isinstance(text, dict) else raw
    return TargetModel(name=name, origin=origin, snapshot=snapshot, values=values, tokenizer=TokenizerFiles(snapshot))


def find_target(snapshot: Snapshot, fmt: DrafterFormat, explicit: str | None, *,
                allow_local: bool = True) -> tuple[str, str, Path | None] | None:
    """Which target to check against: ``--target``, then ``.draftguard.yml``, then the speculators
    verifier. Returns (name, origin, folder that relative names are relative to).

    Raises:
        BadInput: With ``allow_local=False``, the name is not a Hub repo id.

    ``allow_local=False`` (the bots) reads no settings from the host and raises BadInput when the
    name is not a Hub repo id (owner/name), so repository content cannot point at the host's files."""
    if not allow_local:
        found = (explicit, origin_of(explicit)) if explicit else (
            (fmt.verifier, "speculators_config.verifier.name_or_path") if fmt.verifier else None)
        if found is None:
            return None
        _require_hub_id(*found)
        return found[0], found[1], None
    if explicit:
        return explicit, origin_of(explicit), None
    if snapshot.is_hub:
        found = _hub_settings_target(snapshot)
        if found is not None:
            return found
    if not snapshot.is_hub and snapshot.local_dir:
        settings = load_settings(snapshot.local_dir)
        if settings.target:
            return settings.target, str(Path(snapshot.local_dir) / SETTINGS_NAME), Path(snapshot.local_dir)
    if fmt.verifier:
        base = Path(snapshot.local_dir) if not snapshot.is_hub and snapshot.local_dir else None
        return fmt.verifier, "speculators_config.verifier.name_or_path", base
    return None


def _hub_settings_target(snapshot: Snapshot) -> tuple[str, str, None] | None:
    """``target:`` of a Hub drafter's own .draftguard.yml, at the drafter's revision.

    The file is optional: absent, or not fetched because the Hub is out of reach (offline with
    nothing cached), the target comes from elsewhere and the check goes on. Its text is kept in the
    snapshot so that DG100 can point at the `target:` line. The name must be a Hub repo id: a file
    in someone's Hub repo must not make this host read its own folders."""
    shown = f"{snapshot.source}@{snapshot.revision or 'main'}/{SETTINGS_NAME}"
    try:
        data = read_optional(snapshot, SETTINGS_NAME, MAX_SETTINGS_BYTES)
    except HubUnreachable:
        return None
    if data is None:
        return None
    settings = parse_settings(data.decode("utf-8", errors="replace"), shown)
    if not settings.target:
        return None
    _require_hub_id(settings.target, shown)
    snapshot.files[SETTINGS_NAME] = data
    snapshot.display[SETTINGS_NAME] = shown
    return settings.target, shown, None




def special_token_ids(values: dict[str, Any], snapshot: Snapshot | None,
                      tokenizer: TokenizerFiles | None) -> dict[int, str]:
    """Token ids the model itself uses as bos, eos or pad, each with where it was read:
    config.json, generation_config.json (next to it) and tokenizer_config.json, whichever are there.

    Example::

        >>> special_token_ids({"bos_token_id": 1, "eos_token_id": [2, 3]}, None, None)
        {1: 'bos_token_id in config.json', 2: 'eos_token_id in config.json', 3: 'eos_token_id in config.json'}
    """
    found: dict[int, str] = {}

    def add(source: dict[str, Any], where: str) -> None:
        for role in ("bos", "eos", "pad"):
            value = source.get(f"{role}_token_id")
            for token in value if isinstance(value, list) else [value]:
                if _is_int(token) and token >= 0:
                    found.setdefault(token, f"{role}_token_id in {where}")

    add(values, "config.json")
    if snapshot is not None:
        try:
            data = read_optional(snapshot, GENERATION_CONFIG, 1024 * 1024)
        except (HubUnreachable, BadInput):
            data = None
        try:
            generation = json.loads(data) if data else None
        except ValueError:
            generation = None
        if isinstance(generation, dict):
            add(generation, GENERATION_CONFIG)
    if tokenizer is not None:
        for role, token in tokenizer.special_ids().items():
            found.setdefault(token, f"{role}_token in tokenizer_config.json")
    return found
