"""DG014: a composite config (a vision-language or other multi-part class) whose file states the
language model's settings at the top level while its class builds the language sub-config from
defaults. LLaVA-1.x files are flat (``model_type: "llava"``, ``vocab_size`` and the Llama keys at the
top, as LLaVA's own code wrote them); transformers' LlavaConfig reads none of them and builds
``text_config`` from LlamaConfig's defaults, so a ``vocab_size`` of 32004 becomes 32000 and
``max_position_embeddings`` 4096 becomes 2048 in the model transformers builds.

Judged by mechanism, not by family: for every language sub-config the resolved values hold that the
file does not state, each top-level key the file states that the sub-config's class also has,
with another value there. Keys every config carries (token ids, dtype, tie_word_embeddings...) are
left out: the composite class reads its own.

In: the raw config.json (dict) and the values its class resolved; ``emit`` from ``check_repo``.
Out: findings, through ``emit``.
"""

from __future__ import annotations

from typing import Any, Callable

from draftguard.check.findings import show

# The sub-configs that hold the language model's settings.
TEXT_SUBCONFIGS = ("text_config", "llm_config", "language_config")
# Keys every PretrainedConfig carries, or that a composite class reads at its own level.
_COMMON = frozenset({
    "architectures", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id",
    "decoder_start_token_id", "tie_word_embeddings", "torch_dtype", "dtype", "transformers_version",
    "_name_or_path", "name_or_path", "model_type", "use_cache", "return_dict", "output_hidden_states",
    "output_attentions", "id2label", "label2id", "problem_type", "is_encoder_decoder", "chunk_size_feed_forward",
    "initializer_range", "quantization_config", "_attn_implementation", "attn_implementation",
    "max_length", "tokenizer_class", "prefix", "task_specific_params", "finetuning_task",
})


def composite_top_level(raw: dict[str, Any], values: dict[str, Any], emit: Callable[..., None]) -> None:
    for sub in TEXT_SUBCONFIGS:
        node = values.get(sub)
        if sub in raw or not isinstance(node, dict) or not isinstance(node.get("values"), dict):
            continue
        built = node["values"]
        cls = node.get("__config__") or "the sub-config's class"
        if _forwarded(raw, values, built, node.get("defaults")):
            continue  # the class builds the sub-config from the top-level keys: the config rules judge it
        differ = [(key, raw[key], built[key]) for key in raw
                  if key not in _COMMON and key in built and raw[key] != built[key]
                  and not (isinstance(raw[key], (int, float)) and isinstance(built[key], (int, float))
                           and not isinstance(raw[key], bool) and float(raw[key]) == float(built[key]))]
        for key, stated, used in differ[:10]:
            others = ", ".join(f"`{k}`" for k, _, _ in differ if k != key)
            emit("DG014", key, stated, used,
                 f"`{key}` is {show(stated)} at the top level of config.json, but the composite config's class reads the language model's settings from `{sub}`, which the file does not have: it "
                 f"builds `{sub}` from {cls}'s defaults, and the model transformers builds runs with "
                 f"{show(used)}{f' (as it does for {others}: each is its own finding)' if others else ''}. A flat LLaVA-1.x file is this case: "
                 "LLaVA's own code reads the top-level keys, transformers' class for the same model_type does "
                 f"not. Fix: move the language model's keys into \"{sub}\" (with its \"model_type\"), as the "
                 "converted checkpoints do (llava-hf/llava-1.5-7b-hf).")


def _forwarded(raw: dict[str, Any], values: dict[str, Any], built: dict[str, Any], defaults: Any) -> bool:
    """Whether the class built the sub-config from the file's top-level keys (Qwen2-VL, GLM-4.1V):
    it took them off the top level, or the sub-config holds a stated value that is not its class
    default."""
    stated = [k for k in raw if k not in _COMMON and k in built]
    if stated and not any(k in values for k in stated):
        return True  # consumed from the top level
    defaults = defaults if isinstance(defaults, dict) else {}
    return any(k in defaults and raw[k] == built[k] and defaults[k] != raw[k] for k in stated)
