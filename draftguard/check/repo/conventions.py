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

from draftguard.check.findings import ABSENT, show

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
