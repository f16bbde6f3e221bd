"""vLLM 0.32's CPU build against the reference on Step-3.5's MTP layer: the tiny target and its trained MTP
layer built at test time (tests/fixtures/make_mtp_step.py; the reference alone: tests/test_mtp_step.py).
Step attends with plain GQA, gated per head, which vLLM's CPU attention runs in float32 like the reference.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.test_mtp_step import run  # noqa: E402  (one accept call)

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
ARGS = ["--backend", "both", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32",
        "--num-prompts", "4"]


@pytest.fixture(scope="module")
def step_folders(tmp_path_factory) -> dict[str, Path]:
    import make_mtp_step

    return make_mtp_step.build(tmp_path_factory.mktemp("step"))


@pytest.mark.vllm
def test_both_backends_agree_on_the_step_mtp_layer(capsys, monkeypatch, step_folders):
    """MEASURED"""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = run(capsys, step_folders["healthy"], *ARGS, "--num-speculative-tokens", "2")
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == 3
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4, diff
