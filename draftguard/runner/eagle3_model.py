"""An EAGLE-3 head as a torch module, in the published checkpoint format vLLM loads with
``"method": "eagle3"`` (``LlamaForCausalLMEagle3``; SpecForge's and the speculators library's layout).

The format, as vLLM 0.32's ``llama_eagle3.py`` reads it:

- config: a LLaMA decoder config with ``num_hidden_layers`` 1, ``draft_vocab_size`` (the reduced
  draft vocabulary), the aux layer ids at the top level (``eagle_aux_hidden_state_layer_ids``) or in
  ``eagle_config`` (else the engines' default (2, N//2, N-3) for a target of N layers), and
  optionally ``target_hidden_size``;
- or the speculators library's layout (``speculators_model_type`` "eagle3"): the layer's keys in
  ``transformer_layer_config``, read as vLLM's speculators adapter reads them (``_speculators_spec``),
  and the decoder layer's weights under ``layers.0.`` instead of ``midlayer.`` (``engine_names``);
- weights: ``fc`` (len(ids) x target hidden -> hidden), ``midlayer.{input_layernorm, hidden_norm,
  self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}`` (q/k/v take
  2 x hidden: the normed token embedding beside the normed hidden state), ``norm``, ``lm_head``
  (draft vocabulary), ``d2t`` (draft id -> target id offset: target = draft + d2t[draft]) and ``t2d``
  (which target ids the draft vocabulary holds); no embeddings: the target's are shared (a head's
  own, where they differ from the target's, are used, as vLLM keeps them);
- the norm variants vLLM builds: ``norm_before_fc`` (``input_norm`` over the concatenated aux
  features), ``fc_norm`` (``fc_norm.{i}``, one per aux feature), ``norm_output`` (the next chain step
  reads the normed output);
- aux id k is the target's residual stream after layer k - 1 (0: the embeddings); id N is the last
  layer's output before the final norm, as vLLM captures it (``aux_features``);
- the layer is LLaMA's, or Qwen3's (q/k norms) where vLLM builds ``Eagle3Qwen3ForCausalLM``, with
  plain or scaled RoPE (``runner/eagle3_layer.py``); a head whose ``eagle_config`` says
  ``use_aux_hidden_state: false`` has no ``fc`` (vLLM drops the tensor) and reads the target's last
  normed hidden state (``head_features``).

One step of the head at position i reads the token at i + 1 and a hidden state: ``fc`` of the
target's features at i in the first pass, the head's own pre-norm output afterwards (chain drafting,
``runner/eagle3.py``).

In: a head folder (config.json, model.safetensors) and the target model.
Out: ``Eagle3Spec``, ``Eagle3Head`` on the target's device and dtype (``load_eagle3``), and
``aux_features``; a head that does not fit raises ``DrafterMismatch``, one without weights
``MissingWeights``. Needs the ``runner`` extra (torch).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from draftguard.check.drafter.detect import mtp_model_type_refusal
from draftguard.errors import DrafterMismatch, MissingWeights
from draftguard.runner.dflash_model import _local_folder, _read_weights, text_config
from draftguard.runner.eagle3_layer import MidLayer, RMSNorm, layer_kind, rope_parameters, rope_tables
from draftguard.runner.eagle3_mla import MlaAttention, MlaDims, fc_inputs, mla_dims
from draftguard.snapshot import BadInput, parse_json_object

IDS_KEY = "eagle_aux_hidden_state_layer_ids"
# Targets vLLM 0.32 runs with deepseek_v2.py's DeepseekV2Model, whose aux capture adds a residual that is None before
# layer 0 (other models' _maybe_add_hidden_state take the hidden state alone there).
DEEPSEEK_MODEL_TARGETS = ("DeepseekForCausalLM", "DeepseekV2ForCausalLM", "DeepseekV3ForCausalLM",
                          "MistralLarge3ForCausalLM")


def default_aux_ids(n: int) -> list[int]:
    """The engines' aux ids for a head that states none: (2, N//2, N-3) (vLLM's
    ``get_eagle3_default_aux_hidden_state_layers``). Example: ``default_aux_ids(3) == [2, 1, 0]``."""
    return [2, n // 2, n - 3]


@dataclass
class Eagle3Spec:
    """What the head is built from: shapes, the aux ids it reads (``ids_key`` says where they came
    from: the top level, ``eagle_config`` or the engines' default) and the draft vocabulary size."""

    source: str
    hidden_size: int
    target_hidden_size: int
    intermediate_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope: dict[str, Any]  # the RoPE parameters, standardised (``eagle3_layer.rope_parameters``)
    attention_bias: bool
    vocab_size: int
    draft_vocab_size: int
    aux_ids: list[int]
    ids_key: str
    norm_before_residual: bool = False
    norm_before_fc: bool = False  # one RMSNorm over the concatenated aux features before fc (``input_norm``)
    fc_norm: bool = False  # one RMSNorm per aux feature before fc (``fc_norm.{i}``)
    norm_output: bool = False  # the next chain step reads the normed output, not the pre-norm one
    sliding_window: int | None = None  # the layer's window when ``layer_types`` calls it sliding, as vLLM builds it
    layer_kind: str = "llama"  # the decoder layer vLLM builds: "llama" or "qwen3" (``eagle3_layer.layer_kind``)
    use_aux: bool = True  # false: no fc; the head reads the target's last (normed) hidden state, as EAGLE-1
    inv_freq: torch.Tensor | None = None  # RoPE's inverse frequencies and cos/sin factor (``rope_tables``)
    rope_factor: float = 1.0
    max_position: int = 8192  # the layer's max_position_embeddings (LongRoPE's factor; vLLM's default 8192)
    mla: MlaDims | None = None  # a DeepSeek head's MLA dims (``layer_kind`` "mla", ``runner/eagle3_mla.py``)
    fc_inputs: int | None = None  # aux states fc is sized for, where vLLM does not size it by the ids (MLA heads)


def read_eagle3_spec(folder: str | Path, target_layers: int) -> Eagle3Spec:
    """Read a head's config.json. The ids are read as vLLM's V1 runner reads them: the top-level
    list, else ``eagle_config``'s, else the default for ``target_layers``.

    Example::

        >>> read_eagle3_spec("tests/fixtures/vllm-models/eagle3", 3).aux_ids
        [1, 2, 3]
    """
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise BadInput(f"{path}: no config.json in the drafter folder", file=str(path))
    raw = parse_json_object(path.read_bytes(), str(path))
    if raw.get("speculators_model_type") is not None:
        return _speculators_spec(raw, path, target_layers)
    refusal = mtp_model_type_refusal(raw.get("model_type"))
    if refusal:  # vLLM builds its MTP model for such a draft and fails
        raise BadInput(f"{path}: `model_type`: {refusal}", file=str(path), key="model_type")
    layers = raw.get("transformer_layer_config") if isinstance(raw.get("transformer_layer_config"), dict) else raw
    eagle = raw.get("eagle_config") if isinstance(raw.get("eagle_config"), dict) else {}
    if raw.get(IDS_KEY) is not None:
        ids, key = raw[IDS_KEY], IDS_KEY
    elif eagle.get(IDS_KEY) is not None:
        ids, key = eagle[IDS_KEY], f"eagle_config.{IDS_KEY}"
    elif raw.get("aux_hidden_state_layer_ids") is not None:
        ids, key = raw["aux_hidden_state_layer_ids"], "aux_hidden_state_layer_ids"
    else:
        ids, key = default_aux_ids(target_layers), "the engines' default (2, N//2, N-3)"
    _check_ids(path, ids, key)
    spec = _spec(raw, layers, path, ids, key, norm_before_residual=bool(raw.get("norm_before_residual", False)))
    spec.layer_kind, spec.use_aux = layer_kind(raw, layers, False), _use_aux(path, eagle, "eagle_config.")
    if spec.layer_kind == "mla":  # deepseek_eagle3.py: MLA attention, no input_norm, fc sized its own way
        spec.mla, spec.fc_inputs = mla_dims(layers, path, spec.max_position), fc_inputs(raw)
    # As vLLM's llama_eagle3.py reads them: norm_before_fc from eagle_config first, the others top-level.
    spec.norm_before_fc = spec.mla is None and bool(eagle.get("norm_before_fc", raw.get("norm_before_fc", False)))
    spec.fc_norm, spec.norm_output = bool(raw.get("fc_norm", False)), bool(raw.get("norm_output", False))
    return spec


def _speculators_spec(raw: dict[str, Any], path: Path, target_layers: int) -> Eagle3Spec:
    """A speculators-format head (``speculators_model_type`` "eagle3"), read as vLLM 0.32's
    ``SpeculatorsConfig`` reads it (``transformers_utils/configs/speculators``): the layer's keys from
    ``transformer_layer_config`` alone; ``draft_vocab_size``, ``target_hidden_size`` and the aux ids
    from the top level; ``norm_before_residual`` true unless the file says false (its default there,
    where the SpecForge layout defaults to false)."""
    kind = raw.get("speculators_model_type")
    if kind != "eagle3":
        raise BadInput(f"{path}: `speculators_model_type` is {kind!r}; the reference runs speculators `eagle3` heads "
                       "as EAGLE-3", file=str(path), key="speculators_model_type")
    layers = raw.get("transformer_layer_config")
    if not isinstance(layers, dict):
        raise BadInput(f"{path}: a speculators head needs `transformer_layer_config` (the decoder layer's config)",
                       file=str(path), key="transformer_layer_config")
    layer_type = layers.get("model_type", "llama")
    if layer_type not in ("llama", "qwen3"):
        raise BadInput(f"{path}: `transformer_layer_config.model_type` is {layer_type!r}; vLLM's speculators adapter "
                       "builds llama and qwen3 EAGLE-3 heads only (\"Unsupported model_type\"), and so does the "
                       "reference", file=str(path), key="transformer_layer_config.model_type")
    if raw.get(IDS_KEY):  # vLLM copies the list only when it is non-empty
        ids, key = raw[IDS_KEY], IDS_KEY
    else:
        ids, key = default_aux_ids(target_layers), "the engines' default (2, N//2, N-3)"
    _check_ids(path, ids, key)
    spec = _spec(raw, layers, path, ids, key, norm_before_residual=bool(raw.get("norm_before_residual", True)),
                 top_level=False)
    eagle = layers.get("eagle_config") if isinstance(layers.get("eagle_config"), dict) else {}
    spec.layer_kind = layer_kind(raw, layers, True)
    spec.use_aux = _use_aux(path, eagle, "transformer_layer_config.eagle_config.")
    # vLLM's update_eagle3 copies these from the top level, each false unless stated.
    spec.norm_before_fc, spec.fc_norm = bool(raw.get("norm_before_fc", False)), bool(raw.get("fc_norm", False))
    spec.norm_output = bool(raw.get("norm_output", False))
    return spec


def _use_aux(path: Path, eagle: dict[str, Any], where: str) -> bool:
    """Whether the head reads the target's aux features: ``eagle_config.use_aux_hidden_state``, true
    unless stated, and read there only, as vLLM reads it (``llama_eagle3.py``, ``qwen3_eagle3.py`` and
    the proposer's ``_get_eagle3_use_aux_hidden_state_from_config``; a top-level key is never read).
    False: no ``fc``, and vLLM's V1 runner feeds the target's last hidden state (after its final norm)."""
    value = eagle.get("use_aux_hidden_state", True)
    if not isinstance(value, bool):
        raise BadInput(f"{path}: `{where}use_aux_hidden_state` must be true or false, got {value!r}", file=str(path),
                       key=f"{where}use_aux_hidden_state")
    return value


def _check_ids(path: Path, ids: Any, key: str) -> None:
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise BadInput(f"{path}: `{key}` must be a non-empty list of ints, got {ids!r}", file=str(path), key=key)


def _spec(raw: dict[str, Any], layers: dict[str, Any], path: Path, ids: list[int], key: str, *,
          norm_before_residual: bool, top_level: bool = True) -> Eagle3Spec:
    """The spec from the layer's keys (``layers``; with ``top_level``, the file's top level fills in
    what they lack) and the head's own top-level keys."""

    def num(name: str, default: Any = None) -> Any:
        value = layers.get(name, raw.get(name, default) if top_level else default)
        if value is None:
            where = name if top_level or layers is raw else f"transformer_layer_config.{name}"
            raise BadInput(f"{path}: `{where}` is missing; an EAGLE-3 head must set it", file=str(path), key=where)
        return value

    hidden, heads = int(num("hidden_size")), int(num("num_attention_heads"))
    where = "" if layers is raw else "transformer_layer_config."
    rope = rope_parameters(layers if not top_level else {**raw, **layers}, path, where)
    head_dim = int(layers.get("head_dim") or hidden // heads)
    max_position = int(layers.get("max_position_embeddings") or 8192)
    inv_freq, factor = rope_tables(rope, head_dim, max_position, path, where)
    vocab = int(num("vocab_size"))
    return Eagle3Spec(
        source=str(path.parent), hidden_size=hidden, target_hidden_size=int(raw.get("target_hidden_size") or hidden),
        intermediate_size=int(num("intermediate_size")), num_heads=heads,
        num_kv_heads=int(num("num_key_value_heads", heads)), head_dim=head_dim,
        rms_norm_eps=float(num("rms_norm_eps", 1e-6)), rope=rope, inv_freq=inv_freq, rope_factor=factor,
        attention_bias=bool(layers.get("attention_bias", False)), vocab_size=vocab,
        draft_vocab_size=int(raw.get("draft_vocab_size") or vocab), aux_ids=list(ids), ids_key=key,
        norm_before_residual=norm_before_residual, sliding_window=_window(layers), max_position=max_position,
    )


def _window(layers: dict[str, Any]) -> int | None:
    """The head's window as vLLM's LlamaAttention builds it: ``sliding_window`` when ``layer_types``
    names its one layer (index 0 of the draft's layers) ``sliding_attention``, else none."""
    types = layers.get("layer_types")
    window = layers.get("sliding_window")
    if isinstance(types, list) and types and types[0] == "sliding_attention" and isinstance(window, int) and window > 0:
        return window
    return None


_RMSNorm = RMSNorm  # the name mtp_model imports


class Eagle3Head(nn.Module):
    """The head. ``forward(hidden, embeds, positions)`` runs the one layer causally over a whole
    sequence (no cache: the reference recomputes, which is exact) and returns the draft-vocabulary
    logits and the pre-norm output that feeds the next chain step. ``draft_to_target`` maps a draft
    id to the target's."""

    def __init__(self, spec: Eagle3Spec):
        super().__init__()
        self.spec = spec
        if spec.use_aux:  # vLLM builds fc only then, and drops a checkpoint's fc.* otherwise
            self.fc = nn.Linear((spec.fc_inputs or len(spec.aux_ids)) * spec.target_hidden_size, spec.hidden_size,
                                bias=False)
        if spec.norm_before_fc:
            self.input_norm = _RMSNorm(len(spec.aux_ids) * spec.target_hidden_size, spec.rms_norm_eps)
        if spec.fc_norm:
            self.fc_norm = nn.ModuleList([_RMSNorm(spec.target_hidden_size, spec.rms_norm_eps) for _ in spec.aux_ids])
        self.midlayer = MidLayer(spec)
        if spec.mla is not None:
            self.midlayer.self_attn = MlaAttention(spec.mla, 2 * spec.hidden_size, spec.hidden_size, spec.rms_norm_eps)
        self.norm = _RMSNorm(spec.hidden_size, spec.rms_norm_eps)
        self.lm_head = nn.Linear(spec.hidden_size, spec.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(spec.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.ones(spec.vocab_size, dtype=torch.bool))
        # The head's own token embeddings, set by load_eagle3 only when its checkpoint holds ones that
        # differ from the target's (vLLM keeps them then); None: the target's are shared.
        self.own_embed: nn.Embedding | None = None

    def forward(self, hidden: torch.Tensor, embeds: torch.Tensor, positions: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        layer = self.midlayer
        e = layer.input_layernorm(embeds)
        if self.spec.norm_before_residual:
            hidden = layer.hidden_norm(hidden)
            residual = hidden
        else:
            residual, hidden = hidden, layer.hidden_norm(hidden)
        x = layer.self_attn(torch.cat([e, hidden], -1), positions) + residual
        pre = layer.mlp(layer.post_attention_layernorm(x)) + x
        normed = self.norm(pre)
        return self.lm_head(normed), normed if self.spec.norm_output else pre

    def combine(self, features: torch.Tensor) -> torch.Tensor:
        """The target's aux features into the head's width (vLLM's ``combine_hidden_states``): the
        optional norm over all of them, then the optional norm of each, then ``fc``; a head without aux
        features takes the target's hidden state as it is."""
        if not self.spec.use_aux:
            return features
        if self.spec.norm_before_fc:
            features = self.input_norm(features)
        if self.spec.fc_norm:
            chunks = features.chunk(len(self.spec.aux_ids), dim=-1)
            features = torch.cat([norm(c) for norm, c in zip(self.fc_norm, chunks)], -1)
        return self.fc(features)

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]


def head_features(head: Eagle3Head, target: nn.Module, out: Any, prenorm_last: torch.Tensor) -> torch.Tensor:
    """What vLLM's V1 runner feeds the head from a target forward: its aux features (``aux_features``),
    or, for a head without them (``use_aux_hidden_state`` false), the last hidden state after the
    target's final norm (the model's output, ``hidden_states[N]`` in transformers). A head with this
    interface but its own spec (``MtpHead``) states its aux ids."""
    if not getattr(head.spec, "use_aux", True):
        return out.hidden_states[-1]
    return aux_features(target, out, head.spec.aux_ids, prenorm_last)


def aux_features(target: nn.Module, out: Any, ids: Sequence[int], prenorm_last: torch.Tensor) -> torch.Tensor:
    """The target's features at aux ids ``ids`` from a forward with ``output_hidden_states``: index
    k < N is ``hidden_states[k]``; N is the last layer's output before the final norm (``prenorm_last``,
    which transformers' ``hidden_states[N]`` replaces by the normed one). In ascending order whatever
    the list's order: vLLM appends each aux state as its layer runs (``_maybe_add_hidden_state``), so
    the default (2, 1, 0) of a 3-layer target feeds layers 0, 1, 2 in that order."""
    n = len(out.hidden_states) - 1
    return torch.cat([prenorm_last if i == n else out.hidden_states[i] for i in sorted(ids)], -1)


class PrenormHook:
    """Keeps the input of the target's final norm (the last layer's pre-norm output) on each forward."""

    def __init__(self, target: nn.Module):
        base = getattr(target, "model", target)
        norm = getattr(base, "norm", None) or getattr(base, "norm_f", None)  # Nemotron-H: ``norm_f``
        if norm is None:
            raise BadInput("the reference runs EAGLE-3 on targets with a `model.norm` (LLaMA/Qwen-style) only")
        self.value: torch.Tensor | None = None
        self.handle = norm.register_forward_hook(self._keep)

    def _keep(self, _module: nn.Module, args: tuple[Any, ...], _out: Any) -> None:
        self.value = args[0]


# Tensors vLLM runs a head without, each at its initial value, which the module's own matches: its
# loader (``Eagle3LlamaForCausalLM.load_weights``) returns no set of loaded names, so nothing checks
# for missing ones. ``d2t`` stays zeros (draft id i is read as target id i), ``t2d`` is never read, and
# an RMSNorm's weight stays ones. A missing projection would run on uninitialised memory there.
ENGINE_DEFAULTS = frozenset({"d2t", "t2d", "norm.weight", "midlayer.input_layernorm.weight",
                             "midlayer.hidden_norm.weight", "midlayer.post_attention_layernorm.weight"})


def engine_names(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The head's tensors under the names this module uses. The speculators library saves the decoder
    layer as ``layers.0.*`` where SpecForge saves ``midlayer.*``; vLLM loads both into the same layer
    (``LlamaModel.hf_to_vllm_mapper``: ``midlayer.`` -> ``layers.0.``), whatever the config's format.

    Example: ``engine_names({"layers.0.mlp.up_proj.weight": w})`` is ``{"midlayer.mlp.up_proj.weight": w}``."""
    return {"midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k: v for k, v in weights.items()}


def engine_default_notes(name: str) -> list[str]:
    """What a head's checkpoint lacks that vLLM runs at its initial value (``ENGINE_DEFAULTS``), one
    note each, for the result beside the τ; [] for a head that is no local folder. Reads the
    safetensors headers only.

    Example: ``engine_default_notes("tests/fixtures/vllm-models/eagle3-no-d2t")`` names ``d2t``."""
    folder = Path(name)
    try:
        spec = read_eagle3_spec(folder, 3)
        names = engine_names(dict.fromkeys(_tensor_names(folder)))
    except (BadInput, OSError, ValueError):
        return []
    notes = []
    if "d2t" not in names and spec.draft_vocab_size != spec.vocab_size:
        notes.append(f"{folder}: the weights have no `d2t`; run as vLLM runs them, with the map at zeros, so draft "
                     f"id i (of {spec.draft_vocab_size}) is drafted as target id i")
    expected = ENGINE_DEFAULTS - {"d2t", "t2d"}
    if spec.mla is not None:  # the MLA layer's latent norms, ones in vLLM too
        expected |= {"midlayer.self_attn.kv_a_layernorm.weight", "midlayer.self_attn.q_a_layernorm.weight"}
    norms = sorted(k for k in expected if k not in names)
    if norms:
        notes.append(f"{folder}: the weights have no {', '.join(f'`{k}`' for k in norms)}; run as vLLM runs them, "
                     "with each norm's weight at ones")
    return notes


def _tensor_names(folder: Path) -> list[str]:
    from safetensors import safe_open  # safetensors: the runner extra only

    single, index = folder / "model.safetensors", folder / "model.safetensors.index.json"
    if single.is_file():
        with safe_open(str(single), "pt") as f:
            return list(f.keys())
    if index.is_file():
        return list(json.loads(index.read_text())["weight_map"])
    return []


def _own_embeddings(module: Eagle3Head, own: torch.Tensor | None, target: nn.Module, folder: Path) -> None:
    """vLLM's proposer shares the target's embeddings with a head whose checkpoint has none, or has
    ones equal to the target's (``_maybe_share_embeddings``), and keeps the head's own otherwise: so
    does the reference. Its loader asserts their shape."""
    if own is None:
        return
    shared = target.get_input_embeddings().weight
    if tuple(own.shape) != (module.spec.vocab_size, module.spec.hidden_size):
        raise DrafterMismatch(f"{folder}: `embed_tokens.weight` has shape {tuple(own.shape)}, the config calls for "
                              f"{(module.spec.vocab_size, module.spec.hidden_size)}", file=str(folder),
                              key="embed_tokens.weight")
    if tuple(own.shape) == tuple(shared.shape) and torch.equal(own.to(shared.dtype).cpu(), shared.detach().cpu()):
        return
    module.own_embed = nn.Embedding.from_pretrained(own, freeze=True)


def load_eagle3(name: str, target: nn.Module, device: str | None = None, *, aux_ids: Sequence[int] | None = None,
                max_model_len: int | None = None) -> Eagle3Head:
    """Build the head from its config.json and load its safetensors as vLLM loads them: SpecForge's
    ``midlayer.*`` or the speculators library's ``layers.0.*`` names (``engine_names``), every tensor
    the format names with its shape, and those vLLM runs without (``ENGINE_DEFAULTS``: ``d2t``,
    ``t2d``, the norms) at the engine's initial values when the checkpoint lacks them.

    Example: ``head = load_eagle3("tests/fixtures/vllm-models/eagle3", target)``."""
    folder = _local_folder(name, "drafter")
    text = text_config(target)
    n = int(text.num_hidden_layers)
    spec = read_eagle3_spec(folder, n)
    spec.source = str(name)
    if aux_ids is not None:
        spec.aux_ids = list(aux_ids)
    if spec.rope["rope_type"] == "longrope":  # vLLM picks the factors by its max_model_len (the target's length
        # unless --max-model-len says otherwise)
        length = max_model_len or int(text.max_position_embeddings)
        spec.inv_freq, spec.rope_factor = rope_tables(spec.rope, spec.head_dim, spec.max_position,
                                                      folder / "config.json", engine_len=length)
    where = f"{name}/config.json"
    if spec.use_aux and spec.fc_inputs is not None and spec.fc_inputs != len(spec.aux_ids):
        raise DrafterMismatch(f"{where}: vLLM sizes this DeepSeek head's fc for {spec.fc_inputs} aux states "
                              "(`num_aux_hidden_states`, else the length of `eagle_config.eagle_aux_hidden_state_layer_"
                              f"ids`, else 3), but the target feeds {len(spec.aux_ids)} ({spec.ids_key} "
                              f"{spec.aux_ids}): vLLM fails on the mismatch", file=where, key=spec.ids_key)
    for i in spec.aux_ids if spec.use_aux else []:
        if not 0 <= i <= n:
            raise DrafterMismatch(f"{where}: `{spec.ids_key}` {spec.aux_ids} reads aux id {i}, but the target has "
                                  f"{n} layers (aux ids 0..{n})", file=where, key=spec.ids_key)
    arch = (getattr(target.config, "architectures", None) or [None])[0]
    if spec.use_aux and 0 in spec.aux_ids and arch in DEEPSEEK_MODEL_TARGETS:
        raise DrafterMismatch(f"{where}: `{spec.ids_key}` {spec.aux_ids} reads aux id 0, which vLLM 0.32's DeepSeek "
                              f"model ({arch}) captures as hidden + residual before layer 0, where the residual is None: "
                              "the engine fails at the first step (\"unsupported operand type(s) for +: 'Tensor' and "
                              "'NoneType'\")", file=where, key=spec.ids_key)
    if spec.target_hidden_size != int(text.hidden_size) or spec.vocab_size != int(text.vocab_size):
        raise DrafterMismatch(f"{where}: the head's target hidden size {spec.target_hidden_size} and vocabulary "
                              f"{spec.vocab_size} differ from the target's {text.hidden_size} and {text.vocab_size}",
                              file=where)
    if not spec.use_aux and spec.hidden_size != int(text.hidden_size):
        raise DrafterMismatch(f"{where}: `eagle_config.use_aux_hidden_state` is false, so the head reads the target's "
                              f"hidden state ({text.hidden_size} wide) as its own ({spec.hidden_size}); vLLM asserts "
                              "they are equal", file=where, key="hidden_size")
    weights = engine_names(_read_weights(folder))
    # vLLM's loader drops these before loading (load_weights: its mapper's None entries, mask_hidden skipped);
    # deepseek_eagle3's loader drops none of them (an unused fc loads; mask_hidden and input_norm are refused)
    dropped = {k for k in weights if (k == "mask_hidden" or (k.startswith("fc.") and not spec.use_aux)
               or (k.startswith("input_norm.") and not spec.norm_before_fc)) and spec.mla is None}
    dropped |= {k for k in weights if k.startswith("fc.") and not spec.use_aux}
    weights = {k: v for k, v in weights.items() if k not in dropped}
    module = Eagle3Head(spec)
    expected = module.state_dict()
    norms = {f"{n}.weight" for n, m in module.named_modules() if isinstance(m, _RMSNorm)}  # ones in vLLM too
    missing = sorted(set(expected) - set(weights) - ENGINE_DEFAULTS - norms)
    unexpected = sorted(set(weights) - set(expected) - {"embed_tokens.weight"})
    if missing or unexpected:
        raise (MissingWeights if missing else DrafterMismatch)(
            f"{folder}: the EAGLE-3 weights " + (f"lack {', '.join(missing[:4])}" if missing
                                                 else f"hold tensors the format does not name: {', '.join(unexpected[:4])}"),
            file=str(folder))
    if "d2t" in weights and spec.draft_vocab_size == int(text.vocab_size):
        raise DrafterMismatch(f"{folder}: the weights hold `d2t`, but the draft vocabulary is the target's "
                              f"({spec.draft_vocab_size}): vLLM builds no map for such a head and refuses the "
                              "tensor at load (no module or parameter named 'draft_id_to_target_id')",
                              file=str(folder), key="d2t")
    for key, tensor in weights.items():
        if key in expected and tuple(tensor.shape) != tuple(expected[key].shape):
            raise DrafterMismatch(f"{folder}: `{key}` has shape {tuple(tensor.shape)}, the config calls for "
                                  f"{tuple(expected[key].shape)}", file=str(folder), key=key)
    module.load_state_dict({k: v for k, v in weights.items() if k in expected}, strict=False)
    _own_embeddings(module, weights.get("embed_tokens.weight"), target, folder)
    param = next(target.parameters())
    module = module.to(device=device or param.device, dtype=param.dtype).eval()
    module.d2t, module.t2d = module.d2t.long(), module.t2d.bool()
    return module
