"""The light tier: what vLLM 0.32.0 and SGLang 0.5.23 serve for a config, from their code written down
as rules (docs/engines.md cites each line). Base install only: no engine, no torch. The real engine
(``check.engines.real``) is the authority; tests marked ``vllm`` fail wherever the two disagree.

In: an ``EngineSpec``, the raw config.json and the values its transformers class resolves (a
drafter's with its target's), transformers' per-layer windows, and the dtype its weights hold if read.
Out: ``EngineView`` objects: ``target_views`` (one per engine) and ``drafter_views`` (one per vLLM
model runner, one for SGLang). Pure but for reading the shipped registry files once
(``check.engines.registry``).
"""

from __future__ import annotations

from typing import Any

from draftguard.check.drafter.engines import build_target_layer_ids, dflash_v1_refusal, eagle3_default_aux_ids
from draftguard.check.engines import registry
from draftguard.check.engines.specs import EngineSpec
from draftguard.check.engines.view import LIGHT, EngineView, text_values
from draftguard.check.findings import is_int

# vllm/transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key: the smallest
# of these, and model_max_length over all of them.
VLLM_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# vllm/config/model.py _get_and_verify_max_len: RoPE types whose factor does not scale the length.
# vllm/config/model.py _get_and_verify_max_len: the length assumed when no key states one.
VLLM_DEFAULT_LEN = 2048
VLLM_UNSCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn")
# SGLang python/sglang/srt/utils/hf_transformers/config.py get_context_length: the first of these.
SGLANG_LEN_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
# SGLang's llama.py (Mistral, Phi-3 through Phi3ForCausalLM(LlamaForCausalLM)) and starcoder2.py never
# pass sliding_window_size to RadixAttention; Qwen2/Qwen3 likewise (not hybrid-SWA architectures).
# Architectures whose attention vLLM builds as its own kind (DeepSeek-V4's compressed and sliding mix): the
# built model's layers state no window where transformers' config has one, so the light tier claims none.
VLLM_OWN_ATTENTION = ("DeepseekV4ForCausalLM",)
SGLANG_NO_WINDOW = ("LlamaForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM", "Starcoder2ForCausalLM",
                    "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM")
# SGLang target files that capture "before layer i" (so DFlash id N-1, capture N, is never captured).
SGLANG_CAPTURE_BEFORE = ("LlamaForCausalLM", "MistralForCausalLM", "Phi3ForCausalLM", "Qwen2ForCausalLM",
                         "Qwen3ForCausalLM", "Qwen3MoeForCausalLM", "Qwen2MoeForCausalLM")
# Architectures vLLM runs as pooling models, for which its auto dtype prefers float16.
VLLM_POOLING_SUFFIXES = ("Model", "Classification", "ForMaskedLM", "EmbeddingModel", "ForRewardModel")
# ... except the causal LM heads whose names also end in "Model" (GPT2LMHeadModel, XLNetLMHeadModel): vLLM
# 0.32 generates with them, so float32 runs as bfloat16 (its real tier says so; MarianMTModel, which it
# serves through its Transformers backend, does get float16).
VLLM_GENERATIVE_SUFFIXES = ("LMHeadModel",)
# Model types SGLang 0.5.23 re-parses with a config class of its own (utils/hf_transformers/common.py
# _CONFIG_REGISTRY) whose lengths differ from transformers' (checked against its ModelConfig).
SGLANG_OWN_CONFIG = ("step3p7",)
DTYPES = {"float32": "float32", "float": "float32", "bfloat16": "bfloat16", "float16": "float16", "half": "float16"}


def _rope(values: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    rope = values.get("rope_parameters") or values.get("rope_scaling") or {}
    if not isinstance(rope, dict):
        return None, {}
    kind = rope.get("rope_type") or rope.get("type")
    return ("longrope" if kind == "su" else kind), rope


def _archs(values: dict[str, Any]) -> list[str]:
    archs = values.get("architectures")
    return [a for a in archs if isinstance(a, str)] if isinstance(archs, list) else []


def vllm_max_len(values: dict[str, Any], cap: bool = False) -> tuple[int | None, str]:
    """vLLM's max_model_len for a config's resolved values, and why. With ``cap``, the longest it lets a
    launch ask for: the same, except that a LongRoPE model serves its original length by default but
    takes up to its trained (extended) length when asked (``_get_and_verify_max_len``).

    Example::

        >>> vllm_max_len({"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        ...               "rope_parameters": {"rope_type": "longrope"}})
        (4096, 'LongRoPE: original_max_position_embeddings (vllm/config/model.py _get_and_verify_max_len)')
        >>> vllm_max_len({"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
        ...               "rope_parameters": {"rope_type": "longrope"}}, cap=True)[0]
        131072
    """
    found = [(values[k], k) for k in VLLM_LEN_KEYS if is_int(values.get(k))]
    if not found:
        return VLLM_DEFAULT_LEN, (f"no length key: vLLM assumes {VLLM_DEFAULT_LEN} (vllm/config/model.py "
                                  "_get_and_verify_max_len)")
    length, key = min(found)
    if is_int(values.get("model_max_length")):
        length, key = values["model_max_length"], "model_max_length"
    kind, rope = _rope(values)
    if kind == "longrope" and not cap:
        original = rope.get("original_max_position_embeddings", values.get("original_max_position_embeddings"))
        if is_int(original):
            return original, ("LongRoPE: original_max_position_embeddings (vllm/config/model.py "
                              "_get_and_verify_max_len)")
    factor = rope.get("factor")
    gemma3 = str(values.get("model_type", "")).startswith("gemma3")
    if kind not in VLLM_UNSCALED_ROPE and kind not in (None, "default") and isinstance(factor, (int, float)) and not gemma3:
        return int(length * factor), f"`{key}` x RoPE {kind} factor {factor:g}"
    return length, f"`{key}`" + (" (model_max_length overrides the other length keys)" if key == "model_max_length" else "")


def _attribute_map(model_type: Any) -> dict[str, str]:
    """The config class's aliases (GPT-2: max_position_embeddings -> n_positions), {} if unknown."""
    # transformers: already loaded by the light check that resolved these values; only its registry is read
    from transformers import CONFIG_MAPPING

    try:
        return dict(getattr(CONFIG_MAPPING[model_type], "attribute_map", {}) or {})
    except (KeyError, TypeError):
        return {}


def with_aliases(values: dict[str, Any]) -> dict[str, Any]:
    """The values as the engines read them off the config object: the class's ``attribute_map`` aliases
    answer for the names they stand for (GPT-2 and GPT-J: ``num_attention_heads`` is ``n_head``,
    ``num_hidden_layers`` is ``n_layer``), where the values hold the stored name only."""
    amap = _attribute_map(values.get("model_type"))
    out = dict(values)
    for alias, stored in amap.items():
        if alias not in out and stored in values:
            out[alias] = values[stored]
    return out


# vLLM ModelArchConfigConvertor: MLA models size the KV cache by kv_lora_rank + qk_rope_head_dim.
VLLM_MLA_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_mtp", "kimi_k2", "kimi_linear",
                  "longcat_flash", "pangu_ultra_moe", "pangu_ultra_moe_mtp", "glm4_moe_lite", "glm_moe_dsa")
VLLM_KV_KEYS = ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups")


def vllm_shapes(values: dict[str, Any]) -> tuple[int | None, int | None]:
    """vLLM's head size and total KV heads (get_head_size, get_total_num_kv_heads), or None: MLA
    sizes by kv_lora_rank + qk_rope_head_dim; Gemma 4 by its larger global head; Falcon's multi-query
    by one KV head."""
    heads, hidden = values.get("num_attention_heads"), values.get("hidden_size")
    kv = next((values[k] for k in VLLM_KV_KEYS if is_int(values.get(k))), heads if is_int(heads) else None)
    if values.get("multi_query") is True and not values.get("new_decoder_architecture"):
        kv = 1
    model_type = values.get("text_model_type") or values.get("model_type")
    if model_type in VLLM_MLA_TYPES and is_int(values.get("kv_lora_rank")):
        rope = values.get("qk_rope_head_dim")
        return (values["kv_lora_rank"] + rope if is_int(rope) else None), kv
    head = values.get("head_dim") if is_int(values.get("head_dim")) else (
        hidden // heads if is_int(hidden) and is_int(heads) and heads else None)
    if is_int(values.get("global_head_dim")) and is_int(head):
        head = max(head, values["global_head_dim"])
    return head, kv


def sglang_max_len(values: dict[str, Any]) -> tuple[int | None, str]:
    """SGLang's context length: the first length key (read with the class's aliases: GPT-2's
    ``n_positions`` is its ``max_position_embeddings``), times the RoPE factor unless the RoPE
    parameters hold original_max_position_embeddings or the type is llama3. None where SGLang
    re-parses the config with a class of its own, or finds the length in a nested config, which
    these rules do not model."""
    if values.get("model_type") in SGLANG_OWN_CONFIG:
        return None, f"SGLang re-parses {values.get('model_type')} with its own config class (not modelled)"
    kind, rope = _rope(values)
    factor = rope.get("factor", 1) if rope else 1
    if "original_max_position_embeddings" in rope or kind == "llama3" or not isinstance(factor, (int, float)):
        factor = 1
    for key in SGLANG_LEN_KEYS:
        value = values.get(key)
        if value is None:  # getattr on the config: the class's attribute_map aliases count
            value = values.get(_attribute_map(values.get("model_type")).get(key, ""))
        if is_int(value):
            return int(value * factor), f"`{key}`" + (f" x RoPE factor {factor:g}" if factor != 1 else "")
    return None, "no length key at the top level (SGLang may find one in a nested config; not modelled)"


def declared_dtype(raw: dict[str, Any]) -> str | None:
    for where in (raw, raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}):
        for key in ("dtype", "torch_dtype"):
            if isinstance(where.get(key), str) and where[key] in DTYPES:
                return DTYPES[where[key]]
    return None


def _nested_dtype(raw: dict[str, Any], depth: int = 0) -> str | None:
    """The first dtype a nested ``*_config`` states (an omni model's thinker_config.text_config)."""
    for key, value in raw.items():
        if isinstance(value, dict) and key.endswith("config") and depth < 3:
            found = declared_dtype(value) or _nested_dtype(value, depth + 1)
            if found:
                return found
    return None


def served_dtype(spec: EngineSpec, raw: dict[str, Any], weights_dtype: str | None) -> tuple[str | None, str]:
    """The dtype an engine runs a checkpoint in by default (``--dtype auto``), and why."""
    stated = declared_dtype(raw)
    if spec.name == "vllm":
        return _vllm_dtype(spec, raw, stated, weights_dtype)
    gemma = "gemma" in str(raw.get("model_type", ""))
    stated = stated or _nested_dtype(raw)  # SGLang reads the text config's, however deep it sits
    if stated in (None, "float32"):
        to = "bfloat16" if gemma else "float16"
        return to, (f"{stated or 'no dtype'} in config.json: SGLang runs {to} "
                    "(model_config.py _get_and_verify_dtype)")
    return stated, f"config.json's {stated}"


def _vllm_dtype(spec: EngineSpec, raw: dict[str, Any], stated: str | None,
                weights_dtype: str | None) -> tuple[str | None, str]:
    """vLLM's ``_resolve_auto_dtype`` (vllm/config/model.py): float32 runs the platform's first dtype
    the model type allows (float16 first for pooling models); a dtype the model type refuses
    (``_FLOAT16_NOT_SUPPORTED_MODELS``: Gemma 2/3, GLM-4) falls back to that preferred one."""
    archs = _archs(raw)
    facts = registry.data(spec.name, spec.version) or {}
    model_type = raw.get("model_type")
    no_fp16 = (facts.get("float16_not_supported") or {}).get(model_type) if isinstance(model_type, str) else None
    pooling = bool(archs) and archs[0].endswith(VLLM_POOLING_SUFFIXES) and not archs[0].endswith(VLLM_GENERATIVE_SUFFIXES)
    preferred = "float16" if pooling and not no_fp16 else "bfloat16"
    refused = (f"; vLLM {spec.version} drops float16 for model type {model_type!r} (\"{no_fp16}\", "
               "_FLOAT16_NOT_SUPPORTED_MODELS)") if no_fp16 else ""
    source = f"config.json's {stated}" if stated else ("the safetensors headers' " + str(weights_dtype) if weights_dtype else None)
    found = stated or (DTYPES.get(weights_dtype.lower(), weights_dtype) if weights_dtype else None)
    if found is None:
        return None, "no dtype in config.json: read from the safetensors headers at load"
    if found == "float32":
        kind = "a pooling model: vLLM's auto dtype prefers float16" if preferred == "float16" else (
            "vLLM's auto dtype runs bfloat16 (SM80+ GPUs, x86 CPUs)")
        return preferred, f"float32 in {source}, {kind} (vllm/config/model.py _resolve_auto_dtype){refused}"
    if found == "float16" and no_fp16:
        return preferred, (f"{source} is float16, which the model type refuses: vLLM's auto dtype falls back to "
                           f"{preferred} (vllm/config/model.py _resolve_auto_dtype){refused}")
    if not stated:
        return found, "no dtype in config.json: the safetensors headers'"
    return found, source


def _nested_length(raw: dict[str, Any], depth: int = 0) -> bool:
    """Whether a nested ``*_config`` (an omni model's thinker_config.text_config) states a length key."""
    return any(isinstance(v, dict) and k.endswith("config") and depth < 3
               and (any(is_int(v.get(key)) for key in VLLM_LEN_KEYS) or _nested_length(v, depth + 1))
               for k, v in raw.items())


def target_views(spec: EngineSpec, raw: dict[str, Any], values: dict[str, Any], windows: list[int | None],
                 weights_dtype: str | None = None) -> list[EngineView]:
    """One view of a model (target or plain config) by one engine version; ``windows`` are
    transformers' effective per-layer windows (None: full)."""
    values = with_aliases(text_values(values))
    archs = _archs(values) or _archs(raw)
    view = EngineView(spec.shown, spec.transformers, LIGHT, architecture=archs[0] if archs else None)
    if not windows and is_int(values.get("num_hidden_layers")) and not values.get("layer_types"):
        windows = [None] * values["num_hidden_layers"]  # GPT-2's n_layer: no window, every layer full
    view.dtype, view.dtype_why = served_dtype(spec, raw, weights_dtype)
    refused = registry.unserved(spec, raw)
    if refused is not None:
        view.refusal, view.refusal_where = refused
    if spec.name == "vllm":
        # Gemma 4's global_head_dim is read from the file: the resolved text values do not keep it.
        global_head = values.get("global_head_dim") or _get(raw, "text_config", "global_head_dim") or raw.get("global_head_dim")
        view.head_size, view.num_kv_heads = vllm_shapes({**values, "global_head_dim": global_head})
        view.max_model_len, view.max_len_why = vllm_max_len(values)
        if view.max_len_why.startswith("no length key") and _nested_length(raw):
            view.max_model_len, view.max_len_why = None, ("no length key at the top level; vLLM reads the one a "
                                                          "nested config states (not modelled)")
        view.windows, view.windows_why = list(windows), "the model code passes transformers' per-layer windows"
        window = values.get("sliding_window")
        if (not values.get("layer_types") and is_int(window) and window > 0 and view.windows
                and any(w is None for w in view.windows)):
            # No layer_types: CacheConfig.sliding_window is get_sliding_window() (the config's
            # sliding_window by name), and every attention layer given no window of its own takes it,
            # whether or not the model code reads the key (Llama's does not).
            view.windows = [window if w is None else w for w in view.windows]
            view.windows_why = ("the config has no layer_types, so vLLM sets CacheConfig.sliding_window to the "
                                f"config's sliding_window ({window}) and every attention layer without a window "
                                "of its own takes it (engine/arg_utils.py create_engine_config, Attention)")
        if view.architecture in VLLM_OWN_ATTENTION:
            view.windows, view.windows_why = None, (f"vLLM builds {view.architecture}'s compressed attention itself; "
                                                    "which layers slide there is not modelled")
    else:
        view.max_model_len, view.max_len_why = sglang_max_len(values)
        if view.architecture in SGLANG_NO_WINDOW and any(w is not None for w in windows):
            view.windows = [None] * len(windows)
            view.windows_why = (f"SGLang's model file for {view.architecture} never passes sliding_window_size, "
                                "and it is not a hybrid-SWA architecture (load_model_utils.py "
                                "resolve_sliding_window_size)")
        else:
            view.windows, view.windows_why = list(windows), "the model code passes transformers' per-layer windows"
    return [view]


# --- drafters ---------------------------------------------------------------------------------------


def _ints(value: Any) -> list[int] | None:
    return list(value) if isinstance(value, list) and value and all(is_int(i) for i in value) else None


def _get(raw: dict[str, Any], *path: str) -> Any:
    node: Any = raw
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node


def dflash_vllm_aux(raw: dict[str, Any], runner: str, n: int) -> tuple[list[int], str]:
    """The aux ids (target layer + 1) vLLM's V1 or V2 runner feeds a DFlash drafter, and from where.

    Example::

        >>> dflash_vllm_aux({"target_layer_ids": [1, 17, 33]}, "V2", 36)
        ([2, 18, 34], 'reads the top-level `target_layer_ids` [1, 17, 33] (+1)')
        >>> dflash_vllm_aux({"target_layer_ids": [1, 17, 33]}, "V1", 36)[1]
        'never reads a top-level `target_layer_ids`: its default aux ids (2, N//2, N-3)'
    """
    top = _ints(raw.get("eagle_aux_hidden_state_layer_ids"))
    nested = _ints(_get(raw, "eagle_config", "eagle_aux_hidden_state_layer_ids"))
    dflash = _ints(_get(raw, "dflash_config", "target_layer_ids"))
    top_ids = _ints(raw.get("target_layer_ids"))
    if top:
        return top, f"reads `eagle_aux_hidden_state_layer_ids` {top} as aux ids"
    if runner == "V1":
        if nested:
            return nested, f"reads `eagle_config.eagle_aux_hidden_state_layer_ids` {nested}" + (
                " (it overrides `dflash_config.target_layer_ids` in V1)" if dflash else "")
        if dflash:
            return [i + 1 for i in dflash], f"reads `dflash_config.target_layer_ids` {dflash} (+1)"
        why = "never reads a top-level `target_layer_ids`: " if top_ids else ""
        return eagle3_default_aux_ids(n), why + "its default aux ids (2, N//2, N-3)"
    if dflash:
        return [i + 1 for i in dflash], f"reads `dflash_config.target_layer_ids` {dflash} (+1)"
    if top_ids:
        return [i + 1 for i in top_ids], f"reads the top-level `target_layer_ids` {top_ids} (+1)"
    return eagle3_default_aux_ids(n), "its default aux ids (2, N//2, N-3)"


def _draft_layer_windows(values: dict[str, Any], raw: dict[str, Any]) -> tuple[list[int | None], str | None, list[bool]]:
    """vLLM's qwen3_dflash.py per draft layer: sliding where layer_types says so or
    dflash_config.use_swa; the window is dflash_config.swa_window_size or sliding_window."""
    count = values.get("num_hidden_layers") if is_int(values.get("num_hidden_layers")) else 0
    types = values.get("layer_types") if isinstance(values.get("layer_types"), list) else ["full_attention"] * count
    use_swa = _get(raw, "dflash_config", "use_swa") is True
    window = _get(raw, "dflash_config", "swa_window_size") or values.get("sliding_window")
    sliding = [t == "sliding_attention" or use_swa for t in types]
    return [window if s and is_int(window) else None for s in sliding], None, sliding


def drafter_views(spec: EngineSpec, raw: dict[str, Any], values: dict[str, Any], family: str,
                  target: dict[str, Any] | None) -> list[EngineView]:
    """The views of a DFlash or EAGLE-3 drafter by one engine version: per vLLM runner (V1, V2), or
    SGLang's. ``values`` are the drafter's resolved values, ``target`` the target's (None: unknown).
    EAGLE-3 heads get only what DG119 does not already say (the pre-norm last layer)."""
    n = target.get("num_hidden_layers") if target else None
    n = n if is_int(n) else None
    target_arch = (_archs(target) or [None])[0] if target else None
    draft_layers = values.get("num_hidden_layers")
    arch = (_archs(raw) or [None])[0]
    views: list[EngineView] = []
    # A DSpark drafter is served with method "dspark" (its own rename rules): only its model type is judged.
    refused = registry.unserved_draft(spec, raw, family)
    if refused is not None and "DSpark" in str(arch) and not refused[0].startswith("The checkpoint"):
        refused = None
    runners = ("V1", "V2") if spec.name == "vllm" else ("",)
    for runner in runners:
        view = EngineView(spec.shown, spec.transformers, LIGHT, runner=runner, architecture=arch)
        if refused is not None:  # refused at configuration: nothing after it runs
            view.refusal, view.refusal_where = refused
        elif runner == "V1" and "DSpark" in str(arch):  # served with method "dspark", which V1 lacks
            view.refusal = "Model Runner V1 does not support: dspark speculative decoding"
            view.refusal_where = "vllm/config/vllm.py _get_v1_model_runner_unsupported_features, at configuration"
        elif "DSpark" in str(arch) and raw.get("model_type") == "qwen3" and not is_int(raw.get("markov_rank")):
            # vLLM rewrites it to Qwen3DSparkModel, whose Markov head reads config.markov_rank at the top level
            view.refusal = "'Qwen3Config' object has no attribute 'markov_rank'"
            view.refusal_where = ("vllm/model_executor/models/qwen3_dspark.py reads `markov_rank` at the top level"
                                  + (" (this drafter states it under `dflash_config`)"
                                     if is_int(_get(raw, "dflash_config", "markov_rank")) else "") + ", at model build")
        elif family == "dflash":
            _dflash_view(view, spec, raw, values, n, target, target_arch, draft_layers)
        elif family == "eagle3" and n is not None:
            _eagle3_view(view, spec, raw, n, runner)
        views.append(view)
    return views


def _dflash_view(view: EngineView, spec: EngineSpec, raw: dict[str, Any], values: dict[str, Any], n: int | None,
                 target: dict[str, Any] | None, target_arch: str | None, draft_layers: Any) -> None:
    windows, _, sliding = _draft_layer_windows(values, raw)
    if spec.name == "vllm":
        # V1's list is checked when the config is made, before the model is built (VllmConfig).
        if view.runner == "V1" and (reason := dflash_v1_refusal(values.get("layer_types"), view.architecture)):
            view.refusal = f"Model Runner V1 does not support: {reason}"
            view.refusal_where = "vllm/config/vllm.py _get_v1_model_runner_unsupported_features, at configuration"
        elif any(sliding) and not any(w is not None for w, s in zip(windows, sliding) if s):
            view.refusal = "DFlash sliding attention requires a window size"
            view.refusal_where = "vllm/model_executor/models/qwen3_dflash.py _resolve_layer_attention, at model build"
        # Full layers pass no per-layer window, so Attention falls back to cache_config.sliding_window:
        # the target's model-level window, set only when its layer_types are absent or all sliding.
        target_window = target.get("sliding_window") if target else None
        target_types = target.get("layer_types") if target else None
        if is_int(target_window) and (not isinstance(target_types, list)
                                      or all(t == "sliding_attention" for t in target_types)):
            windows = [w if s else target_window for w, s in zip(windows, sliding)]
            view.windows_why = (f"full draft layers fall back to the target's model-level window {target_window} "
                                "(Attention: per-layer window, else cache_config.sliding_window)")
        view.windows = windows
        if n is not None:
            aux, why = dflash_vllm_aux(raw, view.runner, n)
            view.layers_read, view.layers_why = [i - 1 for i in aux], why
            if why.endswith("(2, N//2, N-3)") and is_int(draft_layers) and draft_layers != 3 \
                    and not _ints(raw.get("target_layer_ids")) and view.refusal is None:
                view.refusal = (f"fc is sized for {draft_layers} target layers (the draft layer count) but the "
                                "runner feeds 3")
                view.refusal_where = "not an engine message: a shape error at the first forward (qwen3_dflash.py fc)"
            if n - 1 in view.layers_read:
                view.notes.append("prenorm")
        return
    # SGLang 0.5.23
    if any(sliding) and not any(w is not None for w, s in zip(windows, sliding) if s):
        view.refusal = "DFLASH sliding_attention layers require config.sliding_window"
        view.refusal_where = "python/sglang/srt/models/dflash.py, at model build"
    view.windows = windows
    if n is None:
        return
    ids = _ints(_get(raw, "dflash_config", "target_layer_ids")) or _ints(raw.get("target_layer_ids"))
    if ids is None and is_int(draft_layers):
        ids, view.layers_why = build_target_layer_ids(n, draft_layers), (
            f"no ids: z-lab's build_target_layer_ids({n}, {draft_layers}) (dflash_utils.py)")
    elif ids is not None:
        view.layers_why = "reads `dflash_config.target_layer_ids`, else the top-level `target_layer_ids`"
    if ids is None:
        return
    view.layers_read = ids
    if any(i >= n or i < 0 for i in ids) and view.refusal is None:
        view.refusal = "DFLASH target_layer_ids contains an out-of-range layer id."
        view.refusal_where = "python/sglang/srt/speculative/dflash_utils.py resolve_target_layer_ids"
    elif n - 1 in ids:
        view.notes.append("uncaptured" if target_arch in SGLANG_CAPTURE_BEFORE else "prenorm")


def _eagle3_view(view: EngineView, spec: EngineSpec, raw: dict[str, Any], n: int, runner: str) -> None:
    top = _ints(raw.get("eagle_aux_hidden_state_layer_ids"))
    nested = _ints(_get(raw, "eagle_config", "eagle_aux_hidden_state_layer_ids"))
    if spec.name == "vllm":
        aux = top or (nested if runner == "V1" else None) or eagle3_default_aux_ids(n)
        view.layers_read = [i - 1 for i in aux]
        if n in aux:
            view.notes.append("prenorm")
