"""``--backend both``: the verdict that tells an engine fault from a drafter fault, and its JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftguard.runner import differential as dif
from draftguard.runner.result import AcceptanceResult, PromptResult, Thresholds

MODELS = Path(__file__).resolve().parent / "fixtures" / "models"


def result(per_prompt_accepted: list[list[int]], positions: int = 3, bar: float | None = None,
           backend: str = "vllm") -> AcceptanceResult:
    """A result from per-step accepted counts, one list per prompt (each step drafts ``positions``)."""
    prompts = []
    for i, steps in enumerate(per_prompt_accepted):
        per_pos = [sum(1 for a in steps if a > p) for p in range(positions)]
        prompts.append(PromptResult.from_counts(
            i, drafts=len(steps), draft_tokens=len(steps) * positions, accepted_tokens=sum(steps),
            accepted_per_position=per_pos, new_tokens=sum(steps) + len(steps)))
    return AcceptanceResult.from_prompts(prompts, wall_seconds=1.0, thresholds=Thresholds(bar=bar),
                                         run={"backend": backend})


HEALTHY = [[3, 3, 2, 3], [3, 2, 3, 3]]          # τ = 1 + 22/8 = 3.75
WINDOW_LOST = [[0, 1, 0, 0], [0, 0, 1, 0]]      # τ = 1.25, the incident's shape
SLIGHTLY_LOWER = [[3, 3, 2, 2], [3, 2, 3, 2]]   # τ = 3.5, 0.93 of healthy


def test_engine_mismatch_when_vllm_falls_well_below_a_healthy_reference():
    ref, eng = result(HEALTHY, backend="reference"), result(WINDOW_LOST)
    d = dif.compare(ref, eng)
    assert (d.kind, d.status) == (dif.ENGINE_MISMATCH, "fail")
    assert d.ratio == pytest.approx(1.25 / 3.75)
    # Per-position rates side by side, reference first.
    assert [(r.position, r.reference, r.vllm) for r in d.per_position] == [
        (0, 1.0, 0.25), (1, 1.0, 0.0), (2, 0.75, 0.0)]
    assert "position 1" in d.reason and "target_layer_ids + 1" in d.reason
    table = dif.render_side_by_side(d)
    assert table.splitlines()[2].split() == ["0", "1.00", "0.25"]


def test_the_ratio_boundary_is_point_nine():
    ref = result(HEALTHY, backend="reference")
    assert dif.compare(ref, result(SLIGHTLY_LOWER)).kind == dif.AGREE  # 0.933
    assert dif.compare(ref, result(SLIGHTLY_LOWER), min_ratio=0.95).kind == dif.ENGINE_MISMATCH
    # Exactly 0.9 is not below 0.9.
    ref10 = result([[1] * 10], positions=1)          # τ = 2.0
    eng = result([[1] * 8 + [0] * 2], positions=1)   # τ = 1.8
    assert dif.compare(ref10, eng).ratio == pytest.approx(0.9)
    assert dif.compare(ref10, eng).kind == dif.AGREE


def test_both_low_blames_the_drafter():
    d = dif.compare(result(WINDOW_LOST, backend="reference"), result(WINDOW_LOST))
    assert (d.kind, d.status) == (dif.DRAFTER_BAD, "fail")
    assert "drafter" in d.reason
    # Even when vLLM is lower still: the reference being low means the weights are at fault first.
    worse = result([[0, 0, 0, 0], [0, 0, 1, 0]])
    assert dif.compare(result(WINDOW_LOST, backend="reference"), worse).kind == dif.DRAFTER_BAD


def test_low_is_judged_against_the_bar_when_one_is_set():
    ref, eng = result(SLIGHTLY_LOWER, bar=4.0, backend="reference"), result(SLIGHTLY_LOWER, bar=4.0)
    d = dif.compare(ref, eng)
    assert (d.kind, d.low_bar) == (dif.DRAFTER_BAD, 4.0)
    # vLLM within 0.9 of a reference that clears the bar, but itself under it.
    d = dif.compare(result(HEALTHY, bar=3.6, backend="reference"), result(SLIGHTLY_LOWER, bar=3.6))
    assert (d.kind, d.status) == (dif.BELOW_BAR, "fail")
    assert dif.compare(result(HEALTHY), result(HEALTHY), bar=3.0).kind == dif.AGREE


def test_pass_and_the_odd_cases_are_never_confused():
    d = dif.compare(result(HEALTHY, backend="reference"), result(HEALTHY))
    assert (d.kind, d.status, d.ratio) == (dif.AGREE, "pass", 1.0)
    d = dif.compare(result(WINDOW_LOST, backend="reference"), result(HEALTHY))
    assert (d.kind, d.status) == (dif.REFERENCE_LOW, "inconclusive")
    empty = AcceptanceResult.from_prompts([], wall_seconds=0.0)
    assert dif.compare(result(HEALTHY), empty).kind == dif.NO_DATA
    assert dif.compare(empty, result(HEALTHY)).status == "inconclusive"


def test_identical_outputs_are_counted():
    d = dif.compare(result(HEALTHY), result(HEALTHY), reference_tokens=[[1, 2], [3, 4]],
                    engine_tokens=[[1, 2], [3, 5]])
    assert d.same_tokens == 1
    assert "identical greedy output on 1 of 2 prompts" in dif.render_side_by_side(d, markdown=True)


def test_combined_result_keeps_the_json_contract():
    ref, eng = result(HEALTHY, backend="reference"), result(WINDOW_LOST)
    combined = dif.combine(ref, eng, dif.compare(ref, eng))
    back = AcceptanceResult.from_json(combined.to_json(), "both.json")
    assert back.mean_acceptance_length == eng.mean_acceptance_length
    assert back.verdict.status == "fail" and back.verdict.reason.startswith("engine mismatch")
    run = json.loads(combined.to_json())["run"]
    assert run["backend"] == "both"
    assert run["reference"]["mean_acceptance_length"] == 3.75
    assert run["differential"]["kind"] == dif.ENGINE_MISMATCH
    assert run["differential"]["per_position"][0] == {"position": 0, "reference": 1.0, "vllm": 0.25}


def test_a_real_reference_run_flags_a_drafter_read_wrong_as_an_engine_mismatch():
    """The reference backend on the healthy fixture drafter, against the same weights read through
    the config class that drops the window: the second plays an engine that loads the drafter wrong."""
    torch = pytest.importorskip("torch")
    from draftguard.runner.reference import ReferenceBackend

    torch.set_num_threads(1)
    prompts = [json.loads(line)["input_ids"] for line in (MODELS / "prompts.jsonl").read_text().splitlines()[:3]]

    def run(drafter: str) -> tuple[AcceptanceResult, list[list[int]]]:
        backend = ReferenceBackend(str(MODELS / "target"), str(MODELS / drafter))
        out = [backend.run_prompt(i, p, max_new_tokens=16) for i, p in enumerate(prompts)]
        return AcceptanceResult.from_prompts([r for r, _ in out], wall_seconds=1.0), [t for _, t in out]

    (ref, ref_tokens), (eng, eng_tokens) = run("drafter"), run("drafter-window-lost")
    d = dif.compare(ref, eng, reference_tokens=ref_tokens, engine_tokens=eng_tokens)
    assert d.kind == dif.ENGINE_MISMATCH, d.reason
    # Speculative decoding is lossless: the text is the same whatever the drafter did.
    assert d.same_tokens == len(prompts)


def test_text_and_markdown_views_show_both_backends_side_by_side():
    import io

    from draftguard.runner.render import render_markdown, render_text

    ref, eng = result(HEALTHY, backend="reference"), result(WINDOW_LOST)
    combined = AcceptanceResult.from_json(dif.combine(ref, eng, dif.compare(ref, eng)).to_json())
    md = render_markdown(combined)
    assert "| position | reference | vLLM |" in md and "| 0 | 1.00 | 0.25 |" in md
    out = io.StringIO()
    render_text(combined, out)
    text = out.getvalue()
    assert "position  reference  vLLM" in text and "engine mismatch" in text
    # A single-backend result has no such table.
    assert "reference | vLLM" not in render_markdown(eng)
