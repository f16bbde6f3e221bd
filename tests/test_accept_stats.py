"""The AcceptanceResult contract and the verdict statistics (no torch, no models)."""

from __future__ import annotations

import json

import pytest

from draftguard.runner.result import AcceptanceResult, PromptResult, Thresholds
from draftguard.runner.stats import (
    BOOTSTRAP,
    WILSON,
    EarlyStop,
    bootstrap_interval,
    make_thresholds,
    verdict,
    wilson_interval,
    wilson_tau_interval,
)
from draftguard.snapshot import BadInput


def prompt(i: int, per_pos: list[int], drafts: int = 10, new: int = 32) -> PromptResult:
    return PromptResult.from_counts(i, drafts=drafts, draft_tokens=drafts * len(per_pos), accepted_tokens=sum(per_pos),
                                    accepted_per_position=per_pos, new_tokens=new)


def test_totals_follow_the_vllm_counter_formulas():
    a, b = prompt(0, [10, 8, 6]), prompt(1, [5, 2, 0], drafts=5)
    r = AcceptanceResult.from_prompts([a, b], wall_seconds=2.0)
    assert (r.drafts, r.draft_tokens, r.accepted_tokens) == (15, 45, 31)
    assert r.mean_acceptance_length == pytest.approx(1 + 31 / 15)
    assert r.draft_acceptance_rate == pytest.approx(31 / 45)
    assert r.per_position_acceptance == pytest.approx([15 / 15, 10 / 15, 6 / 15])
    assert r.tokens_per_second == pytest.approx(64 / 2.0)
    assert [p.mean_acceptance_length for p in r.per_prompt] == pytest.approx([3.4, 2.4])


def test_json_round_trip_keeps_every_contract_key():
    r = AcceptanceResult.from_prompts([prompt(0, [10, 8, 6])], wall_seconds=1.0,
                                      verdict=verdict([prompt(0, [10, 8, 6])], make_thresholds(2.0)),
                                      thresholds=make_thresholds(2.0), run={"backend": "reference"})
    data = json.loads(r.to_json())
    for key in ("mean_acceptance_length", "draft_acceptance_rate", "per_position_acceptance", "drafts",
                "draft_tokens", "accepted_tokens", "per_prompt", "tokens_per_second", "wall_seconds", "verdict",
                "thresholds"):
        assert key in data
    assert set(data["verdict"]) >= {"status", "reason"} and data["verdict"]["status"] == "pass"
    assert AcceptanceResult.from_json(r.to_json(), "r.json") == r


@pytest.mark.parametrize("text,needle", [
    ("{", "r.json:1:2: invalid JSON"),
    ('{"per_prompt": []}', "missing key `verdict`"),
    ('{"schema_version": 9}', "schema_version 9 is not supported"),
])
def test_malformed_results_are_bad_input_naming_file_and_key(text, needle):
    with pytest.raises(BadInput, match=needle.replace("`", ".")):
        AcceptanceResult.from_json(text, "r.json")


def test_a_wrong_type_names_the_nested_key():
    r = json.loads(AcceptanceResult.from_prompts([prompt(0, [1, 0, 0])], wall_seconds=1.0).to_json())
    r["per_prompt"][0]["drafts"] = "ten"
    with pytest.raises(BadInput, match=r"per_prompt\[0\]\.drafts. must be int"):
        AcceptanceResult.from_dict(r, "r.json")


def test_thresholds_take_the_higher_bar_and_reject_nonsense():
    base = AcceptanceResult.from_prompts([prompt(0, [10, 10, 10])], wall_seconds=1.0)  # τ 4.0
    t = make_thresholds(3.0, base, "base.json", 0.9)
    assert t.bar == pytest.approx(3.6) and t.baseline == "base.json" and t.baseline_mean_acceptance_length == 4.0
    assert make_thresholds(3.9, base, "base.json").bar == 3.9
    assert make_thresholds().bar is None
    with pytest.raises(BadInput, match="at least 1.0"):
        make_thresholds(0.5)
    with pytest.raises(BadInput, match="tolerance"):
        make_thresholds(None, base, "b", 1.5)


def test_a_tight_interval_decides_and_a_wide_one_straddles():
    steady = [prompt(i, [10, 8, 6 + i % 2]) for i in range(12)]  # τ about 3.45, little spread
    assert verdict(steady, Thresholds(bar=3.0)).status == "pass"
    assert verdict(steady, Thresholds(bar=3.9)).status == "fail"
    noisy = [prompt(i, [10, 10, 10] if i % 2 else [2, 0, 0]) for i in range(12)]  # τ 2.1, half great, half bad
    v = verdict(noisy, Thresholds(bar=2.2))
    assert v.status == "inconclusive" and "straddles" in v.reason and v.interval[0] < 2.2 < v.interval[1]
    assert v.method == BOOTSTRAP


def test_few_prompts_use_wilson_which_is_wider_than_the_point_estimate():
    few = [prompt(0, [9, 6, 3]), prompt(1, [8, 5, 2])]
    v = verdict(few, Thresholds(bar=2.0))
    assert v.method == WILSON
    lo, hi = wilson_tau_interval(few)
    tau = 1 + 33 / 20
    assert lo < tau < hi
    assert wilson_interval(0, 10)[0] == pytest.approx(0.0, abs=1e-12) and wilson_interval(10, 10)[1] == pytest.approx(1.0)


def test_bootstrap_is_seeded_and_contains_tau():
    ps = [prompt(i, [10, 7 + i % 3, 3 + i % 4]) for i in range(9)]
    assert bootstrap_interval(ps) == bootstrap_interval(ps)
    lo, hi = bootstrap_interval(ps)
    tau = AcceptanceResult.from_prompts(ps, wall_seconds=1).mean_acceptance_length
    assert lo <= tau <= hi


def test_nothing_drafted_is_inconclusive():
    v = verdict([PromptResult.from_counts(0, drafts=0, draft_tokens=0, accepted_tokens=0, accepted_per_position=[],
                                          new_tokens=1)], Thresholds(bar=2.0))
    assert v.status == "inconclusive" and "nothing was drafted" in v.reason


def test_early_stop_waits_for_min_prompts_and_a_settled_verdict():
    good = [prompt(i, [10, 9, 8]) for i in range(10)]
    stop = EarlyStop(Thresholds(bar=2.0), min_prompts=6)
    assert [stop.settled(good[:k]) for k in (5, 6)] == [False, True]
    mixed = [prompt(i, [10, 10, 10] if i % 2 else [1, 0, 0]) for i in range(10)]
    assert not EarlyStop(Thresholds(bar=2.4), min_prompts=6).settled(mixed)
    assert not EarlyStop(Thresholds(bar=None), min_prompts=1).settled(good)  # no bar: nothing to settle
    assert not EarlyStop(Thresholds(bar=2.0), min_prompts=6, enabled=False).settled(good)


def test_the_broken_drafter_hint_is_said_only_where_tau_reads_broken():
    """Before: every fail said "a broken drafter or drafter config reads 1.0-1.5", also at τ 3.5
    against a bar of 3.9 (a degraded head, not a broken one)."""
    degraded = [prompt(i, [9, 8, 8]) for i in range(12)]  # τ 3.5
    v = verdict(degraded, Thresholds(bar=3.9))
    assert v.status == "fail" and "broken" not in v.reason
    broken = [prompt(i, [1, 0, 0]) for i in range(12)]  # τ 1.1
    v = verdict(broken, Thresholds(bar=3.0))
    assert v.status == "fail" and "τ 1.0-1.5 is what a broken drafter or drafter config reads" in v.reason
