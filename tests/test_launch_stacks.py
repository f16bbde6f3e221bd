"""The vLLM production stack's Helm values (vllm-project/production-stack), read as its chart renders them:
each servingEngineSpec.modelSpec entry is one `vllm serve` container on `repository:tag`, its flags from
vllmConfig on the values file's own lines. Two of the project's own tutorial values files, byte for byte
(tests/data/real-launch/SOURCE.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from draftguard.check.launch.flags import read_flags
from draftguard.check.launch.sources import read_launches

ROOT = Path(__file__).resolve().parents[1]
STACK = ROOT / "tests" / "data" / "real-launch" / "production-stack"
LLAMA = ROOT / "tests" / "data" / "real-drafters" / "targets" / "llama-3.1-8b" / "config.json"


def test_a_values_file_is_one_vllm_launch_per_model_entry_on_its_own_lines():
    [launch] = read_launches(str(STACK / "values-02-basic-config.yaml"))
    flags = read_flags(launch, "0.32.0")
    assert (launch.engine, launch.where, launch.image) == ("vllm", "modelSpec llama3", "vllm/vllm-openai:latest")
    assert (flags.model.text, flags.model.line) == ("meta-llama/Llama-3.1-8B-Instruct", 7)
    assert flags.get("max-model-len").value == "4096" and flags.get("max-model-len").line == 20
    assert flags.get("dtype").value == "bfloat16" and flags.get("dtype").line == 21
    assert flags.get("no-enable-chunked-prefill").line == 18 and flags.get("no-enable-prefix-caching").line == 19
    assert flags.get("disable-log-requests").line == 22  # an extraArgs word
    assert launch.release is None and "latest" in launch.release_source


def test_the_image_tag_pins_the_release_and_v0_sets_the_environment():
    [launch] = read_launches(str(STACK / "values-25-v100-single-gpu.yaml"))
    flags = read_flags(launch, "0.8.5")
    assert launch.release == "v0.8.5" and "values-25-v100-single-gpu.yaml line 21" in launch.release_source
    assert flags.model.text == "Qwen/Qwen2.5-0.5B-Instruct"
    assert flags.value("dtype") == "half" and flags.value("max-model-len") == "16384"
    assert flags.get("enforce-eager") is not None
    assert launch.env["VLLM_USE_V1"][0] == "0" and launch.env["VLLM_ENABLE_CUDA_COMPATIBILITY"][0] == "1"


@pytest.fixture
def hub(tmp_path):
    """An offline huggingface_hub cache holding Llama 3.1 8B Instruct's published config.json."""
    snap = tmp_path / "hub" / "models--meta-llama--Llama-3.1-8B-Instruct" / "snapshots" / ("0" * 40)
    snap.mkdir(parents=True)
    shutil.copy(LLAMA, snap / "config.json")
    (snap.parent.parent / "refs").mkdir()
    (snap.parent.parent / "refs" / "main").write_text("0" * 40)
    return {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}


def run(*args: str, env: dict) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DRAFTGUARD_", "VLLM_", "HF_"))}
    return subprocess.run([sys.executable, "-m", "draftguard", "check", *args, "--format", "json"], cwd=ROOT,
                          capture_output=True, text=True, env={**base, **env}, timeout=180)


def test_the_values_file_is_judged_under_each_release_on_the_extra_args_line(hub):
    """On `latest` (the newest known release, which takes --disable-log-requests again) the launch is
    accepted; under 0.32.0 the parser refuses the extraArgs flag, on its line."""
    newest = run("--launch-file", str(STACK / "values-02-basic-config.yaml"), env=hub)
    assert newest.returncode == 0, newest.stdout + newest.stderr
    refused = run("--launch-file", str(STACK / "values-02-basic-config.yaml"), "--engine", "vllm==0.32.0", env=hub)
    assert refused.returncode == 1, refused.stderr
    [finding] = [f for f in json.loads(refused.stdout)["findings"] if f["rule"] == "DG300"]
    assert finding["line"] == 22 and "--disable-log-requests" in finding["message"]
    assert "[modelSpec llama3]" in finding["message"]
