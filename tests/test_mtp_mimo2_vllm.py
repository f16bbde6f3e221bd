"""vLLM 0.32's CPU build against the reference on MiMo-V2-Flash's MTP layer
(``tests/fixtures/mtp-models/mimo-v2-flash``, ``make_mtp_mimo2.py``; the reference alone:
tests/test_mtp_mimo2.py). vLLM builds the layer by architecture (``_MIMO_V2_FLASH_NUM_MTP_LAYERS``: the
config names no MTP key) as ``MiMoV2MTPLayer``: sliding-window attention with sinks, which vLLM's CPU
attention runs natively, the fixture's q/k and v head dims equal (the released 192/128 pick a DIFFKV
backend, GPU only).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.test_mtp import accept  # noqa: E402  (one accept call)

ARGS = ["--backend", "both", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32",
        "--num-prompts", "4"]


@pytest.mark.vllm
@pytest.mark.parametrize("k", [1, 2])
def test_both_backends_agree_on_the_mimo_v2_flash_mtp_layer(capsys, monkeypatch, k):
    """Measured 2026-12-05 (4 prompts, float32): K = 1 τ 1.94 and 1.94, K = 2 τ 2.87 and 2.87, the same
    tokens on all 4 each time (docs/acceptance.md)."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, "mimo-v2-flash", *ARGS, "--num-speculative-tokens", str(k),
                               "--min-acceptance-length", "1.5")
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == k + 1
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4, diff
