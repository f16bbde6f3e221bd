"""The verdict of an acceptance test: τ against a bar, with a confidence interval, and early stopping.

- The bar is ``min_acceptance_length``, or ``tolerance x`` a baseline result's τ (0.95 by default, as
  vLLM's own DFlash regression test uses), the higher of the two when both are given.
- The interval of τ is a bootstrap over prompts (τ is a ratio of sums, so prompts are resampled
  whole), or, with fewer than ``MIN_BOOTSTRAP_PROMPTS`` prompts, Wilson intervals on the per-position
  rates (τ = 1 + Σ rate_i; each position at confidence 1 - α/k so the sum keeps 1 - α).
- pass: the whole interval is at or above the bar; fail: the whole interval is below it;
  inconclusive: the interval straddles the bar, or there is no bar, or nothing was drafted.
- Early stop: after each prompt (from ``min_prompts`` on) the verdict is computed at a stricter
  confidence (0.99), because looking repeatedly inflates the error rate; once that is decided the run
  stops. The reported verdict is then computed at the normal confidence on the prompts that ran.

Imports nothing heavy: numpy only for the bootstrap.

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
from statistics import NormalDist
from typing import Sequence

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


def make_thresholds(
    min_acceptance_length: float | None = None,
    baseline: AcceptanceResult | None = None,
    baseline_source: str | None = None,
    tolerance: float | None = None,
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
    import numpy as np

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


def verdict(prompts: Sequence[PromptResult], thresholds: Thresholds, confidence: float = CONFIDENCE) -> Verdict:
    """pass, fail or inconclusive for these prompts against ``thresholds.bar``."""
    tau = _tau(prompts)
    if tau is None:
        return Verdict(INCONCLUSIVE, "nothing was drafted (every prompt ended at once); use other prompts or "
                       "more --max-new-tokens")
    lo, hi, method = tau_interval(prompts, confidence)
    interval = [round(lo, 4), round(hi, 4)]
    shown = f"τ {tau:.2f} ({confidence:.0%} CI {lo:.2f}-{hi:.2f}, {method}, {len(prompts)} prompts)"
    bar = thresholds.bar
    if bar is None:
        return Verdict(INCONCLUSIVE, f"{shown}; no threshold set: pass --min-acceptance-length or --baseline "
                       "(or set them in .draftguard.yml) for a verdict", interval, confidence, method)
    if thresholds.baseline_mean_acceptance_length is not None:
        source = (f"{thresholds.tolerance:g} x baseline τ {thresholds.baseline_mean_acceptance_length:.2f}"
                  if thresholds.min_acceptance_length is None or bar != thresholds.min_acceptance_length
                  else "min_acceptance_length")
    else:
        source = "min_acceptance_length"
    if lo >= bar:
        return Verdict(PASS, f"{shown} is at or above the bar {bar:.2f} ({source})", interval, confidence, method)
    if hi < bar:
        return Verdict(FAIL, f"{shown} is below the bar {bar:.2f} ({source}); a broken drafter or drafter config "
                       "reads 1.0-1.5", interval, confidence, method)
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
        self.enabled = enabled and thresholds.bar is not None

    def settled(self, prompts: Sequence[PromptResult]) -> bool:
        if not self.enabled or len(prompts) < self.min_prompts:
            return False
        return verdict(prompts, self.thresholds, self.confidence).status in (PASS, FAIL)
