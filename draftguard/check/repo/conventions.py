"""DG407: MoE router settings that a file leaves out, filled in by the class with a default its family's
published checkpoints never use.

The conventions are what every published config of the family in tests/data/real-configs states
(``tests/test_repo_rules.py`` keeps the table in step with the corpus): a key is listed only where all
of them state the same value. The rule speaks only when the file omits the key and the class's default
differs, so a file that states any value, even another one, is its author's choice and is left alone.

In: the raw config.json (dict) and the values its class resolved; ``emit`` from ``check_repo``.
Out: findings, through ``emit``.
"""

from __future__ import annotations

from typing import Any, Callable

from draftguard.check.findings import ABSENT, is_int, show

# model_type -> {router key: the value every published config of the family states}
CONVENTIONS: dict[str, dict[str, Any]] = {
    # Qwen3-30B-A3B, -235B-A22B, -Coder-480B-A35B and their FP8/NVFP4 releases all state true;
    # Qwen3MoeConfig defaults to false (transformers 4.52 to 5.24), so a fine-tune that drops the key
    # routes with unnormalized top-k weights in transformers, vLLM and SGLang alike.
    "qwen3_moe": {"norm_topk_prob": True},
    "qwen2_moe": {"norm_topk_prob": False},
    "deepseek_v3": {"norm_topk_prob": True, "topk_method": "noaux_tc", "scoring_func": "sigmoid"},
    "deepseek_v32": {"norm_topk_prob": True, "topk_method": "noaux_tc", "scoring_func": "sigmoid"},
    "kimi_k2": {"norm_topk_prob": True, "topk_method": "noaux_tc", "scoring_func": "sigmoid"},
    "glm_moe_dsa": {"norm_topk_prob": True, "topk_method": "noaux_tc", "scoring_func": "sigmoid",
                    "routed_scaling_factor": 2.5},
}


# model_type -> the router selection its class fills in when the file leaves `topk_method` out, and
# what that selection reads. transformers' DeepseekV2Config defaults to "greedy", and its router (and
# the engines', which key the group-limited path and the correction bias on topk_method) then takes
# the top-k of a softmax over all experts: n_group, topk_group and e_score_correction_bias unread.
CLASS_ROUTERS: dict[str, dict[str, Any]] = {
    "deepseek_v2": {"topk_method": "greedy", "scoring_func": "softmax"},
}


def _nodes(raw: dict[str, Any], values: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    nodes = [(raw, values, "")]
    text, resolved = raw.get("text_config"), values.get("text_config")
    if isinstance(resolved, dict) and isinstance(resolved.get("values"), dict):
        resolved = resolved["values"]
    if isinstance(text, dict):
        nodes.append((text, resolved if isinstance(resolved, dict) else {}, "text_config."))
    return nodes


def router_class_defaults(raw: dict[str, Any], values: dict[str, Any], tensors: frozenset[str] | None,
                          emit: Callable[..., None]) -> None:
    """DG411: a file that states group-limited routing (``n_group`` > 1, ``topk_group`` below it) or
    ships a correction bias, under a class whose default selection reads neither (a DeepSeek-V3
    export labelled ``deepseek_v2`` without ``topk_method``: sgl-project/sglang#35160)."""
    for node, got, prefix in _nodes(raw, values):
        family = node.get("model_type") if isinstance(node.get("model_type"), str) else ""
        defaults = CLASS_ROUTERS.get(family)
        if not defaults or "topk_method" in node:
            continue
        method = got.get("topk_method", defaults["topk_method"])
        if method != defaults["topk_method"]:
            continue
        groups, top = node.get("n_group"), node.get("topk_group")
        grouped = is_int(groups) and groups > 1 and (not is_int(top) or top < groups)
        bias = sorted(n for n in tensors or () if n.endswith("e_score_correction_bias"))
        if not grouped and not bias:
            continue
        scoring = node.get("scoring_func", ABSENT)
        reads = []
        if grouped:
            reads.append(f"`{prefix}n_group` = {groups} and `{prefix}topk_group` = {show(top)}")
        if bias:
            reads.append(f"the checkpoint's correction bias (`{bias[0]}`)")
        v3 = '"topk_method": "noaux_tc"' + (', "scoring_func": "sigmoid"' if scoring is ABSENT else "")
        fix = (f"{v3} (DeepSeek-V3's values)" if bias or scoring == "sigmoid" else
               f"{v3} (DeepSeek-V3's values), or \"topk_method\": \"group_limited_greedy\" for a DeepSeek-V2 model")
        emit("DG411", prefix + "topk_method", ABSENT, method,
             f"`{prefix}topk_method` is not in config.json, so the {family} class fills in {show(method)}"
             f"{'' if scoring is not ABSENT else ' and scores with ' + show(defaults['scoring_func'])}: the router "
             f"takes the top-k of a softmax over all experts and reads none of {' and '.join(reads)}. The file "
             "describes group-limited routing (a DeepSeek-V3-architecture export labelled "
             f"{family}); transformers, vLLM and SGLang key the group selection and the correction bias on "
             "topk_method, so every token goes to other experts than in training and the model serves garbage "
             f"(sgl-project/sglang#35160). Fix: add {fix}, or label the file "
             "\"model_type\": \"deepseek_v3\" if it is one.",
             line_key=prefix + "model_type" if prefix else "model_type")


def router_defaults(raw: dict[str, Any], values: dict[str, Any], emit: Callable[..., None]) -> None:
    nodes = [(raw, values, "")]
    text, resolved = raw.get("text_config"), values.get("text_config")
    if isinstance(resolved, dict) and isinstance(resolved.get("values"), dict):
        resolved = resolved["values"]  # a nested config's node
    if isinstance(text, dict) and isinstance(resolved, dict):
        nodes.append((text, resolved, "text_config."))
    for node, got, prefix in nodes:
        family = node.get("model_type") if isinstance(node.get("model_type"), str) else None
        for key, expected in CONVENTIONS.get(family or "", {}).items():
            if key in node or key not in got or got[key] == expected or got[key] is None:
                continue
            emit("DG407", prefix + key, ABSENT, got[key],
                 f"`{prefix}{key}` is not in config.json, so the class fills in {show(got[key])}, but every "
                 f"published {family} checkpoint states {show(expected)}: the router "
                 f"{'renormalizes' if key == 'norm_topk_prob' and expected else 'weights'} its top-k experts "
                 "the way the model was trained only with that value. transformers, vLLM and SGLang all read "
                 f"the key from config.json (sgl-project/sglang PR #35160), so the model routes tokens with "
                 f"other expert weights than in training and its outputs degrade. Fix: add \"{key}\": "
                 f"{show(expected)} (or the value the model was trained with).",
                 line_key=prefix + "model_type" if prefix else "model_type")
