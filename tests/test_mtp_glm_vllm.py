"""vLLM 0.32's CPU build against the reference on GLM-4.5's MTP layer (``tests/fixtures/mtp-models/glm4-moe``,
``make_mtp_glm.py``; the reference alone: tests/test_mtp_glm.py). GLM attends with plain GQA (partial
rotary), which vLLM's CPU attention runs in float32 like the reference, so unlike DeepSeek-V3's MLA layer
the two backends are expected to agree, the second draft step (fed the layer's pre-norm output) included.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.test_mtp import accept  # noqa: E402  (one accept call)

ARGS = ["--backend", "both", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32",
        "--num-prompts", "4"]


@pytest.mark.vllm
@pytest.mark.parametrize("k", [1, 2])
def test_both_backends_agree_on_the_glm_mtp_layer(capsys, monkeypatch, k):
    """Measured 2026-12-05 (4 prompts, float32): K = 1 τ 2.00 and 2.00, K = 2 τ 3.00 and 3.00, the same
    tokens on all 4 each time (docs/acceptance.md)."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, "glm4-moe", *ARGS, "--num-speculative-tokens", str(k),
                               "--min-acceptance-length", str(0.9 * (k + 1)))
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == k + 1
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4, diff
