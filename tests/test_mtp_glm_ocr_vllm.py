"""vLLM 0.32's CPU build against the reference on GLM-OCR's MTP layer (``GlmOcrForConditionalGeneration``,
vLLM's ``glm_ocr_mtp.py``), on the tiny export tests/fixtures/make_mtp_glm_ocr.py builds at test time (the
reference alone: tests/test_mtp_glm_ocr.py).

vLLM's CPU build cannot import the class: ``glm_ocr.py`` imports ``glm4_1v.py``, which imports transformers'
``glm4v/image_processing_glm4v.py``, whose line 19 is ``from torchvision.transforms.v2 import functional as
tvF``; the CPU build has no torchvision, so the engine stops before loading ("Model architectures
['GlmOcrForConditionalGeneration'] failed to be inspected", the log: "ModuleNotFoundError: No module named
'torchvision'"; run 2026-12-05). PyPI's torchvision 0.28.0 (the release for torch 2.13) is a CUDA build: on
the CPU build's torch 2.13.0+cpu its import fails ("RuntimeError: operator torchvision::nms does not exist");
the +cpu wheel is on download.pytorch.org only. The comparison is a strict xfail with that reason, as
EXAONE-4.5's (tests/test_mtp_exaone_vllm.py): a vLLM that imports the class turns it into a failure to
read, and the test then holds the two τ within 5%.

Past the import, a second refusal waits (run once by hand, 2026-12-05, with an import-only torchvision
stand-in on PYTHONPATH; not kept): vLLM resolved the draft model (``GlmOcrMTPModel``) and stopped at
``ValueError: Glm4vMultiModalProcessor requires a tokenizer and cannot be initialized when
`skip_tokenizer_init=True``` (draftguard's vLLM backend sends token ids with ``skip_tokenizer_init``, and the
fixture ships no tokenizer), so a vLLM with torchvision needs that too before τ can be compared.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.test_mtp import accept  # noqa: E402  (one accept call)
from tests.test_mtp_glm_ocr import glm_ocr  # noqa: E402,F401  (the session's trained target, built once)

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
ARGS = ["--backend", "both", "--enforce-eager", "--gpu-memory-utilization", "0.4", "--dtype", "float32",
        "--num-prompts", "4", "--no-early-stop", "--min-acceptance-length", "1.5"]



@pytest.mark.vllm
@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "vLLM 0.32's CPU build cannot inspect GlmOcrForConditionalGeneration: glm_ocr.py imports glm4_1v.py, which "
    "imports transformers' image_processing_glm4v (`from torchvision.transforms.v2 import functional as tvF`), "
    "and the CPU build has no torchvision (PyPI's 0.28.0 is a CUDA build: 'operator torchvision::nms does not "
    "exist' on torch 2.13.0+cpu), so the engine refuses to start (exit 2: 'failed to be inspected', the log "
    "naming torchvision), as for EXAONE-4.5 and Qwen3.5's exports"))
def test_both_backends_agree_on_the_glm_ocr_mtp_layer(capsys, monkeypatch, request):
    pytest.importorskip("vllm")
    import subprocess

    # The module the engine inspects, imported first (in a process of its own, as the engine's inspection
    # runs): building and training the fixture takes minutes.
    probe = subprocess.run([sys.executable, "-c", "import vllm.model_executor.models.glm_ocr"], capture_output=True,
                           text=True, timeout=600)
    if probe.returncode != 0:
        if "No module named 'torchvision'" not in probe.stderr:
            raise RuntimeError(probe.stderr[-3000:])  # not the recorded reason: an error, not the expected failure
        raise AssertionError("vLLM cannot import its glm_ocr module here: No module named 'torchvision'")
    glm_ocr = request.getfixturevalue("glm_ocr")
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, str(glm_ocr["healthy"]), *ARGS, "--num-speculative-tokens", "1")
    if code != 0 and "failed to be inspected" not in err:
        raise RuntimeError(err)  # not the recorded reason: an error, not the expected failure
    assert code == 0, err
    assert result.run["method"] == "mtp" and result.run["block_size"] == 2
    diff = result.run["differential"]
    assert abs(diff["vllm_tau"] / diff["reference_tau"] - 1) <= 0.05, diff
    assert diff["same_tokens"] == diff["prompts"] == 4, diff
