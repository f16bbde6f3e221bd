"""The diagnosis of an acceptance run across config views and backends: paired cells, one named cause.

In: ``AcceptanceResult`` cells keyed by (view, backend), the thresholds, and the light check's rewrites
of the drafter's config.json.
Out: each cell's state (low, ok, unsure), a ``Diagnosis`` (cause, reason, the rewritten keys)
attached to the combined result, and the raw view's drafter copy for an engine.
``runner/differential.py`` (one engine against the reference) builds on the helpers here.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from draftguard.check.findings import ABSENT, RULES, show as _show
from draftguard.check.light import check_snapshot
from draftguard.errors import RawViewUnavailable
from draftguard.runner.result import (CATASTROPHIC, CONFIG_REWRITE, DRAFTER, ENGINE, FAIL, INCONCLUSIVE, NONE, PASS,
                                     RUNNER, AcceptanceResult, Verdict)
from draftguard.runner.stats import catastrophic, first_position_interval, paired_interval, tau_interval
from draftguard.snapshot import load_snapshot, parse_json_object


# Where an engine that reads a DFlash drafter differently usually goes wrong (the incident's three faults).
ENGINE_HINT = (
    "the weights are fine; look at how vLLM loads the drafter: target layer ids (vLLM's aux layers are "
    "target_layer_ids + 1), sliding-window layers run as full attention (try --attention-backend, and keep "
    "the long-context prompt), and a sliding_window the config class dropped (`draftguard check` on the drafter)"
)


def _fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


# --------------------------------------------------------------------------------------------------
# The diagnosis: config views x backends, paired on the same prompts, one named cause
# --------------------------------------------------------------------------------------------------
#
# Cells are runs of the same prompts: (view, backend) with view "raw" (config.json as written) or
# "resolved" (as the config class resolves it) and backend "reference" or an engine. Two cells are
# compared with a paired bootstrap of τ_b / τ_a (stats.paired_interval); one is "clearly below" the
# other when that whole interval lies under SAME_TOLERANCE. Each cell on its own is low, ok or unsure:
# against the bar when one is set, else by its first-position acceptance (low: wholly below the floor,
# --min-first-position; ok: wholly at or above HEALTHY_FIRST_POSITION).

LOW, OK, UNSURE = "low", "ok", "unsure"
# Two runs of one drafter agree when τ stays within 5% (vLLM's own DFlash test fails under 0.95 of the
# reference); "clearly below" is the whole paired interval under it.
SAME_TOLERANCE = 0.95
# Without a bar a cell counts as healthy when its first drafted token is accepted more often than not,
# beyond doubt: the fixtures' healthy drafter accepts it every time, published DFlash and EAGLE-3
# drafters most of the time, the seeded faults 0.10-0.30 of the time.
HEALTHY_FIRST_POSITION = 0.5
REFERENCE = "reference"
VIEW_TEXT = {"raw": "as written", "resolved": "as resolved"}


@dataclass
class Rewrite:
    """A key of the drafter's config.json that the config class changes, as the light check found it."""

    key: str
    raw: Any
    resolved: Any
    text: str
    rule: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

# The light check's rules that mean the config class hands the model code other values than the file
# (draftguard.check.findings.RULES): overridden values and contradictory aliases. The others (renames,
# intended changes, injected defaults) leave what the raw view sets back unchanged.
REWRITE_RULES = tuple(r.id for r in RULES.values() if r.rewrites_value)


def _json_safe(value: Any) -> Any:
    return None if value is ABSENT else value


def rewrites_from(findings: Sequence[Any]) -> list[Rewrite]:
    """The rewritten keys among a light check's findings of one drafter, each with a short text.

    Example::

        >>> from draftguard.check.findings import Finding, Severity
        >>> f = Finding("DG001", Severity.ERROR, "sliding_window", 6, None, "config.json", 26, "...")
        >>> [(r.key, r.text) for r in rewrites_from([f])]
        [('sliding_window', 'dropped')]
    """

    out: list[Rewrite] = []
    for f in findings:
        if f.rule not in REWRITE_RULES or any(r.key == f.key for r in out):
            continue
        if f.resolved is None or f.resolved is ABSENT:
            text = "dropped"
        else:
            text = f"{_show(f.raw)} → {_show(f.resolved)}"
        out.append(Rewrite(f.key, _json_safe(f.raw), _json_safe(f.resolved), text, f.rule))
    return out


def light_check_rewrites(drafter: str) -> tuple[str | None, list[Rewrite]]:
    """Run the light check (no torch) on a drafter folder and return its config class and the keys that
    class rewrites: what ``--config-view auto`` asks to decide whether both views are worth running.

    Example::

        >>> light_check_rewrites("tests/fixtures/models/drafter-window-lost")[1][0].key
        'sliding_window'
        >>> light_check_rewrites("tests/fixtures/models/drafter")
        ('Qwen3Config', [])
    """

    result = check_snapshot(load_snapshot(drafter))
    return result.config_class, rewrites_from(result.findings)


def cell_state(result: AcceptanceResult, thresholds: Any, confidence: float = 0.95) -> tuple[str, str]:
    """low, ok or unsure for one run, with the figure that decided it."""

    prompts = result.per_prompt
    if not any(p.drafts for p in prompts):
        return UNSURE, "nothing drafted"
    bar = thresholds.bar
    if bar is not None:
        lo, hi, _ = tau_interval(prompts, confidence)
        state = LOW if hi < bar else OK if lo >= bar else UNSURE
        return state, f"τ {lo:.2f}-{hi:.2f} against the bar {bar:.2f}"
    rate, lo, hi, _ = first_position_interval(prompts, confidence)
    floor = thresholds.min_first_position
    state = LOW if floor is not None and hi < floor else OK if lo >= HEALTHY_FIRST_POSITION else UNSURE
    return state, f"first position {rate:.2f} ({lo:.2f}-{hi:.2f})"


@dataclass
class Diagnosis:
    """One named cause for a set of cells, the verdict it implies, and the paired intervals behind it."""

    cause: str | None
    status: str
    reason: str
    rewritten: list[Rewrite] = field(default_factory=list)
    intervals: list[dict[str, Any]] = field(default_factory=list)
    cells: dict[str, str] = field(default_factory=dict)
    config_class: str | None = None
    confidence: float = 0.95
    runners: dict[str, Any] = field(default_factory=dict)  # view "v1"/"v2" -> its RunnerReading as a dict

    def to_dict(self) -> dict[str, Any]:
        out = {"cause": self.cause, "status": self.status, "reason": self.reason,
               "rewritten": [r.to_dict() for r in self.rewritten], "intervals": self.intervals,
               "cells": self.cells, "config_class": self.config_class, "confidence": self.confidence}
        if self.runners:
            out["runners"] = self.runners
        return out


def _pct(change: float) -> str:
    return f"{'−' if change < 0 else '+'}{abs(change):.0%}"


def cell_name(view: str, backend: str) -> str:
    return f"{view}/{backend}"


def diagnose(
    cells: dict[tuple[str, str], AcceptanceResult],
    thresholds: Any,
    *,
    rewrites: Sequence[Rewrite] = (),
    config_class: str | None = None,
    confidence: float = 0.95,
    runners: dict[str, Any] | None = None,
) -> Diagnosis:
    """Name the cause from runs of the same prompts keyed by (view, backend).

    - **config-rewrite**: the resolved view is clearly below the raw view (in the reference when it ran);
    - **runner**: views "v1" and "v2" (``--model-runner both``; ``runners`` holds each runner's
      ``RunnerReading``) and one runner's cell is clearly below the other's, or low while the other
      is ok (in the reference when it ran): the reason names the runner and the aux ids each reads;
    - **engine**: an engine is clearly below the reference in the same view;
    - **drafter**: every cell is low (two or more cells);
    - **none**: every cell is ok, and every paired interval rules out a drop beyond the tolerance;
    - **catastrophic**: none of those, but the served cell (resolved, the engine if one ran) is low
      against the floor;
    - None (inconclusive): nothing decided.

    When both a rewrite and an engine gap show, the rewrite is named and the engine gap follows in the
    reason. Example::

        >>> from draftguard.runner.result import PromptResult, Thresholds
        >>> def run(acc, first):
        ...     ps = [PromptResult.from_counts(i, drafts=10, draft_tokens=30, accepted_tokens=a,
        ...           accepted_per_position=[f, 0, 0], new_tokens=20) for i, (a, f) in enumerate(zip(acc, first))]
        ...     return AcceptanceResult.from_prompts(ps, wall_seconds=1.0)
        >>> good, bad = run([30] * 6, [10] * 6), run([2, 1, 2, 1, 2, 1], [2, 1, 2, 1, 2, 1])
        >>> d = diagnose({("raw", "reference"): good, ("resolved", "reference"): bad}, Thresholds(min_first_position=0.2),
        ...              rewrites=[Rewrite("sliding_window", 6, None, "dropped", "DG001")], config_class="Qwen3Config")
        >>> d.cause, d.status
        ('config-rewrite', 'fail')
        >>> print(d.reason)
        τ 4.00 as written, 1.15 as Qwen3Config resolves it (−71%): `sliding_window` dropped [paired 95% CI of the ratio 0.28-0.30, 6 prompts]
    """

    states = {key: cell_state(r, thresholds, confidence) for key, r in cells.items()}
    views = sorted({v for v, _ in cells}, key=lambda v: (("raw", "resolved").index(v) if v in ("raw", "resolved") else 9, v))
    engines = sorted({b for _, b in cells if b != REFERENCE})
    intervals: list[dict[str, Any]] = []

    def pair(a: tuple[str, str], b: tuple[str, str]) -> Any:
        if a not in cells or b not in cells:
            return None
        p = paired_interval(cells[a].per_prompt, cells[b].per_prompt, names=(cell_name(*a), cell_name(*b)),
                            confidence=confidence)
        if p is not None:
            intervals.append(p.to_dict())
        return p

    # The views are compared in the reference when it ran (the engine may add faults of its own), else
    # in the one engine that did.
    base = REFERENCE if any(b == REFERENCE for _, b in cells) else (engines[0] if engines else REFERENCE)
    rewrite = pair(("raw", base), ("resolved", base))
    engine_gaps = []
    for engine in engines:
        for view in views:
            gap = pair((view, REFERENCE), (view, engine))
            if gap is not None and gap.clearly_below(SAME_TOLERANCE) and states[(view, REFERENCE)][0] != LOW:
                engine_gaps.append((view, engine, gap))
    runner_gap = _runner_gap(cells, states, base, pair, confidence)
    readings = {v: (r.to_dict() if hasattr(r, "to_dict") else dict(r)) for v, r in (runners or {}).items()}
    common = dict(rewritten=list(rewrites), intervals=intervals, config_class=config_class, confidence=confidence,
                  cells={cell_name(*k): s for k, (s, _) in states.items()}, runners=readings)

    def ci(p: Any) -> str:
        return f"paired {confidence:.0%} CI of the ratio {p.interval[0]:.2f}-{p.interval[1]:.2f}, {p.prompts} prompts"

    engine_text = ""
    if engine_gaps:
        view, engine, gap = engine_gaps[0]
        engine_text = (f"{engine} τ {gap.tau_b:.2f} against the reference's {gap.tau_a:.2f} in the {view} view "
                       f"({_pct(gap.change)}, {ci(gap)})")
    if rewrite is not None and rewrite.clearly_below(SAME_TOLERANCE):
        keys = ", ".join(f"`{r.key}` {r.text}" for r in rewrites) or (
            "no key the light check names (run `draftguard check` on the drafter)")
        reason = (f"τ {rewrite.tau_a:.2f} as written, {rewrite.tau_b:.2f} as {config_class or 'the config class'} "
                  f"resolves it ({_pct(rewrite.change)}): {keys}")
        detail = f" [{ci(rewrite)}]"
        if engine_text:
            detail += f"; also {engine_text}"
        return Diagnosis(CONFIG_REWRITE, FAIL, reason + detail, **common)
    if runner_gap is not None:
        return Diagnosis(RUNNER, FAIL, _runner_reason(runner_gap, base, readings, ci) + (
            f"; also {engine_text}" if engine_text else ""), **common)
    if engine_gaps:
        return Diagnosis(ENGINE, FAIL, f"{engine_text}: the drafter is fine as the reference runs it; "
                         f"{ENGINE_HINT}", **common)
    taus = ", ".join(f"{cell_name(*k)} τ {_fmt(r.mean_acceptance_length)} ({states[k][1]})" for k, r in cells.items())
    # One run alone cannot tell the drafter from the engine or the config: that is "catastrophic" below.
    if len(states) > 1 and all(s == LOW for s, _ in states.values()):
        return Diagnosis(DRAFTER, FAIL, f"every run is low ({taus}): the drafter's weights or config are at fault, "
                         "whichever view or backend runs it", **common)
    # "none" needs evidence of agreement, not only the absence of a clear gap: every pair's interval
    # must rule out a drop beyond the tolerance.
    agree = all(p["interval"][0] >= SAME_TOLERANCE for p in intervals)
    if states and all(s == OK for s, _ in states.values()) and agree:
        return Diagnosis(NONE, PASS, f"every run is healthy ({taus}) and agrees with the others within "
                         f"{1 - SAME_TOLERANCE:.0%}", **common)
    served = ("resolved" if "resolved" in views else views[0], engines[0] if engines else REFERENCE)
    floor = catastrophic(cells[served].per_prompt, thresholds.min_first_position, confidence) \
        if served in cells and thresholds.bar is None else None
    if floor is not None and floor[0]:
        return Diagnosis(CATASTROPHIC, FAIL, f"{cell_name(*served)}: {floor[1]}", **common)
    if served in cells and states[served][0] == LOW:
        return Diagnosis(None, FAIL, f"{cell_name(*served)} is below the bar, but no single cause shows ({taus})",
                         **common)
    return Diagnosis(None, INCONCLUSIVE, f"no cause decided ({taus}); run more prompts or longer outputs, or set "
                     "--min-acceptance-length / --baseline", **common)


RUNNER_NAME = {"v1": "V1", "v2": "V2"}


def _runner_gap(cells: dict[tuple[str, str], AcceptanceResult], states: dict[tuple[str, str], tuple[str, str]],
                base: str, pair: Any, confidence: float) -> tuple[str, str, Any] | None:
    """(the runner that drops, the one that does not, their paired interval) when the v1 and v2 cells
    of ``base`` show one runner clearly below the other, or low while the other is ok; else None."""
    a, b = ("v1", base), ("v2", base)
    if a not in cells or b not in cells:
        return None
    forward = pair(a, b)  # v2 against v1
    backward = paired_interval(cells[b].per_prompt, cells[a].per_prompt, names=(cell_name(*b), cell_name(*a)),
                               confidence=confidence)
    for bad, good, gap in (("v2", "v1", forward), ("v1", "v2", backward)):
        good_state, bad_state = states[(good, base)][0], states[(bad, base)][0]
        if good_state == LOW:
            continue  # both low is the drafter's fault, not a runner's
        if (gap is not None and gap.clearly_below(SAME_TOLERANCE)) or (bad_state == LOW and good_state == OK):
            return bad, good, gap
    return None


def _runner_reason(found: tuple[str, str, Any], base: str, readings: dict[str, Any], ci: Any) -> str:
    """'collapse on the V2 model runner only: it reads aux ids [..] where V1 reads [..]', with τ."""
    bad, good, gap = found
    how = readings.get(bad, {}).get("how")
    ids_bad, ids_good = readings.get(bad, {}).get("aux_ids"), readings.get(good, {}).get("aux_ids")
    good_how = readings.get(good, {}).get("how")
    reading = (f": it reads aux ids {ids_bad} where {RUNNER_NAME[good]} reads {ids_good} ({RUNNER_NAME[bad]} {how}; "
               f"{RUNNER_NAME[good]} {good_how})" if how and ids_bad is not None else "")
    taus = ""
    if gap is not None:
        hi, lo = gap.tau_a, gap.tau_b  # the interval is τ_bad / τ_good
        taus = (f"; τ {hi:.2f} as the {RUNNER_NAME[good]} runner reads the head, {lo:.2f} as {RUNNER_NAME[bad]} "
                f"does ({_pct(lo / hi - 1 if hi else 0.0)}) in the {base} backend [{ci(gap)}]")
    return (f"collapse on the {RUNNER_NAME[bad]} model runner only{reading}{taus}; the weights are fine as "
            f"{RUNNER_NAME[good]} feeds them: state the aux ids at the top level "
            "(`eagle_aux_hidden_state_layer_ids`), which both runners read")


def cell_summary(result: AcceptanceResult, confidence: float = 0.95) -> dict[str, Any]:
    """One cell of ``views``: the usual figures of a run, per-prompt τ and the first-position interval."""

    first = None
    if any(p.drafts for p in result.per_prompt):
        rate, lo, hi, method = first_position_interval(result.per_prompt, confidence)
        first = {"rate": rate, "interval": [round(lo, 4), round(hi, 4)], "method": method}
    d = result.to_dict()
    keep = ("mean_acceptance_length", "draft_acceptance_rate", "per_position_acceptance", "drafts",
            "draft_tokens", "accepted_tokens", "tokens_per_second", "wall_seconds", "verdict")
    out = {k: d[k] for k in keep}
    out["per_prompt_tau"] = [p.mean_acceptance_length for p in result.per_prompt]
    out["first_position"] = first
    out["backend"] = result.run.get("backend")
    return out


def views_block(cells: dict[tuple[str, str], AcceptanceResult]) -> dict[str, Any]:
    """``views`` of the JSON contract: per view the cell, or per view and backend when several ran."""
    backends = {b for _, b in cells}
    out: dict[str, Any] = {}
    for (view, backend), r in cells.items():
        if len(backends) == 1:
            out[view] = cell_summary(r)
        else:
            out.setdefault(view, {})[backend] = cell_summary(r)
    return out


def with_diagnosis(result: AcceptanceResult, cells: dict[tuple[str, str], AcceptanceResult],
                   diagnosis: Diagnosis) -> AcceptanceResult:
    """The served cell's result, judged by the diagnosis: its verdict, ``views`` and ``diagnosis``."""
    lead = f"{diagnosis.cause}: " if diagnosis.cause else ""
    result.verdict = Verdict(status=diagnosis.status, reason=lead + diagnosis.reason,
                             interval=result.verdict.interval, confidence=diagnosis.confidence,
                             method="paired bootstrap over prompts, config views x backends")
    result.views = views_block(cells) if len(cells) > 1 else None
    result.diagnosis = diagnosis.to_dict()
    result.wall_seconds = max(result.wall_seconds, sum(r.wall_seconds for r in cells.values()))
    return result

# Keys that make a config class keep a value it would otherwise rewrite, by rewritten key. An engine
# reads config.json through the class, so its raw view is a copy of the drafter whose config.json asks
# the class to keep what the file says. Only the gates draftguard knows are here (Qwen3Config's
# sliding-window gate); any other rewrite makes ``raw_view_folder`` refuse, naming the key.
KEEP_RAW = {"sliding_window": {"use_sliding_window": True}}


def raw_view_folder(drafter: str, rewrites: Sequence[Rewrite], into: str) -> str:
    """A copy of a local drafter folder (weights linked, not copied) whose config.json makes the config
    class keep every rewritten key's raw value; the light check on it must then find no rewrite.

    Example::

        >>> import tempfile
        >>> _, found = light_check_rewrites("tests/fixtures/models/drafter-window-lost")
        >>> folder = raw_view_folder("tests/fixtures/models/drafter-window-lost", found, tempfile.mkdtemp())
        >>> light_check_rewrites(folder)[1]
        []
    """
    src, dst = Path(drafter), Path(into)
    if not src.is_dir():
        raise RawViewUnavailable(f"{drafter}: the raw view for an engine needs a local drafter folder", file=drafter)
    raw = parse_json_object((src / "config.json").read_bytes(), str(src / "config.json"))
    for r in rewrites:
        keep = KEEP_RAW.get(r.key)
        if keep is None:
            raise RawViewUnavailable(
                f"{src / 'config.json'}: the config class rewrites `{r.key}` ({r.text}) and no config.json key is "
                "known to keep it, so an engine cannot run the raw view; run it with --backend reference",
                file=str(src / "config.json"), key=r.key)
        raw.update(keep)
    dst.mkdir(parents=True, exist_ok=True)
    for entry in src.iterdir():
        if entry.name != "config.json" and not (dst / entry.name).exists():
            os.symlink(entry.resolve(), dst / entry.name)
    (dst / "config.json").write_text(json.dumps(raw, indent=2) + "\n", encoding="utf-8")
    left = light_check_rewrites(str(dst))[1]
    if left:
        raise RawViewUnavailable(f"{src / 'config.json'}: `{left[0].key}` is still rewritten ({left[0].text}) with "
                                 "the keys that should keep it; run the raw view with --backend reference",
                                 file=str(src / "config.json"), key=left[0].key)
    return str(dst)
