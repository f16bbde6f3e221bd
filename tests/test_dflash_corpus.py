"""The drafter rules on real published drafters and their real targets (tests/data/real-drafters).

Every file there is a published config (SpecForge, the EAGLE authors, z-lab, speculators) or a real
target's config.json, with a SOURCE.md naming repo, path and commit. The broken cases under
``broken/`` are those configs with the one change a public incident describes, each citing it.

Two promises are checked: a healthy drafter gives no error, and no warning either when its config
states every layer id; every broken case is caught by the rule written for it.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from draftguard.check.drafter import detect_drafter  # noqa: E402
from draftguard.check.run import check as check_targets  # noqa: E402
from draftguard.cli import main  # noqa: E402

CORPUS = Path(__file__).resolve().parent / "data" / "real-drafters"
TARGETS = CORPUS / "targets"

# drafter folder -> (target folder, format label, whether the config states every layer id)
HEALTHY: dict[str, tuple[str | None, str, bool]] = {
    "eagle-authors-llama3.1-8b-eagle3": ("llama-3.1-8b", "EAGLE-3", False),
    "specforge-llama3-8b-eagle3": ("llama-3.1-8b", "EAGLE-3", False),
    "specforge-qwen3-4b-eagle3": ("qwen3-4b", "EAGLE-3", False),
    "specforge-qwen3-8b-eagle3": ("qwen3-8b", "EAGLE-3", False),
    "specforge-qwen3-30b-a3b-eagle3": ("qwen3-30b-a3b", "EAGLE-3", False),
    "specforge-qwen3-30b-a3b-eagle3.1": ("qwen3-30b-a3b", "EAGLE-3", False),
    "specforge-qwen3-32b-eagle3": ("qwen3-32b", "EAGLE-3", False),
    "specforge-qwen2.5-7b-eagle3": ("qwen2.5-7b", "EAGLE-3", False),
    "specforge-gpt-oss-20b-eagle3": ("gpt-oss-20b", "EAGLE-3", True),
    "specforge-deepseek-v3-671b-eagle3": ("deepseek-v3", "EAGLE-3", True),
    "specforge-qwen3-8b-peagle": ("qwen3-8b", "P-EAGLE", False),
    "specforge-qwen3-4b-dflash": ("qwen3-4b", "z-lab DFlash", True),
    "specforge-qwen3-8b-dflash": ("qwen3-8b", "z-lab DFlash", True),
    "specforge-qwen3-4b-dspark": ("qwen3-4b", "DSpark", True),
    "specforge-qwen3-8b-dspark": ("qwen3-8b", "DSpark", True),
    "specforge-qwen3-8b-domino": ("qwen3-8b", "Domino", True),
    # No public config of these targets was found: checked against their own num_target_layers.
    "specforge-qwen3.6-27b-dflash": (None, "z-lab DFlash", True),
    "zlab-dflash2": (None, "z-lab DFlash2", True),
    "zlab-muse-assistant": (None, "z-lab DFlash", True),
}

# The warnings a healthy drafter that states every id still gets, each a fact about the engines, not
# about the drafter being broken. SpecForge writes `eagle_config.eagle_aux_hidden_state_layer_ids`, which
# SGLang (and so SpecForge's training) reads as target layer ids, vLLM 0.32's V1 runner as aux ids and its
# V2 runner not at all (engines.py cites the code): DG119. (DG108, head_dim against the target's, is
# retired: DeepSeek-V3's head_dim, 64, is its MLA qk_rope_head_dim, not a head size.)
EXPECTED_WARNINGS: dict[str, set[str]] = {
    "specforge-gpt-oss-20b-eagle3": {"DG119"},
    "specforge-deepseek-v3-671b-eagle3": {"DG119"},
}

# broken case -> (target folder relative to the corpus, the rule that must catch it, its severity)
BROKEN: dict[str, tuple[str | None, str, str]] = {
    "vllm-40727-dflash-ids-plus-one": ("targets/qwen3-8b", "DG115", "warning"),
    "vllm-40727-eagle3-aux-ids-without-plus-one": ("targets/qwen3-8b", "DG115", "warning"),
    "vllm-50170-eagle3-no-aux-ids": (None, "DG114", "warning"),
    "nemo-2461-mask-is-pad": (None, "DG116", "error"),
    "nemo-2461-mask-is-target-eos": ("targets/qwen3-8b", "DG116", "error"),
    "vllm-48113-qwen3-4b-dflash-on-32-layers": ("broken/vllm-48113-qwen3-4b-dflash-on-32-layers/target", "DG102", "error"),
    "vllm-v1-mixed-sliding-full": ("targets/qwen3-8b", "DG117", "info"),
}


def _check(drafter: Path, target: Path | None):
    report = check_targets([str(drafter)], drafter_target=str(target) if target else None)
    assert report.errors == [], [e.message for e in report.errors]
    [result] = report.targets
    return result.findings


def test_every_corpus_file_names_its_source():
    configs = sorted(CORPUS.rglob("config.json"))
    assert len(configs) >= 30
    for config in configs:
        source = (config.parent / "SOURCE.md").read_text()
        assert "`config.json`" in source and ("commit" in source or "issue" in source), config
    drafters = [p for p in HEALTHY] + [p for p in BROKEN]
    assert len(HEALTHY) >= 18 and len(drafters) >= 25


@pytest.mark.parametrize("name", sorted(HEALTHY))
def test_healthy_real_drafter_gives_no_error(name):
    target, label, states_every_id = HEALTHY[name]
    drafter = CORPUS / name
    fmt = detect_drafter(json.loads((drafter / "config.json").read_text()))
    assert fmt is not None and fmt.label == label
    findings = _check(drafter, TARGETS / target if target else None)
    assert [f.message for f in findings if f.severity.value == "error"] == []
    warnings = {f.rule for f in findings if f.severity.value == "warning"}
    drafter_warnings = {r for r in warnings if r.startswith("DG1")}
    if states_every_id:
        assert warnings == EXPECTED_WARNINGS.get(name, set()), \
            [f.message for f in findings if f.severity.value == "warning"]
    else:
        # The published EAGLE-3 heads state no aux ids: engines fall back, and the user is told to what.
        assert drafter_warnings == {"DG114"}
    if target:
        assert any(f.rule == "DG100" and str(TARGETS / target) in f.message for f in findings)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_case_from_a_public_incident_is_caught(name):
    target, rule, severity = BROKEN[name]
    case = CORPUS / "broken" / name
    cited = (case / "SOURCE.md").read_text()
    assert "https://github.com/" in cited or "vllm/config/vllm.py" in cited
    findings = _check(case, CORPUS / target if target else None)
    caught = [f for f in findings if f.rule == rule]
    assert caught and caught[0].severity.value == severity, [(f.rule, f.message) for f in findings]


def test_missing_eagle3_ids_name_what_each_engine_and_trainer_reads():
    findings = _check(CORPUS / "specforge-llama3-8b-eagle3", TARGETS / "llama-3.1-8b")
    [warning] = [f for f in findings if f.rule == "DG114"]
    # Llama-3.1-8B has 32 layers: aux ids (2, 16, 29) = outputs of target layers (1, 15, 28).
    for engine in ("vLLM", "SGLang", "SpecForge"):
        assert f"{engine}" in warning.message
    assert "[2, 16, 29]" in warning.message and "[1, 15, 28]" in warning.message
    assert "#50170" in warning.message and warning.resolved == [2, 16, 29]


def test_shifted_ids_name_both_lists():
    findings = _check(CORPUS / "broken" / "vllm-40727-dflash-ids-plus-one", TARGETS / "qwen3-8b")
    [warning] = [f for f in findings if f.rule == "DG115"]
    assert "[2, 10, 18, 26, 34]" in warning.message and "[1, 9, 17, 25, 33]" in warning.message
    assert "applied twice" in warning.message and warning.line is not None


# SpecForge head -> (target, the target layers vLLM 0.32's V1 runner, its V2 runner and SGLang 0.5.23 read,
# and the top-level aux ids that make vLLM read what SGLang reads)
ENGINES_DISAGREE = {
    # gpt-oss-20b, 24 layers: V1 reads [1, 11, 21] as aux ids; V2 ignores eagle_config and reads its
    # default (2, 12, 21); SGLang's gpt_oss.py adds 1 (the largest id is not 24).
    "specforge-gpt-oss-20b-eagle3": ("gpt-oss-20b", [0, 10, 20], [1, 11, 20], [1, 11, 21], [2, 12, 22]),
    # DeepSeek-V3, 61 layers: SGLang's deepseek_v2.py adds 1 because the first id is 1 (SGLang PR #25454);
    # V2's default (2, 30, 58) happens to be the same layers, V1 reads one lower.
    "specforge-deepseek-v3-671b-eagle3": ("deepseek-v3", [0, 28, 56], [1, 29, 57], [1, 29, 57], [2, 30, 58]),
}
NESTED = "eagle_config.eagle_aux_hidden_state_layer_ids"


def _edited(name: str, tmp_path: Path, edit) -> Path:
    """A copy of a real corpus drafter with one edit to its config.json."""
    config = json.loads((CORPUS / name / "config.json").read_text())
    edit(config)
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


@pytest.mark.parametrize("name", sorted(ENGINES_DISAGREE))
def test_specforge_eagle_config_ids_are_read_as_other_layers_by_vllm(name):
    target, v1, v2, sglang, top_fix = ENGINES_DISAGREE[name]
    findings = _check(CORPUS / name, TARGETS / target)
    [warning] = [f for f in findings if f.rule == "DG119"]
    assert warning.severity.value == "warning" and warning.key == NESTED and warning.line is not None
    message = warning.message
    assert f"target layers {v1}" in message and f"target layers {sglang}" in message
    assert "V1 model runner" in message and "V2 model runner" in message and "SGLang 0.5.23" in message
    assert f"default aux ids {[i + 1 for i in v2]}" in message  # V2 never reads eagle_config's list
    assert f'"eagle_aux_hidden_state_layer_ids": {top_fix}' in message and warning.resolved == top_fix
    # eagle_config's list is SpecForge's, read by SGLang as written: no error, no shift, no DG104.
    assert not {f.rule for f in findings} & {"DG102", "DG103", "DG104", "DG115"}


@pytest.mark.parametrize("name", sorted(ENGINES_DISAGREE))
def test_the_fix_dg119_names_makes_every_engine_read_the_same_layers(name, tmp_path):
    target, _, _, _, top_fix = ENGINES_DISAGREE[name]
    fixed = _edited(name, tmp_path, lambda c: c.update(eagle_aux_hidden_state_layer_ids=top_fix))
    findings = _check(fixed, TARGETS / target)
    # Before DG119, the two lists were compared as two aux lists, and this fix was a DG104 error.
    assert [f.message for f in findings if f.severity.value == "error"] == []
    assert not {f.rule for f in findings} & {"DG104", "DG115", "DG119"}


def test_a_top_level_list_sglang_ignores_is_read_differently():
    findings = _check(CORPUS / "broken" / "vllm-40727-eagle3-aux-ids-without-plus-one", TARGETS / "qwen3-8b")
    [warning] = [f for f in findings if f.rule == "DG119"]
    # Qwen3-8B, 36 layers: both vLLM runners read [1, 17, 32] as aux ids; SGLang reads only eagle_config.
    assert "V1 and V2 model runners" in warning.message and "target layers [0, 16, 31]" in warning.message
    assert "ignores the top-level list" in warning.message and "target layers [1, 17, 32]" in warning.message


def test_engines_are_not_compared_without_the_target_layer_count():
    findings = _check(CORPUS / "specforge-gpt-oss-20b-eagle3", None)
    assert not {f.rule for f in findings} & {"DG104", "DG115", "DG119"}


def test_aux_form_eagle_config_ids_on_a_deepseek_target_are_read_alike(tmp_path):
    # The convention SGLang PR #25454 keeps for DeepSeek-style targets (lightseekorg/kimi-k2.5-eagle3-mla):
    # a first id of 2 is read as-is, as aux ids, which is what both vLLM runners read too.
    aux_form = _edited("specforge-deepseek-v3-671b-eagle3", tmp_path,
                       lambda c: c["eagle_config"].update(eagle_aux_hidden_state_layer_ids=[2, 30, 58]))
    findings = _check(aux_form, TARGETS / "deepseek-v3")
    assert not {f.rule for f in findings} & {"DG103", "DG104", "DG115", "DG119"}


def test_eagle_config_ids_shifted_as_sglang_reads_them(tmp_path):
    # The same aux-form list on a Qwen3 target: SGLang's qwen3.py adds 1, so it reads layers [2, 18, 33],
    # the usual [1, 17, 32] moved up by one.
    shifted = _edited("specforge-qwen3-8b-eagle3", tmp_path,
                      lambda c: c.update(eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 18, 33]}))
    findings = _check(shifted, TARGETS / "qwen3-8b")
    [warning] = [f for f in findings if f.rule == "DG115"]
    assert warning.key == NESTED and warning.resolved == [1, 17, 32]
    assert "target layers [2, 18, 33]" in warning.message and "applied twice" in warning.message
    assert "Qwen3ForCausalLM" in warning.message


def test_layer_ids_off_the_end_of_a_shallower_target_are_an_error():
    findings = _check(CORPUS / "broken" / "vllm-48113-qwen3-4b-dflash-on-32-layers",
                      CORPUS / "broken" / "vllm-48113-qwen3-4b-dflash-on-32-layers" / "target")
    assert {f.rule for f in findings if f.severity.value == "error"} == {"DG102", "DG105"}


def test_mtp_heads_a_target_declares_are_recognised_with_a_note(capsys):
    deepseek = TARGETS / "deepseek-v3"
    findings = _check(deepseek, None)
    [note] = [f for f in findings if f.rule == "DG118"]
    assert note.severity.value == "info" and note.key == "num_nextn_predict_layers" and note.line is not None
    # Recognised, so naming a target is not refused (it was exit 2, "not a drafter").
    assert main(["check", str(deepseek), "--target", str(deepseek)]) == 0


def test_a_real_model_that_is_no_drafter_with_target_is_bad_input_listing_the_formats(capsys):
    assert main(["check", str(TARGETS / "qwen3-8b"), "--target", str(TARGETS / "qwen3-4b")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "not a drafter" in line and "qwen3-8b" in line
    for fmt in ("DFlash", "speculators", "EAGLE-3", "EAGLE 1/2", "MTP"):
        assert fmt in line


def test_eagle_1_2_heads_are_recognised_by_their_width_when_a_target_is_named(tmp_path):
    vicuna_head = json.loads((CORPUS / "eagle-authors-vicuna-7b-eagle" / "config.json").read_text())
    assert detect_drafter(vicuna_head) is None  # a plain one-layer LlamaForCausalLM on its own
    assert detect_drafter(vicuna_head, target_hidden_size=4096).label == "EAGLE 1/2"
    assert detect_drafter(vicuna_head, target_hidden_size=5120) is None


def test_speculators_eagle3_verifier_path_that_is_not_here_is_a_warning_and_the_head_is_checked(capsys):
    # Issue 41: its author's local path (/model/from_s3) was exit 2, nothing judged. It is a DG127
    # warning on that key, and the drafter's own rules run (no target to compare with).
    drafter = CORPUS / "speculators-qwen3-moe-eagle3"
    fmt = detect_drafter(json.loads((drafter / "config.json").read_text()))
    assert fmt.kind == "speculators-eagle3" and fmt.verifier == "/model/from_s3"
    assert [s.value for s in fmt.aux_ids] == [[2, 46, 91, 93]]
    assert main(["check", str(drafter), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["errors"] == []
    [warning] = [f for f in report["findings"] if f["severity"] == "warning"]
    assert (warning["rule"], warning["key"], warning["raw"]) == (
        "DG127", "speculators_config.verifier.name_or_path", "/model/from_s3")
    line = (drafter / "config.json").read_text().splitlines()[warning["line"] - 1]
    assert "/model/from_s3" in line
    assert main(["check", str(drafter), "--fail-on", "warning"]) == 1


def _write_checkpoint(folder: Path, header: dict) -> None:
    """A model.safetensors with this real header in front of a sparse body of the right length: the
    rules read only the header, and no weight bytes exist to copy."""
    data = json.dumps(header, separators=(",", ":")).encode()
    end = max(t["data_offsets"][1] for k, t in header.items() if k != "__metadata__")
    with open(folder / "model.safetensors", "wb") as out:
        out.write(struct.pack("<Q", len(data)) + data)
        out.truncate(8 + len(data) + end)


def _real_drafter_with_weights(tmp_path: Path, name: str, edit=None) -> Path:
    folder = tmp_path / name
    folder.mkdir(parents=True)
    config = json.loads((CORPUS / name / "config.json").read_text())
    if edit:
        edit(config)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    _write_checkpoint(folder, json.loads((CORPUS / name / "safetensors-header.json").read_text()))
    return folder


def test_dflash2_real_header_matches_its_config(tmp_path):
    findings = _check(_real_drafter_with_weights(tmp_path, "zlab-dflash2"), None)
    assert {f.rule for f in findings if f.severity.value != "info"} == set()
    [dtype] = [f for f in findings if f.rule == "DG124"]
    assert "BF16" in dtype.message and "81 tensors" in dtype.message


@pytest.mark.parametrize("edit, rule", [
    (lambda c: c["dflash_config"].update(target_layer_ids=[1, 13, 25, 37]), "DG121"),  # fc reads 5 layers
    (lambda c: c.update(num_hidden_layers=4, layer_types=["sliding_attention"] * 4), "DG122"),
    (lambda c: c.update(num_key_value_heads=4), "DG123"),
])
def test_shape_rules_on_the_real_dflash2_header(tmp_path, edit, rule):
    findings = _check(_real_drafter_with_weights(tmp_path, "zlab-dflash2", edit), None)
    assert rule in {f.rule for f in findings if f.severity.value == "error"}


def test_muse_assistant_real_header_reads_without_error(tmp_path):
    findings = _check(_real_drafter_with_weights(tmp_path, "zlab-muse-assistant"), None)
    assert {f.rule for f in findings if f.severity.value == "error"} == set()


# --- issue 23: a second set of real drafters (AngelSlim, TorchSpec, SpecForge, DeepSpec, MTP, Medusa) ---------

# drafter folder -> (target folder or None, format label, the drafter warnings it must get: DG114 when it
# states no layer ids, nothing else). Every one gives no error.
MORE_HEALTHY: dict[str, tuple[str | None, str, set[str]]] = {
    **{name: (None, "EAGLE-3", {"DG114"}) for name in (
        "angelslim-hunyuan-1.8b-eagle3", "angelslim-hunyuan-7b-eagle3", "angelslim-qwen2-audio-7b-eagle3",
        "angelslim-qwen2.5-1.5b-eagle3", "angelslim-qwen3-0.6b-eagle3", "angelslim-qwen3-1.7b-eagle3",
        "angelslim-qwen3-14b-eagle3", "angelslim-qwen3-vl-8b-eagle3-mrope", "specforge-deepseek-v2-lite-eagle3",
        "specforge-gemma3-1b-eagle3", "specforge-ling-flash-2.0-eagle3", "specforge-llama3-70b-eagle3",
        "specforge-llama4-scout-eagle3", "specforge-longcat-flash-eagle3", "specforge-phi4-eagle3",
        "specforge-qwen2.5-0.5b-eagle3", "specforge-qwen2.5-vl-7b-eagle3", "specforge-qwen3-coder-30b-a3b-eagle3",
        "specforge-qwen3-coder-480b-eagle3", "specforge-qwen3-coder-next-eagle3", "specforge-qwen3-next-80b-eagle3",
        "specforge-qwen3.5-35b-a3b-eagle3", "specforge-qwq-32b-eagle3", "torchspec-kimi-k2.5-eagle3",
        "torchspec-minimax-m2.5-eagle3")},
    "angelslim-qwen3-4b-eagle3": ("qwen3-4b", "EAGLE-3", {"DG114"}),
    "angelslim-qwen3-8b-eagle3": ("qwen3-8b", "EAGLE-3", {"DG114"}),
    "angelslim-qwen3-32b-eagle3": ("qwen3-32b", "EAGLE-3", {"DG114"}),
    "angelslim-qwen3-30b-a3b-eagle3": ("qwen3-30b-a3b", "EAGLE-3", {"DG114"}),
    "torchspec-qwen3-8b-eagle3": ("qwen3-8b", "EAGLE-3", {"DG114"}),
    # An MLA head (head_dim = qk_rope_head_dim) on a GQA target: once a false DG108.
    "torchspec-qwen3-8b-eagle3-mla": ("qwen3-8b", "EAGLE-3", {"DG114"}),
    "angelslim-qwen3-dflash": ("qwen3-4b", "DFlash", set()),  # QwenDFlashDraftModel: AngelSlim's, not z-lab's
    "specforge-gpt-oss-120b-eagle3": (None, "EAGLE-3", set()),
    "specforge-qwen3-235b-a22b-eagle3": (None, "EAGLE-3", set()),
    # Five 0-based top-level target_layer_ids: once "no ids" (DG114) and a proposal of three.
    "deepspec-qwen3-8b-eagle3": ("qwen3-8b", "EAGLE-3", set()),
    # model_type kimi_k2 (remote code): once refused with exit 2.
    "torchspec-kimi-k2.5-eagle3-moe": (None, "EAGLE-3", set()),
    "torchspec-kimi-k2.5-eagle3-mla": (None, "EAGLE-3", set()),
    "torchspec-kimi-k3-eagle3-mla": (None, "EAGLE-3", set()),
    **{name: (None, label, set()) for name, label in (
        ("specforge-glm-5.2-dspark", "DSpark"), ("specforge-inkling-dspark", "DSpark"),
        ("specforge-kimi-k3-dspark", "DSpark"), ("specforge-lfm2.5-1.2b-dflash", "z-lab DFlash"),
        ("specforge-qwen2.5-0.5b-dflash", "z-lab DFlash"), ("specforge-qwen3.5-35b-a3b-dflash", "z-lab DFlash"),
        ("specforge-qwen3.5-4b-dflash", "z-lab DFlash"), ("specforge-qwen3.5-4b-domino", "Domino"),
        ("specforge-qwen3.6-27b-domino", "Domino"),
        # [2, 17, 32, 47, 62] on a 64-layer target on purpose: once "shifted by one" (DG115).
        ("specforge-qwen3.6-27b-dspark", "DSpark"))},
    "mtp-mimo-7b": (None, "MTP", set()),  # model_type mimo: once refused with exit 2
    "mtp-minimax-m2.7": (None, "MTP", set()),  # num_mtp_modules: once not recognised
    "medusa-vicuna-7b-v1.3": (None, "Medusa", set()),  # no model_type: once refused with exit 2
}

# Real configs where a rule fires and the finding stands, each with why.
FLAGGED: dict[str, tuple[str, str]] = {
    # SpecForge's LongCat-Flash DFlash config sets mask_token_id 2, its own eos_token_id (NeMo #2461's pattern).
    "specforge-longcat-flash-dflash": ("DG116", "error"),
    # TorchSpec's DFlash and DSpark templates state no block_size: engines then pick their own.
    "torchspec-dflash-draft": ("DG111", "error"),
    "torchspec-qwen3.8-27b-dspark": ("DG111", "error"),
}


def test_the_corpus_holds_past_60_real_drafters():
    # EAGLE 1/2 heads and the speculators head are asserted by the tests above them.
    elsewhere = {"eagle-authors-llama2-chat-7b-eagle", "eagle-authors-vicuna-7b-eagle", "speculators-qwen3-moe-eagle3",
                 "redhatai-gemma-4-31b-it-speculator.eagle3"}
    drafters = set(HEALTHY) | set(MORE_HEALTHY) | set(FLAGGED) | elsewhere | {f"broken/{b}" for b in BROKEN} | {
        "broken/eagle-249-reduced-head-no-draft-vocab-size"}
    on_disk = {p.parent.relative_to(CORPUS).as_posix() for p in CORPUS.rglob("config.json")
               if "targets" not in p.parts and p.parent.name != "target"}
    assert drafters == on_disk and len(drafters) >= 60
    for name in on_disk:
        assert "`config.json`" in (CORPUS / name / "SOURCE.md").read_text(), name


@pytest.mark.parametrize("name", sorted(MORE_HEALTHY))
def test_more_real_drafters_are_read_and_give_no_error(name):
    target, label, warnings = MORE_HEALTHY[name]
    fmt = detect_drafter(json.loads((CORPUS / name / "config.json").read_text()))
    assert fmt is not None and fmt.label == label
    findings = _check(CORPUS / name, TARGETS / target if target else None)
    assert [f.message for f in findings if f.severity.value == "error"] == []
    assert {f.rule for f in findings if f.severity.value == "warning"} == warnings, \
        [f.message for f in findings if f.severity.value == "warning"]


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_real_drafters_with_a_standing_finding(name):
    rule, severity = FLAGGED[name]
    assert (rule, severity) in {(f.rule, f.severity.value) for f in _check(CORPUS / name, None)}


@pytest.mark.parametrize("name, alias", [("torchspec-kimi-k2.5-eagle3-moe", "deepseek_v3"), ("mtp-mimo-7b", None),
                                         ("medusa-vicuna-7b-v1.3", None)])
def test_a_model_type_transformers_lacks_is_said_not_refused(name, alias, capsys):
    assert main(["check", str(CORPUS / name)]) == 0
    [note] = [f for f in _check(CORPUS / name, None) if f.rule == "DG126"]
    assert note.severity.value == "info" and note.resolved == alias
    assert "No config class" in note.message or "no `model_type`" in note.message
    assert ("DeepseekV3Config" in note.message) == (alias is not None)


def test_a_config_that_is_no_drafter_is_still_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "kimi_k2", "hidden_size": 8}))
    assert main(["check", str(tmp_path)]) == 2


def test_deepspec_top_level_ids_are_read():
    findings = _check(CORPUS / "deepspec-qwen3-8b-eagle3", TARGETS / "qwen3-8b")
    assert not {f.rule for f in findings} & {"DG114", "DG101", "DG102", "DG105"}
    fmt = detect_drafter(json.loads((CORPUS / "deepspec-qwen3-8b-eagle3" / "config.json").read_text()))
    assert [(s.key, s.value) for s in fmt.target_ids] == [("target_layer_ids", [1, 9, 17, 25, 33])]


def test_default_ids_are_expected_only_of_zlab_trainers(tmp_path):
    # SpecForge's DSpark for Qwen3.6-27B: [2, 17, 32, 47, 62] on 64 layers, on purpose.
    assert "DG115" not in {f.rule for f in _check(CORPUS / "specforge-qwen3.6-27b-dspark", None)}
    # The same ids under z-lab's DFlashDraftModel are z-lab's list moved by one.
    def as_zlab(config):
        config["architectures"] = ["DFlashDraftModel"]
    folder = _edited("specforge-qwen3.6-27b-dspark", tmp_path, as_zlab)
    assert "DG115" in {f.rule for f in _check(folder, None)}


def test_torchspec_target_depth_is_target_num_hidden_layers():
    fmt = detect_drafter(json.loads((CORPUS / "torchspec-qwen3.8-27b-dspark" / "config.json").read_text()))
    assert fmt.label == "DSpark" and fmt.num_target_layers.key == "target_num_hidden_layers"
    assert not {f.rule for f in _check(CORPUS / "torchspec-qwen3.8-27b-dspark", None)} & {"DG102", "DG105"}


def test_minimax_mtp_keys_are_recognised_and_shown_by_their_real_name():
    raw = json.loads((CORPUS / "mtp-minimax-m2.7" / "config.json").read_text())
    assert detect_drafter(raw).num_target_layers.key == "num_mtp_modules"
    nested = detect_drafter({"model_type": "minimax_m3", "text_config": {"num_mtp_modules": 3}})
    assert nested.label == "MTP" and nested.num_target_layers.key == "text_config.num_mtp_modules"
    qwen = detect_drafter({"model_type": "qwen3_5", "text_config": {"mtp_num_hidden_layers": 1}})
    assert qwen.num_target_layers.key == "text_config.mtp_num_hidden_layers"  # once "t.mtp_num_hidden_layers"


def test_dflare_is_labelled_dflare():
    assert detect_drafter({"architectures": ["QwenDFlareDraftModel"], "block_size": 16}).label == "DFlare"
    assert detect_drafter({"dflare_config": {"target_layer_ids": [0, 5], "mask_token_id": 4}}).label == "DFlare"
    spec = detect_drafter({"speculators_model_type": "dflare", "transformer_layer_config": {}})
    assert spec.family == "dflash" and spec.label == "speculators dflare"


def test_eagle_249_reduced_head_without_draft_vocab_size_is_caught(tmp_path):
    name = "broken/eagle-249-reduced-head-no-draft-vocab-size"
    folder = _real_drafter_with_weights(tmp_path, name)
    findings = _check(folder, TARGETS / "llama-3.1-8b")
    [caught] = [f for f in findings if f.rule == "DG131"]
    assert caught.severity.value == "error" and caught.resolved == 32000
    assert "#249" in caught.message and '"draft_vocab_size": 32000' in caught.message
    # The authors' own config, which states draft_vocab_size 32000, loads the same header cleanly.
    healthy = _real_drafter_with_weights(tmp_path / "ok", name, lambda c: c.update(draft_vocab_size=32000))
    assert "DG131" not in {f.rule for f in _check(healthy, TARGETS / "llama-3.1-8b")}


def test_the_version_matrix_reads_a_classless_drafter_too(capsys):
    from draftguard.check import resolver
    # Before, `--transformers` refused the file again, naming each version ("cannot check ... under ...").
    drafter = str(CORPUS / "mtp-mimo-7b")
    assert main(["check", drafter, "--transformers", resolver.transformers_version(), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["errors"] == [] and [f["rule"] for f in out["findings"]] == ["DG126", "DG118"]


def test_redhatai_speculators_head_against_a_real_gemma_4_31b_config():
    target = CORPUS.parent / "real-configs" / "nvidia--gemma-4-31b-it-nvfp4"
    drafter = CORPUS / "redhatai-gemma-4-31b-it-speculator.eagle3"
    fmt = detect_drafter(json.loads((drafter / "config.json").read_text()))
    assert fmt.kind == "speculators-eagle3" and fmt.verifier == "google/gemma-4-31B-it"
    findings = _check(drafter, target)
    # [2, 30, 57] is (2, N//2, N-3) for its 60 layers, read alike by every engine: nothing to say.
    assert {f.rule for f in findings if f.severity.value != "info"} == set()
    assert any(f.rule == "DG100" for f in findings)


def test_dg126_suggests_remote_code_only_where_the_repo_ships_a_config_class(tmp_path):
    config = json.loads((CORPUS / "mtp-mimo-7b" / "config.json").read_text())
    [plain] = [f for f in _check(CORPUS / "mtp-mimo-7b", None) if f.rule == "DG126"]
    assert "--trust-remote-code" not in plain.message
    config["auto_map"] = {"AutoConfig": "configuration_mimo.MiMoConfig"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    [remote] = [f for f in _check(tmp_path, None) if f.rule == "DG126"]
    assert "ships its own config class" in remote.message and "--trust-remote-code" in remote.message


def _deepspeed_form(config: dict, target_vocab: int) -> None:
    """A speculators Eagle3 head as its DeepSpeed trainer (``Eagle3Deepspeed``) writes it: `vocab_size`
    the draft vocabulary, `target_vocab_size` the target's (issue 34's fourth look)."""
    config["architectures"] = ["Eagle3Deepspeed"]
    draft = config.pop("draft_vocab_size")
    config["transformer_layer_config"]["vocab_size"] = draft
    config["target_vocab_size"] = target_vocab


def test_a_speculators_deepspeed_head_reads_target_vocab_size_as_the_targets(tmp_path):
    # Before: `transformer_layer_config.vocab_size` (the draft vocabulary, 32000) was read as the
    # target's, a false DG107 error whose fix (set it to 151936) breaks the trained head.
    source = CORPUS / "specforge-qwen3-8b-eagle3"
    raw = json.loads((CORPUS / "redhatai-gemma-4-31b-it-speculator.eagle3" / "config.json").read_text())
    target = json.loads((TARGETS / "qwen3-8b" / "config.json").read_text())
    layer = json.loads((source / "config.json").read_text())
    raw["transformer_layer_config"].update({k: layer[k] for k in ("hidden_size", "num_attention_heads",
                                                                  "num_key_value_heads", "head_dim")})
    raw["speculators_config"]["verifier"]["name_or_path"] = "Qwen/Qwen3-8B"
    raw["eagle_aux_hidden_state_layer_ids"] = [2, 18, 33]
    _deepspeed_form(raw, target["vocab_size"])
    folder = tmp_path / "head"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    rules = {f.rule: f for f in _check(folder, TARGETS / "qwen3-8b")}
    assert "DG107" not in rules and "DG131" not in rules
    # The key that names the target's vocabulary is still checked: a wrong one is caught, by its name.
    raw["target_vocab_size"] = 152064
    (folder / "config.json").write_text(json.dumps(raw, indent=2))
    [wrong] = [f for f in _check(folder, TARGETS / "qwen3-8b") if f.rule == "DG107"]
    assert wrong.key == "target_vocab_size" and wrong.raw == 152064 and "`target_vocab_size` to 151936" in wrong.message
