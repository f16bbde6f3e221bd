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
    header = {name: {"dtype": dtype, "shape": shape, "data_offsets": [0, 0]} for name, (dtype, shape) in tensors.items()}
    data = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(data)) + data)


# --- 1: MTP weights: norms left out, packed layouts seen, severities ---------------------------------------

# Qwen3.5's MTP module as Qwen/Qwen3.5-27B ships it (the 15 names, trimmed to distinct kinds).
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
