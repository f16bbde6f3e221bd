"""vLLM 0.32's CPU build against the reference on MiMo-V2-Pro's and the omni export's MTP layer (the targets
derived from the trained MiMo-V2-Flash fixture into tmp_path by tests/test_mtp_mimo2_pro.py's ``derived``; the
reference alone: that file). vLLM builds the Pro as ``MiMoV2ForCausalLM`` (``MiMoV2FlashForCausalLM`` with the
fused ``qkv_proj`` loaded as it is) and its layer as ``MiMoV2MTPModel``, 1 by architecture.
"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tests.test_mtp import accept  # noqa: E402  (one accept call)
from tests.test_mtp_mimo2_pro import derived  # noqa: E402

ARGS = ["--backend", "both", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32",
        "--num-prompts", "4"]


@pytest.mark.vllm
@pytest.mark.parametrize("k", [1, 2])
def test_both_backends_agree_on_the_mimo_v2_pro_mtp_layer(capsys, monkeypatch, tmp_path, k):
    """Measured 2026-12-05 (4 prompts, float32): K = 1 τ 1.94 and 1.94, K = 2 τ 2.87 and 2.87, the same
    tokens on all 4 each time: the Flash fixture's figures (tests/test_mtp_mimo2_vllm.py), the same function.
    The target says model_type mimo_v2_flash: the released mimo_v2 needs the checkpoint's remote code in
    vLLM 0.32 ("model type `mimo_v2` but Transformers does not recognize this architecture"), which
    draftguard never runs."""
    pytest.importorskip("vllm")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, str(derived(tmp_path, "pro", model_type="mimo_v2_flash")), *ARGS, "--num-speculative-tokens", str(k),
                               "--min-acceptance-length", "1.5")
    assert code == 0, err
    diff = result.run["differential"]
    assert result.run["method"] == "mtp" and result.run["block_size"] == k + 1
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4, diff


@pytest.mark.vllm
def test_the_omni_export_where_vllms_cpu_build_can_import_it(capsys, monkeypatch, tmp_path):
    """vLLM 0.32's CPU build cannot inspect ``MiMoV2OmniForCausalLM`` (run 2026-12-05 on the derived target,
    model_type mimo_v2_flash, exit 2): ``mimo_v2_omni.py`` imports transformers' qwen2_vl image processing,
    which needs torchvision, and the CPU build has none: "Model architectures ['MiMoV2OmniForCausalLM']
    failed to be inspected ... ModuleNotFoundError: No module named 'torchvision'". The reference builds the
    omni export's text model and its MTP layer (tests/test_mtp_mimo2_pro.py: Flash's τ prompt for prompt)."""
    import importlib.util

    pytest.importorskip("vllm")
    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("vLLM 0.32's CPU build cannot inspect MiMoV2OmniForCausalLM: ModuleNotFoundError: No module "
                    "named 'torchvision' (mimo_v2_omni.py -> transformers qwen2_vl image processing)")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    folder = derived(tmp_path, "omni-class", model_type="mimo_v2_flash")
    code, result, err = accept(capsys, str(folder), *ARGS, "--min-acceptance-length", "1.5")
    assert code == 0, err
    diff = result.run["differential"]
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
