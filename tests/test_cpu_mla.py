"""On vLLM's CPU build, ``draftguard accept`` picks the options an MLA target needs by itself
(``engine_options.cpu_mla_options``): vLLM 0.32's CPU build runs DeepSeek-V2/V3 attention only with
its ``CPU_MLA`` backend in float32, and a user who leaves both out should not have to know that."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftguard.runner.engine_options import EngineOptions, cpu_mla_options

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "fixtures" / "mtp-models"


def test_an_mla_target_on_cpu_gets_cpu_mla_in_float32_and_a_line_that_says_so():
    opts, line = cpu_mla_options(str(MODELS / "dsv3"), EngineOptions(method="mtp"), on_cpu=True)
    assert (opts.attention_backend, opts.dtype) == ("CPU_MLA", "float32")
    assert "kv_lora_rank" in line and "--attention-backend CPU_MLA --dtype float32" in line


def test_what_the_user_gave_is_kept_and_only_the_rest_is_chosen():
    given = EngineOptions(method="mtp", attention_backend="TORCH_SDPA")
    opts, line = cpu_mla_options(str(MODELS / "dsv3"), given, on_cpu=True)
    assert (opts.attention_backend, opts.dtype) == ("TORCH_SDPA", "float32") and "--attention-backend" not in line
    both = EngineOptions(method="mtp", attention_backend="CPU_MLA", dtype="bfloat16")
    assert cpu_mla_options(str(MODELS / "dsv3"), both, on_cpu=True) == (both, None)


@pytest.mark.parametrize("target, on_cpu", [("dsv3", False), ("mimo", True), ("qwen3-next", True)])
def test_off_cpu_or_without_mla_the_options_are_untouched(target, on_cpu):
    given = EngineOptions(method="mtp")
    assert cpu_mla_options(str(MODELS / target), given, on_cpu=on_cpu) == (given, None)


def test_the_rank_is_read_from_text_config_too_and_a_bad_config_is_left_to_the_engine(tmp_path):
    raw = json.loads((MODELS / "dsv3" / "config.json").read_text())
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "config.json").write_text(json.dumps({"model_type": "x", "text_config": raw}))
    opts, _ = cpu_mla_options(str(tmp_path / "nested"), EngineOptions(), on_cpu=True)
    assert opts.attention_backend == "CPU_MLA"
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    assert cpu_mla_options(str(tmp_path / "bad"), EngineOptions(), on_cpu=True) == (EngineOptions(), None)


@pytest.mark.vllm
def test_vllm_runs_an_mla_target_without_the_user_naming_its_backend(capsys, monkeypatch):
    """Before, this run needed `--dtype float32 --attention-backend CPU_MLA` on the command line."""
    pytest.importorskip("vllm")
    from tests.test_mtp import BAR, accept

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    code, result, err = accept(capsys, "dsv3-mtp-own-embeddings", "--backend", "vllm", "--enforce-eager",
                               "--gpu-memory-utilization", "0.4", "--num-prompts", "2",
                               "--num-speculative-tokens", "2", "--min-acceptance-length", BAR)
    assert code == 1, err
    engine = result.run["engine"]
    assert engine["attention_backend"] == "CPU_MLA" and engine["dtype"] == "float32", engine
    assert "CPU_MLA backend in float32: running with --attention-backend CPU_MLA --dtype float32" in err
    assert result.diagnosis["cause"] == "mtp-weights"
