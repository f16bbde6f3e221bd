"""The drafter check's entry point: recognise the format, find the target, run that format's rules.

In: ``check_drafter(snapshot, result, target=, trust_remote_code=, cache=)``: the drafter's
``Snapshot``, its ``TargetResult``, an explicit target (``--target``) or None, and a per-run cache of
fetched ``TargetModel`` objects.
Out: the drafter findings (a list of ``Finding``; [] for a config that is not a drafter), or
``BadInput`` when a named target cannot be fetched or ``--target`` was given for a non-drafter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftguard.check import resolver
from draftguard.check.budget import raise_if_over_budget
from draftguard.check.drafter.detect import RECOGNISED_FORMATS, detect_drafter, layer_config
from draftguard.check.drafter.dflash import DFlashCheck
from draftguard.check.drafter.eagle import Eagle3Check, EagleCheck, MedusaCheck, MtpCheck
from draftguard.check.drafter.rules import DrafterCheck
from draftguard.check.drafter.target import _HUB_ID, TargetModel, find_target, load_target, named_by, origin_of
from draftguard.check.findings import Finding, Severity, TargetResult
from draftguard.check.weights import read_weights
from draftguard.snapshot import SETTINGS_NAME, BadInput, Snapshot, load_snapshot  # noqa: F401  (the doctest uses it)

_FETCH = object()  # check_drafter's default: find and read the target itself

# One rules class per format family: a new format is a new module and one line here.
CHECKS: dict[str, type[DrafterCheck]] = {
    "dflash": DFlashCheck,
    "eagle3": Eagle3Check,
    "eagle": EagleCheck,
    "mtp": MtpCheck,
    "medusa": MedusaCheck,
}


def check_drafter(snapshot: Snapshot, result: TargetResult, *, target: str | None = None,
                  trust_remote_code: bool = False, cache: dict[str, TargetModel] | None = None,
                  confine: Path | None = None, target_model: Any = _FETCH) -> list[Finding]:
    """The drafter rules for one checked snapshot, against its target when one is known.

    Returns [] for a config that is not a drafter, unless ``target`` was given explicitly, which is
    bad input (BadInput): a drafter check asked for and silently skipped would pass a broken pair.
    Raises BadInput when the target cannot be fetched. ``cache`` keeps fetched targets for one run
    of several drafters. ``confine``: local targets named by the files must resolve inside it.
    ``target_model``: the target the caller already read its own way (a ``TargetModel``, or None
    for none; the bots and the audit), which is then not looked for.

    Raises:
        BadInput: ``target`` names no readable model, or names one for a config that is not a drafter.

    Example::

        >>> from draftguard.check.light import check_snapshot
        >>> snap = load_snapshot("examples/qwen3-swa-drafter")
        >>> check_drafter(snap, check_snapshot(snap))  # no target, weights or tokenizer: nothing to say
        []
    """
    raw = snapshot.load_json()
    fmt = detect_drafter(raw)
    shown = snapshot.path_of("config.json")
    cache = {} if cache is None else cache
    local = None  # a verifier path that is not here (DG127)
    if fmt is None:
        if not target:
            return []
        # EAGLE 1/2 heads are plain one-layer decoders: only the target's width tells them apart.
        if target_model is _FETCH:
            target_model = _cached_target(snapshot, (target, origin_of(target), None), cache, trust_remote_code, confine)
        width = target_model.value("hidden_size") if target_model is not None else None
        fmt = detect_drafter(raw, target_hidden_size=width if isinstance(width, int) else None)
        if fmt is None:
            origin = origin_of(target)
            if origin != "--target":  # `target:` of a settings file above, or the Action's input: named as such
                fix = ("move `target:` into the drafter's folder's .draftguard.yml, or name the drafter's folder"
                       if origin.endswith(SETTINGS_NAME) else "narrow the `paths` input to the drafters' folders")
                raise BadInput(
                    f"{shown}: {named_by(origin)} names the drafter's target {target}, but this "
                    f"config.json is not a drafter of any recognised format: {'; '.join(RECOGNISED_FORMATS)}. "
                    f"Fix: {fix}.", file=shown)
            raise BadInput(
                f"{shown}: --target {target} was given, but this config.json is not a drafter of any "
                f"recognised format: {'; '.join(RECOGNISED_FORMATS)}. Fix: pass the drafter's folder, or "
                "check the target on its own, without --target.",
                file=shown,
            )
    elif target_model is _FETCH:
        where = find_target(snapshot, fmt, target)
        local = unreachable_verifier(where)
        if local is not None:
            where = None  # the drafter is checked on its own, and DG127 says why
        target_model = _cached_target(snapshot, where, cache, trust_remote_code, confine) if where is not None else None
    values = result.values
    if values is None:  # a result made elsewhere (the version matrix): resolve the same way
        layers_raw, _ = layer_config(raw)
        try:
            values = resolver.resolve(layers_raw, trust_remote_code=trust_remote_code,
                                      pretrained=snapshot.local_dir if not snapshot.is_hub else snapshot.source,
                                      revision=snapshot.revision)["values"]
        except resolver.ResolveError as exc:
            raise_if_over_budget(exc, shown)  # a spent time budget is an error on the file, not "no values"
            values = {}
    weights = read_weights(snapshot)
    found = CHECKS[fmt.family](snapshot, raw, fmt, result, target_model, weights, values).run()
    if local is not None:
        found.insert(0, _verifier_finding(snapshot, local))
    return found


_VERIFIER_KEY = "speculators_config.verifier.name_or_path"


def unreachable_verifier(where: tuple[str, str, Path | None] | None) -> str | None:
    """The verifier name when the target came from the speculators verifier key and names neither a
    Hub repo id nor a path that exists here: its author's local path (``/home/me/models/Qwen3-8B``),
    which no one else can read. None otherwise (a Hub id, or a folder that is here, is read as always).

    Example::

        >>> unreachable_verifier(("/home/me/models/Qwen3-8B", _VERIFIER_KEY, None))
        '/home/me/models/Qwen3-8B'
        >>> unreachable_verifier(("Qwen/Qwen3-8B", _VERIFIER_KEY, None)) is None
        True
    """
    if where is None or where[1] != _VERIFIER_KEY:
        return None
    name, _, base = where
    if _HUB_ID.match(name) and not name.startswith((".", "/", "~")):
        return None
    for candidate in (Path(name).expanduser(), (base / name) if base is not None else None):
        if candidate is not None and candidate.exists():
            return None
    return name


def _verifier_finding(snapshot: Snapshot, name: str) -> Finding:
    shown = snapshot.path_of("config.json")
    return Finding(rule="DG127", severity=Severity.WARNING, key=_VERIFIER_KEY, raw=name, resolved=None, file=shown,
                   line=snapshot.line_of(_VERIFIER_KEY),
                   message=f"`{_VERIFIER_KEY}` is {name!r}, a path on its author's machine: it is not here and is "
                           "not a Hub repo id, so no one else can read the target it names. The drafter was "
                           "checked on its own: the rules that compare it with its target (layer ids, hidden "
                           "size, vocabulary, mask token) did not run. Serving the drafter alone, which reads the "
                           "verifier from this key, fails the same way. Fix: write the target's Hub repo id (for example "
                           "\"Qwen/Qwen3-8B\"), and pass --target to check the pair now.")


def _cached_target(snapshot: Snapshot, where: tuple[str, str, Path | None], cache: dict[str, TargetModel],
                   trust_remote_code: bool, confine: Path | None = None) -> TargetModel:
    """The target named by ``where`` (name, origin, base folder), fetched once per run."""
    name, origin, base = where
    cache_key = str(base / name) if base is not None and (base / name).exists() else name
    target_model = cache.get(cache_key)
    if target_model is None:
        # A Hub drafter's own .draftguard.yml names Hub targets only (checked in find_target).
        hub_named = snapshot.is_hub and origin == snapshot.display.get(SETTINGS_NAME)
        target_model = load_target(name, origin, base=base, trust_remote_code=trust_remote_code,
                                   allow_local=not hub_named, confine=confine)
        cache[cache_key] = target_model
    return target_model
