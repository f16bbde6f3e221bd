"""The repo rules (DG400-DG409, draftguard/check/repo/): each class of issue 34 caught on its incident's
files, said with what breaks and the fix, and silent on healthy repos of the same family.

Real files: tests/data/real-repos (each with a SOURCE note) and the config corpus
tests/data/real-configs. Where an incident's other files are not public, the test writes them from a
real file with the one change the incident describes, and says so.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from draftguard.check.light import check_snapshot
from draftguard.check.repo import check_repo
from draftguard.check.repo.conventions import CONVENTIONS
from draftguard.check.run import check as check_targets
from draftguard.cli import main
from draftguard.snapshot import BadInput, load_snapshot

ROOT = Path(__file__).resolve().parents[1]
REPOS = ROOT / "tests" / "data" / "real-repos"
CONFIGS = ROOT / "tests" / "data" / "real-configs"
DRAFTERS = ROOT / "tests" / "data" / "real-drafters"
REFLECTION = REPOS / "mattshumer--reflection-llama-3.1-70b"
LLAMA3 = REPOS / "meta-llama--meta-llama-3-8b-instruct"
# The incidents' files are tested one by one below. The corpus files these rules find broken are
# flattened copies of composite configs (DG014): the copying tools wrote the language model's keys at
# the top level, where transformers' class does not read them and builds text_config from defaults
# (GLM-4.1V: max_position_embeddings 65536 runs as 32768; Step-3.7-Flash: its sliding window and
# layer_types dropped, every layer full attention). True of these files, not of the Hub's nested ones.
TRUE_FINDINGS: set[tuple[str, str]] = {
    ("glm-4.1v-9b", "DG014"), ("stepfun-ai--step-3.7-flash", "DG014"), ("stepfun-ai--step-3.7-flash-fp8", "DG014"),
    ("liuhaotian--llava-v1.5-7b", "DG014"),  # tests/data/real-repos: the flat LLaVA-1.5 file (its SOURCE)
    # tests/data/real-repos: a REAP-pruned Qwen3.5 MoE whose export dropped the MTP layer it declares (its SOURCE)
    ("bryce-hoehn--qwen3.5-18b-reap-a3b-coding", "DG404"),
}


def repo_findings(folder: Path) -> list:
    snapshot = load_snapshot(str(folder))
    return check_repo(snapshot, check_snapshot(snapshot).values)


def rules(findings) -> dict[str, object]:
    return {f.rule: f for f in findings}


def copy(src: Path, dest: Path, *names: str) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in names or [p.name for p in src.iterdir() if p.name != "SOURCE"]:
        shutil.copy(src / name, dest / name)
    return dest


def write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n")


def edit_json(path: Path, change) -> None:
    value = json.loads(path.read_text())
    change(value)
    write_json(path, value)


# --- the corpora: silent on healthy repos ------------------------------------------------------------


CORPUS = sorted(p.parent for p in CONFIGS.glob("*/config.json")) + sorted(
    p.parent for p in DRAFTERS.rglob("config.json")) + sorted(p.parent for p in REPOS.glob("*/config.json"))


def test_no_repo_rule_fires_on_a_healthy_corpus_repo_under_the_pinned_transformers():
    loud = []
    for folder in CORPUS:
        snapshot = load_snapshot(str(folder))
        try:
            values = check_snapshot(snapshot).values
        except BadInput:
            values = {}  # a model type this transformers lacks: the rules that need no values still run
        loud += [(folder.name, f.rule) for f in check_repo(snapshot, values) if f.severity.value != "info"]
    assert len(CORPUS) >= 490
    assert set(loud) == TRUE_FINDINGS


def test_no_repo_rule_fires_on_a_healthy_corpus_repo_under_transformers_4_52_4():
    from draftguard.check import matrix

    python, _ = matrix.ensure_env("4.52.4", progress=lambda line: None)
    snapshots = [load_snapshot(str(folder)) for folder in CORPUS]
    nodes = matrix.run_resolver(python, [{"raw": s.load_json()} for s in snapshots], timeout=600)
    loud = []
    for folder, snapshot, node in zip(CORPUS, snapshots, nodes):
        values = node.get("values", {}) if "error" not in node else {}
        loud += [(folder.name, f.rule) for f in check_repo(snapshot, values) if f.severity.value != "info"]
    assert set(loud) <= TRUE_FINDINGS


def test_the_router_conventions_are_what_every_published_config_of_the_family_states():
    # The table may list only what the corpus shows: every config of the family states that value.
    seen: dict[str, list[dict]] = {}
    for path in CONFIGS.glob("*/config.json"):
        raw = json.loads(path.read_text())
        for node in (raw, raw.get("text_config") if isinstance(raw.get("text_config"), dict) else None):
            if node and isinstance(node.get("model_type"), str):
                seen.setdefault(node["model_type"], []).append(node)
    for family, keys in CONVENTIONS.items():
        assert seen.get(family), f"no published {family} config in the corpus"
        for key, value in keys.items():
            assert all(node.get(key) == value for node in seen[family]), (family, key)


# --- 5: stop tokens ----------------------------------------------------------------------------------


def test_llama3_instruct_as_first_published_never_stops(tmp_path):
    # vllm-project/vllm#4180: the template ends turns with <|eot_id|> (128009); tokenizer_config.json
    # (real, as first shipped) and config.json (128001, as the issue quotes) name <|end_of_text|>.
    case = copy(LLAMA3, tmp_path / "llama3", "tokenizer_config.json")
    config = json.loads((REFLECTION / "config.json").read_text())
    config.update(eos_token_id=128001, vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                  num_attention_heads=32, num_hidden_layers=32)
    write_json(case / "config.json", config)
    [found] = [f for f in repo_findings(case) if f.rule == "DG408"]
    assert found.severity.value == "error" and found.resolved == 128009 and found.key == "eos_token_id"
    assert "<|eot_id|>" in found.message and "#4180" in found.message and "Fix:" in found.message
    # With no generation_config.json the stop list is config.json's: `draftguard fix` adds 128009.
    assert main(["fix", str(case), "--write"]) == 0
    assert json.loads((case / "config.json").read_text())["eos_token_id"] == [128001, 128009]
    assert rules(repo_findings(case)).keys() == set()


def test_a_generation_config_that_still_says_end_of_text_is_the_file_to_fix(tmp_path, capsys):
    case = copy(LLAMA3, tmp_path / "llama3", "tokenizer_config.json")
    write_json(case / "config.json", {**json.loads((REFLECTION / "config.json").read_text()), "eos_token_id": 128001})
    write_json(case / "generation_config.json", {"bos_token_id": 128000, "eos_token_id": 128001})
    [found] = [f for f in repo_findings(case) if f.rule == "DG408"]
    assert found.file.endswith("generation_config.json")
    assert main(["fix", str(case)]) == 1  # nothing in config.json would end it
    assert "generation_config.json" in capsys.readouterr().err
    # The Hub's own fix (generation_config.json's eos_token_id [128001, 128009]) ends the error; config.json
    # alone still says 128001, which is the info of vllm-project/vllm#45591.
    write_json(case / "generation_config.json", {"bos_token_id": 128000, "eos_token_id": [128001, 128009]})
    found = rules(repo_findings(case))
    assert "DG408" not in found and found["DG409"].severity.value == "info" and "#45591" in found["DG409"].message


def test_a_healthy_llama_repo_gets_no_stop_token_finding():
    assert repo_findings(REFLECTION) == []


# --- 3: tied embeddings -------------------------------------------------------------------------------


def _ministral_index(head: bool) -> dict:
    """Ministral 3 3B's tensor names, trimmed to one layer: the 3B ships tied, with no lm_head.weight."""
    names = ["language_model.model.embed_tokens.weight", "language_model.model.norm.weight",
             "language_model.model.layers.0.self_attn.q_proj.weight", "vision_tower.transformer.layers.0.attention.q_proj.weight"]
    return {"weight_map": {n: "model.safetensors" for n in names + (["language_model.lm_head.weight"] if head else [])}}


def test_ministral3_root_and_text_config_disagree_and_fix_states_the_root(tmp_path):
    # The real config: text_config ties, the root leaves it to the class (false here). Alone that is no
    # finding (transformers 4.52 ties by text_config); with a checkpoint that holds no lm_head.weight, a
    # reader of the root initialises the head at random.
    case = copy(CONFIGS / "mlc-preset--ministral3_3b_2512", tmp_path / "ministral", "config.json")
    assert repo_findings(case) == []
    write_json(case / "model.safetensors.index.json", _ministral_index(head=False))
    [found] = repo_findings(case)
    assert (found.rule, found.severity.value, found.key) == ("DG405", "error", "tie_word_embeddings")
    assert "#43429" in found.message and "gibberish" in found.message
    assert main(["fix", str(case), "--write"]) == 0
    assert json.loads((case / "config.json").read_text())["tie_word_embeddings"] is True
    assert repo_findings(case) == []


def test_an_untied_head_with_no_lm_head_weight_in_the_index_is_an_error(tmp_path):
    case = copy(REFLECTION, tmp_path / "reflection")
    edit_json(case / "model.safetensors.index.json", lambda index: index["weight_map"].pop("lm_head.weight"))
    [found] = repo_findings(case)
    assert (found.rule, found.severity.value) == ("DG406", "error") and "random" in found.message
    assert main(["fix", str(case), "--write"]) == 0  # proven against the index: the head is the embeddings
    assert json.loads((case / "config.json").read_text())["tie_word_embeddings"] is True
    # The real repo, with its lm_head.weight, is silent.
    assert [f.rule for f in repo_findings(REFLECTION)] == []


# --- 4: router defaults --------------------------------------------------------------------------------


def test_a_qwen3_moe_file_without_norm_topk_prob_routes_with_the_class_default(tmp_path):
    case = copy(CONFIGS / "qwen--qwen3-30b-a3b", tmp_path / "qwen3moe", "config.json")
    assert repo_findings(case) == []  # the published config states it
    edit_json(case / "config.json", lambda c: c.pop("norm_topk_prob"))
    [found] = repo_findings(case)
    assert (found.rule, found.severity.value, found.key, found.resolved) == ("DG407", "warning", "norm_topk_prob", False)
    assert main(["fix", str(case), "--write"]) == 0
    assert json.loads((case / "config.json").read_text())["norm_topk_prob"] is True


def test_a_file_that_states_another_router_value_is_left_alone(tmp_path):
    case = copy(CONFIGS / "qwen--qwen3-30b-a3b", tmp_path / "qwen3moe", "config.json")
    edit_json(case / "config.json", lambda c: c.update(norm_topk_prob=False))
    assert repo_findings(case) == []


# --- 2: MTP weights ----------------------------------------------------------------------------------


def _glm_index(layers: range, *, mtp: bool, quantized_mtp: bool = True) -> dict:
    """A GLM-5 NVFP4 index's names, trimmed to a few layers (the rules read names only)."""
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in list(layers) + ([78] if mtp else []):
        for proj in ("q_a_proj", "kv_a_proj_with_mqa", "o_proj"):
            names.append(f"model.layers.{i}.self_attn.{proj}.weight")
            if i != 78 or quantized_mtp:
                names += [f"model.layers.{i}.self_attn.{proj}.weight_scale", f"model.layers.{i}.self_attn.{proj}.input_scale"]
    if mtp:
        names += ["model.layers.78.eh_proj.weight", "model.layers.78.enorm.weight", "model.layers.78.hnorm.weight"]
    return {"metadata": {}, "weight_map": {n: "model-00001-of-00001.safetensors" for n in names}}


def test_glm_nvfp4_without_mtp_weights_is_caught(tmp_path):
    # vllm-project/vllm#35548: the real GLM-5 NVFP4 config (78 layers + 1 MTP layer), an index without layer 78.
    case = copy(CONFIGS / "nvidia--glm-5-nvfp4", tmp_path / "glm", "config.json")
    # The corpus copy of config.json carries no quantization_config; ModelOpt repos ship the scheme in
    # hf_quant_config.json, which vLLM reads (without either, the NVFP4 scales are DG410's).
    write_json(case / "hf_quant_config.json", {"producer": {"name": "modelopt"},
                                               "quantization": {"quant_algo": "NVFP4", "group_size": 16}})
    write_json(case / "model.safetensors.index.json", _glm_index(range(3), mtp=False))
    [found] = repo_findings(case)
    assert (found.rule, found.severity.value, found.key) == ("DG404", "error", "num_nextn_predict_layers")
    assert "#35548" in found.message and "78" in found.message
    write_json(case / "model.safetensors.index.json", _glm_index(range(3), mtp=True))
    assert repo_findings(case) == []


def test_unquantized_mtp_layers_the_ignore_list_leaves_out(tmp_path):
    # sgl-project/sglang#35797: the MTP layer stored in bf16, every other linear quantized, and an ignore
    # list that names only lm_head.
    case = copy(CONFIGS / "nvidia--glm-5-nvfp4", tmp_path / "glm", "config.json")
    quant = json.loads((CONFIGS / "nvidia--kimi-k2.5-nvfp4" / "config.json").read_text())["quantization_config"]
    quant["ignore"] = ["lm_head"]
    edit_json(case / "config.json", lambda c: c.update(quantization_config=quant))
    write_json(case / "model.safetensors.index.json", _glm_index(range(3), mtp=True, quantized_mtp=False))
    found = rules(repo_findings(case))
    assert set(found) == {"DG401"} and "#35797" in found["DG401"].message
    quant["ignore"] = ["lm_head", "re:model.layers.78.*"]
    edit_json(case / "config.json", lambda c: c.update(quantization_config=quant))
    assert repo_findings(case) == []


# --- 1: quantization ----------------------------------------------------------------------------------


def _laguna_quant() -> dict:
    return json.loads((CONFIGS / "poolside--laguna-xs.2-fp8" / "config.json").read_text())["quantization_config"]


def test_a_group_size_that_does_not_divide_the_hidden_size_is_an_error(tmp_path):
    # A real compressed-tensors config (group 128) on a real SmolLM2-360M config (hidden 960 = 7 x 128 + 64).
    quant = _laguna_quant()
    walk = [quant]
    while walk:
        node = walk.pop()
        if isinstance(node, dict):
            if "group_size" in node and node["group_size"] is None:
                node["group_size"] = 128
            walk.extend(node.values())
        elif isinstance(node, list):
            walk.extend(node)
    case = copy(CONFIGS / "huggingfacetb--smollm2-360m-instruct", tmp_path / "smol", "config.json")
    edit_json(case / "config.json", lambda c: c.update(quantization_config=quant))
    found = rules(repo_findings(case))
    assert found["DG402"].severity.value == "error" and "960" in found["DG402"].message and "64" in found["DG402"].message
    # The same quantization on Qwen3-8B (4096, 12288) divides evenly.
    healthy = copy(CONFIGS / "qwen--qwen3-8b", tmp_path / "qwen", "config.json")
    edit_json(healthy / "config.json", lambda c: c.update(quantization_config=quant))
    assert "DG402" not in rules(repo_findings(healthy))


def test_packed_weights_without_scales_and_ignore_entries_that_name_nothing(tmp_path):
    case = copy(CONFIGS / "qwen--qwen3-8b", tmp_path / "qwen", "config.json")
    edit_json(case / "config.json", lambda c: c.update(quantization_config={
        "quant_method": "compressed-tensors", "ignore": ["lm_head", "model.layers.0.mlp.gate"]}))
    names = ["model.embed_tokens.weight", "lm_head.weight"]
    for i in range(2):
        for proj in ("q_proj", "k_proj"):
            names += [f"model.layers.{i}.self_attn.{proj}.weight_packed", f"model.layers.{i}.self_attn.{proj}.weight_scale"]
    names.remove("model.layers.1.self_attn.k_proj.weight_scale")
    write_json(case / "model.safetensors.index.json", {"weight_map": {n: "a.safetensors" for n in names}})
    found = rules(repo_findings(case))
    assert found["DG403"].severity.value == "error" and "model.layers.1.self_attn.k_proj.weight_packed" in found["DG403"].message
    assert found["DG400"].raw == ["model.layers.0.mlp.gate"]


def test_the_check_runs_the_repo_rules_for_every_surface(tmp_path, capsys):
    case = copy(CONFIGS / "qwen--qwen3-30b-a3b", tmp_path / "qwen3moe", "config.json")
    edit_json(case / "config.json", lambda c: c.pop("norm_topk_prob"))
    assert "DG407" in {f.rule for f in check_targets([str(case)]).findings}
    assert "DG407" in {f.rule for f in check_targets([str(case)], versions=["5.24.0"], host_in_process=True).findings}
    assert main(["check", str(case), "--format", "json", "--fail-on", "warning"]) == 1
    assert '"DG407"' in capsys.readouterr().out


def test_a_hub_snapshot_of_config_json_alone_reads_no_other_file(tmp_path):
    # The bots and the audit hand a Snapshot of config.json bytes: the rules that need other files are
    # silent, and none makes a Hub request (there is no Hub here to answer one).
    from draftguard.snapshot import Snapshot

    raw = json.loads((CONFIGS / "nvidia--glm-5-nvfp4" / "config.json").read_text())
    raw["tie_word_embeddings"], raw["text_config"] = True, {"tie_word_embeddings": False}
    data = json.dumps(raw).encode()
    snap = Snapshot(source="x/y", revision="abc", files={"config.json": data}, display={"config.json": "x/y@abc/config.json"},
                    is_hub=True)
    assert [f.rule for f in check_repo(snap, {})] == ["DG405"]  # stated both ways: the file contradicts itself


def test_every_real_repo_folder_names_its_source():
    folders = [p for p in REPOS.iterdir() if p.is_dir()]
    assert len(folders) >= 3
    for folder in folders:
        note = (folder / "SOURCE").read_text()
        for field in ("repo:", "path:", "commit:", "hub:"):
            assert field in note, (folder.name, field)
    total = sum(p.stat().st_size for p in REPOS.rglob("*") if p.is_file())
    assert total < 1_000_000  # issue 34: the added data stays small
