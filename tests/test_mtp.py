"""`draftguard accept --method mtp` on a target's own MTP layer (tests/fixtures/make_mtp_models.py): the
healthy MiMo fixture and its seeded faults under the reference backend, and (marked vllm) against
vLLM's CPU build.

The fixtures are committed; nothing here trains. Each folder holds ``trained_eval.json``, the τ the
training script measured; the reference must reproduce it prompt for prompt and stay lossless.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from draftguard.cli import main  # noqa: E402
from draftguard.runner.result import AcceptanceResult  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "mtp-models"
PROMPTS = ROOT / "tests" / "fixtures" / "models" / "prompts.jsonl"
NEW_TOKENS = 32
BAR = "1.8"


def accept(capsys, target: str, *args: str) -> tuple[int, AcceptanceResult | None, str]:
    code = main(["accept", "--target", str(MODELS / target), "--prompts", str(PROMPTS),
                 "--max-new-tokens", str(NEW_TOKENS), "--quiet", "--format", "json", *args])
    out, err = capsys.readouterr()
    return code, (AcceptanceResult.from_json(out, "stdout") if out.strip() else None), err


def trained(target: str) -> dict:
    return json.loads((MODELS / target / "trained_eval.json").read_text())


def test_method_is_detected_from_the_target_config():
    from draftguard.runner.engine_options import drafting_method
    from draftguard.check.repo.checkpoint import mtp_declared as mtp_layer_count

    assert drafting_method(str(MODELS / "mimo")) == "mtp"
    assert drafting_method(str(ROOT / "tests" / "fixtures" / "vllm-models" / "target")) == "dflash"
    assert mtp_layer_count({"mtp_num_hidden_layers": 2}) == ("mtp_num_hidden_layers", 2)
    assert mtp_layer_count({"text_config": {"num_mtp_layers": 1}}) == ("text_config.num_mtp_layers", 1)
    assert mtp_layer_count({"num_nextn_predict_layers": 0}) is None
    from draftguard.runner.engine_options import drafter_facts

    assert drafter_facts(str(MODELS / "mimo"), method="mtp").block_size == 2  # vLLM's K: one per MTP layer


def test_healthy_mtp_layer_passes_and_matches_its_trained_tau_prompt_for_prompt(capsys):
    code, result, err = accept(capsys, "mimo", "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    per_prompt = [round(p.mean_acceptance_length, 4) for p in result.per_prompt]
    assert per_prompt == trained("mimo")["per_prompt"]
    assert result.mean_acceptance_length > 1.95


@pytest.mark.parametrize("fault, named", [
    ("mimo-mtp-dropped", "the weights hold no tensor under `model.mtp_layers.0.`: dropped at save"),
    ("mimo-mtp-fp8", "`model.mtp_layers.0.input_proj.weight` is stored F8_E4M3 with "
                     "`model.mtp_layers.0.input_proj.weight_scale_inv` beside it"),
])
def test_each_faulty_copy_fails_with_mtp_weights_named(capsys, fault, named):
    code, result, err = accept(capsys, fault, "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 1, err
    assert result.verdict.status == "fail"
    assert result.diagnosis["cause"] == "mtp-weights" and named in result.diagnosis["reason"]
    assert result.mean_acceptance_length < 1.4  # healthy: 2.0
    assert [round(p.mean_acceptance_length, 4) for p in result.per_prompt] == trained(fault)["per_prompt"]


def test_the_text_report_names_the_cause(capsys):
    code = main(["accept", "--target", str(MODELS / "mimo-mtp-dropped"), "--prompts", str(PROMPTS), "--num-prompts",
                 "4", "--max-new-tokens", "16", "--quiet", "--min-acceptance-length", BAR])
    out, _ = capsys.readouterr()
    assert code == 1 and "mtp-weights" in out and "dropped at save" in out


def test_the_reference_is_lossless_and_the_layout_order_matters():
    """The drafts never change the text (the target's greedy tokens), and the forward concatenates in
    the family's order: MiMo's [hidden, embedding] read as DeepSeek-V3's [embedding, hidden] drafts
    far worse, so the layout is no detail the reference gets away with."""
    from draftguard.runner.eagle3 import eagle3_generate
    from draftguard.runner.mtp_model import load_mtp, load_mtp_target
    from draftguard.runner.reference import greedy_generate

    target, _ = load_mtp_target(str(MODELS / "mimo"))
    head = load_mtp(str(MODELS / "mimo"), target)
    prompts = [json.loads(line)["input_ids"] for line in PROMPTS.read_text().splitlines()][:6]
    right = wrong = 0.0
    for p in prompts:
        tokens, c = eagle3_generate(target, head, p, NEW_TOKENS, num_speculative_tokens=1, stop_ids=[41])
        assert tokens == greedy_generate(target, p, NEW_TOKENS, stop_ids=[41])
        right += c.accepted_tokens / c.drafts
    object.__setattr__(head.spec, "layout", type(head.spec.layout)(**{**head.spec.layout.__dict__,
                                                                      "embeds_first": True}))
    for p in prompts:
        _, c = eagle3_generate(target, head, p, NEW_TOKENS, num_speculative_tokens=1, stop_ids=[41])
        wrong += c.accepted_tokens / c.drafts
    assert right / len(prompts) > 0.95 and wrong / len(prompts) < 0.5


def test_the_faulty_copies_share_the_healthy_target_shard():
    for fault in ("mimo-mtp-dropped", "mimo-mtp-fp8"):
        shard = MODELS / fault / "model-00001-of-00002.safetensors"
        assert shard.is_symlink() and os.readlink(shard) == "../mimo/model-00001-of-00002.safetensors"
    assert not (MODELS / "mimo-mtp-dropped" / "model-00002-of-00002.safetensors").exists()


@pytest.mark.parametrize("args, says", [
    (["--target", "tests/fixtures/vllm-models/target"], "declares no MTP layers"),
    (["--target", "tests/fixtures/mtp-models/mimo", "--method", "mtp", "--drafter",
      "tests/fixtures/vllm-models/eagle3"], "drop --drafter"),
    (["--target", "tests/fixtures/vllm-models/target", "--drafter", "tests/fixtures/mtp-models/mimo"],
     "a model with MTP layers runs as --target"),
    (["--target", "tests/fixtures/mtp-models/mimo", "--method", "dflash"], "--method dflash needs --drafter"),
    (["--target", "tests/fixtures/vllm-models/target", "--method", "mtp"],
     "vllm-models/target/config.json: --method mtp needs a target that declares MTP layers"),
])
def test_bad_mtp_input_is_one_line_and_exit_2(capsys, monkeypatch, args, says):
    monkeypatch.chdir(ROOT)
    code = main(["accept", *args, "--prompts", str(PROMPTS), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_target_named_as_its_own_drafter_runs_its_mtp_layer(capsys):
    """As the GPU job names a model: --drafter is the folder, --target the same folder."""
    code, result, err = accept(capsys, "mimo", "--drafter", str(MODELS / "mimo"), "--num-prompts", "4",
                               "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.mean_acceptance_length > 1.95


def test_the_gpu_job_runs_a_model_with_mtp_layers_as_its_own_target():
    """The bot and the Action hand a changed model folder over as --drafter; one with MTP layers is its
    own target, whatever target the settings name (a MiMo layout runs; another says why not)."""
    from draftguard.check.drafter.detect import detect_drafter
    from draftguard.runner.gpu_job import accept_command
    from draftguard.settings import Settings

    folder = str(MODELS / "mimo")
    cmd = accept_command("Qwen/Qwen3-8B", folder, Settings(), python="py", env={})
    assert cmd[cmd.index("--target") + 1] == folder and cmd[cmd.index("--drafter") + 1] == folder
    dflash = str(ROOT / "tests" / "fixtures" / "vllm-models" / "drafter")
    assert accept_command("Qwen/Qwen3-8B", dflash, Settings(), python="py", env={})[5] == "Qwen/Qwen3-8B"
    assert detect_drafter(json.loads((MODELS / "mimo" / "config.json").read_text())).acceptance_testable


def test_an_engine_refusal_of_a_faulty_mtp_target_names_the_cause():
    """vLLM 0.32 refuses both faulty copies at load; the one line accept prints then carries the cause."""
    import argparse

    from draftguard.runner.cli import _mtp_cause

    args = argparse.Namespace(method="mtp", target=str(MODELS / "mimo-mtp-fp8"))
    assert _mtp_cause(args).startswith("; cause: mtp-weights — `model.mtp_layers.0.")
    assert _mtp_cause(argparse.Namespace(method="mtp", target=str(MODELS / "mimo"))) == ""


@pytest.mark.vllm
@pytest.mark.parametrize("fault, says", [
    ("mimo-mtp-dropped", "Following weights were not initialized from checkpoint"),
    ("mimo-mtp-fp8", "weight_scale_inv"),
])
def test_vllm_refuses_each_faulty_copy_and_the_line_names_mtp_weights(capsys, monkeypatch, fault, says):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # a small reservation on a shared machine
    code, result, err = accept(capsys, fault, "--backend", "vllm", "--num-prompts", "2", "--enforce-eager",
                               "--gpu-memory-utilization", "0.4", "--min-acceptance-length", BAR)
    line = [x for x in err.splitlines() if x.startswith("draftguard: ")][-1]
    assert code == 2 and result is None
    assert says in line and "cause: mtp-weights — " in line


@pytest.mark.vllm
def test_both_backends_agree_on_the_healthy_mtp_layer_within_5_percent(capsys, monkeypatch):
    """Two draft tokens, so the second chain step (layer 0 again, fed its own normed output) is compared
    too. Measured 2026-12-05 (4 prompts): τ 3.00 in both, the same tokens."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, "mimo", "--backend", "both", "--num-prompts", "4", "--enforce-eager",
                               "--gpu-memory-utilization", "0.4", "--num-speculative-tokens", "2",
                               "--min-acceptance-length", "2.7")
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == 3
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4


@pytest.mark.parametrize("folder, rule", [("mimo", None), ("mimo-mtp-dropped", "DG404"), ("mimo-mtp-fp8", "DG410")])
def test_the_light_check_flags_the_same_copies_without_a_run(folder, rule):
    """`draftguard check` (no torch) flags each faulty copy from its names and dtypes alone; the
    acceptance test measures what the fault costs. The healthy folder has no error."""
    from draftguard.check.repo import check_repo
    from draftguard.snapshot import load_snapshot

    errors = {f.rule for f in check_repo(load_snapshot(str(MODELS / folder)), {}) if f.severity.name == "ERROR"}
    assert errors == ({rule} if rule else set())


def assert_healthy_matches_trained(capsys, name: str, floor: float) -> None:
    """A shipped MTP fixture passes under the reference at K = 1 and reproduces the τ its training
    script measured, prompt for prompt (test_mtp_glm, test_mtp_ernie, test_mtp_mimo2)."""
    code, result, err = accept(capsys, name, "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2 and result.diagnosis is None
    assert [round(p.mean_acceptance_length, 4) for p in result.per_prompt] == trained(name)["per_prompt"]
    assert result.mean_acceptance_length > floor and trained(name)["faults"] == []


def dropped_fails(capsys, folder) -> str:
    """A copy without its MTP layer fails the bar with the cause mtp-weights (τ under 1.25); its reason."""
    code, result, err = accept(capsys, str(folder), "--no-early-stop", "--min-acceptance-length", BAR)
    assert code == 1, err
    assert result.verdict.status == "fail" and result.diagnosis["cause"] == "mtp-weights"
    assert result.mean_acceptance_length < 1.25
    return result.diagnosis["reason"]
