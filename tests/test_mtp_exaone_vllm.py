"""vLLM 0.32's CPU build against the reference on EXAONE-MoE's MTP layer (``ExaoneMoeForCausalLM``, vLLM's
``exaone_moe_mtp.py``), on the tiny target tests/test_mtp_exaone.py builds and trains at test time (the
reference alone: that file). The layer attends with plain GQA and q/k norms, which vLLM's CPU attention
runs in float32 like the reference, so the two are expected to agree token for token, the second draft
step (fed the layer's normed output) included. (A copy with the MTP shard dropped, run once on
2026-12-05 with ``--backend vllm``, was refused at load, exit 2, the line naming ``mtp-weights``; not kept
as a test, to keep this file to one engine start.) EXAONE-4.5's export vLLM's CPU build cannot start:
a strict xfail records why.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.test_mtp import accept  # noqa: E402  (one accept call)
from tests.test_mtp_exaone import exaone  # noqa: E402,F401  (the session's trained target)
from tests.test_mtp_exaone45 import exaone45  # noqa: E402,F401  (EXAONE-4.5's)

ARGS = ["--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32", "--num-prompts", "4"]


@pytest.mark.vllm
def test_both_backends_agree_on_the_exaone_mtp_layer(capsys, monkeypatch, exaone):
    """Measured 2026-12-05 (4 prompts, float32, K = 2): τ 2.89 in both, per position 0.956 / 0.933 in
    both, the same tokens on all 4 (docs/acceptance.md)."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, str(exaone), "--backend", "both", *ARGS, "--num-speculative-tokens", "2",
                               "--min-acceptance-length", "2.4")
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == 3
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4, diff
    assert diff["reference_tau"] > 2.5


@pytest.mark.vllm
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "vLLM 0.32's CPU build cannot inspect Exaone4_5_ForConditionalGeneration: its model module imports "
    "torchvision (`from torchvision.transforms.v2 import functional`), which the CPU build lacks (PyPI's "
    "torchvision is a CUDA build; the +cpu wheel is on download.pytorch.org only), so the engine refuses to "
    "start (exit 2: 'failed to be inspected', the engine log naming torchvision), as for Qwen3.5"))
def test_both_backends_agree_on_the_exaone45_mtp_layer(capsys, monkeypatch, exaone45):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, str(exaone45), "--backend", "both", *ARGS, "--num-speculative-tokens", "1",
                               "--min-acceptance-length", "1.6")
    if code != 0 and "No module named 'torchvision'" not in err:
        raise RuntimeError(err)  # not the recorded reason: an error, not the expected failure
    assert "No module named 'torchvision'" not in err and code == 0, err
    diff = result.run["differential"]
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4, diff
