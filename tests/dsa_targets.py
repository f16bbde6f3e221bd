"""Tiny DeepSeek-V3.2 / GLM-5 targets derived at test time (no weights shipped) from the trained DeepSeek-V3
MTP fixture ``tests/fixtures/mtp-models/dsv3``: the same trunk and MTP layer, each layer's ``q_proj`` split
into the low-rank query V3.2 always has (``q_a_proj`` = diag(1 / input_layernorm), ``q_a_layernorm`` =
input_layernorm, ``q_b_proj`` = ``q_proj``: the query is DeepSeek-V3's to float32 rounding), and a seeded
random indexer in every layer, the MTP layer's included. Where ``index_topk`` >= the sequence the indexer
selects every token and the target and its MTP layer compute what dsv3's do; a small ``index_topk`` makes
the selection matter. Stored float32 (the split is exact only unrounded).

In: an output folder and the knobs below. Out: the folder (config.json, two shards, index, tokenizer files).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

MODELS = Path(__file__).parent / "fixtures" / "mtp-models"
INDEX_HEADS, INDEX_DIM = 2, 64  # the indexer's head dim holds the 64 rotary dims (qk_rope_head_dim)


def _load(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    weights: dict[str, torch.Tensor] = {}
    for shard in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(shard.resolve())))
    return weights


def indexer(seed: int, hidden: int = 32, rank: int = 32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"wq_b.weight": torch.randn(INDEX_HEADS * INDEX_DIM, rank, generator=g) * 0.3,
            "wk.weight": torch.randn(INDEX_DIM, hidden, generator=g) * 0.3,
            "k_norm.weight": 1 + 0.1 * torch.randn(INDEX_DIM, generator=g),
            "k_norm.bias": 0.1 * torch.randn(INDEX_DIM, generator=g),
            "weights_proj.weight": torch.randn(INDEX_HEADS, hidden, generator=g) * 0.3}


def dsa_target(out: Path, *, index_topk: int = 1024, model_type: str = "deepseek_v32", drop_mtp: bool = False,
               fp8_mtp: bool = False, own_embeddings: bool = False, **config_changes) -> Path:
    """dsv3 as a V3.2 (or GLM-5) target with the indexer, the MTP layer at model.layers.1."""
    import sys

    from safetensors.torch import save_file

    sys.path.insert(0, str(MODELS.parent))
    from make_mtp_models import fp8_state  # the MTP fixtures' FP8 writer

    raw = json.loads((MODELS / "dsv3" / "config.json").read_text())
    raw.update(q_lora_rank=32, index_topk=index_topk, index_n_heads=INDEX_HEADS, index_head_dim=INDEX_DIM,
               torch_dtype="float32")
    if model_type == "glm_moe_dsa":
        raw.update(architectures=["GlmMoeDsaForCausalLM"], model_type="glm_moe_dsa", indexer_rope_interleave=True)
    else:
        raw.update(architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32")
    raw.update(config_changes)
    weights = {k: v.float() for k, v in _load(MODELS / "dsv3").items()}
    for i in (0, 1):
        p = f"model.layers.{i}."
        w_in = weights[p + "input_layernorm.weight"]
        weights[p + "self_attn.q_a_proj.weight"] = torch.diag(1.0 / w_in)
        weights[p + "self_attn.q_a_layernorm.weight"] = w_in.clone()
        weights[p + "self_attn.q_b_proj.weight"] = weights.pop(p + "self_attn.q_proj.weight")
        weights.update({p + "self_attn.indexer." + k: v for k, v in indexer(7 + i).items()})
    if own_embeddings:
        weights["model.layers.1.embed_tokens.weight"] = weights["model.layers.1.embed_tokens.weight"].flip(0)
    mtp = {k: v for k, v in weights.items() if k.startswith("model.layers.1.")}
    if fp8_mtp:  # block FP8 as DeepSeek stores it (real = fp8 x scale_inv), no quantization_config declared
        copies = ("model.layers.1.embed_tokens.weight", "model.layers.1.shared_head.head.weight")
        mtp = {**fp8_state({k: v for k, v in mtp.items() if k not in copies}), **{k: mtp[k] for k in copies}}
    shards = {"model-00001-of-00002.safetensors": {k: v for k, v in weights.items() if k not in mtp}}
    if not drop_mtp:
        shards["model-00002-of-00002.safetensors"] = mtp
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(raw, indent=2))
    for name in ("generation_config.json",):
        shutil.copy(MODELS / "dsv3" / name, out / name)
    for name, tensors in shards.items():
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(out / name), metadata={"format": "pt"})
    index = {"metadata": {}, "weight_map": {k: name for name, tensors in shards.items() for k in tensors}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return out

