"""Speculative-decoding counters from vLLM's metric snapshots, and per-prompt deltas between them.

``vllm.LLM.get_metrics()`` returns the process's Prometheus metrics as plain objects
(``vllm/v1/metrics/reader.py``): a ``Counter`` has ``.name``, ``.labels`` and an int ``.value``; the
one ``Vector`` (``vllm:spec_decode_num_accepted_tokens_per_pos``) has ``.values``, one count per
drafted position. The counters only grow, over the whole process, so the figures of one prompt are
the difference of a snapshot taken after it and one taken before.

Several label sets can carry the same name (one per engine under data parallelism, or per model
name); they are summed, because a prompt's work can land on any of them.

Nothing here imports vLLM: the objects are read by attribute, so tests build them by hand.

In: the metric objects of ``LLM.get_metrics()`` before and after a prompt.
Out: ``SpecDecodeCounts`` (``read_counts``; their difference with ``-``), a ``PromptResult`` per
prompt (``prompt_result``); ``MetricsError`` when vLLM reported no speculative-decoding counters
(``require_spec_decode``) or a metric is not of vLLM's shape.

Example::

    >>> from types import SimpleNamespace as M
    >>> before = read_counts([M(name=DRAFTS, labels={}, value=10), M(name=DRAFT_TOKENS, labels={}, value=30),
    ...                       M(name=ACCEPTED, labels={}, value=20), M(name=PER_POS, labels={}, values=[9, 7, 4])])
    >>> after = read_counts([M(name=DRAFTS, labels={}, value=14), M(name=DRAFT_TOKENS, labels={}, value=42),
    ...                      M(name=ACCEPTED, labels={}, value=29), M(name=PER_POS, labels={}, values=[13, 10, 6])])
    >>> d = after - before
    >>> d.drafts, d.accepted_tokens, d.accepted_per_position, d.mean_acceptance_length
    (4, 9, [4, 3, 2], 3.25)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from draftguard.check.findings import int_or_none
from draftguard.errors import MetricsError
from draftguard.runner.result import PromptResult

DRAFTS = "vllm:spec_decode_num_drafts"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"
SPEC_DECODE_METRICS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS)


@dataclass
class SpecDecodeCounts:
    """The four speculative-decoding counters at one moment (or the change between two moments).

    ``found`` is False when the snapshot held none of them: speculation is off, or the engine was
    started with ``disable_log_stats=True`` (``LLM``'s default), which turns the counters off."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)
    found: bool = True

    @property
    def mean_acceptance_length(self) -> float | None:
        """τ = 1 + accepted / drafts (the bonus token counts), None when nothing was drafted."""
        return 1.0 + self.accepted_tokens / self.drafts if self.drafts else None

    def __sub__(self, earlier: "SpecDecodeCounts") -> "SpecDecodeCounts":
        return delta(earlier, self)


def _count(value: Any, name: str) -> int:
    number = int_or_none(value)
    if number is None:
        raise MetricsError(f"metric {name} has a value that is not a count, {value!r}; is this vLLM's metric reader?")
    return number


def read_counts(metrics: Iterable[Any]) -> SpecDecodeCounts:
    """Sum the speculative-decoding counters of one ``LLM.get_metrics()`` snapshot.

    Metrics with other names (gauges, histograms, other counters) are ignored; counters of the same
    name with different labels are added, per-position vectors position by position.

    Example::

        >>> from types import SimpleNamespace as M
        >>> snap = [M(name=DRAFTS, labels={"engine": "0"}, value=3), M(name=DRAFTS, labels={"engine": "1"}, value=2),
        ...         M(name=PER_POS, labels={"engine": "0"}, values=[3, 1]),
        ...         M(name=PER_POS, labels={"engine": "1"}, values=[2, 2, 1]),
        ...         M(name="vllm:num_requests_running", labels={}, value=1.0)]
        >>> c = read_counts(snap)
        >>> c.drafts, c.accepted_per_position
        (5, [5, 3, 1])
    """
    totals = {DRAFTS: 0, DRAFT_TOKENS: 0, ACCEPTED: 0}
    per_pos: list[int] = []
    seen = False
    for metric in metrics:
        name = getattr(metric, "name", None)
        if name not in SPEC_DECODE_METRICS:
            continue
        seen = True
        if name == PER_POS:
            values = getattr(metric, "values", None)
            if values is None:
                raise MetricsError(f"metric {PER_POS} has no `.values`; expected vLLM's Vector metric type")
            for i, v in enumerate(values):
                if i == len(per_pos):
                    per_pos.append(0)
                per_pos[i] += _count(v, name)
        else:
            if not hasattr(metric, "value"):
                raise MetricsError(f"metric {name} has no `.value`; expected vLLM's Counter metric type")
            totals[name] += _count(metric.value, name)
    return SpecDecodeCounts(
        drafts=totals[DRAFTS],
        draft_tokens=totals[DRAFT_TOKENS],
        accepted_tokens=totals[ACCEPTED],
        accepted_per_position=per_pos,
        found=seen,
    )


def delta(before: SpecDecodeCounts, after: SpecDecodeCounts) -> SpecDecodeCounts:
    """What happened between two snapshots. Raises MetricsError when a counter went down (the
    registry was reset between them), because a negative count would be silently wrong.

    Raises:
        MetricsError: A counter went down between the snapshots.

    Example::

        >>> delta(SpecDecodeCounts(2, 6, 3, [2, 1]), SpecDecodeCounts(5, 15, 9, [5, 3, 1])).accepted_per_position
        [3, 2, 1]
    """
    width = max(len(before.accepted_per_position), len(after.accepted_per_position))
    b = before.accepted_per_position + [0] * (width - len(before.accepted_per_position))
    a = after.accepted_per_position + [0] * (width - len(after.accepted_per_position))
    out = SpecDecodeCounts(
        drafts=after.drafts - before.drafts,
        draft_tokens=after.draft_tokens - before.draft_tokens,
        accepted_tokens=after.accepted_tokens - before.accepted_tokens,
        accepted_per_position=[x - y for x, y in zip(a, b)],
        found=before.found and after.found,
    )
    if min([out.drafts, out.draft_tokens, out.accepted_tokens, *out.accepted_per_position]) < 0:
        raise MetricsError(
            "vLLM's speculative-decoding counters went down between two snapshots (the metrics registry "
            "was reset); run one engine per process"
        )
    return out


def require_spec_decode(counts: SpecDecodeCounts) -> None:
    """Raise MetricsError when a snapshot holds no speculative-decoding counters at all.

    Raises:
        MetricsError: The snapshot has no ``vllm:spec_decode_*`` counters.

    Example::

        >>> require_spec_decode(read_counts([]))
        Traceback (most recent call last):
        ...
        draftguard.errors.MetricsError: vLLM reported no speculative-decoding metrics (vllm:spec_decode_num_drafts ...): start the engine with a speculative_config and disable_log_stats=False
    """
    if not counts.found:
        raise MetricsError(
            f"vLLM reported no speculative-decoding metrics ({DRAFTS} ...): start the engine with a "
            "speculative_config and disable_log_stats=False"
        )


def prompt_result(
    index: int,
    counts: SpecDecodeCounts,
    *,
    new_tokens: int,
    wall_seconds: float = 0.0,
    label: str | None = None,
    positions: int | None = None,
) -> PromptResult:
    """One prompt's PromptResult from the delta of its snapshots. ``positions`` pads or checks the
    per-position vector to the number of speculative tokens, so every prompt reports the same width.

    Example::

        >>> prompt_result(0, SpecDecodeCounts(2, 6, 4, [2, 2]), new_tokens=6, positions=3).accepted_per_position
        [2, 2, 0]
    """
    per_pos = list(counts.accepted_per_position)
    if positions is not None:
        if any(per_pos[positions:]):
            raise MetricsError(
                f"vLLM counted accepted tokens at position {len(per_pos) - 1}, past the {positions} drafted "
                "positions asked for; num_speculative_tokens differs from what the engine ran"
            )
        per_pos = (per_pos + [0] * positions)[:positions]
    return PromptResult.from_counts(
        index,
        drafts=counts.drafts,
        draft_tokens=counts.draft_tokens,
        accepted_tokens=counts.accepted_tokens,
        accepted_per_position=per_pos,
        new_tokens=new_tokens,
        wall_seconds=wall_seconds,
        label=label,
    )
