"""Write this example pair: a tiny Qwen3 target and a healthy z-lab-format DFlash drafter for it.

    python examples/dflash-pair/regenerate.py

The drafter has one sliding-window layer and one full layer, reads target layers [0, 2] (it
reads hidden_states[1] and [3]), uses the target's special token <|mask|> (id 46), and ships
model.safetensors with the z-lab tensor layout. The weights are zeros: this pair shows what
`draftguard check` accepts, not a drafter that drafts well. Needs numpy and safetensors only.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER, VOCAB, TARGET_LAYERS = 16, 2, 1, 8, 16, 48, 4

TARGET = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": HIDDEN,
    "intermediate_size": INTER, "num_hidden_layers": TARGET_LAYERS, "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "vocab_size": VOCAB, "dtype": "float16",
    "tie_word_embeddings": False,
}
DRAFTER = {
    "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": HIDDEN,
    "intermediate_size": INTER, "num_hidden_layers": 2, "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "vocab_size": VOCAB, "dtype": "float16",
    "num_target_layers": TARGET_LAYERS, "block_size": 4,
    "dflash_config": {"target_layer_ids": [0, 2], "mask_token_id": 46},
    "layer_types": ["sliding_attention", "full_attention"], "sliding_window": 6,
    "use_sliding_window": True, "max_window_layers": 0, "tie_word_embeddings": False,
}


def tokenizer() -> dict:
    specials = ["<|endoftext|>", "<|im_start|>", "<|mask|>"]
    return {
        "version": "1.0",
        "added_tokens": [{"id": 44 + i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, c in enumerate(specials)],
        "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None, "decoder": None,
        "model": {"type": "WordLevel", "vocab": {f"w{i}": i for i in range(44)}, "unk_token": "w0"},
    }


def tensors() -> dict[str, np.ndarray]:
    n_ids = len(DRAFTER["dflash_config"]["target_layer_ids"])
    shapes = {"fc.weight": (HIDDEN, n_ids * HIDDEN), "hidden_norm.weight": (HIDDEN,), "norm.weight": (HIDDEN,)}
    for i in range(DRAFTER["num_hidden_layers"]):
        p = f"layers.{i}."
        shapes.update({
            p + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            p + "self_attn.q_norm.weight": (HEAD_DIM,), p + "self_attn.k_norm.weight": (HEAD_DIM,),
            p + "mlp.gate_proj.weight": (INTER, HIDDEN), p + "mlp.up_proj.weight": (INTER, HIDDEN),
            p + "mlp.down_proj.weight": (HIDDEN, INTER),
            p + "input_layernorm.weight": (HIDDEN,), p + "post_attention_layernorm.weight": (HIDDEN,),
        })
    return {name: np.zeros(shape, dtype=np.float16) for name, shape in sorted(shapes.items())}


def main() -> None:
    (HERE / "target").mkdir(exist_ok=True)
    (HERE / "drafter").mkdir(exist_ok=True)
    (HERE / "target" / "config.json").write_text(json.dumps(TARGET, indent=2) + "\n")
    (HERE / "target" / "tokenizer.json").write_text(json.dumps(tokenizer(), indent=2) + "\n")
    (HERE / "drafter" / "config.json").write_text(json.dumps(DRAFTER, indent=2) + "\n")
    (HERE / "drafter" / ".draftguard.yml").write_text("target: ../target  # the model this drafter drafts for\n")
    save_file(tensors(), str(HERE / "drafter" / "model.safetensors"), metadata={"format": "pt"})


if __name__ == "__main__":
    main()
