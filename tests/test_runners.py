"""`draftguard accept --model-runner both`: vLLM's V1 and V2 model runners, each measured, and the
runner that collapses named (runner/model_runners.py, the "v1"/"v2" views of runs.run_cells).

On CPU the reference feeds an EAGLE-3 head the aux layers each runner reads from its config.json, so
the comparison runs in CI: ``eagle3-nested-ids`` is the healthy head's weights with its ids only in
``eagle_config`` (V1 reads them, V2 never does and falls back to its default). vLLM's CPU build runs
V1 only ("Model Runner V2 requires Triton"); the vllm-marked tests check that it says so.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from draftguard.cli import main
from draftguard.runner.diagnosis import diagnose
from draftguard.runner.model_runners import runner_readings
from draftguard.runner.result import AcceptanceResult, PromptResult, Thresholds

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "vllm-models"
TARGET = MODELS / "target"
PROMPTS = ROOT / "tests" / "fixtures" / "models" / "prompts.jsonl"


def accept(capsys, drafter: str, *args: str) -> tuple[int, AcceptanceResult | None, str]:
    code = main(["accept", "--target", str(TARGET), "--drafter", str(MODELS / drafter), "--prompts", str(PROMPTS),
                 "--max-new-tokens", "32", "--quiet", "--format", "json", *args])
    out, err = capsys.readouterr()
    return code, (AcceptanceResult.from_json(out, "stdout") if out.strip() else None), err


def test_the_variant_links_the_healthy_weights_and_states_its_ids_in_eagle_config_only():
    folder = MODELS / "eagle3-nested-ids"
    assert (folder / "model.safetensors").is_symlink()
    assert (folder / "model.safetensors").resolve() == (MODELS / "eagle3" / "model.safetensors").resolve()
    readings = runner_readings(str(folder), str(TARGET), "eagle3")
    assert readings["v1"].aux_ids == [1, 2, 3] and "eagle_config" in readings["v1"].how
    assert readings["v2"].aux_ids == [2, 1, 0] and "never reads" in readings["v2"].how
    healthy = runner_readings(str(MODELS / "eagle3"), str(TARGET), "eagle3")
    assert healthy["v1"].aux_ids == healthy["v2"].aux_ids == [1, 2, 3]


# --------------------------------------------------------------------------------------------------
# Reference backend: each runner's reading of the head (torch, CPU)
# --------------------------------------------------------------------------------------------------


def test_healthy_head_passes_on_both_runners_with_the_same_tau(capsys):
    pytest.importorskip("torch")
    code, result, err = accept(capsys, "eagle3", "--model-runner", "both", "--no-early-stop")
    assert code == 0, err
    assert result.diagnosis["cause"] == "none" and result.verdict.status == "pass"
    taus = {v: result.views[v]["mean_acceptance_length"] for v in ("v1", "v2")}
    assert taus == {"v1": 4.0, "v2": 4.0}
    assert result.run["model_runner"] == "both"
    assert result.diagnosis["cells"] == {"v1/reference": "ok", "v2/reference": "ok"}


def test_eagle_config_only_head_collapses_on_v2_only_and_the_verdict_names_it(capsys):
    pytest.importorskip("torch")
    code, result, err = accept(capsys, "eagle3-nested-ids", "--model-runner", "both", "--min-acceptance-length", "3.9")
    assert code == 1, err
    assert result.verdict.status == "fail" and result.diagnosis["cause"] == "runner"
    assert result.diagnosis["cells"] == {"v1/reference": "ok", "v2/reference": "low"}
    reason = result.diagnosis["reason"]
    assert reason.startswith("collapse on the V2 model runner only: it reads aux ids [2, 1, 0] where V1 reads [1, 2, 3]")
    assert result.views["v1"]["mean_acceptance_length"] == 4.0
    assert result.views["v2"]["mean_acceptance_length"] < 3.8
    assert result.run["model_runners"]["v2"]["aux_ids"] == [2, 1, 0]


def test_text_and_markdown_name_each_runner_with_the_aux_ids_it_reads(capsys):
    pytest.importorskip("torch")
    args = ["--model-runner", "both", "--min-acceptance-length", "3.9"]
    code = main(["accept", "--target", str(TARGET), "--drafter", str(MODELS / "eagle3-nested-ids"), "--prompts",
                 str(PROMPTS), "--max-new-tokens", "32", "--quiet", "--format", "markdown", *args])
    out = capsys.readouterr().out
    assert code == 1
    assert "| model runner | reference |" in out
    assert re.search(r"\| V2 model runner \(aux ids \[2, 1, 0\]\) \| τ 3\.\d\d · first [\d.]+ ⚠️ \|", out), out
    assert "**cause: runner** — collapse on the V2 model runner only" in out


def test_a_single_runner_on_the_reference_reads_the_head_as_that_runner_does(capsys):
    """--model-runner v2 on the reference feeds the head V2's aux ids (before: V1's, whatever was asked)."""
    pytest.importorskip("torch")
    code, v1, err = accept(capsys, "eagle3-nested-ids", "--model-runner", "v1", "--no-early-stop")
    assert code == 0, err
    code, v2, err = accept(capsys, "eagle3-nested-ids", "--model-runner", "v2", "--no-early-stop")
    assert code == 0, err
    assert v1.mean_acceptance_length == 4.0 and v2.mean_acceptance_length < 3.8


def test_a_head_with_its_ids_in_eagle_config_is_not_refused(capsys):
    """Before: DG102 (eagle_config's [1, 2, 3] read as SGLang's 0-based layers: 3 is past a 3-layer
    target) made accept exit 2, though vLLM's V1 runner reads them as aux ids and runs the head."""
    pytest.importorskip("torch")
    code, result, err = accept(capsys, "eagle3-nested-ids", "--min-acceptance-length", "3.5")
    assert code == 0, err
    assert result.mean_acceptance_length == 4.0


def test_the_documented_command_runs_as_written(capsys, monkeypatch):
    pytest.importorskip("torch")
    doc = (ROOT / "docs" / "acceptance.md").read_text()
    block = re.search(r"<!-- runner-both -->\n```sh\n(.*?)```", doc, re.S).group(1)
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[:2] == ["draftguard", "accept"]
    monkeypatch.chdir(ROOT)
    code = main(argv[1:] + ["--quiet"])
    out = capsys.readouterr().out
    assert code == 1
    assert "cause: runner — collapse on the V2 model runner only" in out


@pytest.mark.parametrize("value", ["v3", "BOTH"])
def test_a_bad_runner_is_one_line_and_exit_2(capsys, value):
    code, result, err = accept(capsys, "eagle3", "--model-runner", value)
    assert code == 2 and result is None
    assert err.strip().splitlines() == [f"draftguard: --model-runner must be one of auto, v1, v2, both, got {value!r}"]


def test_a_dflash_drafter_on_the_reference_alone_cannot_compare_runners(capsys):
    pytest.importorskip("torch")
    code, result, err = accept(capsys, "drafter", "--model-runner", "both")
    assert code == 2 and result is None
    assert len(err.strip().splitlines()) == 1 and "--backend vllm or both" in err


# --------------------------------------------------------------------------------------------------
# The diagnosis, on made-up cells (no torch)
# --------------------------------------------------------------------------------------------------


def _run(accepted: list[int]) -> AcceptanceResult:
    ps = [PromptResult.from_counts(i, drafts=10, draft_tokens=30, accepted_tokens=a,
                                   accepted_per_position=[min(a, 10), 0, 0], new_tokens=20)
          for i, a in enumerate(accepted)]
    return AcceptanceResult.from_prompts(ps, wall_seconds=1.0)


@pytest.mark.parametrize("bad", ["v1", "v2"])
def test_diagnosis_names_whichever_runner_drops(bad):
    good_cells, bad_cells = _run([30] * 8), _run([12, 10, 14, 9, 12, 11, 10, 13])
    cells = {(v, "reference"): (bad_cells if v == bad else good_cells) for v in ("v1", "v2")}
    readings = {"v1": {"runner": "v1", "aux_ids": [1, 2, 3], "how": "reads a"},
                "v2": {"runner": "v2", "aux_ids": [2, 1, 0], "how": "reads b"}}
    d = diagnose(cells, Thresholds(min_first_position=0.2), runners=readings)
    assert d.cause == "runner" and d.status == "fail"
    name, other = bad.upper(), ("V2" if bad == "v1" else "V1")
    assert d.reason.startswith(f"collapse on the {name} model runner only: it reads aux ids "
                               f"{readings[bad]['aux_ids']} where {other} reads")
    assert d.to_dict()["runners"] == readings


def test_both_runners_low_is_the_drafter_not_a_runner():
    low = _run([1, 0, 2, 1, 0, 1, 2, 1])
    d = diagnose({("v1", "reference"): low, ("v2", "reference"): low}, Thresholds(min_first_position=0.2))
    assert d.cause == "drafter"


# --------------------------------------------------------------------------------------------------
# vLLM's CPU build: V1 runs, V2 is refused ("requires Triton") and the result says so
# --------------------------------------------------------------------------------------------------


@pytest.mark.vllm
def test_vllm_measures_v1_and_says_v2_cannot_run_here(capsys, monkeypatch):
    pytest.importorskip("vllm")
    # On CPU, --gpu-memory-utilization is the share of the machine's memory vLLM reserves (0.85 by default,
    # more than a 24 GiB machine has free after the earlier tests of the pass); the fixtures need little.
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, "eagle3", "--backend", "vllm", "--model-runner", "both", "--num-prompts", "4",
                               "--enforce-eager", "--min-acceptance-length", "3.5", "--gpu-memory-utilization", "0.4")
    assert code == 0, err
    assert result.views is None  # one cell ran: V1 in vLLM
    assert result.diagnosis["cells"] == {"v1/vllm": "ok"}
    assert result.run["backend"] == "vllm" and result.run["model_runner_env"] == "0"
    assert result.run["model_runner_used"] == "v1"  # as the worker logged it
    notes = result.run["notes"]
    assert len(notes) == 1 and notes[0].startswith("the V2 model runner cannot run here, so vLLM measured V1 alone")
    assert "Model Runner V2 requires Triton" in notes[0]
    assert result.mean_acceptance_length == 4.0


@pytest.mark.vllm
def test_both_backends_on_cpu_still_name_the_v2_collapse_through_the_reference(capsys, monkeypatch):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")  # as above: a small reservation on a shared machine
    code, result, err = accept(capsys, "eagle3-nested-ids", "--backend", "both", "--model-runner", "both",
                               "--enforce-eager", "--min-acceptance-length", "3.9", "--gpu-memory-utilization", "0.4")
    assert code == 1, err
    assert result.diagnosis["cause"] == "runner"
    assert result.diagnosis["cells"]["v1/vllm"] == "ok" and result.diagnosis["cells"]["v2/reference"] == "low"
    assert "v2/vllm" not in result.diagnosis["cells"]
    assert "Model Runner V2 requires Triton" in result.run["notes"][0]
    assert "the reference still measured the head as V2 reads it" in result.run["notes"][0]


def test_an_engine_that_builds_the_other_runner_is_not_measured_twice():
    """vLLM's worker logs which runner it built; an engine asked for V2 that built V1 (an older vLLM,
    an env that did not reach it) is left out with a note, never recorded as V2. The engine here is
    the reference reading the head as V1 does, reporting V1 whatever it was asked."""
    pytest.importorskip("torch")
    import argparse

    from draftguard.runner import cli
    from draftguard.runner.eagle3 import Eagle3Backend
    from draftguard.runner.prompts import select_prompts
    from draftguard.runner.stats import make_thresholds

    parser = argparse.ArgumentParser()
    cli.add_accept_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["accept", "--target", str(TARGET), "--drafter", str(MODELS / "eagle3-nested-ids"),
                              "--prompts", str(PROMPTS), "--max-new-tokens", "32", "--quiet", "--num-prompts", "4",
                              "--model-runner", "both"])
    cli._settings(args)
    args.method = "eagle3"
    readings = runner_readings(args.drafter, args.target, "eagle3")

    class OneRunnerEngine(Eagle3Backend):
        name = "vllm"

        def model_runner_used(self) -> str:
            return "v1"

    def engine(view: str) -> OneRunnerEngine:
        return OneRunnerEngine(args.target, args.drafter, aux_ids={"v1": readings["v1"].aux_ids})

    result = cli.run_cells(args, select_prompts(args.prompts, 4), make_thresholds(), {"drafter": args.drafter},
                           ("v1", "v2"), runners=readings, engine=engine)
    assert set(result.diagnosis["cells"]) == {"v1/vllm", "v1/reference", "v2/reference"}
    assert result.run["notes"] == [
        "the V2 model runner cannot run here, so vLLM measured V1 alone (vLLM's worker built the V1 runner when V2 "
        "was asked); the reference still measured the head as V2 reads it"]


def test_runner_both_runs_the_resolved_view_only(capsys):
    pytest.importorskip("torch")
    code, result, err = accept(capsys, "eagle3", "--model-runner", "both", "--config-view", "raw")
    assert code == 2 and result is None
    assert err.strip().splitlines() == ["draftguard: --model-runner both runs the resolved config view; drop "
                                        "--config-view raw"]
