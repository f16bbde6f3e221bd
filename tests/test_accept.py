"""`draftguard accept` on the tiny fixture models (tests/fixtures/make_models.py): the healthy pair, the
incident's three seeded faults, losslessness, and the bad inputs that must exit 2.

The fixtures are committed; nothing here trains. Each drafter folder holds ``trained_eval.json``: the
per-prompt τ that the trainer's own, independently written DFlash model measured. The reference
backend must reproduce it prompt for prompt; that is the test that it reads the z-lab format as the
drafter was trained (weight names, k_norm on context keys, RoPE positions, causal sliding layers).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from draftguard.cli import main  # noqa: E402
from draftguard.runner.result import AcceptanceResult  # noqa: E402

MODELS = Path(__file__).resolve().parent / "fixtures" / "models"
TARGET = MODELS / "target"
PROMPTS = MODELS / "prompts.jsonl"
FAULTS = ["drafter-window-lost", "drafter-layers-off", "drafter-wrong-mask"]
NEW_TOKENS = 32  # what trained_eval.json was measured with


def trained(drafter: str) -> dict:
    return json.loads((MODELS / drafter / "trained_eval.json").read_text())


def accept(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["accept", "--target", str(TARGET), "--prompts", str(PROMPTS), "--max-new-tokens", str(NEW_TOKENS),
                 "--quiet", *args])
    out, err = capsys.readouterr()
    return code, out, err


def accept_json(capsys, *args: str) -> tuple[int, AcceptanceResult]:
    code, out, err = accept(capsys, "--format", "json", *args)
    assert code in (0, 1), err
    return code, AcceptanceResult.from_json(out, "stdout")


@pytest.fixture(scope="module")
def healthy_file(tmp_path_factory) -> Path:
    """The healthy pair over all 24 prompts, written with --output: the baseline for the faults."""
    path = tmp_path_factory.mktemp("baseline") / "healthy.json"
    code = main(["accept", "--target", str(TARGET), "--drafter", str(MODELS / "drafter"), "--prompts", str(PROMPTS),
                 "--max-new-tokens", str(NEW_TOKENS), "--quiet", "--no-early-stop", "--min-acceptance-length", "3",
                 "--format", "json", "--output", str(path)])
    assert code == 0
    return path


def test_healthy_pair_reaches_the_trained_tau_prompt_for_prompt(healthy_file):
    result = AcceptanceResult.from_json(healthy_file.read_text(), str(healthy_file))
    want = trained("drafter")
    assert result.verdict.status == "pass"
    assert len(result.per_prompt) == want["prompts"] == 24
    assert [p.mean_acceptance_length for p in result.per_prompt] == pytest.approx(want["per_prompt"], abs=1e-9)
    assert result.mean_acceptance_length == pytest.approx(want["mean_acceptance_length"], abs=1e-9)
    # Block 4 drafts 3 tokens: a drafter that is always right reaches τ 4 (its ceiling).
    assert result.mean_acceptance_length >= 3.9
    assert result.draft_tokens == 3 * result.drafts
    assert result.run["block_size"] == 4 and result.run["config_view"] == "resolved"


@pytest.mark.parametrize("fault", FAULTS)
def test_each_seeded_fault_lowers_tau_by_a_third_and_fails_against_the_baseline(capsys, healthy_file, fault):
    healthy = AcceptanceResult.from_json(healthy_file.read_text(), str(healthy_file))
    code, result = accept_json(capsys, "--drafter", str(MODELS / fault), "--baseline", str(healthy_file))
    assert code == 1
    assert result.verdict.status == "fail", result.verdict.reason
    assert result.thresholds.bar == pytest.approx(0.95 * healthy.mean_acceptance_length)
    assert result.mean_acceptance_length <= 0.7 * healthy.mean_acceptance_length
    # The trainer's own model measures the same τ on the same prompts with the fault's config.
    n = len(result.per_prompt)
    assert [p.mean_acceptance_length for p in result.per_prompt] == pytest.approx(trained(fault)["per_prompt"][:n],
                                                                                  abs=1e-9)
    # The verdict settled before the prompts ran out.
    assert result.run["stopped_early"] and n < 24
    lo, hi = result.verdict.interval
    assert hi < result.thresholds.bar


def test_the_window_fault_is_the_config_class_and_the_raw_view_runs_it_as_trained(capsys):
    code, result = accept_json(capsys, "--drafter", str(MODELS / "drafter-window-lost"), "--config-view", "raw",
                               "--min-acceptance-length", "3", "--num-prompts", "8")
    assert code == 0 and result.verdict.status == "pass"
    assert result.mean_acceptance_length == pytest.approx(trained("drafter")["mean_acceptance_length"])


def test_decoding_is_lossless_for_every_drafter():
    """The output equals transformers' own greedy decoding of the target alone, however bad the drafter."""
    from transformers import AutoModelForCausalLM

    from draftguard.runner.reference import load_drafter, speculative_generate

    torch.set_num_threads(1)
    target = AutoModelForCausalLM.from_pretrained(str(TARGET)).eval()
    prompts = [json.loads(line)["input_ids"] for line in PROMPTS.read_text().splitlines()[:3]]
    for name in ["drafter", *FAULTS]:
        drafter = load_drafter(str(MODELS / name), target)
        for prompt in prompts:
            plain = target.generate(torch.tensor([prompt]), max_new_tokens=NEW_TOKENS, do_sample=False,
                                    eos_token_id=None, pad_token_id=41)[0, len(prompt):].tolist()
            tokens, counts = speculative_generate(target, drafter, prompt, NEW_TOKENS)
            assert tokens == plain, name
            per_pos = counts.accepted_per_position
            assert sum(per_pos) == counts.accepted_tokens
            assert all(a >= b for a, b in zip(per_pos, per_pos[1:]))  # acceptance stops at the first miss


def first_positions(tokens: list[int]) -> list[int]:
    """The indices (after the first token) where each token of ``tokens`` first appears: the stop tokens a
    run over these tokens can end at, each for the first time."""
    return [i for i in range(1, len(tokens)) if tokens.index(tokens[i]) == i]


def test_generation_stops_at_a_stop_token_and_counts_its_block_as_vllm_does():
    """The output ends at a stop token; the block holding it counts as vLLM's scheduler counts it (the
    rejection sampler's accepted drafts, before the stop check), drafts the target confirms past the stop
    included. So a run stopped at token i counts exactly what a run cut by length at i + 1 counts: the same
    blocks, whole. Before, the reference stopped counting at the stop token, and vLLM's τ beat it wherever
    a draft chain ran past one (Step-3.5's MTP layer at K = 2: 2.05 against 2.21, tests/test_mtp_step_vllm.py)."""
    from draftguard.runner.reference import greedy_generate, load_drafter, load_target, speculative_generate

    target, _ = load_target(str(TARGET))
    drafter = load_drafter(str(MODELS / "drafter"), target)
    prompt = json.loads(PROMPTS.read_text().splitlines()[0])["input_ids"]
    full = greedy_generate(target, prompt, NEW_TOKENS)
    past_stop = 0
    for i in first_positions(full):
        stop = full[i]
        tokens, counts = speculative_generate(target, drafter, prompt, NEW_TOKENS, stop_ids=[stop])
        assert tokens == full[: i + 1] == greedy_generate(target, prompt, NEW_TOKENS, stop_ids=[stop])
        cut, by_length = speculative_generate(target, drafter, prompt, i + 1)
        assert cut == tokens
        assert (counts.drafts, counts.accepted_per_position) == (by_length.drafts, by_length.accepted_per_position), i
        # Every output token is the first one, an accepted draft or a step's bonus (every step has one but
        # a last one ending on a drafted stop): at most len - drafts of them are drafts, so a count above
        # that holds drafts the target confirmed after the stop token.
        assert counts.accepted_tokens >= len(tokens) - 1 - counts.drafts
        past_stop += max(0, counts.accepted_tokens - (len(tokens) - counts.drafts))
    assert past_stop > 0  # the healthy drafter runs past some stop: the case vLLM counts and the old count missed


def test_a_replayed_drafter_counts_past_a_stop_token_as_its_own_run_does():
    """``replay_generate`` verifies against the first run's trace; past the stop token that ended that run
    the trace extends by the target's greedy steps, so a replayed block counts what its own run counts."""
    from draftguard.runner.reference import (TargetTrace, greedy_generate, load_drafter, load_target,
                                             replay_generate, speculative_generate)

    target, _ = load_target(str(TARGET))
    first, second = (load_drafter(str(MODELS / name), target) for name in ("drafter-wrong-mask", "drafter"))
    prompt = json.loads(PROMPTS.read_text().splitlines()[0])["input_ids"]
    full = greedy_generate(target, prompt, NEW_TOKENS)
    extended = 0
    for i in first_positions(full):
        trace = TargetTrace()
        speculative_generate(target, first, prompt, NEW_TOKENS, stop_ids=[full[i]], trace=trace)
        before = len(trace.tokens)
        replayed = replay_generate(second, trace, NEW_TOKENS, stop_ids=[full[i]])
        alone = speculative_generate(target, second, prompt, NEW_TOKENS, stop_ids=[full[i]])
        assert replayed[0] == alone[0] == full[: i + 1]
        assert replayed[1] == alone[1], i
        extended += len(trace.tokens) > before
    assert extended > 0  # some replay looked past the stop the first run ended on


def test_markdown_and_text_views(capsys):
    code, out, _ = accept(capsys, "--drafter", str(MODELS / "drafter-wrong-mask"), "--min-acceptance-length", "2.5",
                          "--format", "markdown", "--num-prompts", "8")
    assert code == 1
    assert out.startswith("### ❌ Acceptance test: fail") and "| 1 | 0." in out and "per-prompt τ" in out
    code, out, _ = accept(capsys, "--drafter", str(MODELS / "drafter"), "--min-acceptance-length", "2.5",
                          "--num-prompts", "8")
    assert code == 0 and "acceptance test: pass" in out and "per-position acceptance" in out


def test_no_threshold_reports_inconclusive_and_exits_zero(capsys):
    code, result = accept_json(capsys, "--drafter", str(MODELS / "drafter"), "--num-prompts", "2")
    assert code == 0 and result.verdict.status == "inconclusive"
    assert "no threshold" in result.verdict.reason and result.thresholds.bar is None
    # Two prompts are too few to bootstrap: the interval comes from Wilson on the per-position rates.
    assert result.verdict.method == "wilson per position"


def test_settings_file_supplies_thresholds_and_prompts(capsys, tmp_path):
    shutil.copy(PROMPTS, tmp_path / "p.jsonl")
    (tmp_path / ".draftguard.yml").write_text(
        f"target: {TARGET}\nmin_acceptance_length: 3.5\nnum_prompts: 3\nmax_new_tokens: 8\nprompts: p.jsonl\n")
    code = main(["accept", "--drafter", str(MODELS / "drafter-layers-off"), "--settings", str(tmp_path),
                 "--format", "json", "--quiet"])
    result = AcceptanceResult.from_json(capsys.readouterr().out, "stdout")
    assert code == 1 and result.thresholds.min_acceptance_length == 3.5
    assert len(result.per_prompt) == 3 and all(p.new_tokens == 8 for p in result.per_prompt)


# --- bad input: one line on stderr, exit 2 -----------------------------------------------------------


def drafter_copy(tmp_path: Path, edit=None, drop_weights: bool = False) -> Path:
    folder = tmp_path / "drafter"
    shutil.copytree(MODELS / "drafter", folder)
    if edit is not None:
        config = json.loads((folder / "config.json").read_text())
        edit(config)
        (folder / "config.json").write_text(json.dumps(config, indent=2))
    if drop_weights:
        (folder / "model.safetensors").unlink()
    return folder


def bad(capsys, *args: str) -> str:
    code, out, err = accept(capsys, *args)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("draftguard: ") and "Traceback" not in err
    return lines[0]


def test_layer_id_outside_the_target_is_bad_input(capsys, tmp_path):
    folder = drafter_copy(tmp_path, lambda c: c["dflash_config"].update(target_layer_ids=[0, 3]))
    line = bad(capsys, "--drafter", str(folder))
    assert "config.json:" in line and "target_layer_ids" in line and "DG102" in line


def test_mask_token_outside_the_vocabulary_is_bad_input(capsys, tmp_path):
    folder = drafter_copy(tmp_path, lambda c: c["dflash_config"].update(mask_token_id=48))
    line = bad(capsys, "--drafter", str(folder))
    assert "mask_token_id" in line


def test_missing_weights_are_bad_input(capsys, tmp_path):
    folder = drafter_copy(tmp_path, drop_weights=True)
    line = bad(capsys, "--drafter", str(folder))
    assert "model.safetensors" in line


def test_weights_that_do_not_match_the_config_are_bad_input(tmp_path):
    """The loader's own exact-format check: a tensor the config does not call for."""
    from safetensors.torch import load_file, save_file

    from draftguard.errors import DrafterMismatch
    from draftguard.runner.reference import load_drafter, load_target

    folder = drafter_copy(tmp_path)
    weights = load_file(str(folder / "model.safetensors"))
    weights["layers.2.input_layernorm.weight"] = torch.ones(64)
    save_file(weights, str(folder / "model.safetensors"))
    target, _ = load_target(str(TARGET))
    with pytest.raises(DrafterMismatch, match="layers.2.input_layernorm.weight"):
        load_drafter(str(folder), target)


def test_a_prompt_file_that_is_not_jsonl_is_bad_input(capsys, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"input_ids": [40, 1, 2]}\n[1, 2, 3]\n')
    line = bad(capsys, "--drafter", str(MODELS / "drafter"), "--prompts", str(prompts))
    assert f"{prompts}:2:" in line and "JSONL" in line


def test_text_prompts_for_a_target_without_tokenizer_are_bad_input(capsys):
    code = main(["accept", "--target", str(TARGET), "--drafter", str(MODELS / "drafter"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "no tokenizer" in err and "input_ids" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_is_bad_input(capsys):
    line = bad(capsys, "--drafter", str(MODELS / "drafter"), "--device", "cuda")
    assert "no CUDA GPU" in line


def test_a_broken_baseline_file_is_bad_input(capsys, tmp_path):
    base = tmp_path / "base.json"
    base.write_text('{"mean_acceptance_length": 3.0}')
    line = bad(capsys, "--drafter", str(MODELS / "drafter"), "--baseline", str(base))
    assert str(base) in line and "missing key" in line


def test_plot_needs_matplotlib_or_writes_a_png(capsys, tmp_path):
    png = tmp_path / "pos.png"
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        line = bad(capsys, "--drafter", str(MODELS / "drafter"), "--plot", str(png))
        assert "-e '.[plot]'" in line
    else:
        code, _, _ = accept(capsys, "--drafter", str(MODELS / "drafter"), "--plot", str(png), "--num-prompts", "2")
        assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
