"""The light check on real published configs: no false error and no false warning, under the pinned
transformers and under 4.52.4, while the incident cases are still caught. Each mechanism behind a
former false alarm (issue 12) has a regression test on a real config of tests/data/real-configs.

The 4.52.4 part runs draftguard's resolver in the version-matrix environment (check/matrix.py), the
one test_matrix.py uses: transformers==4.52.4 installed once into the draftguard cache, then reused.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from draftguard.check import matrix
from draftguard.check.fidelity import judge_config
from draftguard.check.light import check_snapshot
from draftguard.check.run import check as check_targets
from draftguard.check.resolver import resolve
from draftguard.report.comment import render_light_section
from draftguard.report.terminal import render_text
from draftguard.snapshot import BadInput, load_snapshot

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "real-configs"
REAL = sorted(p for p in CORPUS.iterdir() if (p / "config.json").is_file())
HEALTHY = sorted((ROOT / "tests" / "data" / "healthy").glob("*.json"))
EVERY = REAL + HEALTHY
OLD = "4.52.4"
# What a file that no built-in class reads is told: not a false alarm, an input error (exit 2).
UNRESOLVABLE = ("is unknown to transformers", "is not built into transformers")


def real(name: str):
    return check_snapshot(load_snapshot(str(CORPUS / name)))


def found(result, key: str) -> list[str]:
    return [f.rule for f in result.findings if f.key == key]


def loud(findings) -> list[str]:
    return [f"{f.rule} {f.key}: {f.message}" for f in findings if f.severity.value != "info"]


def write(tmp_path: Path, raw: dict) -> str:
    (tmp_path / "config.json").write_text(json.dumps(raw, indent=2))
    return str(tmp_path)


# --- the corpus ---------------------------------------------------------------------------------


def test_the_corpus_is_the_size_the_readme_states():
    assert len(REAL) >= 400


def test_every_corpus_folder_names_a_hub_repo_id():
    # tests/fakes/fleet.py serves each folder as the repo owner/name (the first "--" is the "/"), and
    # the audit refuses an id the Hub would refuse ("--" or ".." in the name).
    from huggingface_hub.utils import validate_repo_id

    for path in REAL:
        validate_repo_id(path.name.replace("--", "/", 1) if "--" in path.name else f"corpus/{path.name}")


@pytest.mark.parametrize("path", EVERY, ids=[p.name for p in EVERY])
def test_no_false_error_or_warning_under_the_pinned_transformers(path):
    try:
        result = check_snapshot(load_snapshot(str(path)))
    except BadInput as exc:
        assert any(text in str(exc) for text in UNRESOLVABLE), str(exc)
        return
    assert loud(result.findings) == []


@pytest.fixture(scope="module")
def old_python():
    python, _ = matrix.ensure_env(OLD, progress=lambda line: None)
    return python


def test_no_false_error_or_warning_under_transformers_4_52_4(old_python):
    snapshots = [load_snapshot(str(path)) for path in EVERY]
    raws = [snapshot.load_json() for snapshot in snapshots]
    results = matrix.run_resolver(old_python, [{"raw": raw} for raw in raws], timeout=600)
    alarms, judged = [], 0
    for path, snapshot, raw, node in zip(EVERY, snapshots, raws, results):
        if "error" in node:
            assert node["error"]["kind"] in ("model_type_unknown", "remote_code_required"), (path.name, node["error"])
            continue
        judged += 1
        findings, _ = judge_config(raw, node, version=OLD, file=path.name, line_of=snapshot.line_of)
        alarms += [f"{path.name}: {text}" for text in loud(findings)]
    assert judged >= 280  # the newer model types of the corpus are unknown to 4.52.4
    assert alarms == []


# --- the incident cases are still caught ------------------------------------------------------------


@pytest.mark.parametrize("folder", ["examples/qwen3-swa-drafter", "tests/fixtures/models/drafter-window-lost"])
def test_the_window_incident_is_still_an_error(folder):
    result = check_snapshot(load_snapshot(str(ROOT / folder)))
    rules = {(f.rule, f.key) for f in result.findings}
    assert ("DG001", "sliding_window") in rules and ("DG005", "layer_types") in rules
    [dropped] = [f for f in result.findings if f.rule == "DG001"]
    assert '"use_sliding_window": true' in dropped.message  # the gate the tracing found, and its fix


def test_the_window_incident_under_4_52_4_is_kept_as_before(old_python):
    raw = json.loads((ROOT / "examples" / "qwen3-swa-drafter" / "config.json").read_text())
    [node] = matrix.run_resolver(old_python, [{"raw": raw}], timeout=120)
    findings, _ = judge_config(raw, node, version=OLD, file="config.json", line_of=lambda key: None)
    assert loud(findings) == []  # 4.52 keeps the window; the matrix shows the difference


# --- 1 and 7: renames found by tracing, wherever they land -------------------------------------------


def test_gpt_neox_rotary_keys_are_traced_to_rope_parameters():
    result = real("togethercomputer--redpajama-incite-chat-3b-v1")
    moved = {f.key: f.moved_to for f in result.findings if f.rule == "DG007"}
    assert moved["rotary_pct"] == "rope_parameters.partial_rotary_factor"
    assert moved["rotary_emb_base"] == "rope_parameters.rope_theta"
    assert loud(result.findings) == []


def test_a_rename_no_table_knows_is_traced_too():
    # LFM2's block_ff_dim is read as intermediate_size: found by tracing, in no table of draftguard's.
    result = real("liquidai--lfm2.5-vl-1.6b")
    [renamed] = [f for f in result.findings if f.key == "text_config.block_ff_dim"]
    assert (renamed.rule, renamed.moved_to) == ("DG007", "text_config.intermediate_size")


def test_legacy_per_layer_keys_are_followed_into_per_layer_overrides():
    result = real("google--gemma-4-26b-a4b")
    [moved] = [f for f in result.findings if f.key == "text_config.global_head_dim"]
    assert moved.rule == "DG007" and "per_layer_overrides" in moved.moved_to


def test_a_traced_value_overwritten_by_another_key_is_still_a_contradiction(tmp_path):
    raw = json.loads((CORPUS / "togethercomputer--redpajama-incite-chat-3b-v1" / "config.json").read_text())
    raw["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000, "partial_rotary_factor": 0.5}
    result = check_snapshot(load_snapshot(write(tmp_path, raw)))
    assert ("DG002", "error") in {(f.rule, f.severity.value) for f in result.findings if f.key == "rotary_pct"}


# --- 2 and 8: changes the class makes on purpose, with its own evidence ------------------------------


def test_gemma_hidden_act_is_corrected_by_the_class_and_quoted():
    result = real("google--gemma-2b")
    [corrected] = [f for f in result.findings if f.key == "hidden_act"]
    assert (corrected.rule, corrected.severity.value) == ("DG009", "info")
    assert "gelu_pytorch_tanh" in corrected.message and "We found" in corrected.message


def test_the_class_voice_is_captured_for_every_config_of_a_family():
    # transformers logs some corrections once per process (warning_once); each config is judged alike.
    raw = json.loads((CORPUS / "google--gemma-2b" / "config.json").read_text())
    assert resolve(raw)["evidence"]["messages"] and resolve(raw)["evidence"]["messages"]


@pytest.mark.parametrize("name, key", [
    ("xiaomimimo--mimo-v2-flash", "sliding_window"),  # counted with the query token: 128 -> 129
    ("google--gemma-4-26b-a4b", "vision_config.rope_parameters.rope_type"),  # the only one the tower has
    ("deepseek-ai--deepseek-v4-flash", "compress_ratios"),  # read into layer_types
    ("nvidia--nvidia-nemotron-3-ultra-550b-a55b-bf16", "layers_block_type"),  # names translated
    ("zai-org--glm-5.2", "head_dim"),  # always set from qk_rope_head_dim
])
def test_deliberate_conversions_are_corrected_by_the_class(name, key):
    assert found(real(name), key) == ["DG009"]


# --- 3: a value of a feature the file's own flag switches off ----------------------------------------


@pytest.mark.parametrize("name, resolved", [("qwen--qwen1.5-moe-a2.7b-chat", 0), ("qwen--qwen2-0.5b-instruct", None)])
def test_switched_off_window_is_intended_whether_the_class_stores_null_or_0(name, resolved):
    [intended] = [f for f in real(name).findings if f.key == "sliding_window"]
    assert (intended.rule, intended.resolved) == ("DG008", resolved)
    assert "use_sliding_window: false" in intended.message


def test_a_window_behind_a_default_off_gate_is_vestigial_only_where_it_changes_nothing(tmp_path):
    # Qwen2-Audio's text window (32768) is no shorter than the 8192 positions the model reads: with the
    # switch on or off, every layer attends to the same keys. Nothing the file states disagrees.
    [vestigial] = [f for f in real("qwen--qwen2-audio-7b-instruct").findings if f.key == "text_config.sliding_window"]
    assert vestigial.rule == "DG008" and "8192 positions" in vestigial.message
    raw = json.loads((CORPUS / "qwen--qwen2-audio-7b-instruct" / "config.json").read_text())
    text = raw["text_config"]
    text["num_hidden_layers"] = 4
    text["layer_types"] = ["sliding_attention", "full_attention"] * 2
    (tmp_path / "layers").mkdir(), (tmp_path / "short").mkdir()
    result = check_snapshot(load_snapshot(write(tmp_path / "layers", raw)))
    assert found(result, "text_config.sliding_window") == ["DG001"]
    del text["layer_types"]
    text["sliding_window"] = 4096  # shorter than the context: the window would matter
    result = check_snapshot(load_snapshot(write(tmp_path / "short", raw)))
    assert found(result, "text_config.sliding_window") == ["DG012"]


# --- the agreement rule: intended only when everything the file states agrees ----------------------


def _drafter(tmp_path: Path, **changes):
    raw = json.loads((ROOT / "examples" / "qwen3-swa-drafter" / "config.json").read_text())
    raw.update(changes)
    return check_snapshot(load_snapshot(write(tmp_path, raw)))


def test_the_shipped_example_without_the_flag_is_an_error(tmp_path):
    result = check_snapshot(load_snapshot(str(ROOT / "examples" / "qwen3-swa-drafter")))
    verdicts = {(f.rule, f.key, f.severity.value) for f in result.findings}
    assert {("DG001", "sliding_window", "error"), ("DG005", "layer_types", "error")} <= verdicts


def test_flag_false_with_declared_sliding_layers_is_an_error_not_intended(tmp_path):
    """The issue-23 regression: `use_sliding_window: false` beside four declared sliding layers was
    called intended (DG008). The file contradicts itself and four layers run full attention."""
    result = _drafter(tmp_path, use_sliding_window=False)
    assert found(result, "sliding_window") == ["DG001"]
    [runs_full] = [f for f in result.findings if f.key == "layer_types"]
    assert (runs_full.rule, runs_full.severity.value) == ("DG005", "error")
    assert "layers 0-3" in runs_full.message and "use_sliding_window: false" in runs_full.message
    assert not [f for f in result.findings if f.rule == "DG008"]


def test_flag_false_with_every_layer_declared_full_stays_intended(tmp_path):
    result = _drafter(tmp_path, use_sliding_window=False, layer_types=["full_attention"] * 5)
    assert found(result, "sliding_window") == ["DG008"] and loud(result.findings) == []


def test_a_window_only_qwen3_config_is_a_warning(tmp_path):
    """A window, no `use_sliding_window`, no `layer_types`: the file states a window and leaves the
    switch out, and the window (4096) is shorter than the context (40960). Was called vestigial."""
    raw = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 64, "num_hidden_layers": 28,
           "max_position_embeddings": 40960, "sliding_window": 4096, "vocab_size": 151936}
    [unsettled] = [f for f in check_snapshot(load_snapshot(write(tmp_path, raw))).findings if f.key == "sliding_window"]
    assert (unsettled.rule, unsettled.severity.value) == ("DG012", "warning")
    assert '"use_sliding_window": true' in unsettled.message


def test_one_cause_gets_one_verdict(tmp_path):
    raw = {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 2,
           "use_sliding_window": False, "sliding_window": 4096,
           "layer_types": ["sliding_attention", "full_attention"]}
    result = check_snapshot(load_snapshot(write(tmp_path, raw)))
    assert {(f.rule, f.key) for f in result.findings if f.severity.value != "info"} == {
        ("DG001", "sliding_window"), ("DG005", "layer_types")}
    by_key: dict[str, set[str]] = {}
    for f in result.findings:
        by_key.setdefault(f.key, set()).add(f.severity.value)
    assert all(len(severities) == 1 for severities in by_key.values())


# --- 4: head_dim warnings need evidence ---------------------------------------------------------------


def test_gemma3_head_dim_default_is_no_contradiction():
    assert "DG003" not in found(real("google--gemma-3-4b-it"), "text_config.head_dim")


def test_qwen3_head_dim_default_still_contradicts(tmp_path):
    raw = {"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16, "num_hidden_layers": 2}
    assert found(check_snapshot(load_snapshot(write(tmp_path, raw))), "head_dim") == ["DG003"]


# --- 5: generation settings ---------------------------------------------------------------------------


def test_generation_settings_are_rebuilt_by_generation_config():
    result = real("facebook--bart-large-cnn")
    generation = {f.key for f in result.findings if f.rule == "DG010"}
    assert {"num_beams", "max_length", "no_repeat_ngram_size", "length_penalty"} <= generation
    assert loud(result.findings) == []


# --- 6: class labels and runtime choices --------------------------------------------------------------


def test_nested_model_type_relabel_and_saved_attention_kernel_are_benign():
    assert found(real("qwen--qwen3.5-27b"), "vision_config.model_type") == ["DG007"]
    assert found(real("moonshotai--kimi-k2.5"), "vision_config._attn_implementation") == ["DG007"]


# --- the possible miss: two keys for one attribute ------------------------------------------------------


MAMBA = {"architectures": ["MambaForCausalLM"], "model_type": "mamba", "hidden_size": 768, "state_size": 16,
         "vocab_size": 50280, "expand": 2, "conv_kernel": 4}


def test_mamba_n_layer_beside_num_hidden_layers_is_caught(tmp_path):
    result = check_snapshot(load_snapshot(write(tmp_path, {**MAMBA, "n_layer": 48, "num_hidden_layers": 32})))
    [clash] = [f for f in result.findings if f.key == "n_layer"]
    assert (clash.rule, clash.severity.value, clash.resolved) == ("DG002", "error", 32)


def test_mamba_n_layer_alone_is_an_unread_alias(tmp_path):
    result = check_snapshot(load_snapshot(write(tmp_path, {**MAMBA, "n_layer": 24})))
    [unread] = [f for f in result.findings if f.key == "n_layer"]
    assert (unread.rule, unread.severity.value, unread.resolved) == ("DG011", "warning", 32)
    assert '"num_hidden_layers": 24' in unread.message


def test_a_file_with_its_own_code_keeps_its_own_keys(tmp_path):
    """SpecForge's Domino drafter (real, tests/data/real-drafters) names its code in auto_map and reads
    `emb_dim` 256 beside `hidden_size` 4096: not another name of hidden_size there. Without auto_map,
    the same pair is a clash."""
    config = json.loads((ROOT / "tests/data/real-drafters/specforge-qwen3-8b-domino/config.json").read_text())
    (tmp_path / "own").mkdir(), (tmp_path / "builtin").mkdir()
    assert found(check_snapshot(load_snapshot(write(tmp_path / "own", config))), "emb_dim") == []
    del config["auto_map"]
    assert found(check_snapshot(load_snapshot(write(tmp_path / "builtin", config))), "emb_dim") == ["DG002"]


def test_a_key_the_class_reads_is_no_unread_alias():
    # DeepSeek-V4 pops qk_rope_head_dim and computes partial_rotary_factor from it.
    assert found(real("deepseek-ai--deepseek-v4-flash"), "qk_rope_head_dim") == []


# --- unknown model types ----------------------------------------------------------------------------


def test_chatglm_gets_no_unrelated_suggestion():
    with pytest.raises(BadInput) as caught:
        real("mlc-preset--chatglm")
    assert "Did you mean" not in str(caught.value)


def test_remote_code_model_is_told_which_built_in_class_reads_it():
    with pytest.raises(BadInput) as caught:
        real("moonshotai--kimi-k2-instruct")
    assert "DeepseekV3Config" in str(caught.value) and '"model_type": "deepseek_v3"' in str(caught.value)


REPOS = ROOT / "tests" / "data" / "real-repos"


def test_a_remote_code_florence2_file_the_built_in_class_refuses_is_told_of_trust_remote_code(tmp_path):
    # Issue 34's fourth look: the remote-code Florence-2 file as its own classes save it (the
    # sub-config's model_type "florence2_language") got the built-in class's raw ValueError, exit 2,
    # and no word of --trust-remote-code. It fails before: the message was the ValueError alone.
    raw = json.loads((REPOS / "microsoft--florence-2-large" / "config.json").read_text())
    raw["text_config"]["model_type"] = "florence2_language"
    with pytest.raises(BadInput) as caught:
        check_snapshot(load_snapshot(write(tmp_path, raw)))
    said = str(caught.value)
    assert "--trust-remote-code" in said and "configuration_florence2.Florence2Config" in said
    assert "names its own config class" in said and "\n" not in said


def test_the_published_remote_code_florence2_file_reads_without_error():
    result = check_snapshot(load_snapshot(str(REPOS / "microsoft--florence-2-large")))
    assert loud(result.findings) == []


# --- noise: one line per config for benign renames ------------------------------------------------


def test_text_and_markdown_fold_benign_findings_into_one_line_json_keeps_each():
    report = check_targets([str(CORPUS / "facebook--bart-large-cnn")])
    generation = [f for f in report.findings if f.rule == "DG010"]
    assert len(generation) >= 5
    assert len([f for f in report.to_json()["findings"] if f["rule"] == "DG010"]) == len(generation)
    out = io.StringIO()
    render_text(report, out)
    assert out.getvalue().count("DG010 generation-setting") == 1
    assert render_light_section(report).count("DG010 generation-setting") == 1


# --- 4: head_dim against the weights, where they can be read ------------------------------------------


def _write_q_proj(folder: Path, rows: int, columns: int) -> None:
    """A one-tensor model.safetensors: the header and zeroed F16 data, as the format lays them out."""
    import struct

    size = rows * columns * 2
    header = json.dumps({"model.layers.0.self_attn.q_proj.weight": {
        "dtype": "F16", "shape": [rows, columns], "data_offsets": [0, size]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(size))


QWEN3_NO_HEAD_DIM = {"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 1,
                     "num_key_value_heads": 4, "vocab_size": 48}


def test_weights_trained_with_hidden_over_heads_make_the_default_head_dim_an_error(tmp_path):
    _write_q_proj(tmp_path, 4 * 16, 64)
    result = check_snapshot(load_snapshot(write(tmp_path, QWEN3_NO_HEAD_DIM)))
    [wrong] = [f for f in result.findings if f.key == "head_dim"]
    assert (wrong.rule, wrong.severity.value) == ("DG123", "error")
    assert '"head_dim": 16' in wrong.message and "64 rows" in wrong.message


def test_weights_trained_with_the_default_head_dim_settle_the_warning(tmp_path):
    _write_q_proj(tmp_path, 4 * 128, 64)
    result = check_snapshot(load_snapshot(write(tmp_path, QWEN3_NO_HEAD_DIM)))
    assert [f for f in result.findings if f.key == "head_dim"] == []


def test_without_weights_the_class_evidence_warns(tmp_path):
    assert found(check_snapshot(load_snapshot(write(tmp_path, QWEN3_NO_HEAD_DIM))), "head_dim") == ["DG003"]


def test_a_cached_trace_whose_places_this_file_lacks_is_traced_again():
    # The trace cache is keyed by a file's shape, which leaves numbers out; per-layer override indices
    # come from numbers. A second Gemma 4 whose global layers sit elsewhere must not inherit places.
    from draftguard.check import resolver

    raw = json.loads((CORPUS / "google--gemma-4-26b-a4b" / "config.json").read_text())
    first = resolve(raw)["evidence"]["landed"]["text_config.global_head_dim"]
    key = next(k for k in resolver.TRACE_CACHE if "text_config.global_head_dim" in k[2])
    resolver.TRACE_CACHE[key] = {**resolver.TRACE_CACHE[key], "text_config.global_head_dim": [
        ["text_config._heterogeneity_spec.per_layer_overrides.999.head_dim", "same"]]}
    again = resolve(raw)["evidence"]["landed"]["text_config.global_head_dim"]
    assert again == first and again
