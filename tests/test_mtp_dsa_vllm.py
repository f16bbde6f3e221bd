"""vLLM 0.32's CPU build on DeepSeek-V3.2's and GLM-5's MTP layer (the reference alone: tests/test_mtp_dsa.py,
whose builder makes the targets here into tmp_path).

vLLM 0.32's CPU build cannot start either target: its CPU platform has no sparse-attention backend
(``vllm/platforms/cpu.py``, ``get_attn_backend_cls``: ``NotImplementedError: Sparse Attention is not supported
on CPU.``, raised in the worker while the target's first layer is built, before the MTP layer is), so the
comparison is skipped with that reason and the refusal itself is recorded by a test, so a vLLM that runs
sparse attention on CPU shows here. The package imports (``vllm.models.deepseek_v32.nvidia.mtp`` loads); it
is the engine that stops. Measured 2026-12-05 on the V3.2 target with every token selected (index_topk 1024).
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.dsa_targets import dsa_target  # noqa: E402  (the targets, built at test time)
from tests.test_mtp import accept  # noqa: E402  (one accept call)

ARGS = ["--backend", "vllm", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32",
        "--num-prompts", "4", "--min-acceptance-length", "1.5"]  # accept picks --attention-backend CPU_MLA itself
REFUSAL = "NotImplementedError: Sparse Attention is not supported on CPU."


@pytest.mark.vllm
def test_vllm_cpu_cannot_start_a_sparse_attention_target(capsys, monkeypatch, tmp_path):
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, _, err = accept(capsys, str(dsa_target(tmp_path / "v32")), *ARGS)
    assert code == 2 and REFUSAL in err and "could not start" in err


@pytest.mark.vllm
@pytest.mark.skip(reason=f"vLLM 0.32's CPU build cannot start a DeepSeek-V3.2 / GLM-5 target ({REFUSAL}, "
                  "vllm/platforms/cpu.py get_attn_backend_cls; recorded by the test above), so the reference's "
                  "τ has nothing to be compared with here; it is built from vLLM's deepseek_v32/nvidia/mtp.py read")
def test_both_backends_agree_on_the_v32_mtp_layer_within_5_percent():
    """Compare on a CUDA host: ``draftguard accept --backend both`` on the tests/dsa_targets.py targets."""
