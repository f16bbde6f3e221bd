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
from draftguard.check.drafter.target import TargetModel, find_target, load_target
from draftguard.check.findings import Finding, TargetResult
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
    if fmt is None:
        if not target:
            return []
        # EAGLE 1/2 heads are plain one-layer decoders: only the target's width tells them apart.
        if target_model is _FETCH:
            target_model = _cached_target(snapshot, (target, "--target", None), cache, trust_remote_code, confine)
        width = target_model.value("hidden_size") if target_model is not None else None
        fmt = detect_drafter(raw, target_hidden_size=width if isinstance(width, int) else None)
        if fmt is None:
            raise BadInput(
                f"{shown}: --target {target} was given, but this config.json is not a drafter of any "
                f"recognised format: {'; '.join(RECOGNISED_FORMATS)}. Fix: pass the drafter's folder, or "
                "check the target on its own, without --target.",
                file=shown,
            )
    elif target_model is _FETCH:
        where = find_target(snapshot, fmt, target)
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
    return CHECKS[fmt.family](snapshot, raw, fmt, result, target_model, weights, values).run()


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
