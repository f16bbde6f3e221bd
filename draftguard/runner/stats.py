"""The verdict of an acceptance test: τ against a bar, with a confidence interval, and early stopping.

- The bar is ``min_acceptance_length``, or ``tolerance x`` a baseline result's τ (0.95 by default, as
  vLLM's own DFlash regression test uses), the higher of the two when both are given.
- The interval of τ is a bootstrap over prompts (τ is a ratio of sums, so prompts are resampled
  whole), or, with fewer than ``MIN_BOOTSTRAP_PROMPTS`` prompts, Wilson intervals on the per-position
  rates (τ = 1 + Σ rate_i; each position at confidence 1 - α/k so the sum keeps 1 - α).
- pass: the whole interval is at or above the bar; fail: the whole interval is below it;
  inconclusive: the interval straddles the bar, or nothing was drafted.
- No bar: the run still fails, as **catastrophic**, when the interval of the first-position acceptance
  rate lies wholly below a floor (``min_first_position``, 0.2 by default). A healthy drafter's first
  drafted token is accepted far more often (the fixtures' healthy drafter: 1.00; published DFlash
  drafters: well over half); a broken one sits near 0.1. Otherwise, with no bar, it is inconclusive.
- Paired comparison of two runs on the same prompts (two config views, two backends):
  ``paired_interval`` bootstraps prompts jointly, so a prompt's difficulty cancels out.
- Early stop: after each prompt (from ``min_prompts`` on) the verdict is computed at a stricter
  confidence (0.99), because looking repeatedly inflates the error rate; once that is decided the run
  stops. The reported verdict is then computed at the normal confidence on the prompts that ran.

Imports nothing heavy: numpy only for the bootstrap.

In: per-prompt ``PromptResult`` objects and ``Thresholds`` (``make_thresholds`` builds them from the
bar, a baseline ``AcceptanceResult`` and the tolerance).
Out: a ``Verdict`` (status, reason, interval), intervals as tuples, a ``PairedInterval`` for two runs,
and ``EarlyStop``, which says when a run may stop.

Example::

    >>> from draftguard.runner.result import PromptResult
    >>> ps = [PromptResult.from_counts(i, drafts=8, draft_tokens=24, accepted_tokens=20 + i % 3,
    ...                                accepted_per_position=[8, 7, 5 + i % 3], new_tokens=32) for i in range(10)]
    >>> verdict(ps, Thresholds(min_acceptance_length=3.0, bar=3.0)).status
    'pass'
    >>> verdict(ps, Thresholds(min_acceptance_length=3.9, bar=3.9)).status
    'fail'
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Sequence

from draftguard.runner.result import (
    FAIL,
    INCONCLUSIVE,
    PASS,
    AcceptanceResult,
    PromptResult,
    Thresholds,
    Verdict,
)
from draftguard.snapshot import BadInput

CONFIDENCE = 0.95
EARLY_STOP_CONFIDENCE = 0.99
MIN_BOOTSTRAP_PROMPTS = 5
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP, WILSON = "bootstrap over prompts", "wilson per position"
PAIRED = "paired bootstrap over prompts"
MIN_FIRST_POSITION = 0.2
# The τ a broken drafter or drafter config reads (nearly nothing accepted): the fail verdict says so at or below it.
BROKEN_TAU = 1.5


def make_thresholds(
    min_acceptance_length: float | None = None,
    baseline: AcceptanceResult | None = None,
    baseline_source: str | None = None,
    tolerance: float | None = None,
    min_first_position: float | None = MIN_FIRST_POSITION,
) -> Thresholds:
    """The bar from a minimum τ and/or a baseline result.

    Example::

        >>> make_thresholds(3.0).bar
        3.0
        >>> base = AcceptanceResult(4.0, 1.0, [1.0], 1, 3, 3, [], 0.0, 0.0)
        >>> make_thresholds(None, base, "base.json", 0.95).bar
        3.8
    """
    if min_acceptance_length is not None and not min_acceptance_length >= 1.0:
        raise BadInput(f"--min-acceptance-length must be at least 1.0 (τ counts the bonus token), "
                       f"got {min_acceptance_length}", key="min_acceptance_length")
    if min_first_position is not None and not 0.0 < min_first_position < 1.0:
        raise BadInput(f"--min-first-position must be in (0, 1), a share of drafts whose first token is accepted, "
                       f"got {min_first_position}", key="min_first_position")
    if tolerance is not None and not 0.0 < tolerance <= 1.0:
        raise BadInput(f"--tolerance must be in (0, 1], a share of the baseline's τ, got {tolerance}", key="tolerance")
    bars = []
    if min_acceptance_length is not None:
        bars.append(float(min_acceptance_length))
    base_tau = None
    if baseline is not None:
        base_tau = baseline.mean_acceptance_length
        if base_tau is None:
            raise BadInput(f"{baseline_source or 'the baseline'}: the baseline result drafted nothing, so it sets no bar",
                           file=baseline_source, key="mean_acceptance_length")
        tolerance = 0.95 if tolerance is None else tolerance
        bars.append(round(tolerance * base_tau, 10))
    return Thresholds(
        min_acceptance_length=min_acceptance_length,
        baseline=baseline_source,
        baseline_mean_acceptance_length=base_tau,
        tolerance=tolerance if baseline is not None else None,
        bar=max(bars) if bars else None,
        min_first_position=min_first_position,
    )


def _tau(prompts: Sequence[PromptResult]) -> float | None:
    drafts = sum(p.drafts for p in prompts)
    return 1.0 + sum(p.accepted_tokens for p in prompts) / drafts if drafts else None


def bootstrap_interval(prompts: Sequence[PromptResult], confidence: float = CONFIDENCE,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of τ = 1 + Σ accepted / Σ drafts, resampling prompts whole.
    Seeded, so the same prompts give the same interval.

    Example::

        >>> ps = [PromptResult.from_counts(i, drafts=4, draft_tokens=12, accepted_tokens=a,
        ...       accepted_per_position=[], new_tokens=10) for i, a in enumerate([8, 8, 8, 8, 8])]
        >>> bootstrap_interval(ps)
        (3.0, 3.0)
    """
    import numpy as np  # numpy: ~50 ms; only the acceptance statistics use it

    used = [p for p in prompts if p.drafts]
    if not used:
        raise ValueError("no prompt drafted anything")
    acc = np.array([p.accepted_tokens for p in used], dtype=float)
    drafts = np.array([p.drafts for p in used], dtype=float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(used), size=(resamples, len(used)))
    taus = 1.0 + acc[idx].sum(1) / drafts[idx].sum(1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(taus, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def wilson_interval(successes: int, trials: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of a proportion.

    Example::

        >>> tuple(round(x, 3) for x in wilson_interval(8, 10))
        (0.49, 0.943)
    """
    if trials <= 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(1 - (1 - confidence) / 2)
    p = successes / trials
    den = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / den
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / den
    return max(0.0, centre - half), min(1.0, centre + half)


def wilson_tau_interval(prompts: Sequence[PromptResult], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """τ's interval from Wilson intervals of each position's acceptance rate, summed (Bonferroni over
    positions, so conservative). Used when there are too few prompts to bootstrap."""
    drafts = sum(p.drafts for p in prompts)
    width = max((len(p.accepted_per_position) for p in prompts), default=0)
    per_pos = [sum(p.accepted_per_position[i] for p in prompts if i < len(p.accepted_per_position))
               for i in range(width)]
    if not width:
        tau = _tau(prompts) or 1.0
        return tau, tau
    each = 1 - (1 - confidence) / width
    bounds = [wilson_interval(n, drafts, each) for n in per_pos]
    return 1.0 + sum(b[0] for b in bounds), 1.0 + sum(b[1] for b in bounds)


def tau_interval(prompts: Sequence[PromptResult], confidence: float = CONFIDENCE) -> tuple[float, float, str]:
    """τ's confidence interval and the method used (bootstrap with enough prompts, else Wilson)."""
    if sum(1 for p in prompts if p.drafts) >= MIN_BOOTSTRAP_PROMPTS:
        lo, hi = bootstrap_interval(prompts, confidence)
        return lo, hi, BOOTSTRAP
    lo, hi = wilson_tau_interval(prompts, confidence)
    return lo, hi, WILSON


def first_position_interval(prompts: Sequence[PromptResult], confidence: float = CONFIDENCE,
                            resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float, float, str]:
    """The first-position acceptance rate (drafts whose first drafted token was accepted, over drafts)
    with its interval: a bootstrap over prompts when there are enough (drafts within a prompt are not
    independent), else Wilson. Returns (rate, low, high, method).

    Example::

        >>> ps = [PromptResult.from_counts(i, drafts=10, draft_tokens=30, accepted_tokens=1,
        ...       accepted_per_position=[1, 0, 0], new_tokens=12) for i in range(6)]
        >>> rate, lo, hi, method = first_position_interval(ps)
        >>> rate, (lo, hi), method
        (0.1, (0.1, 0.1), 'bootstrap over prompts')
    """
    import numpy as np  # numpy: ~50 ms; only the acceptance statistics use it

    used = [p for p in prompts if p.drafts]
    if not used:
        raise ValueError("no prompt drafted anything")
    first = np.array([p.accepted_per_position[0] if p.accepted_per_position else 0 for p in used], dtype=float)
    drafts = np.array([p.drafts for p in used], dtype=float)
    rate = float(first.sum() / drafts.sum())
    if len(used) < MIN_BOOTSTRAP_PROMPTS:
        lo, hi = wilson_interval(int(first.sum()), int(drafts.sum()), confidence)
        return rate, lo, hi, WILSON
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(used), size=(resamples, len(used)))
    rates = first[idx].sum(1) / drafts[idx].sum(1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(rates, [alpha / 2, 1 - alpha / 2])
    return rate, float(lo), float(hi), BOOTSTRAP


@dataclass
class PairedInterval:
    """Run ``b`` against run ``a`` on the same prompts: τ of each, the ratio τ_b / τ_a and its interval
    from a paired bootstrap (prompts resampled jointly, so both runs see the same resample)."""

    a: str
    b: str
    tau_a: float
    tau_b: float
    ratio: float
    interval: list[float]
    confidence: float
    prompts: int
    method: str = PAIRED

    @property
    def change(self) -> float:
        """Relative change of τ from a to b (-0.71 is 71% lower)."""
        return self.ratio - 1.0

    def clearly_below(self, tolerance: float) -> bool:
        """b is below a beyond doubt: the whole interval of τ_b / τ_a lies under ``tolerance``."""
        return self.interval[1] < tolerance

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_interval(a: Sequence[PromptResult], b: Sequence[PromptResult], *, names: tuple[str, str] = ("a", "b"),
                    confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES,
                    seed: int = 0) -> PairedInterval | None:
    """Paired bootstrap of τ_b / τ_a over the prompts both runs drafted on (matched by ``index``).
    None when no prompt drafted in both.

    Example::

        >>> def run(acc):
        ...     return [PromptResult.from_counts(i, drafts=4, draft_tokens=12, accepted_tokens=x,
        ...             accepted_per_position=[], new_tokens=10) for i, x in enumerate(acc)]
        >>> p = paired_interval(run([12, 11, 12, 10, 12, 12]), run([1, 0, 2, 1, 0, 1]), names=("raw", "resolved"))
        >>> round(p.tau_a, 3), round(p.tau_b, 3), p.clearly_below(0.95)
        (3.875, 1.208, True)
        >>> paired_interval(run([8] * 6), run([8] * 6)).interval
        [1.0, 1.0]
    """
    import numpy as np  # numpy: ~50 ms; only the acceptance statistics use it

    by_index = {p.index: p for p in b}
    pairs = [(p, by_index[p.index]) for p in a if p.index in by_index and p.drafts and by_index[p.index].drafts]
    if not pairs:
        return None
    acc_a = np.array([x.accepted_tokens for x, _ in pairs], dtype=float)
    dr_a = np.array([x.drafts for x, _ in pairs], dtype=float)
    acc_b = np.array([y.accepted_tokens for _, y in pairs], dtype=float)
    dr_b = np.array([y.drafts for _, y in pairs], dtype=float)
    tau_a = 1.0 + acc_a.sum() / dr_a.sum()
    tau_b = 1.0 + acc_b.sum() / dr_b.sum()
    if len(pairs) >= 2:
        rng = np.random.default_rng(seed)
        idx = rng.integers(0, len(pairs), size=(resamples, len(pairs)))
        ratios = (1.0 + acc_b[idx].sum(1) / dr_b[idx].sum(1)) / (1.0 + acc_a[idx].sum(1) / dr_a[idx].sum(1))
        alpha = 1.0 - confidence
        lo, hi = (float(x) for x in np.quantile(ratios, [alpha / 2, 1 - alpha / 2]))
    else:  # one prompt: no spread to resample; the point is all there is
        lo = hi = float(tau_b / tau_a)
    return PairedInterval(a=names[0], b=names[1], tau_a=float(tau_a), tau_b=float(tau_b), ratio=float(tau_b / tau_a),
                          interval=[round(lo, 4), round(hi, 4)], confidence=confidence, prompts=len(pairs))


def catastrophic(prompts: Sequence[PromptResult], floor: float | None,
                 confidence: float = CONFIDENCE) -> tuple[bool, str] | None:
    """Whether the first-position acceptance interval lies wholly below ``floor``, with the sentence
    that says so; None when nothing was drafted or there is no floor."""
    if floor is None or not any(p.drafts for p in prompts):
        return None
    rate, lo, hi, method = first_position_interval(prompts, confidence)
    shown = f"first-position acceptance {rate:.3f} ({confidence:.0%} CI {lo:.3f}-{hi:.3f}, {method})"
    if hi < floor:
        return True, (f"{shown} lies wholly below the floor {floor:g}: catastrophic. A healthy drafter's first "
                      "drafted token is accepted far more often (--min-first-position sets the floor)")
    return False, f"{shown}, not wholly below the floor {floor:g}"


def verdict(prompts: Sequence[PromptResult], thresholds: Thresholds, confidence: float = CONFIDENCE) -> Verdict:
    """pass, fail or inconclusive for these prompts against ``thresholds.bar``; with no bar, fail as
    catastrophic when the first position's interval lies wholly below ``thresholds.min_first_position``."""
    tau = _tau(prompts)
    if tau is None:
        return Verdict(INCONCLUSIVE, "nothing was drafted (every prompt ended at once); use other prompts or "
                       "more --max-new-tokens")
    lo, hi, method = tau_interval(prompts, confidence)
    interval = [round(lo, 4), round(hi, 4)]
    shown = f"τ {tau:.2f} ({confidence:.0%} CI {lo:.2f}-{hi:.2f}, {method}, {len(prompts)} prompts)"
    bar = thresholds.bar
    if bar is None:
        floor = catastrophic(prompts, thresholds.min_first_position, confidence)
        if floor is not None and floor[0]:
            return Verdict(FAIL, f"{shown}; {floor[1]}", interval, confidence, method)
        said = f"; {floor[1]}" if floor is not None else ""
        return Verdict(INCONCLUSIVE, f"{shown}{said}; no threshold set: pass --min-acceptance-length or --baseline "
                       "(or set them in .draftguard.yml) for a pass", interval, confidence, method)
    if thresholds.baseline_mean_acceptance_length is not None:
        source = (f"{thresholds.tolerance:g} x baseline τ {thresholds.baseline_mean_acceptance_length:.2f}"
                  if thresholds.min_acceptance_length is None or bar != thresholds.min_acceptance_length
                  else "min_acceptance_length")
    else:
        source = "min_acceptance_length"
    if lo >= bar:
        return Verdict(PASS, f"{shown} is at or above the bar {bar:.2f} ({source})", interval, confidence, method)
    if hi < bar:
        # Only where it fits: at τ 3.48 against a bar of 3.9 the hint misled (a degraded head, not a broken one).
        broken = "; τ 1.0-1.5 is what a broken drafter or drafter config reads" if tau <= BROKEN_TAU else ""
        return Verdict(FAIL, f"{shown} is below the bar {bar:.2f} ({source}){broken}", interval, confidence, method)
    return Verdict(INCONCLUSIVE, f"{shown} straddles the bar {bar:.2f} ({source}); run more prompts "
                   "(--num-prompts) or longer outputs (--max-new-tokens)", interval, confidence, method)


class EarlyStop:
    """Decides, prompt by prompt, whether the verdict is already settled.

    Example::

        >>> stop = EarlyStop(Thresholds(bar=3.0), min_prompts=5)
        >>> ps = [PromptResult.from_counts(i, drafts=8, draft_tokens=24, accepted_tokens=8,
        ...       accepted_per_position=[8, 0, 0], new_tokens=16) for i in range(5)]
        >>> [stop.settled(ps[:k]) for k in (4, 5)]
        [False, True]
    """

    def __init__(self, thresholds: Thresholds, *, min_prompts: int = 8,
                 confidence: float = EARLY_STOP_CONFIDENCE, enabled: bool = True):
        self.thresholds, self.min_prompts, self.confidence = thresholds, min_prompts, confidence
        # With no bar only a catastrophic fail can settle a run; a healthy one runs every prompt.
        self.enabled = enabled and (thresholds.bar is not None or thresholds.min_first_position is not None)

    def settled(self, prompts: Sequence[PromptResult]) -> bool:
        if not self.enabled or len(prompts) < self.min_prompts:
            return False
        return verdict(prompts, self.thresholds, self.confidence).status in (PASS, FAIL)
