"""The check of one file, in a bounded child (``draftguard.bounded``): the light check with its tracing
builds, the drafter rules and the engine rules all run there; what only the caller holds (a surface's
target lookup, the real engines' worker) is asked of it over the child's pipe. ``check.run`` runs
every file of every surface through ``check_files`` (the files streamed to one child).

In: one ``Snapshot``, ``Options`` (how to check it), the caller's ``DrafterStep`` and real engines.
Out: ``check_file(...)`` -> a ``TargetResult`` read back from capped JSON, or BadInput (``Stopped``
naming the bound when a bound stopped the child); ``check_files(...)`` -> the same for many files,
a result or a BadInput each; ``target_masks`` (fix's mask tokens); ``drafter_file`` (the drafter rules alone, for
the matrix, whose resolving runs in bounded resolver processes); ``check_one`` (the same in this process: the
benchmark's baseline, and what the child runs); ``DrafterStep``.
"""

from __future__ import annotations

import collections
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from draftguard import bounded
from draftguard.check.drafter import check_drafter, detect_drafter
from draftguard.check.drafter.detect import DrafterFormat
from draftguard.check.drafter.check import _cached_target
from draftguard.check.drafter.target import TargetModel, find_target, origin_of
from draftguard.check.engines import check_engines
from draftguard.check.engines.view import EngineView
from draftguard.check.findings import ABSENT, Finding, LayerAttention, Severity, TargetResult
from draftguard.check.light import check_snapshot
from draftguard.check.repo import check_repo
from draftguard.check.resolver import hide_torch
from draftguard.hub_access import hub_constants, use_hub_constants
from draftguard.snapshot import BadInput, Snapshot

# A surface's way to read a drafter's target: (the drafter's snapshot, its format) -> the target, or
# None when it has none. Raises BadInput when the named target cannot be read.
TargetLookup = Callable[[Snapshot, DrafterFormat], "TargetModel | None"]
# What a surface does with a drafter whose rules could not run (its target unreadable).
DrafterFailed = Callable[[Snapshot, BadInput], None]
_ABSENT = "__draftguard_absent__"  # how ABSENT crosses the pipe


@dataclass
class Options:
    """How to check one file: what ``check.run.check`` was asked, as picklable data."""

    trust_remote_code: bool = False
    version: str | None = None
    drafter_rules: bool = True
    drafter_target: str | None = None
    confine: Path | None = None
    engines: list = field(default_factory=list)
    lookup: bool = False  # the caller has a target lookup (asked with bounded.call)
    failed: bool = False  # the caller takes drafters whose target could not be read
    real: bool = False  # the caller has real engines (asked with bounded.call)
    hub: dict = field(default_factory=dict)  # the caller's view of the Hub (hub_access.hub_constants)
    values: bool = False  # the caller reads each TargetResult's values (else None, but with engine views)


def check_file(snapshot: Snapshot, options: Options, step: "DrafterStep", real: Any,
               child: bounded.Child) -> TargetResult:
    """``check_one`` in a bounded child (``child``: one per check, for all its files). Raises
    BadInput: the file's own, or ``Stopped`` when a bound stopped the child (naming the bound)."""
    return _result(_bounded(_in_child, snapshot, (snapshot, options, step.fetched), step, real, options, child))


def check_files(snapshots: Iterable[Snapshot], options: Options, step: "DrafterStep", real: Any,
                child: bounded.Child) -> Iterator["TargetResult | BadInput"]:
    """``check_file`` of each snapshot, streamed to the child (``Child.stream``: each file under its
    own bounds, sent ahead while the child checks the ones before, answered as it finishes; a lazy
    ``snapshots`` reads its next files meanwhile): per file, in order, its result or its BadInput."""
    shown: collections.deque[tuple[str, Snapshot]] = collections.deque()

    def calls() -> Iterator[tuple[tuple, dict, dict]]:
        for snapshot in snapshots:
            shown.append((snapshot.path_of("config.json"), snapshot))
            yield (snapshot, options, step.fetched), _handlers(snapshot, step, real, options), {"file": shown[-1][0]}

    for answer in child.stream(_in_child, calls(), object_hook=_decode_absent):
        name, snapshot = shown.popleft()
        yield _finished(answer, name, snapshot, step, _result)


def drafter_file(snapshot: Snapshot, result: TargetResult, options: Options, step: "DrafterStep",
                 child: bounded.Child) -> list[Finding]:
    """The drafter rules of one checked file (``step``) in a bounded child: the matrix's drafter step."""
    if options.drafter_target is None and detect_drafter(snapshot.load_json()) is None:
        return []  # not a drafter, and no pair named: no rule to run, no child to start
    found = _bounded(_drafter_in_child, snapshot, (snapshot, result, options, step.fetched), step, None, options, child)
    return [_finding(f) for f in found]


def target_masks(snapshot: Snapshot, target: str | None, trust_remote_code: bool, limits: bounded.Limits) -> dict[int, str]:
    """The mask tokens a drafter's target reserves (special added tokens named like a mask), read
    in a bounded child: ``fix``'s mask-token proposals. {} where there is no target or none."""
    with bounded.Child(limits) as child:
        found = _bounded(_masks_in_child, snapshot, (snapshot, target, trust_remote_code, hub_constants()), DrafterStep(
            None, None, trust_remote_code, None, {}, None), None, Options(), child)
    return {int(i): token for i, token in found.items()}


def _masks_in_child(snapshot: Snapshot, target: str | None, trust_remote_code: bool, hub: dict) -> dict[str, Any]:
    _child_start(hub)
    fmt = detect_drafter(snapshot.load_json())
    where = (target, origin_of(target), None) if fmt is None and target else find_target(snapshot, fmt, target) if fmt else None
    model = _cached_target(snapshot, where, {}, trust_remote_code) if where is not None else None
    found = {} if model is None or model.tokenizer is None else {
        str(i): token for i, (token, special) in model.tokenizer.added().items() if special and "mask" in token.lower()}
    return _answer(found, [])


def _bounded(function: Callable[..., Any], snapshot: Snapshot, args: tuple, step: "DrafterStep", real: Any,
             options: Options, child: bounded.Child) -> Any:
    shown = snapshot.path_of("config.json")
    [answer] = child.run_each(function, [args], handlers=[_handlers(snapshot, step, real, options)],
                              object_hook=_decode_absent, where=[{"file": shown}])
    found = _finished(answer, shown, snapshot, step, lambda data: data)
    if isinstance(found, BadInput):
        raise found
    return found


def _handlers(snapshot: Snapshot, step: "DrafterStep", real: Any, options: Options) -> dict[str, Callable[..., Any]]:
    """What the child may ask the caller about one file: its drafter's target, the real engines' views."""
    return {
        "lookup": lambda: step.lookup(snapshot, detect_drafter(snapshot.load_json())),
        "real": lambda index, *where: _real_views(real, options.engines[index], *where),
    }


def _finished(answer: Any, shown: str, snapshot: Snapshot, step: "DrafterStep", read: Callable[[Any], Any]) -> Any:
    """One file's answer from the child: ``read`` of it, with its drafter failures told to ``step``;
    or its BadInput (a ``Stopped`` names the file and the bound)."""
    if isinstance(answer, bounded.Stopped):
        return bounded.Stopped(f"{shown}: not checked: {answer}; nothing of it was judged (is this a real model "
                               f"config?)", answer.bound, file=shown)
    if isinstance(answer, BadInput):
        return answer
    for fields in answer["failed"]:
        step.failed(snapshot, BadInput(**fields))
    return read(answer["answer"])


def check_one(snapshot: Snapshot, options: Options, step: "DrafterStep", real: Any) -> TargetResult:
    """One file's light check, drafter rules and engine rules, in this process."""

    def one() -> TargetResult:
        result = check_snapshot(snapshot, trust_remote_code=options.trust_remote_code, version=options.version)
        result.findings.extend(check_repo(snapshot, result.values))
        if options.drafter_rules:
            result.findings.extend(step(snapshot, result))
        if options.engines:
            found, views = check_engines(snapshot, result, options.engines, target=options.drafter_target,
                                         trust_remote_code=options.trust_remote_code, cache=step.fetched,
                                         real=real, **step.target_of(snapshot))
            result.findings.extend(found)
            result.engine_views = views
        if not options.values and not result.engine_views:
            result.values = None  # read by the rules above, and by the engine section (transformers' windows)
        return result

    return _guarded(snapshot, one)


def _guarded(snapshot: Snapshot, run: Callable[[], TargetResult]) -> TargetResult:
    """``run()``, with a check that cannot finish within bounds (a config nested past Python's depth,
    or one too large for memory) made BadInput: an error the reader sees, never a crash or a failed
    job that leaves an earlier "passes" standing (B4 of issue 25)."""
    try:
        return run()
    except (RecursionError, MemoryError) as exc:
        shown = snapshot.path_of("config.json")
        limits = bounded.current()
        what = ("ran out of depth" if isinstance(exc, RecursionError) else
                limits.words("memory") if limits else "ran out of memory")
        raise BadInput(f"{shown}: not checked: the check {what} (is this a real model config?)", file=shown) from None


def _in_child(snapshot: Snapshot, options: Options, fetched: dict) -> dict[str, Any]:
    """What the child runs: ``check_one`` with the caller's lookup and real engines asked over the pipe."""
    _child_start(options.hub)
    step, failures = _child_step(options, fetched)
    result = check_one(snapshot, options, step, _AskedReal(options.engines) if options.real else None)
    return _answer(_plain(result), failures)


def _drafter_in_child(snapshot: Snapshot, result: TargetResult, options: Options, fetched: dict) -> dict[str, Any]:
    _child_start(options.hub)
    step, failures = _child_step(options, fetched)
    found = _guarded(snapshot, lambda: step(snapshot, result))
    return _answer([_plain_finding(f) for f in found], failures)


def _child_start(hub: dict) -> None:
    """Each child function's first step. torch hidden from transformers, as the CLI hides it: a child
    forked from a library caller that never imported torch (``check.run.check`` in a user's script)
    imported it through transformers' config modules, 2.8 times slower, and with a CUDA build of torch
    past the 2 GB memory bound ("libtorch_cpu.so: failed to map segment"): every file failed. A no-op
    where the caller had torch imported already. Then the caller's view of the Hub."""
    hide_torch()
    use_hub_constants(hub)


def _child_step(options: Options, fetched: dict) -> tuple["DrafterStep", list[dict[str, Any]]]:
    """The drafter step of a child: the caller's lookup asked over the pipe, failures kept for it."""
    failures: list[dict[str, Any]] = []

    def failed(_snapshot: Snapshot, exc: BadInput) -> None:
        failures.append({"message": str(exc), "file": exc.file, "line": exc.line, "column": exc.column, "key": exc.key})

    step = DrafterStep(options.drafter_target, (lambda _s, _f: bounded.call("lookup")) if options.lookup else None,
                       options.trust_remote_code, options.confine, fetched, failed if options.failed else None)
    return step, failures


def _answer(answer: Any, failures: list[dict[str, Any]]) -> bounded.Encoded:
    """The child's answer, written once as JSON (ABSENT as its marker)."""
    return bounded.Encoded(json.dumps({"answer": answer, "failed": failures}, default=_encode).encode())


def _real_views(real: Any, spec: Any, *where: Any) -> tuple[Any, list]:
    """The caller's side of ``_AskedReal.views``: the views, and the fallbacks that asking added."""
    seen = len(real.fallbacks)
    views = real.views(spec, *where)
    return views, real.fallbacks[seen:]


class _AskedReal:
    """The caller's real engines, asked over the pipe (``RealEngines.views``' signature; ``fallbacks``
    as ``RealEngines`` keeps them: the configs the running engine could not take)."""

    def __init__(self, engines: list):
        self.engines = engines
        self.fallbacks: list[tuple[Any, str, str]] = []

    def views(self, spec: Any, folder: str | None, family: str | None, target_folder: str | None) -> Any:
        views, fallbacks = bounded.call("real", self.engines.index(spec), folder, family, target_folder)
        self.fallbacks.extend(tuple(f) for f in fallbacks)
        return views


def _plain(result: TargetResult) -> dict[str, Any]:
    data = {k: getattr(result, k) for k in ("source", "file", "revision", "model_type", "config_class", "values")}
    data["findings"] = [_plain_finding(f) for f in result.findings]
    data["attention"] = [(a.index, a.declared, a.effective) for a in result.attention]  # a row a layer, small
    data["engine_views"] = [v.to_json() for v in result.engine_views]
    return data


def _plain_finding(finding: Finding) -> dict[str, Any]:
    # its fields as they are (asdict would deep-copy raw and resolved, which json writes as they are)
    return {**{name: getattr(finding, name) for name in _FINDING_FIELDS}, "severity": finding.severity.value}


_FINDING_FIELDS = tuple(Finding.__dataclass_fields__)


def _finding(data: dict[str, Any]) -> Finding:
    return Finding(**{**data, "severity": Severity(data["severity"])})


def _encode(value: Any) -> Any:
    return {_ABSENT: True} if value is ABSENT else str(value)


def _decode_absent(data: dict) -> Any:
    return ABSENT if data.get(_ABSENT) is True and len(data) == 1 else data


def _result(data: dict[str, Any]) -> TargetResult:
    findings = [_finding(f) for f in data["findings"]]
    return TargetResult(source=data["source"], file=data["file"], revision=data["revision"],
                        model_type=data["model_type"], config_class=data["config_class"], findings=findings,
                        attention=[LayerAttention(*a) for a in data["attention"]], values=data["values"],
                        engine_views=[EngineView.from_json(v) for v in data["engine_views"]])


class DrafterStep:
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
