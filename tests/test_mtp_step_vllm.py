"""vLLM 0.32's CPU build against the reference on Step-3.5's MTP layer: the tiny target and its trained MTP
layer built at test time (tests/fixtures/make_mtp_step.py; the reference alone: tests/test_mtp_step.py).
Step attends with plain GQA, gated per head, which vLLM's CPU attention runs in float32 like the reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.test_mtp_step import step_folders, run  # noqa: E402,F401  (one accept call; the session's trained folders, built once)

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
ARGS = ["--backend", "both", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32",
        "--num-prompts", "4"]



def compare(capsys, monkeypatch, folder: Path, k: int) -> dict:
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = run(capsys, folder, *ARGS, "--num-speculative-tokens", str(k))
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == k + 1
    diff = result.run["differential"]
    assert diff["same_tokens"] == diff["prompts"] == 4, diff  # the target: transformers' Step3p7 as vLLM's
    return diff


@pytest.mark.vllm
def test_both_backends_agree_on_the_step_mtp_layer_at_k_1(capsys, monkeypatch, step_folders):
    """Measured 2026-12-05 (4 prompts, float32): τ 1.73 and 1.73, the same tokens on all 4 (docs/acceptance.md)."""
    diff = compare(capsys, monkeypatch, step_folders["healthy"], 1)
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff


@pytest.mark.vllm
@pytest.mark.xfail(strict=True, reason=(
    "measured 2026-12-05 (4 prompts, K = 2): the first draft step agrees (acceptance at position 1: 0.684 "
    "both, the same tokens on 4 of 4) but the second does not (0.368 reference, 0.526 vLLM; τ 2.05 against "
    "2.21, 1.08 of it). Not explained: the reference feeds step 2 the layer's output before "
    "shared_head.norm, as step3p5_mtp.py returns it, at the next position, with layer 0 (j mod 1); vLLM's "
    "Step3p5MTPProposer (per-KV-group slot mappings and attention metadata of its own) is the code path "
    "that GLM's agreeing K = 2 comparison does not share"))
def test_both_backends_agree_on_the_step_mtp_layer_at_k_2(capsys, monkeypatch, step_folders):
    diff = compare(capsys, monkeypatch, step_folders["healthy"], 2)
    assert diff["per_position"][0]["reference"] == diff["per_position"][0]["vllm"], diff
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
