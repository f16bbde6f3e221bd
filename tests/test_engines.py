"""The engine's view, light tier (``draftguard check --engine``): vLLM 0.32.0 and SGLang 0.5.23's code
as rules, on real configs and the incident's shapes. The real engine checks these in
tests/test_engines_vllm.py (marked ``vllm``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from draftguard.check.engines import parse_engines
from draftguard.check.run import check as check_targets
from draftguard.cli import main
from draftguard.snapshot import BadInput

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "data" / "real-configs"
HEALTHY = ROOT / "tests" / "data" / "healthy"
DRAFTERS = ROOT / "tests" / "data" / "real-drafters"
BOTH = parse_engines("vllm==0.32.0,sglang==0.5.23")


def engine_findings(target: Path | str, drafter_target: Path | None = None, engines=BOTH):
    report = check_targets([str(target)], drafter_target=str(drafter_target) if drafter_target else None,
                           engines=engines)
    assert report.errors == [], [e.message for e in report.errors]
    [result] = report.targets
    return [f for f in result.findings if f.rule.startswith("DG2")], result


def test_engine_specs_are_checked_not_guessed():
    assert [s.shown for s in BOTH] == ["vLLM 0.32.0", "SGLang 0.5.23"]
    assert BOTH[0].transformers == "5.19.0"
    for bad in ("vllm==0.7.0", "tgi==1.0", "vllm>=0.32", ""):
        with pytest.raises(BadInput):
            parse_engines(bad)


@pytest.mark.parametrize("config", [HEALTHY / "llama-3.1-8b.json", HEALTHY / "qwen3-8b.json",
                                    REAL / "mistralai--mistral-7b-instruct-v0.3",
                                    REAL / "meta-llama--llama-3.1-8b-instruct", REAL / "qwen--qwen3-8b"])
def test_healthy_models_get_no_engine_finding_above_info(config):
    findings, result = engine_findings(config)
    assert [f.message for f in findings if f.severity.value != "info"] == []
    assert {v.engine for v in result.engine_views} == {"vLLM 0.32.0", "SGLang 0.5.23"}


def test_the_incident_is_refused_loudly_by_both_engines_in_their_own_words():
    findings, _ = engine_findings(ROOT / "examples" / "qwen3-swa-drafter")
    refusals = [f for f in findings if f.rule == "DG200"]
    assert {f.severity.value for f in refusals} == {"error"}
    text = " ".join(f.message for f in refusals)
    # V1 refuses the mixed draft when the config is made; V2 gets to the model build and refuses there.
    assert 'V1 runner, light tier' in text and '"Model Runner V1 does not support: mixed sliding/full dflash drafts"' in text
    assert 'V2 runner, light tier' in text and '"DFlash sliding attention requires a window size"' in text
    assert '"DFLASH sliding_attention layers require config.sliding_window"' in text
    assert "SGLang 0.5.23" in text and "light tier" in text and "transformers" in text


@pytest.mark.parametrize("name", ["microsoft--phi-3.5-mini-instruct", "microsoft--phi-4-mini-instruct"])
def test_longrope_models_are_served_at_their_original_length_by_vllm(name):
    findings, result = engine_findings(REAL / name)
    [cut] = [f for f in findings if f.rule == "DG202"]
    assert cut.severity.value == "warning" and (cut.raw, cut.resolved) == (131072, 4096)
    assert "vLLM 0.32.0" in cut.message and "original_max_position_embeddings" in cut.message
    sglang = next(v for v in result.engine_views if v.engine == "SGLang 0.5.23")
    assert sglang.max_model_len == 131072  # SGLang multiplies only by `factor`, which LongRoPE lacks


@pytest.mark.parametrize("config, window", [(HEALTHY / "mistral-7b-v0.1.json", 4096),
                                            (HEALTHY / "phi-3-mini.json", 2047),
                                            (REAL / "mlc-preset--starcoder2", 4096)])
def test_sglang_drops_the_window_of_mistral_phi3_and_starcoder2(config, window):
    findings, result = engine_findings(config)
    [dropped] = [f for f in findings if f.rule == "DG201"]
    assert dropped.severity.value == "error" and dropped.raw == window
    assert "SGLang 0.5.23" in dropped.message and "full attention" in dropped.message
    vllm = next(v for v in result.engine_views if v.engine == "vLLM 0.32.0")
    assert set(vllm.windows) == {window}  # vLLM slides, as transformers does


def test_a_window_wider_than_the_served_length_is_no_finding():
    findings, _ = engine_findings(REAL / "microsoft--phi-3.5-mini-instruct")  # window 262144
    assert "DG201" not in {f.rule for f in findings}


def test_float32_runs_bf16_in_vllm_and_fp16_in_sglang(tmp_path):
    config = json.loads((HEALTHY / "llama-3.1-8b.json").read_text())
    config["torch_dtype"] = "float32"
    (tmp_path / "config.json").write_text(json.dumps(config))
    findings, _ = engine_findings(tmp_path)
    casts = {f.message.split(" (")[0]: f for f in findings if f.rule == "DG205"}
    assert {f.resolved for f in casts.values()} == {"bfloat16", "float16"}
    assert {f.severity.value for f in casts.values()} == {"warning"}  # the engines disagree
    alone, _ = engine_findings(tmp_path, engines=parse_engines("vllm"))
    assert [(f.rule, f.severity.value, f.resolved) for f in alone] == [("DG205", "info", "bfloat16")]


@pytest.mark.parametrize("folder, served", [
    ("adarshsharma2510--tweet_generator-results-checkpoint-320", "bfloat16"),  # GPT2LMHeadModel: it generates
    ("bfm123--triad_lingua-models", "float16"),  # MarianMTModel: vLLM 0.32 itself says float16
    ("sentence-transformers--all-minilm-l6-v2", "float16"),  # BertModel: a pooling model
    ("mitegvg--videomae-base-finetuned-xd-violence-videomae-inference-public", "float16"),  # ForVideoClassification
])
def test_a_generative_head_named_model_is_not_a_pooling_model_in_vllm(folder, served):
    # vLLM 0.32 itself (tests/test_engines_vllm.py) runs these float32 GPT-2 fine-tunes in bfloat16:
    # "...LMHeadModel" ends in "Model" but is no pooling model.
    from draftguard.check.engines.light import served_dtype

    raw = json.loads((REAL / folder / "config.json").read_text())
    assert raw["torch_dtype"] == "float32"
    assert served_dtype(BOTH[0], raw, None)[0] == served


def test_fp16_for_a_bf16_model_is_a_warning(tmp_path):
    from draftguard.check.engines.light import served_dtype

    assert served_dtype(BOTH[1], {"model_type": "gemma2"}, None)[0] == "bfloat16"  # SGLang's Gemma exception
    # No dtype in config.json, bfloat16 weights: vLLM reads the headers, SGLang runs float16.
    config = json.loads((HEALTHY / "llama-3.1-8b.json").read_text())
    del config["torch_dtype"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    header = json.dumps({"lm_head.weight": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 8]}}).encode()
    (tmp_path / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header + bytes(8))
    findings, result = engine_findings(tmp_path, engines=parse_engines("sglang"))
    [fp16] = [f for f in findings if f.rule == "DG205"]
    assert fp16.severity.value == "warning" and fp16.resolved == "float16"
    assert [v.dtype for v in engine_findings(tmp_path, engines=parse_engines("vllm"))[1].engine_views] == ["bfloat16"]


def _dflash_pair(tmp_path: Path, change) -> tuple[Path, Path]:
    drafter = json.loads((DRAFTERS / "specforge-qwen3-8b-dflash" / "config.json").read_text())
    change(drafter)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text(json.dumps(drafter))
    return tmp_path / "d", DRAFTERS / "targets" / "qwen3-8b"


def test_a_top_level_target_layer_ids_is_read_by_vllms_v2_runner_only(tmp_path):
    def top_level(config):
        config["target_layer_ids"] = config["dflash_config"].pop("target_layer_ids")
    drafter, target = _dflash_pair(tmp_path, top_level)
    findings, result = engine_findings(drafter, target)
    [split] = [f for f in findings if f.rule == "DG203"]
    assert split.severity.value == "error"  # the drafter states what it was trained on; V1 reads others
    reads = {(v.engine, v.runner): v.layers_read for v in result.engine_views}
    assert reads[("vLLM 0.32.0", "V2")] == reads[("SGLang 0.5.23", "")] == [1, 9, 17, 25, 33]
    assert reads[("vLLM 0.32.0", "V1")] == [1, 17, 32]  # (2, N//2, N-3) as aux ids
    assert "never reads a top-level `target_layer_ids`" in split.message


def test_the_published_dflash_drafter_is_read_alike_by_every_runner():
    findings, result = engine_findings(DRAFTERS / "specforge-qwen3-8b-dflash", DRAFTERS / "targets" / "qwen3-8b")
    assert [f.message for f in findings if f.severity.value != "info"] == []
    assert {tuple(v.layers_read) for v in result.engine_views} == {(1, 9, 17, 25, 33)}


def test_our_vllm_fixture_reads_the_last_layer_before_the_final_norm():
    fixtures = ROOT / "tests" / "fixtures" / "vllm-models"
    findings, _ = engine_findings(fixtures / "drafter", fixtures / "target")
    prenorm = [f for f in findings if f.rule == "DG204"]
    assert prenorm and all("vLLM 0.32.0" in f.message and "before the final norm" in f.message for f in prenorm)
    # SGLang's Qwen3 captures the input of each layer: the last layer's output never arrives.
    [short] = [f for f in findings if f.rule == "DG200"]
    assert "SGLang 0.5.23" in short.message and "never captured" in short.message


def test_dflash_full_layers_take_the_targets_model_level_window_in_vllm(tmp_path):
    def full(config):
        config.update(layer_types=["full_attention"] * 5, sliding_window=None, use_sliding_window=False)
    drafter, _ = _dflash_pair(tmp_path, full)
    target = json.loads((HEALTHY / "mistral-7b-v0.1.json").read_text())
    target.update(num_hidden_layers=36, hidden_size=4096, vocab_size=151936)
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "config.json").write_text(json.dumps(target))
    findings, _ = engine_findings(drafter, tmp_path / "t")
    [window] = [f for f in findings if f.rule == "DG201"]
    assert "vLLM 0.32.0" in window.message and "window of 4096" in window.message
    assert "SGLang" not in window.message


def test_cli_engine_option_and_settings(tmp_path, monkeypatch, capsys):
    example = str(ROOT / "examples" / "qwen3-swa-drafter")
    monkeypatch.delenv("DRAFTGUARD_VLLM_PYTHON", raising=False)
    monkeypatch.setenv("DRAFTGUARD_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["check", example, "--engine", "vllm==0.32.0", "--format", "json"]) == 1
    out, err = capsys.readouterr()
    assert "DG200" in out and "light tier" in err
    assert main(["check", example, "--engine", "vllm==0.1"]) == 2
    assert "not one whose code draftguard has read" in capsys.readouterr().err
    # engines: comes from the checked files' repository's .draftguard.yml (docs/settings.md), as every key does
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.json").write_bytes((HEALTHY / "mistral-7b-v0.1.json").read_bytes())
    (repo / ".draftguard.yml").write_text("engines: [sglang==0.5.23]\n")
    assert main(["check", str(repo), "--format", "json"]) == 1
    assert "DG201" in capsys.readouterr().out


def test_the_window_rule_says_which_engines_refuse_the_incident_and_which_serve_it_silently():
    report = check_targets([str(ROOT / "examples" / "qwen3-swa-drafter")])
    [lost] = [f for f in report.findings if f.rule == "DG005"]
    assert "vLLM 0.32" in lost.message and "refuses it on both model runners" in lost.message
    assert "SGLang 0.5.23 refuses it" in lost.message and "older stacks" in lost.message
    assert "silently with full attention" in lost.message


def test_a_real_engine_that_cannot_start_leaves_the_light_tier_and_says_so(tmp_path, monkeypatch, capsys):
    import sys

    # An interpreter without vLLM: the worker dies on `import vllm`, and the check goes on.
    monkeypatch.setenv("DRAFTGUARD_VLLM_PYTHON", sys.executable)
    assert main(["check", str(REAL / "microsoft--phi-3.5-mini-instruct"), "--engine", "vllm==0.32.0",
                 "--format", "json"]) == 0
    out, err = capsys.readouterr()
    [view] = json.loads(out)["targets"][0]["engines"]
    assert view["tier"] == "light" and view["max_model_len"] == 4096
    assert "the real engine answers" in err and "could not answer" in err and "its light tier did" in err
    assert "authority" not in err


def _llama_with_window(tmp_path: Path, window: int = 4096) -> Path:
    """The real Llama-3.1-8B config with `sliding_window` added, as a maintainer trying the tool did."""
    raw = json.loads((REAL / "meta-llama--llama-3.1-8b-instruct" / "config.json").read_text())
    raw["sliding_window"] = window
    (tmp_path / "config.json").write_text(json.dumps(raw, indent=2))
    return tmp_path


def test_a_window_llamas_model_code_never_reads_runs_full_in_transformers_and_slides_in_vllm(tmp_path):
    # transformers' modeling_llama.py never reads sliding_window (the logits are the same with and
    # without it), vLLM takes it by name for every layer (CacheConfig.sliding_window), SGLang's Llama
    # never passes it: the view says what each one's code does, not what LlamaConfig holds.
    findings, result = engine_findings(_llama_with_window(tmp_path))
    assert {(a.declared, a.effective) for a in result.attention} == {("sliding(4096)", "full")}
    assert len(result.attention) == 32
    [unread] = [f for f in result.findings if f.rule == "DG015"]
    assert unread.severity.value == "warning" and unread.key == "sliding_window" and unread.line is not None
    assert "never reads it" in unread.message
    vllm = next(v for v in result.engine_views if v.engine == "vLLM 0.32.0")
    sglang = next(v for v in result.engine_views if v.engine == "SGLang 0.5.23")
    assert set(vllm.windows) == {4096} and set(sglang.windows) == {None}
    [differs] = [f for f in findings if f.rule == "DG201"]
    assert differs.key == "sliding_window" and "vLLM 0.32.0" in differs.message and "SGLang" not in differs.message
    assert "--disable-sliding-window" in differs.message


@pytest.mark.parametrize("config", [HEALTHY / "mistral-7b-v0.1.json", REAL / "meta-llama--llama-3.1-8b-instruct",
                                    REAL / "qwen--qwen3-8b"])
def test_a_window_the_model_code_reads_or_no_window_is_no_unread_finding(config):
    # Mistral's model code applies its window in transformers; the real Llama sets none.
    report = check_targets([str(config)])
    assert "DG015" not in {f.rule for t in report.targets for f in t.findings}


def test_a_multimodal_models_window_and_length_come_from_its_text_config_as_the_engines_read_them():
    """Both engines read ``hf_text_config`` (transformers' ``get_text_config()``). olmOCR-2's Qwen2.5-VL
    class keeps the file's top-level ``sliding_window`` 32768 beside a ``text_config`` that has none and
    states ``layer_types``: the light tier read the top level and said vLLM slides all 28 layers."""
    findings, result = engine_findings(REAL / "allenai--olmocr-2-7b-1025")
    assert [f.message for f in findings if f.rule == "DG201"] == []
    vllm = next(v for v in result.engine_views if v.engine == "vLLM 0.32.0")
    assert vllm.windows == [None] * 28, vllm.windows_why
    # A flat GLM-4.1V file: the class builds text_config from its defaults (32768 positions), which is
    # what the engines serve, not the file's top-level 65536.
    findings, result = engine_findings(REAL / "glm-4.1v-9b")
    assert {v.max_model_len for v in result.engine_views} == {32768}
    assert [f.rule for f in findings if "65536" in f.message] == ["DG202", "DG202"]
