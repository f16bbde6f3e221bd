"""The one way from files to a Report: every surface (the CLI, the Action, the bots, the audit, fix)
hands its sources here, and this picks the light check or the transformers matrix, runs the config
rules, the repo rules (``check.repo``), the drafter rules and the engine rules, and turns what cannot be checked into InputErrors.

In: sources (target names, which are loaded here: a folder, a config.json file or a Hub repo id; or
``Snapshot`` objects a surface read itself, e.g. from an API at a commit), and how to check them:
transformers ``versions`` (the matrix), a drafter's explicit target, a ``target_lookup`` (how a
surface reads a drafter's target: the bots and the audit never read the host's files or use their
token for a name the files chose), ``engines`` (``check.engines.EngineSpec``), and the repository's ``settings`` (rules and exceptions).
Out: ``check(...)`` -> a ``Report``; nothing is raised for a source that cannot be checked (it is an
``InputError`` in the Report), only ``BadInput`` for malformed versions, before any work.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from draftguard import bounded
from draftguard.check import policy, resolver
from draftguard.check.environments import parse_versions
from draftguard.check.findings import InputError, Report
from draftguard.check.isolated import (DrafterFailed, DrafterStep, Options, TargetLookup, check_files, check_one,
                                       drafter_file)
from draftguard.check.isolated import target_masks as _target_masks
from draftguard.check.matrix import check_matrix
from draftguard.hub_access import hub_constants
from draftguard.settings import Settings
from draftguard.snapshot import BadInput, Snapshot, load_snapshot

__all__ = ["DrafterFailed", "TargetLookup", "check", "target_masks"]


def target_masks(snapshot: Snapshot, *, target: str | None = None, trust_remote_code: bool = False) -> dict[int, str]:
    """The mask tokens a drafter's target reserves ({id: token}), read in a bounded child (fix's
    mask-token rules). Raises BadInput: the target cannot be read, or a bound stopped the child."""
    return _target_masks(snapshot, target, trust_remote_code, bounded.Limits.from_env())


def check(
    sources: Iterable[str | Snapshot], *, versions: list[str] | None = None, revision: str | None = None,
    drafter_target: str | None = None, target_lookup: TargetLookup | None = None,
    trust_remote_code: bool = False, engines: list | None = None, real_engines: Any = None,
    confine: Path | None = None, drafter_rules: bool = True, drafter_failed: DrafterFailed | None = None,
    cache: dict | None = None, version: str | None = None, progress: Callable[[str], None] | None = None,
    host_in_process: bool = False, in_process: bool = False, settings: Settings | None = None,
    settings_root: str | None = None, values: bool = False,
) -> Report:
    """Check every source into one Report: under each of ``versions`` through the version matrix
    (``check.matrix``), else under the installed transformers in this process (``check.light``).

    Drafters are also checked against their target: ``target_lookup`` where the surface reads it
    itself, else ``drafter_target``, the drafter's .draftguard.yml ``target:`` or the speculators
    verifier. ``drafter_rules=False`` runs the config rules alone. ``drafter_failed`` takes a drafter
    whose target could not be read (the bots say so in a note); without it that is an InputError
    (and, in the light check, the target's result is left out, as it always was).

    ``engines`` adds the engine findings (DG200-DG206) and views, from ``real_engines`` where it
    serves a version, else the light tier; not with a matrix (the engine rules read one version's
    values). ``confine`` (the Action: a checkout on a runner): a target, and a local target model
    the files name, must resolve (symlinks followed) inside that folder. ``cache`` keeps fetched
    target models across calls (fix rechecks one file many times). ``version`` names the installed
    transformers in the Report (the audit passes it once). ``progress`` and ``host_in_process``
    are the matrix's (first installs; resolving in this process). ``settings``: the repository's
    .draftguard.yml, whose ``rules:`` and ``ignore:`` are applied here (``check.policy``), once for
    every surface; ``settings_root`` is the folder its paths are relative to (None: the findings'
    files are already named from the repository root). ``values``: keep each target's resolved
    values (``TargetResult.values``) for a caller that reads them (the launch check, the audit);
    else the light check's stay in the child, never written, sent or parsed, but for a target with
    engine views (the engine section shows transformers' windows beside the engines').

    Each file is checked in a child process under hard limits (``draftguard.bounded``: memory, CPU
    seconds, wall time, from the environment): a file past one is an InputError naming the bound,
    and the other files go on. One child checks all of a check's files in turn: this thread's warm
    one, or, with ``trust_remote_code``, one of the check's own. ``in_process=True`` checks in this
    process instead, unbounded: the
    benchmark's baseline, never for untrusted files.

    Raises:
        BadInput: A version or a limit's setting is malformed, or the settings name a rule that does
            not exist (nothing has run yet).

    Example::

        >>> report = check(["examples/qwen3-swa-drafter"])
        >>> sorted({f.rule for f in report.findings}), report.matrix is None
        (['DG001', 'DG005'], True)
    """
    versions = parse_versions(versions) if versions else None
    if settings is not None:
        policy.validate(settings)
    fetched: dict = {} if cache is None else cache  # target models fetched once per run
    step = DrafterStep(drafter_target, target_lookup, trust_remote_code, confine, fetched, drafter_failed)
    limits = bounded.Limits.from_env()  # a setting that is no limit: BadInput before any work
    if not in_process:
        bounded.start()  # transformers is imported there while the files are read here
    options = Options(trust_remote_code=trust_remote_code, drafter_rules=drafter_rules, drafter_target=drafter_target,
                      confine=confine, engines=list(engines or []), lookup=target_lookup is not None,
                      failed=drafter_failed is not None, real=real_engines is not None, hub=hub_constants(),
                      values=values)
    # this thread's warm bounded child checks every file in turn (a fresh one after a file stops it);
    # a check that runs a repository's own code (trust_remote_code) has a child of its own, ended with
    # the check: what that code leaves in the child reaches no other check (docs/security.md)
    own = trust_remote_code and not in_process
    with bounded.Child(limits) if own else contextlib.nullcontext(bounded.Child.of_thread(limits)) as child:
        if versions:
            drafter = None
            if drafter_rules:
                drafter = step if in_process else (lambda snapshot, result: drafter_file(snapshot, result, options,
                                                                                         step, child))
            return policy.apply(_matrix(list(sources), versions, revision, confine, drafter, trust_remote_code,
                                        progress, host_in_process), settings, settings_root)
        report = Report(transformers_version=version or resolver.transformers_version())
        options.version = report.transformers_version
        if in_process:
            for source in sources:
                try:
                    report.targets.append(check_one(_load(source, revision, confine), options, step, real_engines))
                except BadInput as exc:
                    report.errors.append(InputError.of(_name(source), exc))
        else:
            _check_streamed(sources, revision, confine, report, options, step, real_engines, child)
        return policy.apply(report, settings, settings_root)


def _check_streamed(sources: Iterable[str | Snapshot], revision: str | None, confine: Path | None, report: Report,
                    options: Options, step: DrafterStep, real_engines: Any, child: bounded.Child) -> None:
    """Check every source in the child (``check_files``: each file read here while the child checks
    the ones before it) and report them in the order they were named, the ones that could not be
    read among them."""
    unread: list[tuple[str, BadInput | None]] = []  # per source: its reading's error, or None (sent to the child)

    def snapshots() -> Iterator[Snapshot]:
        for source in sources:
            try:
                snapshot = _load(source, revision, confine)
            except BadInput as exc:
                unread.append((_name(source), exc))
                continue
            unread.append((_name(source), None))
            yield snapshot

    results = list(check_files(snapshots(), options, step, real_engines, child))
    checked = iter(results)
    for name, error in unread:
        outcome = error if error is not None else next(checked)
        if isinstance(outcome, BadInput):
            report.errors.append(InputError.of(name, outcome))
        else:
            report.targets.append(outcome)


def _name(source: str | Snapshot) -> str:
    return source.source if isinstance(source, Snapshot) else source


def _load(source: str | Snapshot, revision: str | None, confine: Path | None) -> Snapshot:
    if isinstance(source, Snapshot):
        return source
    if confine is not None:
        _inside(source, confine)
    return load_snapshot(source, revision)


def _matrix(sources: list, versions: list[str], revision: str | None, confine: Path | None,
            drafter: Callable[..., Any] | None, trust_remote_code: bool, progress: Callable[[str], None] | None,
            host_in_process: bool) -> Report:
    """The matrix of the sources that load; those that do not are its first InputErrors."""
    snapshots, errors = [], []
    for source in sources:
        try:
            snapshots.append(_load(source, revision, confine))
        except BadInput as exc:
            errors.append(InputError.of(source.source if isinstance(source, Snapshot) else source, exc))
    report = check_matrix([], versions, snapshots=snapshots, trust_remote_code=trust_remote_code,
                          progress=progress, drafter_rules=drafter is not None, drafter=drafter,
                          host_in_process=host_in_process)
    report.errors[:0] = errors
    return report


def _inside(target: str, confine: Path) -> None:
    """Raise BadInput when ``target`` (a folder or a config file, and its config.json) resolves
    outside ``confine``: a symlink in a checkout must not read the runner's files (R5 of issue 25)."""
    path = Path(target)
    for candidate in (path, path / "config.json") if path.is_dir() else (path,):
        if candidate.exists() and not candidate.resolve().is_relative_to(Path(confine).resolve()):
            raise BadInput(f"{target}: a symlink out of the repository, not read", file=target)
