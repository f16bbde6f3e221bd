"""The engine view's second look, light tier (base install): which configs an engine version will not
serve at all (its registry and Transformers backend, generated from its code into
draftguard/check/engines/data/), the drafters vLLM 0.32.0 refuses, its dtype and length defaults, vLLM
0.33.0, and what a check says when a running real engine cannot take a config. Each case was measured
against vLLM itself (tests/test_engines_vllm.py holds the two tiers equal where vLLM is installed)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from draftguard.check.engines import parse_engines, registry
from draftguard.check.run import check as check_targets
from draftguard.cli import main

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "data" / "real-configs"
DRAFTERS = ROOT / "tests" / "data" / "real-drafters"
VLLM = parse_engines("vllm==0.32.0")


def _views(folder: Path, target: Path | None = None, engines=VLLM):
    report = check_targets([str(folder)], drafter_target=str(target) if target else None, engines=engines)
    assert report.errors == [], [e.message for e in report.errors]
    [result] = report.targets
    return result


def test_every_shipped_registry_names_its_engine_version_transformers_and_source():
    for path in sorted(registry.DATA.glob("*.json")):
        data = json.loads(path.read_text())
        assert path.name == f"{data['engine']}-{data['version']}.json"
        assert data["source"] and data["transformers"] and len(data["architectures"]) > 200


@pytest.mark.parametrize("name, words", [
    ("mdhabeebvulla--physics-qa-trainer-trained_model", "Model architectures ['GPTNeoForCausalLM'] are not supported"),
    ("issawarasna--text-classification-with-xlnet-fine_tuned_model", "['XLNetForSequenceClassification'] are not"),
    ("salesforce--blip-image-captioning-base", "['BlipForConditionalGeneration'] are not supported"),
    ("muzammil822--emotion-api-best_model", "Model architectures ['EmotionBERT'] are not supported"),
])
def test_vllm_will_not_serve_what_its_registry_and_transformers_backend_lack(name, words):
    result = _views(REAL / name)
    [view] = result.engine_views
    assert words in view.refusal and "registry" in view.refusal_where
    [dg200] = [f for f in result.findings if f.rule == "DG200"]
    assert "vLLM 0.32.0" in dg200.message and "light tier" in dg200.message and words in dg200.message


@pytest.mark.parametrize("name", ["meta-llama--llama-3.1-8b-instruct", "google--gemma-3-27b-it",
                                  "bigcode--gpt_bigcode-santacoder"])  # the last through the Transformers backend
def test_what_vllm_registers_or_its_transformers_backend_builds_is_served(name):
    assert [v.refusal for v in _views(REAL / name, engines=parse_engines("vllm==0.32.0,sglang==0.5.23")).engine_views] \
        == [None, None]


@pytest.mark.parametrize("name, runner, words", [
    ("specforge-qwen3-8b-domino", "V1 and V2", "Model architectures ['DominoDraftModel'] are not supported"),
    ("deepspec-qwen3-8b-eagle3", "V1 and V2", "Model architectures ['Qwen3Eagle3Model'] are not supported"),
    ("angelslim-qwen3-dflash", "V1 and V2", "Model architectures ['QwenDFlashDraftModel'] are not supported"),
    ("specforge-qwen3-8b-peagle", "V1 and V2", "Model architectures ['Eagle3PEagleDraftModel'] are not supported"),
    ("torchspec-dflash-draft", "V1 and V2", "has model type `dflash` but Transformers does not recognize"),
    ("specforge-qwen3-8b-dspark", "V1", "Model Runner V1 does not support: dspark speculative decoding"),
    ("specforge-qwen3-8b-dspark", "V2", "'Qwen3Config' object has no attribute 'markov_rank'"),
])
def test_vllm_refuses_these_real_drafters_and_the_light_tier_says_so(name, runner, words):
    views = _views(DRAFTERS / name, DRAFTERS / "targets" / "qwen3-8b").engine_views
    [view] = [v for v in views if v.engine == "vLLM 0.32.0" and v.runner == runner]
    assert view.refusal and words in view.refusal, view.refusal


def test_a_float16_gemma_2_runs_bfloat16_in_vllm(tmp_path):
    """vLLM's _FLOAT16_NOT_SUPPORTED_MODELS (generated into the registry file): its auto dtype drops float16
    for Gemma 2, so a float16 checkpoint runs in bfloat16. The published config, one value changed."""
    folder = tmp_path / "gemma-2-2b-it-fp16"
    shutil.copytree(REAL / "google--gemma-2-2b-it", folder)
    config = json.loads((folder / "config.json").read_text())
    config["torch_dtype"] = "float16"
    (folder / "config.json").write_text(json.dumps(config))
    [view] = _views(folder).engine_views
    assert view.dtype == "bfloat16" and "does not support" not in view.dtype_why and "gemma2" in view.dtype_why


def test_vllm_assumes_2048_where_no_key_states_a_length_and_claims_nothing_for_a_nested_one():
    [bare] = _views(REAL / "duanduanzhou--tubetitler-trained_model").engine_views
    assert bare.max_model_len == 2048 and "assumes 2048" in bare.max_len_why
    [omni] = _views(REAL / "qwen2.5-omni").engine_views  # vLLM reads thinker_config.text_config's 32768
    assert omni.max_model_len is None


def test_vllm_0_33_is_known_from_its_code_and_a_bare_name_means_the_newest():
    from draftguard.check.engines import releases

    [newest] = parse_engines("vllm")
    assert newest.version == releases.newest("vllm") == "0.34.0"
    assert parse_engines("vllm==0.33.0")[0].transformers == "5.20.2"
    kolibri = ROOT / "tests" / "data" / "engine-releases" / "kolibri1"
    old, new = _views(kolibri, engines=parse_engines("vllm==0.32.0,vllm==0.33.0")).engine_views
    assert "kolibri1" in old.refusal and new.refusal is None


def test_a_config_the_running_engine_cannot_take_is_named_and_its_stand_in_view_says_so(tmp_path, monkeypatch, capsys):
    """A worker that speaks vllm_probe's protocol and answers every config as vLLM does one it refuses
    (a stand-in interpreter on a pipe, as the bot's fakes answer on loopback). Before: stderr said the
    real engine's views were "the authority" and nothing named the config the light tier answered."""
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\n"
                    "import json, sys\n"
                    "print(json.dumps({'ready': True, 'vllm': '0.32.0', 'transformers': '5.19.0'}), flush=True)\n"
                    "for line in sys.stdin:\n"
                    "    ask = json.loads(line)\n"
                    "    said = \"Model architectures ['EmotionBERT'] are not supported for now.\"\n"
                    "    print(json.dumps({'id': ask['id'], 'answer': {'error': said}}), flush=True)\n")
    fake.chmod(0o755)
    monkeypatch.setenv("DRAFTGUARD_VLLM_PYTHON", str(fake))
    folder = REAL / "muzammil822--emotion-api-best_model"
    assert main(["check", str(folder), "--engine", "vllm==0.32.0", "--format", "json"]) == 1
    out, err = capsys.readouterr()
    assert "authority" not in err
    assert f"vLLM 0.32.0 could not take {folder} here (Model architectures ['EmotionBERT']" in err
    [view] = json.loads(out)["targets"][0]["engines"]
    assert view["tier"] == "light" and "vLLM 0.32.0 itself could not take it here" in view["fallback"]
    [dg200] = [f for f in json.loads(out)["findings"] if f["rule"] == "DG200"]
    assert "light tier" in dg200["message"] and "could not take it here" in dg200["message"]
