"""AcceptanceResult: what an acceptance test measured, and its verdict, as one JSON contract.

Every backend (the reference in ``reference.py``, vLLM) fills the same counters, the ones vLLM's
``LLM.get_metrics()`` exposes, so results from either read the same and can be compared:

- ``drafts``: verification steps that checked a drafted block;
- ``draft_tokens``: drafted tokens offered to the target (``drafts x (block_size - 1)``);
- ``accepted_tokens``: drafted tokens the target accepted;
- ``accepted_per_position[i]``: drafts whose position ``i`` was accepted.

From them: mean acceptance length τ = 1 + accepted / drafts (each step also yields the target's bonus
token), draft acceptance rate = accepted / draft_tokens, per-position rate = per_pos[i] / drafts.

This module imports nothing heavy (no torch): the bot and the Action read results with it.

In: per-prompt counters (``PromptResult.from_counts``), a ``Verdict`` and ``Thresholds``, or the JSON
of an earlier result (``AcceptanceResult.from_json``).
Out: an ``AcceptanceResult`` (τ, acceptance rates, per-position rates) and its JSON (``to_json()``)
in the contract below.

JSON contract (``schema_version`` 1); keys the bot, the Action and every backend rely on::

    {
      "schema_version": 1,
      "mean_acceptance_length": 3.41,          # τ, counting the bonus token; null when no drafts
      "draft_acceptance_rate": 0.80,
      "per_position_acceptance": [0.95, 0.81, 0.65],
      "drafts": 120, "draft_tokens": 360, "accepted_tokens": 289,
      "per_prompt": [{"index": 0, "mean_acceptance_length": 3.5, "drafts": 10, "draft_tokens": 30,
                      "accepted_tokens": 25, "accepted_per_position": [10, 8, 7], "new_tokens": 32,
                      "wall_seconds": 0.2, "label": "math-1"}],
      "tokens_per_second": 150.2, "wall_seconds": 2.9,
      "verdict": {"status": "pass", "reason": "...", "interval": [3.2, 3.6], "confidence": 0.95,
                  "method": "bootstrap over prompts"},
      "thresholds": {"min_acceptance_length": 3.0, "baseline": null,
                     "baseline_mean_acceptance_length": null, "tolerance": null, "bar": 3.0},
      "run": {"backend": "reference", "target": "...", "drafter": "...", "block_size": 4, ...},
      "views": null,      # or, when both config views ran (--config-view both): one cell per view
      "diagnosis": null   # or the cause, when a verdict was reached without a bar or across cells
    }

With ``--config-view both`` the top-level figures are the resolved view's (what an engine that trusts
the config class runs; with ``--backend both``, vLLM's resolved view), and::

    "views": {"raw": {<cell>}, "resolved": {<cell>}}                      # one backend
    "views": {"raw": {"reference": {<cell>}, "vllm": {<cell>}}, "resolved": {...}}   # --backend both

A cell holds the usual figures of that run (``mean_acceptance_length``, ``draft_acceptance_rate``,
``per_position_acceptance``, ``drafts``, ``draft_tokens``, ``accepted_tokens``, ``per_prompt_tau``,
``first_position`` {rate, interval}, ``wall_seconds``, ``verdict``). The diagnosis names one cause::

    "diagnosis": {"cause": "config-rewrite",   # none | config-rewrite | engine | drafter | catastrophic | null
                  "reason": "τ 4.00 as written, 1.19 as Qwen3Config resolves it (−70%): `sliding_window` dropped",
                  "rewritten": [{"key": "sliding_window", "raw": 6, "resolved": null, "text": "dropped"}],
                  "intervals": [{"a": "raw", "b": "resolved", "tau_a": 4.0, "tau_b": 1.19, "ratio": 0.3,
                                 "interval": [0.27, 0.33], "confidence": 0.95, "prompts": 24, ...}],
                  "cells": {"raw": "ok", "resolved": "low"}}

``cause`` is null only when nothing could be decided (then ``verdict.status`` is inconclusive).

Example::

    >>> p = PromptResult.from_counts(0, drafts=2, draft_tokens=6, accepted_tokens=5,
    ...                              accepted_per_position=[2, 2, 1], new_tokens=7)
    >>> r = AcceptanceResult.from_prompts([p], wall_seconds=0.5)
    >>> r.mean_acceptance_length, r.draft_acceptance_rate, r.per_position_acceptance
    (3.5, 0.8333333333333334, [1.0, 1.0, 0.5])
    >>> AcceptanceResult.from_json(r.to_json()) == r
    True
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from draftguard.snapshot import BadInput

SCHEMA_VERSION = 1
PASS, FAIL, INCONCLUSIVE = "pass", "fail", "inconclusive"
STATUSES = (PASS, FAIL, INCONCLUSIVE)
# What a diagnosis can blame (draftguard.runner.diagnosis.diagnose).
NONE, CONFIG_REWRITE, ENGINE, DRAFTER, CATASTROPHIC = "none", "config-rewrite", "engine", "drafter", "catastrophic"
RUNNER = "runner"  # one vLLM model runner reads the drafter so that acceptance drops (--model-runner both)
MTP_WEIGHTS = "mtp-weights"  # the target's MTP layer dropped at save or left quantized (runner/mtp_model.py)
CAUSES = (NONE, CONFIG_REWRITE, ENGINE, DRAFTER, CATASTROPHIC, RUNNER, MTP_WEIGHTS)
CONFIG_VIEWS = ("raw", "resolved")


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


@dataclass
class PromptResult:
    """The counters of one prompt. ``mean_acceptance_length`` is None when nothing was drafted
    (for instance a prompt whose first token was end-of-sequence)."""

    index: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_position: list[int]
    new_tokens: int
    wall_seconds: float = 0.0
    label: str | None = None
    mean_acceptance_length: float | None = None

    @classmethod
    def from_counts(
        cls,
        index: int,
        *,
        drafts: int,
        draft_tokens: int,
        accepted_tokens: int,
        accepted_per_position: Sequence[int],
        new_tokens: int,
        wall_seconds: float = 0.0,
        label: str | None = None,
    ) -> "PromptResult":
        """Build a prompt's result from raw counters; τ is derived, never passed in.

        Example::

            >>> PromptResult.from_counts(3, drafts=4, draft_tokens=12, accepted_tokens=6,
            ...     accepted_per_position=[3, 2, 1], new_tokens=10).mean_acceptance_length
            2.5
        """
        tau = 1.0 + accepted_tokens / drafts if drafts else None
        return cls(
            index=index,
            drafts=int(drafts),
            draft_tokens=int(draft_tokens),
            accepted_tokens=int(accepted_tokens),
            accepted_per_position=[int(x) for x in accepted_per_position],
            new_tokens=int(new_tokens),
            wall_seconds=float(wall_seconds),
            label=label,
            mean_acceptance_length=tau,
        )


@dataclass
class Verdict:
    """pass, fail or inconclusive, with a sentence saying why.

    ``interval`` is the confidence interval of τ (``[low, high]``) that the decision used, when one was
    computed; ``method`` names how ("bootstrap over prompts" or "wilson per position")."""

    status: str
    reason: str
    interval: list[float] | None = None
    confidence: float | None = None
    method: str | None = None


@dataclass
class Thresholds:
    """The bar τ had to reach and where it came from.

    ``bar`` is the effective minimum τ: ``min_acceptance_length``, or ``tolerance x`` the baseline's τ,
    whichever is higher when both are set. None when no threshold was given (the verdict then only
    reports).

    ``min_first_position`` is the floor that needs no bar: with none set, a run whose first-position
    acceptance interval lies wholly below it fails as catastrophic (0.2 by default)."""

    min_acceptance_length: float | None = None
    baseline: str | None = None
    baseline_mean_acceptance_length: float | None = None
    tolerance: float | None = None
    bar: float | None = None
    min_first_position: float | None = None


@dataclass
class AcceptanceResult:
    """Totals, rates, per-prompt figures, speed and the verdict of one acceptance test."""

    mean_acceptance_length: float | None
    draft_acceptance_rate: float | None
    per_position_acceptance: list[float]
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    per_prompt: list[PromptResult]
    tokens_per_second: float
    wall_seconds: float
    verdict: Verdict = field(default_factory=lambda: Verdict(INCONCLUSIVE, "no verdict computed"))
    thresholds: Thresholds = field(default_factory=Thresholds)
    run: dict[str, Any] = field(default_factory=dict)
    views: dict[str, Any] | None = None
    diagnosis: dict[str, Any] | None = None
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_prompts(
        cls,
        prompts: Sequence[PromptResult],
        *,
        wall_seconds: float,
        verdict: Verdict | None = None,
        thresholds: Thresholds | None = None,
        run: dict[str, Any] | None = None,
    ) -> "AcceptanceResult":
        """Sum per-prompt counters into a result. Per-position vectors of different lengths are summed
        position by position (a backend may report fewer positions for a prompt that ended early).

        Example::

            >>> a = PromptResult.from_counts(0, drafts=1, draft_tokens=3, accepted_tokens=3,
            ...                              accepted_per_position=[1, 1, 1], new_tokens=4)
            >>> AcceptanceResult.from_prompts([a], wall_seconds=2.0).tokens_per_second
            2.0
        """
        drafts = sum(p.drafts for p in prompts)
        draft_tokens = sum(p.draft_tokens for p in prompts)
        accepted = sum(p.accepted_tokens for p in prompts)
        width = max((len(p.accepted_per_position) for p in prompts), default=0)
        per_pos = [0] * width
        for p in prompts:
            for i, n in enumerate(p.accepted_per_position):
                per_pos[i] += n
        new_tokens = sum(p.new_tokens for p in prompts)
        return cls(
            mean_acceptance_length=1.0 + accepted / drafts if drafts else None,
            draft_acceptance_rate=_ratio(accepted, draft_tokens),
            per_position_acceptance=[n / drafts for n in per_pos] if drafts else [0.0] * width,
            drafts=drafts,
            draft_tokens=draft_tokens,
            accepted_tokens=accepted,
            per_prompt=list(prompts),
            tokens_per_second=new_tokens / wall_seconds if wall_seconds > 0 else 0.0,
            wall_seconds=float(wall_seconds),
            verdict=verdict or Verdict(INCONCLUSIVE, "no verdict computed"),
            thresholds=thresholds or Thresholds(),
            run=dict(run or {}),
        )

    @property
    def accepted_per_position(self) -> list[int]:
        """Summed per-position counts (``per_position_acceptance x drafts``), rounded back to ints."""
        return [round(r * self.drafts) for r in self.per_position_acceptance]

    @property
    def new_tokens(self) -> int:
        return sum(p.new_tokens for p in self.per_prompt)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict in the JSON contract's key order."""
        out = asdict(self)
        order = [
            "schema_version", "mean_acceptance_length", "draft_acceptance_rate", "per_position_acceptance",
            "drafts", "draft_tokens", "accepted_tokens", "per_prompt", "tokens_per_second", "wall_seconds",
            "verdict", "thresholds", "run", "views", "diagnosis",
        ]
        return {k: out[k] for k in order}

    def to_json(self, indent: int | None = 2) -> str:
        """Serialize to the JSON contract (UTF-8 text ending in a newline)."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<result>") -> "AcceptanceResult":
        """Rebuild a result from its dict form; raise BadInput naming the key that is missing or wrong."""
        if not isinstance(data, dict):
            raise BadInput(f"{source}: an acceptance result must be a JSON object", file=source)
        version = data.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            raise BadInput(
                f"{source}: schema_version {version!r} is not supported (this draftguard reads "
                f"{SCHEMA_VERSION}); rerun `draftguard accept --format json` to regenerate it",
                file=source, key="schema_version",
            )

        def need(obj: dict[str, Any], key: str, types: tuple[type, ...], where: str, nullable: bool = False) -> Any:
            if key not in obj:
                raise BadInput(f"{source}: missing key `{where}{key}` in the acceptance result", file=source, key=where + key)
            value = obj[key]
            if value is None and nullable:
                return None
            if isinstance(value, bool) or not isinstance(value, types):
                want = " or ".join(t.__name__ for t in types)
                raise BadInput(
                    f"{source}: `{where}{key}` must be {want}, got {type(value).__name__}", file=source, key=where + key
                )
            return value

        num = (int, float)
        prompts = []
        for i, p in enumerate(need(data, "per_prompt", (list,), "")):
            where = f"per_prompt[{i}]."
            if not isinstance(p, dict):
                raise BadInput(f"{source}: `per_prompt[{i}]` must be an object", file=source, key=f"per_prompt[{i}]")
            prompts.append(
                PromptResult(
                    index=need(p, "index", (int,), where),
                    drafts=need(p, "drafts", (int,), where),
                    draft_tokens=need(p, "draft_tokens", (int,), where),
                    accepted_tokens=need(p, "accepted_tokens", (int,), where),
                    accepted_per_position=list(need(p, "accepted_per_position", (list,), where)),
                    new_tokens=need(p, "new_tokens", (int,), where),
                    wall_seconds=float(p.get("wall_seconds") or 0.0),
                    label=p.get("label"),
                    mean_acceptance_length=need(p, "mean_acceptance_length", num, where, nullable=True),
                )
            )
        v = need(data, "verdict", (dict,), "")
        status = need(v, "status", (str,), "verdict.")
        if status not in STATUSES:
            raise BadInput(f"{source}: `verdict.status` must be one of {', '.join(STATUSES)}, got {status!r}",
                           file=source, key="verdict.status")
        verdict = Verdict(
            status=status,
            reason=need(v, "reason", (str,), "verdict."),
            interval=v.get("interval"),
            confidence=v.get("confidence"),
            method=v.get("method"),
        )
        views = need(data, "views", (dict,), "", nullable=True) if "views" in data else None
        diagnosis = need(data, "diagnosis", (dict,), "", nullable=True) if "diagnosis" in data else None
        if diagnosis is not None:
            cause = diagnosis.get("cause")
            if cause is not None and cause not in CAUSES:
                raise BadInput(f"{source}: `diagnosis.cause` must be one of {', '.join(CAUSES)} or null, got {cause!r}",
                               file=source, key="diagnosis.cause")
        t = need(data, "thresholds", (dict,), "")
        thresholds = Thresholds(**{k: t.get(k) for k in Thresholds.__dataclass_fields__})
        return cls(
            mean_acceptance_length=need(data, "mean_acceptance_length", num, "", nullable=True),
            draft_acceptance_rate=need(data, "draft_acceptance_rate", num, "", nullable=True),
            per_position_acceptance=[float(x) for x in need(data, "per_position_acceptance", (list,), "")],
            drafts=need(data, "drafts", (int,), ""),
            draft_tokens=need(data, "draft_tokens", (int,), ""),
            accepted_tokens=need(data, "accepted_tokens", (int,), ""),
            per_prompt=prompts,
            tokens_per_second=float(need(data, "tokens_per_second", num, "")),
            wall_seconds=float(need(data, "wall_seconds", num, "")),
            verdict=verdict,
            thresholds=thresholds,
            run=dict(data.get("run") or {}),
            views=views,
            diagnosis=diagnosis,
            schema_version=version,
        )

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "<result>") -> "AcceptanceResult":
        """Parse the JSON contract; raise BadInput (file, line, key) on anything malformed.

        Example::

            >>> AcceptanceResult.from_json("[]", "base.json")
            Traceback (most recent call last):
            ...
            draftguard.errors.BadInput: base.json: an acceptance result must be a JSON object
        """
        if isinstance(text, bytes):
            try:
                text = text.decode("utf-8-sig")
            except UnicodeDecodeError:
                raise BadInput(f"{source} is not UTF-8 text", file=source) from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{source}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}", file=source,
                           line=exc.lineno, column=exc.colno) from None
        return cls.from_dict(data, source)
