"""vLLM 0.32's CPU build against the reference on Gemma 4's MTP assistant (the pair trained into tmp_path by
``tests/fixtures/make_mtp_gemma4.py``; the reference alone: tests/test_mtp_gemma4.py). vLLM serves it with
``method: mtp`` and the assistant as the speculative model (``gemma4_mtp.py``, ``spec_decode/gemma4.py``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.test_mtp_gemma4 import accept, gemma4_models  # noqa: E402,F401  (the session's trained pair)

ARGS = ["--backend", "both", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32",
        "--num-prompts", "4"]


@pytest.mark.vllm
def test_both_backends_agree_on_the_gemma4_assistant(capsys, monkeypatch, gemma4_models):
    """K = 3, where the third draft is accepted about half the time, so the chain (constant position, the
    post-projected state fed back, the sliding layer's window) is compared where it can differ. Measured
    2026-12-05 (4 prompts, float32): τ 3.568 in both, per position 1.0 / 1.0 / 0.568 in both, the same
    tokens on all 4; at K = 2, 3.00 / 3.00."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, gemma4_models["target"], gemma4_models["assistant"], *ARGS,
                               "--num-speculative-tokens", "3", "--min-acceptance-length", "1.8")
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == 4
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4, diff
    assert diff["per_position"][2]["reference"] < 0.9  # not saturated: the comparison can tell


@pytest.mark.vllm
def test_vllm_refuses_an_assistant_without_its_layers_and_the_line_names_mtp_weights(capsys, monkeypatch,
                                                                                    gemma4_models):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, gemma4_models["target"], gemma4_models["assistant-dropped"], "--backend",
                               "vllm", "--num-prompts", "2", "--enforce-eager", "--gpu-memory-utilization", "0.4",
                               "--dtype", "float32", "--min-acceptance-length", "1.8")
    line = [x for x in err.splitlines() if x.startswith("draftguard: ")][-1]
    assert code == 2 and result is None
    assert "Following weights were not initialized from checkpoint" in line
    assert "cause: mtp-weights — the assistant's weights lack `model.layers.0." in line
