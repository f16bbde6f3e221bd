"""An MTP drafter shipped as its own checkpoint beside the target: Gemma 4's assistant
(``Gemma4AssistantForCausalLM``), which vLLM 0.32 serves with ``"method": "mtp"`` and the assistant as
the speculative ``model``. What is wrong with its tensors, read from config.json and the safetensors
headers only (no torch), so that ``draftguard accept`` names the cause ``mtp-weights`` whichever backend
ran: a tensor the assistant's config calls for that the checkpoint lacks (dropped at save; vLLM 0.32
refuses to load it, the reference runs it as zeros), or one stored quantized where config.json declares
no ``quantization_config``. The forward: ``runner/mtp_gemma4.py``.

In: an assistant folder (its config.json and safetensors headers).
Out: ``assistant_faults`` (one sentence each) and ``assistant_tensors`` (the names its config calls for).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from draftguard.check.drafter.detect import is_mtp_assistant
from draftguard.runner.mtp_weights import FULL_PRECISION, _headers, read_config
from draftguard.snapshot import BadInput

LAYER_TENSORS = ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm", "self_attn.q_norm", "self_attn.q_proj", "self_attn.o_proj",
                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")


def assistant_tensors(raw: dict[str, Any]) -> list[str]:
    """The weights a Gemma 4 assistant's config calls for (vLLM's ``gemma4_mtp`` parameters, by the
    checkpoint's names; ``lm_head`` is tied to ``model.embed_tokens``, ``layer_scalar`` a buffer).

    Example::

        >>> assistant_tensors({"model_type": "gemma4_assistant", "text_config": {"num_hidden_layers": 1}})[:2]
        ['model.embed_tokens.weight', 'model.norm.weight']
    """
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    layers = text.get("num_hidden_layers", 4)
    names = ["model.embed_tokens.weight", "model.norm.weight", "pre_projection.weight", "post_projection.weight"]
    names += [f"model.layers.{i}.{t}.weight" for i in range(int(layers)) for t in LAYER_TENSORS]
    if raw.get("use_ordered_embeddings"):
        names += ["masked_embedding.centroids.weight", "masked_embedding.token_ordering"]
    if raw.get("tie_word_embeddings") is False:
        names.append("lm_head.weight")
    return names


def assistant_faults(folder: str | Path) -> list[str]:
    """What is wrong with an assistant's tensors, one sentence each; empty for a whole one.

    Example::

        >>> assistant_faults("tests/fixtures/vllm-models/target")
        Traceback (most recent call last):
        ...
        draftguard.errors.BadInput: tests/fixtures/vllm-models/target/config.json: model_type 'qwen3' is no MTP assistant (gemma4_assistant)
    """
    folder = Path(folder)
    raw = read_config(folder)
    if not is_mtp_assistant(raw):
        where = f"{folder}/config.json"
        raise BadInput(f"{where}: model_type {raw.get('model_type')!r} is no MTP assistant (gemma4_assistant)",
                       file=where, key="model_type")
    dtypes = {k: v[0] for k, v in _headers(folder).items()}
    lacking = [n for n in assistant_tensors(raw) if n not in dtypes]
    faults = []
    if lacking:
        shown = ", ".join(f"`{n}`" for n in lacking[:3]) + (f" and {len(lacking) - 3} more" if len(lacking) > 3 else "")
        faults.append(f"the assistant's weights lack {shown}: dropped at save (vLLM 0.32 refuses to load it; the "
                      "reference runs them as zeros)")
    if "quantization_config" not in raw:
        faults += [f"`{n}` is stored {d}, but config.json declares no quantization_config (the reference reads its raw "
                   "values)" for n, d in sorted(dtypes.items()) if n.endswith("weight") and d not in FULL_PRECISION]
    return faults


__all__ = ["assistant_faults", "assistant_tensors"]
