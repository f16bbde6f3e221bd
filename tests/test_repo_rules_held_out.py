"""The repo rules on the held-out classes of issue 41: MTP weights matched as the engines match them
(norms left out, packed layouts seen), quantization evidence from the tensors themselves, a MoE
router's class defaults against the group-limited settings the file states, and stop tokens per
consumer. Each broken case beside a healthy control of its family.

Configs are real (tests/data/real-configs, tests/data/real-repos, each with a SOURCE note). Where a
case needs a checkpoint's tensor names, the test writes an index or a header-only safetensors file
with the names a real checkpoint of the family uses (said at each helper), trimmed to a few layers.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from draftguard.check.findings import RULES
from draftguard.check.light import check_snapshot
from draftguard.check.repo import check_repo
from draftguard.snapshot import load_snapshot

ROOT = Path(__file__).resolve().parents[1]
REPOS = ROOT / "tests" / "data" / "real-repos"
CONFIGS = ROOT / "tests" / "data" / "real-configs"


def findings(folder: Path) -> dict:
    snapshot = load_snapshot(str(folder))
    return {f.rule: f for f in check_repo(snapshot, check_snapshot(snapshot).values)}


def write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=2) + "\n")


def config_copy(name: str, dest: Path, **changes) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    raw = json.loads((CONFIGS / name / "config.json").read_text())
    raw.update(changes)
    write_json(dest / "config.json", raw)
    return dest


def index(folder: Path, names) -> None:
    write_json(folder / "model.safetensors.index.json", {"metadata": {}, "weight_map": {n: "model-00001.safetensors" for n in names}})


def header_only(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    """A safetensors file with the header and no weight bytes: names, dtypes and shapes only."""
    size = {"BF16": 2, "F16": 2, "F32": 4, "F8_E4M3": 1, "I32": 4, "U8": 1, "I8": 1}
    header, at = {}, 0
    for name, (dtype, shape) in tensors.items():
        count = size[dtype]
        for d in shape:
            count *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + count]}
        at += count
    data = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(data)) + data)


# --- 1: MTP weights: norms left out, packed layouts seen, severities ---------------------------------------

# Qwen3.5's MTP module names (mtp.fc, mtp.pre_fc_norm_*, mtp.norm, mtp.layers.0.*), the layout the
# engines' Qwen3.5 MTP loaders read; a few of each kind. Written here: no public copy of an AWQ
# Qwen3.5 index was found.
QWEN35_MTP = ["mtp.fc", "mtp.norm", "mtp.pre_fc_norm_embedding", "mtp.pre_fc_norm_hidden",
              "mtp.layers.0.input_layernorm", "mtp.layers.0.post_attention_layernorm",
              "mtp.layers.0.self_attn.q_proj", "mtp.layers.0.self_attn.k_proj", "mtp.layers.0.self_attn.o_proj",
              "mtp.layers.0.self_attn.q_norm", "mtp.layers.0.mlp.down_proj", "mtp.layers.0.mlp.up_proj"]


def _qwen35_awq(folder: Path, *, mtp_packed: tuple[str, ...] = (), modules_to_not_convert=("mtp.fc", "mtp.layers.0")) -> Path:
    """Qwen/Qwen3.5-27B's real config with an AWQ quantization_config; the body stored as AWQ packs
    (qweight, qzeros, scales), the MTP module in bf16 except the modules named in ``mtp_packed``."""
    config_copy("qwen--qwen3.5-27b", folder, quantization_config={
        "quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True,
        "modules_to_not_convert": list(modules_to_not_convert) + ["visual", "lm_head"]})
    names = ["model.language_model.embed_tokens.weight", "model.language_model.norm.weight", "lm_head.weight",
             "model.visual.blocks.0.attn.qkv.weight"]
    for i in range(2):
        names += [f"model.language_model.layers.{i}.input_layernorm.weight"]
        for proj in ("self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"):
            names += [f"model.language_model.layers.{i}.{proj}.{leaf}" for leaf in ("qweight", "qzeros", "scales")]
    for module in QWEN35_MTP:
        if module in mtp_packed:
            names += [f"{module}.{leaf}" for leaf in ("qweight", "qzeros", "scales")]
        else:
            names.append(f"{module}.weight")
    index(folder, names)
    return folder


def test_a_healthy_awq_checkpoint_whose_mtp_norms_have_no_scales_is_silent(tmp_path):
    # The held-out false warning: `mtp.pre_fc_norm_embedding` "has no scales". A norm is never quantized.
    assert findings(_qwen35_awq(tmp_path / "awq")) == {}


def test_an_ignore_list_that_names_a_packed_mtp_module_is_an_error(tmp_path):
    # `modules_to_not_convert` names mtp.fc (vLLM matches it as a substring of the layer name, so the
    # engine builds mtp.fc in bf16) while the checkpoint stores mtp.fc.qweight: it cannot load.
    case = _qwen35_awq(tmp_path / "awq", mtp_packed=("mtp.fc",))
    found = findings(case)
    assert set(found) == {"DG401"}
    assert found["DG401"].severity.value == "error" and found["DG401"].raw == ["mtp.fc"]
    assert "mtp.fc.qweight" in found["DG401"].message and "1.000" in found["DG401"].message
    # The same packs with an ignore list that leaves mtp.fc to the scheme: as it should be.
    healthy = _qwen35_awq(tmp_path / "ok", mtp_packed=("mtp.fc",), modules_to_not_convert=("mtp.layers.0",))
    assert findings(healthy) == {}


def test_a_compressed_tensors_re_pattern_is_matched_as_compressed_tensors_matches_it(tmp_path):
    # compressed-tensors and vLLM match `re:` entries from the start of the module name (re.match).
    case = config_copy("qwen--qwen3.5-27b", tmp_path / "ct", quantization_config={
        "quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head", "re:.*mtp.*"]})
    names = ["lm_head.weight", "model.language_model.embed_tokens.weight"]
    names += [f"model.language_model.layers.0.mlp.down_proj.{leaf}" for leaf in ("weight_packed", "weight_scale", "weight_shape")]
    names += [f"mtp.fc.{leaf}" for leaf in ("weight_packed", "weight_scale", "weight_shape")]
    names += ["mtp.pre_fc_norm_embedding.weight", "mtp.layers.0.self_attn.q_proj.weight"]
    index(case, names)
    found = findings(case)
    assert found["DG401"].severity.value == "error" and found["DG401"].raw == ["mtp.fc"]
    names = [n.replace("mtp.fc.weight_packed", "mtp.fc.weight") for n in names if not n.startswith("mtp.fc.weight_s")]
    index(case, names)
    assert findings(case) == {}


def test_mtp_layers_left_unquantized_outside_the_ignore_list_and_mtp_declared_without_weights_are_errors(tmp_path):
    assert RULES["DG401"].severity.value == "error" and RULES["DG404"].severity.value == "error"
    case = _qwen35_awq(tmp_path / "awq", modules_to_not_convert=())
    found = findings(case)
    assert found["DG401"].severity.value == "error" and "mtp.pre_fc_norm_embedding" not in found["DG401"].raw
    assert "mtp.fc" in found["DG401"].raw
    # vllm-project/vllm#35548: mtp_num_hidden_layers 1, no mtp tensor at all.
    index(case, [n for n in json.loads((case / "model.safetensors.index.json").read_text())["weight_map"]
                 if not n.startswith("mtp.")])
    found = findings(case)
    assert found["DG404"].severity.value == "error" and found["DG404"].key == "text_config.mtp_num_hidden_layers"


# --- 2: quantization evidence from the tensors --------------------------------------------------------

# DeepSeek-V3's MTP layer (model.layers.61) in its published FP8 layout: e4m3 weights with F32
# `weight_scale_inv` per 128x128 block, norms, router gate and embeddings in BF16, the correction
# bias in F32; names, dtypes and shapes, trimmed to one expert. Written here (the real index is
# larger than the data this project keeps); the names are the ones DeepSeek-V3's index uses.
DSV3_MTP = {
    "model.embed_tokens.weight": ("BF16", [129280, 7168]),
    "model.norm.weight": ("BF16", [7168]),
    "lm_head.weight": ("BF16", [129280, 7168]),
    "model.layers.61.embed_tokens.weight": ("BF16", [129280, 7168]),
    "model.layers.61.enorm.weight": ("BF16", [7168]),
    "model.layers.61.hnorm.weight": ("BF16", [7168]),
    "model.layers.61.eh_proj.weight": ("F8_E4M3", [7168, 14336]),
    "model.layers.61.eh_proj.weight_scale_inv": ("F32", [56, 112]),
    "model.layers.61.input_layernorm.weight": ("BF16", [7168]),
    "model.layers.61.self_attn.q_a_proj.weight": ("F8_E4M3", [1536, 7168]),
    "model.layers.61.self_attn.q_a_proj.weight_scale_inv": ("F32", [12, 56]),
    "model.layers.61.self_attn.q_a_layernorm.weight": ("BF16", [1536]),
    "model.layers.61.mlp.gate.weight": ("BF16", [256, 7168]),
    "model.layers.61.mlp.gate.e_score_correction_bias": ("F32", [256]),
    "model.layers.61.mlp.experts.0.gate_proj.weight": ("F8_E4M3", [2048, 7168]),
    "model.layers.61.mlp.experts.0.gate_proj.weight_scale_inv": ("F32", [16, 56]),
    "model.layers.61.shared_head.norm.weight": ("BF16", [7168]),
    "model.layers.61.shared_head.head.weight": ("BF16", [129280, 7168]),
}


def _dsv3_mtp_export(folder: Path, *, with_quant: bool, scales: bool = True) -> Path:
    """The real DeepSeek-V3 config, the MTP layer's tensors in one header-only shard behind an index."""
    folder.mkdir(parents=True)
    raw = json.loads((CONFIGS / "deepseek-ai--deepseek-v3" / "config.json").read_text())
    if not with_quant:
        raw.pop("quantization_config")
    write_json(folder / "config.json", raw)
    tensors = {n: v for n, v in DSV3_MTP.items() if scales or not n.endswith("weight_scale_inv")}
    header_only(folder / "model-00001.safetensors", tensors)
    index(folder, tensors)
    return folder


def test_fp8_tensors_without_a_quantization_config_are_an_error(tmp_path):
    found = findings(_dsv3_mtp_export(tmp_path / "export", with_quant=False))
    assert set(found) == {"DG410"}
    assert found["DG410"].severity.value == "error" and found["DG410"].key == "quantization_config"
    assert "model.layers.61.eh_proj.weight_scale_inv" in found["DG410"].message
    assert "mtp.norm" not in found["DG410"].message and "enorm" not in found["DG410"].message
    # The healthy control: the same tensors under the published quantization_config.
    assert findings(_dsv3_mtp_export(tmp_path / "healthy", with_quant=True)) == {}


def test_fp8_dtypes_in_the_shard_headers_are_evidence_without_any_scale_name(tmp_path):
    # No scale tensor at all: only the headers' F8_E4M3 dtypes say the weights are quantized.
    found = findings(_dsv3_mtp_export(tmp_path / "export", with_quant=False, scales=False))
    assert "model.layers.61.eh_proj.weight (F8_E4M3)" in found["DG410"].message
    # A bf16 checkpoint of the same names is silent.
    bf16 = tmp_path / "bf16"
    _dsv3_mtp_export(bf16, with_quant=False, scales=False)
    header_only(bf16 / "model-00001.safetensors", {n: ("BF16", s) for n, (_, s) in DSV3_MTP.items()
                                                   if not n.endswith("weight_scale_inv")})
    assert findings(bf16) == {}
    # A GPTQ repo that keeps its scheme in quantize_config.json (vLLM reads it) is not this case.
    gptq = _dsv3_mtp_export(tmp_path / "gptq", with_quant=False)
    write_json(gptq / "quantize_config.json", {"bits": 4, "group_size": 128})
    assert "DG410" not in findings(gptq)


# --- 3: router semantics per family -------------------------------------------------------------------


def _v3_labelled_v2(folder: Path, **drop_or_set) -> Path:
    """deepseek-ai/DeepSeek-V3's real config exported under the V2 class's label, as
    sgl-project/sglang#35160 describes: model_type deepseek_v2, topk_method and scoring_func left out."""
    raw = json.loads((CONFIGS / "deepseek-ai--deepseek-v3" / "config.json").read_text())
    raw.update(model_type="deepseek_v2", architectures=["DeepseekV2ForCausalLM"])
    raw.pop("topk_method"), raw.pop("scoring_func"), raw.pop("auto_map", None), raw.pop("quantization_config")
    raw.update(drop_or_set)
    folder.mkdir(parents=True)
    write_json(folder / "config.json", raw)
    return folder


def test_a_v3_architecture_export_labelled_deepseek_v2_routes_with_the_v2_defaults(tmp_path):
    found = findings(_v3_labelled_v2(tmp_path / "v2label"))
    assert set(found) == {"DG411"}
    finding = found["DG411"]
    assert (finding.severity.value, finding.key, finding.resolved) == ("error", "topk_method", "greedy")
    assert "n_group` = 8" in finding.message and "#35160" in finding.message and "noaux_tc" in finding.message
    # With the V3 checkpoint's correction bias in the index, the fix names sigmoid scoring too.
    case = _v3_labelled_v2(tmp_path / "biased", n_group=1, topk_group=1)
    index(case, ["model.embed_tokens.weight", "lm_head.weight", "model.layers.3.mlp.gate.weight",
                 "model.layers.3.mlp.gate.e_score_correction_bias", "model.layers.61.eh_proj.weight"])
    finding = findings(case)["DG411"]
    assert "e_score_correction_bias" in finding.message and '"scoring_func": "sigmoid"' in finding.message


def test_the_router_controls_of_the_family_are_silent(tmp_path):
    # The file states its selection (its author's choice), a V2-Lite with one group, the real V3 file.
    assert findings(_v3_labelled_v2(tmp_path / "stated", topk_method="noaux_tc", scoring_func="sigmoid")) == {}
    assert findings(_v3_labelled_v2(tmp_path / "v2full", topk_method="group_limited_greedy")) == {}
    for name in ("deepseek-ai--deepseek-v2-lite-chat", "deepseek-ai--deepseek-v3"):
        folder = shutil.copytree(CONFIGS / name, tmp_path / name)
        assert "DG411" not in findings(folder)


# --- 4: stop tokens per consumer -------------------------------------------------------------------------

QWEN3 = REPOS / "qwen--qwen3-4b"  # real config.json and tokenizer_config.json (SOURCE)
SAKURA = REPOS / "sakurallm--sakura-14b-qwen2.5-v1.0"  # a real Qwen2.5 generation_config.json


def test_a_qwen_generation_config_without_im_end_never_stops_in_transformers_and_mlx(tmp_path):
    # Blaizzy/mlx-vlm#2112: generation_config.json lists only <|endoftext|> (151643); the template ends
    # turns with <|im_end|> (151645), which config.json and the tokenizer's eos_token name.
    case = shutil.copytree(QWEN3, tmp_path / "qwen3", ignore=shutil.ignore_patterns("SOURCE"))
    assert findings(case) == {}  # the real files: config.json's list is what every consumer reads
    write_json(case / "generation_config.json", {"bos_token_id": 151643, "eos_token_id": 151643, "pad_token_id": 151643})
    found = findings(case)
    assert set(found) == {"DG408"}
    finding = found["DG408"]
    assert finding.severity.value == "error" and finding.resolved == 151645 and finding.file.endswith("generation_config.json")
    assert "transformers generate() and MLX stop only on that list and never stop" in finding.message
    assert "vLLM and SGLang stop" in finding.message and "#2112" in finding.message
    assert "config.json names it ([151645])" in finding.message
    # The family's healthy generation_config.json (a real Qwen2.5 one, <|im_end|> first): silent.
    shutil.copy(SAKURA / "generation_config.json", case / "generation_config.json")
    assert findings(case) == {}


def test_a_turn_end_token_only_config_json_names_stops_nowhere_once_generation_config_exists(tmp_path):
    case = shutil.copytree(QWEN3, tmp_path / "qwen3", ignore=shutil.ignore_patterns("SOURCE"))
    tokenizer = json.loads((case / "tokenizer_config.json").read_text())
    tokenizer["eos_token"] = "<|endoftext|>"  # as a base model's tokenizer says
    write_json(case / "tokenizer_config.json", tokenizer)
    write_json(case / "generation_config.json", {"bos_token_id": 151643, "eos_token_id": 151643})
    finding = findings(case)["DG408"]
    assert "transformers generate(), MLX, vLLM and SGLang" in finding.message
    assert "no reader takes config.json's list" in finding.message


def test_the_existing_llama_stop_findings_keep_their_consumers():
    assert findings(REPOS / "mattshumer--reflection-llama-3.1-70b") == {}
    assert findings(SAKURA) == {}


# --- 5: the fifth look's misses ------------------------------------------------------------------------

LLAVA_FLAT = REPOS / "liuhaotian--llava-v1.5-7b"  # real, flat, as LLaVA's own code writes it


def test_a_flat_llava_config_is_read_by_a_class_that_builds_text_config_from_defaults(tmp_path):
    found = findings(LLAVA_FLAT)
    finding = found["DG014"]
    assert finding.severity.value == "error" and finding.file.endswith("config.json")
    all_found = check_repo(load_snapshot(str(LLAVA_FLAT)), check_snapshot(load_snapshot(str(LLAVA_FLAT))).values)
    by_key = {f.key: (f.raw, f.resolved) for f in all_found if f.rule == "DG014"}
    assert by_key["max_position_embeddings"] == (4096, 2048) and by_key["rms_norm_eps"] == (1e-05, 1e-06)
    assert "vocab_size" not in by_key  # 32000 is LlamaConfig's default too
    # The fifth look's file: the same LLaVA-1.x config with 4 added tokens (vocab_size 32004).
    case = tmp_path / "llava"
    case.mkdir()
    raw = json.loads((LLAVA_FLAT / "config.json").read_text())
    raw["vocab_size"] = 32004
    write_json(case / "config.json", raw)
    all_found = check_repo(load_snapshot(str(case)), check_snapshot(load_snapshot(str(case))).values)
    vocab = next(f for f in all_found if f.rule == "DG014" and f.key == "vocab_size")
    assert (vocab.raw, vocab.resolved, vocab.line) == (32004, 32000, 41)
    assert "text_config" in vocab.message and "LlamaConfig" in vocab.message


def test_the_converted_llava_and_a_class_that_forwards_its_top_level_keys_are_silent(tmp_path):
    # Healthy controls: the converted LLaVA-1.5 (nested text_config), Qwen2-VL's flat file (its class
    # builds text_config from the top-level keys).
    for name in ("llava-hf--llava-1.5-7b-hf", "qwen--qwen2-vl-2b-instruct", "qwen--qwen2.5-vl-7b-instruct"):
        assert "DG014" not in findings(shutil.copytree(CONFIGS / name, tmp_path / name)), name


def test_a_dflash_drafter_whose_verifier_is_a_local_path_is_still_checked(tmp_path, capsys):
    # The fifth look: a speculators DFlash drafter naming its author's folder. The drafter's own rules
    # still run: its aux ids out of order are DG101, beside the DG127 warning on the verifier key.
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from test_dflash import make_pair, speculators_config

    from draftguard.cli import main

    config = speculators_config([3, 1], verifier="/home/alice/ckpt/Qwen3-8B")
    folder = tmp_path / "dflash"
    folder.mkdir()
    write_json(folder / "config.json", config)
    assert main(["check", str(folder), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    rules = {f["rule"]: f for f in report["findings"]}
    assert report["errors"] == [] and rules["DG127"]["severity"] == "warning"
    assert rules["DG101"]["severity"] == "error"
    # A verifier folder that is here is read as the target, as before: no DG127.
    _, target = make_pair(tmp_path / "pair")
    write_json(folder / "config.json", speculators_config([1, 3], verifier=str(target)))
    main(["check", str(folder), "--format", "json"])
    report = json.loads(capsys.readouterr().out)
    assert "DG127" not in {f["rule"] for f in report["findings"]} and report["errors"] == []


def test_an_ignore_list_that_names_an_fp8_mtp_module_is_an_error_too(tmp_path):
    # The FP8 form of the packed case: DeepSeek-V3's published quantization_config with an ignore
    # list naming the MTP layer's eh_proj, which the checkpoint stores in FP8 with weight_scale_inv.
    case = _dsv3_mtp_export(tmp_path / "export", with_quant=True)
    edit = json.loads((case / "config.json").read_text())
    edit["quantization_config"]["modules_to_not_convert"] = ["model.layers.61.eh_proj"]
    write_json(case / "config.json", edit)
    finding = findings(case)["DG401"]
    assert finding.severity.value == "error" and finding.raw == ["model.layers.61.eh_proj"]
    assert "model.layers.61.eh_proj.weight_scale_inv" in finding.message
