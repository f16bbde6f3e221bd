"""The one way from files to a Report: every surface (the CLI, the Action, the bots, the audit, fix)
hands its sources here, and this picks the light check or the transformers matrix, runs the config
rules, the drafter rules and the engine rules, and turns what cannot be checked into InputErrors.

In: sources (target names, which are loaded here: a folder, a config.json file or a Hub repo id; or
``Snapshot`` objects a surface read itself, e.g. from an API at a commit), and how to check them:
transformers ``versions`` (the matrix), a drafter's explicit target, a ``target_lookup`` (how a
surface reads a drafter's target: the bots and the audit never read the host's files or use their
token for a name the files chose), ``engines`` (``check.engines.EngineSpec``), and the repository's ``settings`` (rules and exceptions).
Out: ``check(...)`` -> a ``Report``; nothing is raised for a source that cannot be checked (it is an
``InputError`` in the Report), only ``BadInput`` for malformed versions, before any work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterable

from draftguard.check import policy, resolver
from draftguard.check.drafter import check_drafter, detect_drafter
from draftguard.check.drafter.detect import DrafterFormat
from draftguard.check.drafter.target import TargetModel
from draftguard.check.engines import check_engines
from draftguard.check.environments import parse_versions
from draftguard.check.findings import Finding, InputError, Report, TargetResult
from draftguard.check.light import check_snapshot
from draftguard.check.matrix import check_matrix
from draftguard.settings import Settings
from draftguard.snapshot import BadInput, Snapshot, load_snapshot

# A surface's way to read a drafter's target: (the drafter's snapshot, its format) -> the target, or
# None when it has none. Raises BadInput when the named target cannot be read.
TargetLookup = Callable[[Snapshot, DrafterFormat], "TargetModel | None"]
# What a surface does with a drafter whose rules could not run (its target unreadable); without one,
# that is an InputError in the Report.
DrafterFailed = Callable[[Snapshot, BadInput], None]


def check(
    sources: Iterable[str | Snapshot], *, versions: list[str] | None = None, revision: str | None = None,
    drafter_target: str | None = None, target_lookup: TargetLookup | None = None,
    trust_remote_code: bool = False, engines: list | None = None, real_engines: Any = None,
    confine: Path | None = None, drafter_rules: bool = True, drafter_failed: DrafterFailed | None = None,
    cache: dict | None = None, version: str | None = None, progress: Callable[[str], None] | None = None,
    host_in_process: bool = False, settings: Settings | None = None, settings_root: str | None = None,
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
    files are already named from the repository root).

    Raises:
        BadInput: A version is malformed, or the settings name a rule that does not exist (nothing
            has run yet).

    Example::

        >>> report = check(["examples/qwen3-swa-drafter"])
        >>> sorted({f.rule for f in report.findings}), report.matrix is None
        (['DG001', 'DG005'], True)
    """
    versions = parse_versions(versions) if versions else None
    if settings is not None:
        policy.validate(settings)
    fetched: dict = {} if cache is None else cache  # target models fetched once per run
    step = _DrafterStep(drafter_target, target_lookup, trust_remote_code, confine, fetched, drafter_failed)
    if versions:
        return policy.apply(_matrix(list(sources), versions, revision, confine, step if drafter_rules else None,
                                    trust_remote_code, progress, host_in_process), settings, settings_root)
    report = Report(transformers_version=version or resolver.transformers_version())
    for source in sources:
        name = source.source if isinstance(source, Snapshot) else source
        try:
            snapshot = _load(source, revision, confine)

            def one() -> TargetResult:
                result = check_snapshot(snapshot, trust_remote_code=trust_remote_code,
                                        version=report.transformers_version)
                if drafter_rules:
                    result.findings.extend(step(snapshot, result))
                if engines:
                    found, views = check_engines(snapshot, result, engines, target=drafter_target,
                                                 trust_remote_code=trust_remote_code, cache=fetched,
                                                 real=real_engines, **step.target_of(snapshot))
                    result.findings.extend(found)
                    result.engine_views = views
                return result

            report.targets.append(_guarded(snapshot, one))
        except BadInput as exc:
            report.errors.append(InputError.of(name, exc))
    return policy.apply(report, settings, settings_root)


def _load(source: str | Snapshot, revision: str | None, confine: Path | None) -> Snapshot:
    if isinstance(source, Snapshot):
        return source
    if confine is not None:
        _inside(source, confine)
    return load_snapshot(source, revision)


def _guarded(snapshot: Snapshot, run: Callable[[], TargetResult]) -> TargetResult:
    """``run()``, with a check that cannot finish within bounds (a config nested past Python's depth,
    or one too large for memory) made BadInput: an error the reader sees, never a crash or a failed
    job that leaves an earlier "passes" standing (B4 of issue 25)."""
    try:
        return run()
    except (RecursionError, MemoryError) as exc:
        shown = snapshot.path_of("config.json")
        raise BadInput(f"{shown}: not checked: the check ran out of "
                       f"{'depth' if isinstance(exc, RecursionError) else 'memory'} (is this a real model config?)",
                       file=shown) from None


def _matrix(sources: list, versions: list[str], revision: str | None, confine: Path | None,
            step: "_DrafterStep | None", trust_remote_code: bool, progress: Callable[[str], None] | None,
            host_in_process: bool) -> Report:
    """The matrix of the sources that load; those that do not are its first InputErrors."""
    snapshots, errors = [], []
    for source in sources:
        try:
            snapshots.append(_load(source, revision, confine))
        except BadInput as exc:
            errors.append(InputError.of(source.source if isinstance(source, Snapshot) else source, exc))
    report = check_matrix([], versions, snapshots=snapshots, trust_remote_code=trust_remote_code,
                          progress=progress, drafter_rules=step is not None, drafter=step,
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


class _DrafterStep:
    """The drafter rules of one checked snapshot, with the target read the surface's way, once per run."""

    def __init__(self, explicit: str | None, lookup: TargetLookup | None, trust_remote_code: bool,
                 confine: Path | None, fetched: dict, failed: DrafterFailed | None):
        self.explicit, self.lookup, self.trust_remote_code = explicit, lookup, trust_remote_code
        self.confine, self.fetched, self.failed = confine, fetched, failed
        self.looked: dict[int, TargetModel | None] = {}  # id(snapshot) -> the target lookup read

    def __call__(self, snapshot: Snapshot, result: TargetResult) -> list[Finding]:
        """The drafter findings ([] when they could not run and ``failed`` was told). Raises
        BadInput (the target cannot be read) when there is no ``failed``."""
        try:
            if self.lookup is None:
                if not (self.explicit or detect_drafter(snapshot.load_json()) is not None):
                    return []  # the drafter rules run only for a drafter, or a pair the user named
                return check_drafter(snapshot, result, target=self.explicit, trust_remote_code=self.trust_remote_code,
                                     cache=self.fetched, confine=self.confine)
            fmt = detect_drafter(snapshot.load_json())
            if fmt is None:
                return []
            model = self.looked[id(snapshot)] = self.lookup(snapshot, fmt)
            return check_drafter(snapshot, result, trust_remote_code=self.trust_remote_code, target_model=model)
        except BadInput as exc:
            if self.failed is None:
                raise
            self.failed(snapshot, exc)
            return []

    def target_of(self, snapshot: Snapshot) -> dict[str, Any]:
        """``check_engines``' ``target_model``: the one the lookup read (None when it failed or there
        is none), so the engine rules never read a target another way."""
        if self.lookup is None:
            return {}
        return {"target_model": self.looked.get(id(snapshot))}
