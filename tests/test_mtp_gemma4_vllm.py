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
    """MEASURED"""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, gemma4_models["target"], gemma4_models["assistant"], *ARGS,
                               "--num-speculative-tokens", "2", "--min-acceptance-length", "1.8")
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == 3
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4, diff
