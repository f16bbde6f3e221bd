"""Runs of one drafter on the same prompts, compared: config views x backends, and who is at fault.

Two layers live here:

- ``diagnose`` (the verdict of ``--config-view both`` and ``--backend both``): cells keyed by
  (view, backend), compared pairwise with a paired bootstrap on per-prompt τ, and one named cause:
  config-rewrite, engine, drafter, none, or catastrophic. It needs no threshold. ``rewrites_from``
  takes the rewritten keys from the light check's report of the same drafter, for the reason text.
- ``compare`` (kept for its per-position side-by-side table, ``run.differential``): one vLLM run against
  one reference run, judged on point estimates, as described below.

``compare``, for ``--backend both``: the same prompts through vLLM and the reference.

The reference backend runs the drafter's checkpoint format as written; vLLM runs it as users serve
it. Their τ tell apart the two ways a drafter deployment fails:

- vLLM's τ below ``min_ratio`` (0.9) of the reference's, while the reference is fine: **engine
  mismatch**. The weights are good; the engine (or the config class in front of it) reads the
  drafter differently: target layer ids one off, sliding-window layers run as full attention, a
  window the config class dropped. Per-position rates are shown side by side.
- both low (below the bar): **drafter bad**. The weights or the config are at fault whatever runs them.
- otherwise **pass**: the engine reproduces the reference (and a bar, when one is set, is met).

Two rarer outcomes are named too, so they are never mistaken for a pass: vLLM agrees with the
reference but falls just under the bar (**below bar**), and the reference is low while vLLM is not
(**reference low**: our reference may not read this drafter's format, so nothing is concluded).

"Low" is τ below the result's bar (``--min-acceptance-length`` or the baseline's) or, with no bar,
below ``LOW_TAU``: a broken drafter sits at 1.0 to 1.5 (see the design notes), a healthy one well above.

In: two ``AcceptanceResult`` objects from the same prompts, the reference's and the engine's (and a bar).
Out: ``compare`` -> a ``Differential`` (kind, status, ratio, per-position rows); ``combine`` -> one
``AcceptanceResult`` carrying it; ``render_side_by_side`` -> the table as text or markdown.

Example::

    >>> from draftguard.runner.result import AcceptanceResult, PromptResult
    >>> def result(accepted, per_pos):
    ...     p = PromptResult.from_counts(0, drafts=10, draft_tokens=30, accepted_tokens=accepted,
    ...                                  accepted_per_position=per_pos, new_tokens=40)
    ...     return AcceptanceResult.from_prompts([p], wall_seconds=1.0)
    >>> d = compare(result(25, [10, 9, 6]), result(2, [2, 0, 0]))
    >>> d.kind, d.status, round(d.ratio, 3)
    ('engine mismatch', 'fail', 0.343)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from draftguard.runner.diagnosis import ENGINE_HINT, REFERENCE, _fmt
from draftguard.runner.result import FAIL, INCONCLUSIVE, PASS, AcceptanceResult, Verdict

MIN_RATIO = 0.9
LOW_TAU = 1.5
ENGINE_MISMATCH, DRAFTER_BAD, BELOW_BAR, REFERENCE_LOW, AGREE, NO_DATA = (
    "engine mismatch", "drafter bad", "below bar", "reference low", "pass", "no data")
KINDS = (ENGINE_MISMATCH, DRAFTER_BAD, BELOW_BAR, REFERENCE_LOW, AGREE, NO_DATA)
METHOD = "vLLM against the reference backend, same prompts"


@dataclass
class PositionRow:
    """Acceptance rate at one drafted position in each backend (None: that backend drafted fewer)."""

    position: int
    reference: float | None
    vllm: float | None


@dataclass
class Differential:
    """The comparison of one vLLM run with one reference run on the same prompts."""

    kind: str
    status: str
    reason: str
    reference_tau: float | None
    vllm_tau: float | None
    ratio: float | None
    min_ratio: float
    low_bar: float
    per_position: list[PositionRow] = field(default_factory=list)
    same_tokens: int | None = None
    prompts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Differential":
        """Rebuild from ``run.differential`` of a result's JSON (for renderers that only have the JSON).

        Example::

            >>> d = Differential(AGREE, PASS, "pass", 3.0, 3.0, 1.0, 0.9, 1.5, [PositionRow(0, 0.9, 0.9)])
            >>> Differential.from_dict(d.to_dict()) == d
            True
        """
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["per_position"] = [PositionRow(**row) for row in data.get("per_position") or []]
        return cls(**known)



def side_by_side(reference: AcceptanceResult, engine: AcceptanceResult) -> list[PositionRow]:
    """Per-position acceptance rates of both results, position by position.

    Example::

        >>> from draftguard.runner.result import AcceptanceResult as R
        >>> a = R(3.0, 0.6, [0.9, 0.7, 0.4], 10, 30, 20, [], 0.0, 0.0)
        >>> b = R(2.0, 0.5, [0.8, 0.2], 10, 20, 10, [], 0.0, 0.0)
        >>> [(r.position, r.reference, r.vllm) for r in side_by_side(a, b)]
        [(0, 0.9, 0.8), (1, 0.7, 0.2), (2, 0.4, None)]
    """
    ref, eng = reference.per_position_acceptance, engine.per_position_acceptance
    width = max(len(ref), len(eng))
    return [PositionRow(i, ref[i] if i < len(ref) else None, eng[i] if i < len(eng) else None) for i in range(width)]


def low_bar(reference: AcceptanceResult, engine: AcceptanceResult) -> float:
    """The τ below which a result counts as low: the bar either result was judged against, else LOW_TAU."""
    for r in (engine, reference):
        if r.thresholds.bar is not None:
            return float(r.thresholds.bar)
    return LOW_TAU


def compare(
    reference: AcceptanceResult,
    engine: AcceptanceResult,
    *,
    min_ratio: float = MIN_RATIO,
    bar: float | None = None,
    reference_tokens: Sequence[Sequence[int]] | None = None,
    engine_tokens: Sequence[Sequence[int]] | None = None,
) -> Differential:
    """Judge a vLLM result against the reference result of the same prompts.

    ``bar`` overrides the bar read from the results. With both token lists, ``same_tokens`` counts the
    prompts whose greedy output is identical (both decode the target greedily, so they should agree
    apart from low-precision ties).

    Example::

        >>> from draftguard.runner.result import AcceptanceResult as R
        >>> ok, bad = R(3.5, 0.8, [0.9], 10, 30, 25, [], 0.0, 0.0), R(1.2, 0.1, [0.2], 10, 30, 2, [], 0.0, 0.0)
        >>> compare(bad, bad).kind, compare(ok, ok).kind, compare(ok, bad).kind
        ('drafter bad', 'pass', 'engine mismatch')
    """
    ref_tau, eng_tau = reference.mean_acceptance_length, engine.mean_acceptance_length
    floor = float(bar) if bar is not None else low_bar(reference, engine)
    rows = side_by_side(reference, engine)
    same = None
    if reference_tokens is not None and engine_tokens is not None:
        same = sum(1 for a, b in zip(reference_tokens, engine_tokens) if list(a) == list(b))
    ratio = eng_tau / ref_tau if (ref_tau and eng_tau is not None) else None
    base = dict(reference_tau=ref_tau, vllm_tau=eng_tau, ratio=ratio, min_ratio=min_ratio, low_bar=floor,
                per_position=rows, same_tokens=same, prompts=len(engine.per_prompt))
    taus = f"vLLM τ {_fmt(eng_tau)} against the reference's {_fmt(ref_tau)}"
    if ref_tau is None or eng_tau is None:
        who = "the reference" if ref_tau is None else "vLLM"
        return Differential(NO_DATA, INCONCLUSIVE, f"{who} drafted nothing ({taus}); use longer outputs or more prompts",
                            **base)
    ref_low, eng_low = ref_tau < floor, eng_tau < floor
    if ref_low and (eng_low or eng_tau < min_ratio * ref_tau):
        return Differential(DRAFTER_BAD, FAIL, (
            f"drafter bad: {taus}, both below {_fmt(floor)}; the drafter's weights or config are at fault, "
            "whichever engine runs it"), **base)
    if ref_low:
        return Differential(REFERENCE_LOW, INCONCLUSIVE, (
            f"reference low: {taus}; vLLM is fine but the reference backend is below {_fmt(floor)}, so it may "
            "not read this drafter's format; nothing is concluded about the engine"), **base)
    if eng_tau < min_ratio * ref_tau:
        worst = max((r for r in rows if r.reference is not None and r.vllm is not None),
                    key=lambda r: r.reference - r.vllm, default=None)
        at = (f"; the widest gap is at position {worst.position} ({_fmt(worst.reference)} against {_fmt(worst.vllm)})"
              if worst is not None else "")
        return Differential(ENGINE_MISMATCH, FAIL, (
            f"engine mismatch: {taus} ({_fmt(ratio)} of it, below {_fmt(min_ratio)}){at}; {ENGINE_HINT}"), **base)
    if eng_low:
        return Differential(BELOW_BAR, FAIL, (
            f"below bar: {taus}; vLLM matches the reference but both sit under the bar {_fmt(floor)}"), **base)
    return Differential(AGREE, PASS, f"pass: {taus} ({_fmt(ratio)} of it, at least {_fmt(min_ratio)})", **base)


def reference_summary(result: AcceptanceResult) -> dict[str, Any]:
    """The reference run, kept inside the combined result's ``run`` block (totals, not per prompt)."""
    d = result.to_dict()
    keep = ("mean_acceptance_length", "draft_acceptance_rate", "per_position_acceptance", "drafts",
            "draft_tokens", "accepted_tokens", "per_prompt", "tokens_per_second", "wall_seconds", "verdict", "run")
    return {k: d[k] for k in keep}


def cells_of_combined(result: AcceptanceResult, view: str) -> dict[tuple[str, str], AcceptanceResult]:
    """The two cells of a ``combine``d result (vLLM's figures at the top, the reference's under
    ``run.reference``), for ``diagnose``."""
    ref = result.run["reference"]
    reference = AcceptanceResult.from_dict({**ref, "thresholds": asdict(result.thresholds)}, "run.reference")
    engine = AcceptanceResult.from_dict({**result.to_dict(), "views": None, "diagnosis": None}, "result")
    return {(view, REFERENCE): reference, (view, "vllm"): engine}


def combine(reference: AcceptanceResult, engine: AcceptanceResult, diff: Differential) -> AcceptanceResult:
    """One AcceptanceResult for ``--backend both``: vLLM's figures (what users will see when serving),
    the differential verdict, and the reference's totals and the comparison under ``run``.

    Example::

        >>> from draftguard.runner.result import AcceptanceResult as R
        >>> ok = R(3.5, 0.8, [0.9], 10, 30, 25, [], 0.0, 0.0, run={"backend": "vllm"})
        >>> out = combine(ok, ok, compare(ok, ok))
        >>> out.verdict.status, out.run["backend"], out.run["differential"]["kind"]
        ('pass', 'both', 'pass')
    """
    run = dict(engine.run)
    run["backend"] = "both"
    run["reference"] = reference_summary(reference)
    run["differential"] = diff.to_dict()
    verdict = Verdict(status=diff.status, reason=diff.reason, method=METHOD)
    return AcceptanceResult(
        mean_acceptance_length=engine.mean_acceptance_length,
        draft_acceptance_rate=engine.draft_acceptance_rate,
        per_position_acceptance=list(engine.per_position_acceptance),
        drafts=engine.drafts,
        draft_tokens=engine.draft_tokens,
        accepted_tokens=engine.accepted_tokens,
        per_prompt=list(engine.per_prompt),
        tokens_per_second=engine.tokens_per_second,
        wall_seconds=engine.wall_seconds + reference.wall_seconds,
        verdict=verdict,
        thresholds=engine.thresholds,
        run=run,
    )


def render_side_by_side(diff: "Differential | dict[str, Any]", markdown: bool = False) -> str:
    """The verdict and the per-position rates of both backends as a table (text or markdown); takes the
    Differential or its JSON form (``result.run["differential"]``).

    Example::

        >>> d = Differential(AGREE, PASS, "pass: ...", 3.0, 2.9, 0.97, 0.9, 1.5,
        ...                  [PositionRow(0, 0.9, 0.88), PositionRow(1, 0.6, None)])
        >>> print(render_side_by_side(d))
        pass: ...
        position  reference  vLLM
               0       0.90  0.88
               1       0.60   n/a
    """
    if isinstance(diff, dict):
        diff = Differential.from_dict(diff)
    lines = [diff.reason]
    if markdown:
        lines += ["", "| position | reference | vLLM |", "|---:|---:|---:|"]
        lines += [f"| {r.position} | {_fmt(r.reference)} | {_fmt(r.vllm)} |" for r in diff.per_position]
    else:
        lines.append("position  reference  vLLM")
        lines += [f"{r.position:>8}  {_fmt(r.reference):>9}  {_fmt(r.vllm):>4}" for r in diff.per_position]
    if diff.same_tokens is not None:
        if markdown:
            lines.append("")
        lines.append(f"identical greedy output on {diff.same_tokens} of {diff.prompts} prompts")
    return "\n".join(lines)

