"""`draftguard accept` on EAGLE-3 heads (tests/fixtures/make_eagle3_models.py): the healthy head and
its seeded faults, under the reference backend and (marked vllm) against vLLM's CPU build.

The fixtures are committed; nothing here trains. Each head folder holds ``trained_eval.json``, the
τ the training script measured; the reference must reproduce it prompt for prompt, and must stay
lossless (its tokens are the target's own greedy tokens).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from draftguard.cli import main  # noqa: E402
from draftguard.runner.result import AcceptanceResult  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "vllm-models"
TARGET = MODELS / "target"
PROMPTS = ROOT / "tests" / "fixtures" / "models" / "prompts.jsonl"
NEW_TOKENS = 32


def accept(capsys, drafter: str | Path, *args: str) -> tuple[int, AcceptanceResult | None, str]:
    """`draftguard accept` of a drafter (a fixture's name, or any folder's path) on the fixture target."""
    code = main(["accept", "--target", str(TARGET), "--drafter", str(MODELS / drafter), "--prompts", str(PROMPTS),
                 "--max-new-tokens", str(NEW_TOKENS), "--quiet", "--format", "json", *args])
    out, err = capsys.readouterr()
    return code, (AcceptanceResult.from_json(out, "stdout") if out.strip() else None), err


def trained(drafter: str) -> dict:
    return json.loads((MODELS / drafter / "trained_eval.json").read_text())


def test_method_is_detected_from_the_drafter_files():
    from draftguard.runner.engine_options import drafting_method

    assert drafting_method(str(MODELS / "eagle3")) == "eagle3"
    assert drafting_method(str(MODELS / "drafter")) == "dflash"
    assert drafting_method(str(MODELS / "drafter"), "eagle3") == "eagle3"  # --method overrides


def test_healthy_head_passes_and_matches_its_trained_tau_prompt_for_prompt(capsys):
    code, result, err = accept(capsys, "eagle3", "--no-early-stop", "--min-acceptance-length", "3.5")
    assert code == 0, err
    assert result.run["method"] == "eagle3" and result.run["block_size"] == 4
    assert [round(p.mean_acceptance_length, 4) for p in result.per_prompt] == trained("eagle3")["per_prompt"]
    assert result.per_position_acceptance == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("drafter", ["eagle3-no-ids", "eagle3-bad-d2t"])
def test_faulty_heads_fail_the_bar(capsys, drafter):
    code, result, err = accept(capsys, drafter, "--min-acceptance-length", "3.9")
    assert code == 1, err
    assert result.verdict.status == "fail"
    assert result.mean_acceptance_length < 3.9


def test_faulty_heads_fail_without_a_bar_against_the_healthy_baseline(capsys, tmp_path):
    base = tmp_path / "healthy.json"
    code, _, err = accept(capsys, "eagle3", "--no-early-stop", "--output", str(base))
    assert code == 0, err
    code, result, err = accept(capsys, "eagle3-bad-d2t", "--baseline", str(base))
    assert code == 1 and result.verdict.status == "fail", err


def test_shifted_ids_run_as_vllm_runs_them_with_the_light_finding_beside(capsys):
    """[0, 1, 2]: aux id 0 is the embedding output (DG103). vLLM captures the embeddings as aux state 0
    and runs the head, so accept measures it too (it was refused, exit 2): τ as trained, prompt for
    prompt, below the bar, with DG103 in the notes."""
    code, result, err = accept(capsys, "eagle3-ids-shifted", "--no-early-stop", "--min-acceptance-length", "3.9")
    assert code == 1 and result.verdict.status == "fail", err
    assert [round(p.mean_acceptance_length, 4) for p in result.per_prompt] == trained("eagle3-ids-shifted")["per_prompt"]
    assert any("DG103" in n and "eagle_aux_hidden_state_layer_ids" in n for n in result.run["notes"])


def test_aux_id_zero_still_refuses_a_dflash_drafter(capsys, tmp_path):
    """DG103 lets only EAGLE-3 heads through: a DFlash drafter's aux id 0 stays exit 2."""
    import shutil

    drafter = tmp_path / "drafter"
    shutil.copytree(MODELS / "drafter", drafter, symlinks=False)
    config = json.loads((drafter / "config.json").read_text())
    config["eagle_aux_hidden_state_layer_ids"] = [0, 1]
    (drafter / "config.json").write_text(json.dumps(config))
    code = main(["accept", "--target", str(TARGET), "--drafter", str(drafter), "--prompts", str(PROMPTS), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "DG103" in err, err


def test_reference_eagle3_is_lossless():
    from draftguard.runner.dflash_model import load_target
    from draftguard.runner.eagle3 import eagle3_generate
    from draftguard.runner.eagle3_model import load_eagle3
    from draftguard.runner.reference import greedy_generate

    target, _ = load_target(str(TARGET))
    prompts = [json.loads(line)["input_ids"] for line in PROMPTS.read_text().splitlines()][:4]
    for drafter in ("eagle3", "eagle3-bad-d2t"):
        head = load_eagle3(str(MODELS / drafter), target)
        for p in prompts:
            tokens, _ = eagle3_generate(target, head, p, NEW_TOKENS, stop_ids=[41])
            assert tokens == greedy_generate(target, p, NEW_TOKENS, stop_ids=[41])


@pytest.mark.vllm
def test_both_backends_agree_on_the_healthy_head_and_fail_the_broken_d2t(capsys):
    """Measured 2026-12-04 (6 prompts): healthy τ 4.00 in both; d2t one off 1.00 in both. The no-ids
    head (3.76 reference, 3.82 vLLM) is within 5% too, but only 2 of these 6 prompts show its fault,
    so against a bar it is inconclusive here; docs/acceptance.md has its figures."""
    pytest.importorskip("vllm")
    args = ("--backend", "both", "--num-prompts", "6", "--enforce-eager", "--min-acceptance-length", "3.5")
    code, healthy, err = accept(capsys, "eagle3", *args)
    assert code == 0, err
    ref, eng = healthy.run["differential"]["reference_tau"], healthy.run["differential"]["vllm_tau"]
    assert abs(eng / ref - 1) <= 0.05, (ref, eng)
    code, faulty, err = accept(capsys, "eagle3-bad-d2t", *args)
    assert code == 1 and faulty.verdict.status == "fail", err
    assert faulty.run["differential"]["vllm_tau"] < 0.95 * eng
    assert faulty.diagnosis["cause"] == "drafter"
