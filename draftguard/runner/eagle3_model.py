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
  layer's output before the final norm, as vLLM captures it (``aux_features``).

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
from torch.nn import functional as F

from draftguard.check.drafter.detect import EAGLE3_UNBUILT_OPTIONS
from draftguard.errors import DrafterMismatch, MissingWeights
from draftguard.runner.dflash_model import _local_folder, _read_weights, _rotate_half, text_config
from draftguard.snapshot import BadInput, parse_json_object

IDS_KEY = "eagle_aux_hidden_state_layer_ids"


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
    rope_theta: float
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
    _refuse_unbuilt(path, raw, eagle)
    spec = _spec(raw, layers, path, ids, key, norm_before_residual=bool(raw.get("norm_before_residual", False)))
    # As vLLM's llama_eagle3.py reads them: norm_before_fc from eagle_config first, the others top-level.
    spec.norm_before_fc = bool(eagle.get("norm_before_fc", raw.get("norm_before_fc", False)))
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
    if layer_type != "llama":
        vllm = ("vLLM builds it as Eagle3Qwen3ForCausalLM (--backend vllm measures it)" if layer_type == "qwen3"
                else "vLLM refuses it too (its speculators adapter builds llama and qwen3 heads)")
        raise BadInput(f"{path}: `transformer_layer_config.model_type` is {layer_type!r}; the reference builds the "
                       f"LLaMA layer of an EAGLE-3 head only, and {vllm}", file=str(path),
                       key="transformer_layer_config.model_type")
    if raw.get(IDS_KEY):  # vLLM copies the list only when it is non-empty
        ids, key = raw[IDS_KEY], IDS_KEY
    else:
        ids, key = default_aux_ids(target_layers), "the engines' default (2, N//2, N-3)"
    _check_ids(path, ids, key)
    _refuse_unbuilt(path, raw, {})
    spec = _spec(raw, layers, path, ids, key, norm_before_residual=bool(raw.get("norm_before_residual", True)),
                 top_level=False)
    # vLLM's update_eagle3 copies these from the top level, each false unless stated.
    spec.norm_before_fc, spec.fc_norm = bool(raw.get("norm_before_fc", False)), bool(raw.get("fc_norm", False))
    spec.norm_output = bool(raw.get("norm_output", False))
    return spec


def _refuse_unbuilt(path: Path, raw: dict[str, Any], eagle: dict[str, Any]) -> None:
    """A head that sets an option vLLM builds and this head does not (``EAGLE3_UNBUILT_OPTIONS``: no
    aux features) is refused with that reason, read where vLLM reads it (``eagle_config`` first),
    rather than on the tensors it then holds."""
    for name, built in EAGLE3_UNBUILT_OPTIONS:
        value = eagle.get(name, raw.get(name, built))
        if isinstance(value, bool) and value != built:
            raise BadInput(f"{path}: `{name}` is {str(value).lower()}: vLLM builds that variant of the EAGLE-3 head "
                           "(no aux features) and the reference does not, so it cannot judge it (--backend vllm "
                           "measures it)",
                           file=str(path), key=name)


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
    rope = layers.get("rope_parameters") or {}
    vocab = int(num("vocab_size"))
    return Eagle3Spec(
        source=str(path.parent), hidden_size=hidden, target_hidden_size=int(raw.get("target_hidden_size") or hidden),
        intermediate_size=int(num("intermediate_size")), num_heads=heads,
        num_kv_heads=int(num("num_key_value_heads", heads)), head_dim=int(layers.get("head_dim") or hidden // heads),
        rms_norm_eps=float(num("rms_norm_eps", 1e-6)),
        rope_theta=float(rope.get("rope_theta") or layers.get("rope_theta") or 10000.0),
        attention_bias=bool(layers.get("attention_bias", False)), vocab_size=vocab,
        draft_vocab_size=int(raw.get("draft_vocab_size") or vocab), aux_ids=list(ids), ids_key=key,
        norm_before_residual=norm_before_residual, sliding_window=_window(layers),
    )


def _window(layers: dict[str, Any]) -> int | None:
    """The head's window as vLLM's LlamaAttention builds it: ``sliding_window`` when ``layer_types``
    names its one layer (index 0 of the draft's layers) ``sliding_attention``, else none."""
    types = layers.get("layer_types")
    window = layers.get("sliding_window")
    if isinstance(types, list) and types and types[0] == "sliding_attention" and isinstance(window, int) and window > 0:
        return window
    return None


class _RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype) * self.weight


class _Attention(nn.Module):
    def __init__(self, s: Eagle3Spec):
        super().__init__()
        inp, b = 2 * s.hidden_size, s.attention_bias
        self.q_proj = nn.Linear(inp, s.num_heads * s.head_dim, bias=b)
        self.k_proj = nn.Linear(inp, s.num_kv_heads * s.head_dim, bias=b)
        self.v_proj = nn.Linear(inp, s.num_kv_heads * s.head_dim, bias=b)
        self.o_proj = nn.Linear(s.num_heads * s.head_dim, s.hidden_size, bias=b)
        self.s = s

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        s = self.s
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, s.num_heads, s.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, s.num_kv_heads, s.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, s.num_kv_heads, s.head_dim).transpose(1, 2)
        inv = 1.0 / (s.rope_theta ** (torch.arange(0, s.head_dim, 2, device=x.device).float() / s.head_dim))
        freqs = positions.float()[..., None] * inv
        emb = torch.cat([freqs, freqs], -1)
        cos, sin = emb.cos().to(x.dtype)[:, None], emb.sin().to(x.dtype)[:, None]
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        rep = s.num_heads // s.num_kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        if s.sliding_window:  # causal within the window: a query at p sees keys at p - w + 1 .. p
            gap = positions[:, :, None] - positions[:, None, :]
            allowed = (gap >= 0) & (gap < s.sliding_window)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed[:, None])
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, n, -1))


class _Mlp(nn.Module):
    def __init__(self, s: Eagle3Spec):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.up_proj = nn.Linear(s.hidden_size, s.intermediate_size, bias=False)
        self.down_proj = nn.Linear(s.intermediate_size, s.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, s: Eagle3Spec):
        super().__init__()
        self.input_layernorm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.hidden_norm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.self_attn = _Attention(s)
        self.post_attention_layernorm = _RMSNorm(s.hidden_size, s.rms_norm_eps)
        self.mlp = _Mlp(s)


class Eagle3Head(nn.Module):
    """The head. ``forward(hidden, embeds, positions)`` runs the one layer causally over a whole
    sequence (no cache: the reference recomputes, which is exact) and returns the draft-vocabulary
    logits and the pre-norm output that feeds the next chain step. ``draft_to_target`` maps a draft
    id to the target's."""

    def __init__(self, spec: Eagle3Spec):
        super().__init__()
        self.spec = spec
        self.fc = nn.Linear(len(spec.aux_ids) * spec.target_hidden_size, spec.hidden_size, bias=False)
        if spec.norm_before_fc:
            self.input_norm = _RMSNorm(len(spec.aux_ids) * spec.target_hidden_size, spec.rms_norm_eps)
        if spec.fc_norm:
            self.fc_norm = nn.ModuleList([_RMSNorm(spec.target_hidden_size, spec.rms_norm_eps) for _ in spec.aux_ids])
        self.midlayer = _MidLayer(spec)
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
        optional norm over all of them, then the optional norm of each, then ``fc``."""
        if self.spec.norm_before_fc:
            features = self.input_norm(features)
        if self.spec.fc_norm:
            chunks = features.chunk(len(self.spec.aux_ids), dim=-1)
            features = torch.cat([norm(c) for norm, c in zip(self.fc_norm, chunks)], -1)
        return self.fc(features)

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids + self.d2t[draft_ids]


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
        norm = getattr(getattr(target, "model", target), "norm", None)
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
    norms = sorted(k for k in ENGINE_DEFAULTS - {"d2t", "t2d"} if k not in names)
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


def load_eagle3(name: str, target: nn.Module, device: str | None = None, *, aux_ids: Sequence[int] | None = None
                ) -> Eagle3Head:
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
    where = f"{name}/config.json"
    for i in spec.aux_ids:
        if not 0 <= i <= n:
            raise DrafterMismatch(f"{where}: `{spec.ids_key}` {spec.aux_ids} reads aux id {i}, but the target has "
                                  f"{n} layers (aux ids 0..{n})", file=where, key=spec.ids_key)
    if spec.target_hidden_size != int(text.hidden_size) or spec.vocab_size != int(text.vocab_size):
        raise DrafterMismatch(f"{where}: the head's target hidden size {spec.target_hidden_size} and vocabulary "
                              f"{spec.vocab_size} differ from the target's {text.hidden_size} and {text.vocab_size}",
                              file=where)
    weights = engine_names(_read_weights(folder))
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
