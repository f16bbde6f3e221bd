"""DG123 (head_dim against q_proj's rows) on MLA models: DeepSeek-V2/V3's q_proj holds heads x
(qk_nope_head_dim + qk_rope_head_dim) rows, and their config classes set head_dim to the rope part, so
reading q_proj as heads x head_dim called every such checkpoint unloadable (a false error, found on
the DeepSeek-V3 MTP fixture and DeepSeek-V2-Lite's real config, whose q_proj is unfactored)."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

from draftguard.check.run import check

ROOT = Path(__file__).resolve().parent.parent
V2_LITE = ROOT / "tests" / "data" / "real-configs" / "deepseek-ai--deepseek-v2-lite-chat"


def _header_only(path: Path, tensors: dict[str, tuple[list[int], str]]) -> None:
    """A safetensors file whose header declares ``tensors`` (bf16); the data is a sparse hole."""
    header, offset = {}, 0
    for name, (shape, dtype) in tensors.items():
        size = 2
        for d in shape:
            size *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)


def _rules(folder: Path) -> set[str]:
    return {f.rule for f in check([str(folder)]).targets[0].findings}


def test_the_deepseek_v3_mtp_fixture_is_not_called_unloadable():
    assert "DG123" not in _rules(ROOT / "tests" / "fixtures" / "mtp-models" / "dsv3")


def test_deepseek_v2_lite_with_its_unfactored_q_proj_gets_no_head_dim_error(tmp_path):
    folder = tmp_path / "v2-lite"
    shutil.copytree(V2_LITE, folder)
    raw = json.loads((folder / "config.json").read_text())
    heads, width = raw["num_attention_heads"], raw["hidden_size"]
    rows = heads * (raw["qk_nope_head_dim"] + raw["qk_rope_head_dim"])  # 16 x 192, not 16 x head_dim
    _header_only(folder / "model.safetensors", {"model.layers.0.self_attn.q_proj.weight": ([rows, width], "BF16")})
    assert "DG123" not in _rules(folder)
    # The rule still reads the weights of a model without MLA: the same rows under a Llama config are wrong.
    llama = tmp_path / "llama"
    llama.mkdir()
    (llama / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": width,
        "num_attention_heads": heads, "num_key_value_heads": heads, "num_hidden_layers": 2,
        "intermediate_size": 4 * width, "vocab_size": 1000}))
    _header_only(llama / "model.safetensors", {"model.layers.0.self_attn.q_proj.weight": ([rows, width], "BF16")})
    assert "DG123" in _rules(llama)
