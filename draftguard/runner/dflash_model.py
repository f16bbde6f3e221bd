"""The DFlash drafter as a torch module: its spec read from config.json (raw or resolved view), its
layers, and loading it and its target with their weights.

In: a drafter folder (config.json and safetensors) and a target (a folder or a Hub id).
Out: a ``DrafterSpec``, a ``DFlashDrafter`` on the target's device and dtype, the target model and
tokenizer; a drafter that does not fit its target raises ``DrafterMismatch``, one without weights
``MissingWeights``. Needs the ``runner`` extra (torch). The decoding loop is ``runner/reference.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from draftguard.errors import DrafterMismatch, MissingWeights
from draftguard.hub_access import hub_problem
from draftguard.snapshot import BadInput, parse_json_object


CONFIG_VIEWS = ("resolved", "raw")
SMALL_MODEL_PARAMS = 50_000_000
# Keys a drafter config may carry inside ``dflash_config`` or (older drafters) at the top level.
_DFLASH_KEYS = ("block_size", "mask_token_id", "target_layer_ids", "input_embedding_scale",
                "output_multiplier", "final_logit_softcapping")


# --------------------------------------------------------------------------------------------------
# Config: what the drafter is built from, in the raw or the resolved view
# --------------------------------------------------------------------------------------------------


@dataclass
class DrafterSpec:
    """Everything the drafter module needs, read from config.json in one view.

    ``layer_windows[i]`` is the sliding window of layer i (None: no window) and ``layer_causal[i]``
    whether it is causal; both follow the format's rules from ``layer_types``, ``sliding_window`` and
    ``is_causal``. ``config`` is the transformers config object (for RoPE and the MLP activation)."""

    config: Any
    view: str
    source: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    attention_bias: bool
    layer_types: list[str]
    layer_windows: list[int | None]
    layer_causal: list[bool]
    target_layer_ids: list[int]
    mask_token_id: int
    block_size: int
    input_embedding_scale: float = 1.0
    output_multiplier: float = 1.0
    final_logit_softcapping: float | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    # The drafter reads target layer i as hidden_states[i + layer_offset]: 1 is the format (index 0 is
    # the embedding output). 0 exists only to simulate an engine that reads the ids one off.
    layer_offset: int = 1


def _dflash_value(raw: dict[str, Any], cfg: Any, name: str, default: Any = None) -> Any:
    block = raw.get("dflash_config") if isinstance(raw.get("dflash_config"), dict) else {}
    if name in block:
        return block[name]
    if name in raw:
        return raw[name]
    return getattr(cfg, name, default)


def read_drafter_spec(folder: str | Path, view: str = "resolved") -> DrafterSpec:
    """Read a drafter's config.json and build its spec as transformers resolves it (``resolved``) or as
    the file says (``raw``: every key present in the file wins over the config class's rewrite).

    ``resolved`` is what an engine that trusts the config class runs: a config without
    ``use_sliding_window`` loses its window there, and that is what this view reproduces.

    Example::

        >>> spec = read_drafter_spec("tests/fixtures/models/drafter-window-lost", "resolved")
        >>> spec.layer_windows
        [None, None]
        >>> read_drafter_spec("tests/fixtures/models/drafter-window-lost", "raw").layer_windows
        [6, None]
    """
    from transformers import CONFIG_MAPPING  # transformers: seconds to import; only a model run pays it

    if view not in CONFIG_VIEWS:
        raise BadInput(f"--config-view must be one of {', '.join(CONFIG_VIEWS)}, got {view!r}")
    path = Path(folder) / "config.json"
    if not path.is_file():
        raise BadInput(f"{path}: no config.json in the drafter folder", file=str(path))
    raw = parse_json_object(path.read_bytes(), str(path))
    model_type = raw.get("model_type", "qwen3")
    if model_type not in CONFIG_MAPPING:
        raise BadInput(f"{path}: model_type {model_type!r} is not known to this transformers", file=str(path),
                       key="model_type")
    try:
        cfg = CONFIG_MAPPING[model_type].from_dict(dict(raw))
    except Exception as exc:  # transformers' own validation: report it as the file's fault
        raise BadInput(f"{path}: transformers rejects this config: {exc}", file=str(path)) from None
    if view == "raw":
        for key, value in raw.items():
            if key in ("dflash_config", "architectures", "transformers_version"):
                continue
            try:
                setattr(cfg, key, value)
            except Exception:  # a read-only derived property: the class decides, as an engine would
                pass

    def need(name: str) -> Any:
        value = _dflash_value(raw, cfg, name)
        if value is None:
            raise BadInput(f"{path}: `dflash_config.{name}` is missing; a DFlash drafter must set it",
                           file=str(path), key=f"dflash_config.{name}")
        return value

    ids = need("target_layer_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise BadInput(f"{path}: `dflash_config.target_layer_ids` must be a non-empty list of ints, got {ids!r}",
                       file=str(path), key="dflash_config.target_layer_ids")
    mask = need("mask_token_id")
    if not isinstance(mask, int) or isinstance(mask, bool) or mask < 0:
        raise BadInput(f"{path}: `dflash_config.mask_token_id` must be a non-negative int, got {mask!r}",
                       file=str(path), key="dflash_config.mask_token_id")
    n_layers = int(cfg.num_hidden_layers)
    layer_types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * n_layers)
    if len(layer_types) != n_layers:
        raise BadInput(f"{path}: `layer_types` has {len(layer_types)} entries for {n_layers} layers",
                       file=str(path), key="layer_types")
    forced_causal = getattr(cfg, "is_causal", None)
    windows: list[int | None] = []
    causal: list[bool] = []
    for kind in layer_types:
        sliding = kind == "sliding_attention"
        window = getattr(cfg, "sliding_window", None) if sliding else None
        windows.append(int(window) if window is not None else None)
        causal.append(sliding if forced_causal is None else bool(forced_causal))
    heads = int(cfg.num_attention_heads)
    head_dim = getattr(cfg, "head_dim", None) or int(cfg.hidden_size) // heads
    softcap = _dflash_value(raw, cfg, "final_logit_softcapping")
    return DrafterSpec(
        config=cfg,
        view=view,
        source=str(folder),
        hidden_size=int(cfg.hidden_size),
        num_layers=n_layers,
        num_heads=heads,
        num_kv_heads=int(getattr(cfg, "num_key_value_heads", None) or heads),
        head_dim=int(head_dim),
        rms_norm_eps=float(cfg.rms_norm_eps),
        attention_bias=bool(getattr(cfg, "attention_bias", False)),
        layer_types=layer_types,
        layer_windows=windows,
        layer_causal=causal,
        target_layer_ids=list(ids),
        mask_token_id=mask,
        block_size=int(_dflash_value(raw, cfg, "block_size", 16)),
        input_embedding_scale=float(_dflash_value(raw, cfg, "input_embedding_scale", 1.0) or 1.0),
        output_multiplier=float(_dflash_value(raw, cfg, "output_multiplier", 1.0) or 1.0),
        final_logit_softcapping=float(softcap) if softcap else None,
        raw=raw,
    )


# --------------------------------------------------------------------------------------------------
# The drafter module, named exactly as the checkpoint's tensors
# --------------------------------------------------------------------------------------------------


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [batch, heads, T, head_dim]; cos/sin: [batch, T, head_dim]
    return x * cos[:, None] + _rotate_half(x) * sin[:, None]


class DrafterAttention(nn.Module):
    def __init__(self, spec: DrafterSpec, index: int):
        super().__init__()
        h, hd = spec.hidden_size, spec.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = spec.num_heads, spec.num_kv_heads, hd
        self.window, self.causal = spec.layer_windows[index], spec.layer_causal[index]
        bias = spec.attention_bias
        self.q_proj = nn.Linear(h, spec.num_heads * hd, bias=bias)
        self.k_proj = nn.Linear(h, spec.num_kv_heads * hd, bias=bias)
        self.v_proj = nn.Linear(h, spec.num_kv_heads * hd, bias=bias)
        self.o_proj = nn.Linear(spec.num_heads * hd, h, bias=bias)
        # transformers: seconds to import; only a model run pays it
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

        self.q_norm = Qwen3RMSNorm(hd, eps=spec.rms_norm_eps)
        self.k_norm = Qwen3RMSNorm(hd, eps=spec.rms_norm_eps)

    def keys_values(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys (k_norm, then RoPE) and values of x: [batch, T, hidden] -> [batch, kv_heads, T, head_dim]."""
        b, t, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        return _rope(k, cos, sin), v

    def mask(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor | None:
        """Boolean visibility [Tq, Tk] from absolute positions, or None when every key is visible."""
        if not self.causal and self.window is None:
            return None
        delta = q_pos[:, None] - k_pos[None, :]
        visible = torch.ones_like(delta, dtype=torch.bool)
        if self.causal:
            visible &= delta >= 0
        if self.window is not None:
            visible &= delta < self.window
            if not self.causal:
                visible &= -delta < self.window
        return visible

    def forward(
        self,
        x: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor | None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, self.num_heads, self.head_dim)).transpose(1, 2)
        q = _rope(q, cos, sin)
        k_blk, v_blk = self.keys_values(x, cos, sin)
        k = torch.cat([keys, k_blk], dim=2)
        v = torch.cat([values, v_blk], dim=2)
        groups = self.num_heads // self.num_kv_heads
        if groups > 1:
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.head_dim ** -0.5)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class DrafterLayer(nn.Module):
    def __init__(self, spec: DrafterSpec, index: int):
        super().__init__()
        # transformers: seconds to import; only a model run pays it
        from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP, Qwen3RMSNorm

        self.self_attn = DrafterAttention(spec, index)
        self.mlp = Qwen3MLP(spec.config)
        self.input_layernorm = Qwen3RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)
        self.post_attention_layernorm = Qwen3RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)


class DraftCache:
    """Per-layer keys and values of the context tokens, with their RoPE already applied.

    Context keys depend only on the (fixed) target features and positions, so each context token is
    projected once; block keys are recomputed every step and never cached."""

    def __init__(self, num_layers: int):
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers
        self.length = 0


class DFlashDrafter(nn.Module):
    """A DFlash drafter in the z-lab checkpoint format. Build with ``DFlashDrafter(spec, hidden)`` and
    load weights with ``load_state_dict``; ``draft`` runs one block."""

    def __init__(self, spec: DrafterSpec, target_hidden_size: int | None = None):
        super().__init__()
        # transformers: seconds to import; only a model run pays it
        from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, Qwen3RotaryEmbedding

        self.spec = spec
        feat = len(spec.target_layer_ids) * (target_hidden_size or spec.hidden_size)
        self.fc = nn.Linear(feat, spec.hidden_size, bias=False)
        self.hidden_norm = Qwen3RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)
        self.layers = nn.ModuleList(DrafterLayer(spec, i) for i in range(spec.num_layers))
        self.norm = Qwen3RMSNorm(spec.hidden_size, eps=spec.rms_norm_eps)
        self.rotary_emb = Qwen3RotaryEmbedding(spec.config)

    def new_cache(self) -> DraftCache:
        return DraftCache(len(self.layers))

    def forward(self, context: torch.Tensor, block: torch.Tensor, cache: DraftCache) -> torch.Tensor:
        """Append ``context`` (target features [1, m, len(ids) x hidden] of the tokens since the last
        call) to the cache, then run the block ([1, B, hidden] embeddings) over [context; block].
        Returns ``norm(h)`` at all B block positions."""
        device = block.device
        n0, m, bsz = cache.length, context.shape[1], block.shape[1]
        if m:
            ctx = self.hidden_norm(self.fc(context))
            ctx_pos = torch.arange(n0, n0 + m, device=device)[None]
            cos_c, sin_c = self.rotary_emb(ctx, ctx_pos)
            for i, layer in enumerate(self.layers):
                k, v = layer.self_attn.keys_values(ctx, cos_c, sin_c)
                cache.keys[i] = k if cache.keys[i] is None else torch.cat([cache.keys[i], k], dim=2)
                cache.values[i] = v if cache.values[i] is None else torch.cat([cache.values[i], v], dim=2)
            cache.length = n0 + m
        n = cache.length
        q_pos = torch.arange(n, n + bsz, device=device)
        k_pos = torch.arange(0, n + bsz, device=device)
        cos, sin = self.rotary_emb(block, q_pos[None])
        h = block
        empty = block.new_zeros(1, 1, 0, 1)
        for i, layer in enumerate(self.layers):
            attn = layer.self_attn
            keys = cache.keys[i] if cache.keys[i] is not None else empty.expand(1, attn.num_kv_heads, 0, attn.head_dim)
            vals = cache.values[i] if cache.values[i] is not None else empty.expand(1, attn.num_kv_heads, 0, attn.head_dim)
            h = h + attn(layer.input_layernorm(h), keys, vals, cos, sin, attn.mask(q_pos, k_pos))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.norm(h)


# --------------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------------


def _local_folder(name: str, what: str) -> Path:
    """A local folder as is; otherwise a Hub repo id, downloaded (config, weights, tokenizer only)."""
    path = Path(name)
    if path.is_dir():
        return path
    if path.exists():
        raise BadInput(f"{name}: the {what} must be a folder or a Hub repo id, not a file", file=name)
    # huggingface_hub: the weights download (~0.18 s to import); only a target named by repo id pays it
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name, allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]))
    except Exception as exc:
        problem = hub_problem(exc)  # one line: huggingface_hub's own messages run over several
        why = problem.message if problem else f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
        raise BadInput(f"{name}: cannot find the {what} as a folder or a Hub repo ({why})", file=name) from None


def load_target(name: str, device: str = "cpu", dtype: torch.dtype | None = None) -> tuple[nn.Module, Any]:
    """Load the target with transformers ``AutoModelForCausalLM`` (and its tokenizer, or None when the
    folder has none). Example: ``target, tokenizer = load_target("Qwen/Qwen3-8B", "cuda")``."""
    # transformers: seconds to import; only a model run pays it
    from transformers import AutoModelForCausalLM

    folder = _local_folder(name, "target")
    if not (folder / "config.json").is_file():
        raise BadInput(f"{folder}: no config.json in the target folder", file=str(folder))
    if not any(folder.glob("*.safetensors")) and not any(folder.glob("*.bin")):
        raise MissingWeights(f"{folder}: the target has no weights (*.safetensors)", file=str(folder))
    dtype = dtype or (torch.float32 if device == "cpu" else torch.bfloat16)
    from transformers.utils import logging as hf_logging  # transformers: seconds to import; only a model run pays it

    hf_logging.disable_progress_bar()  # stderr carries the one-line errors and our own progress only
    try:
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=dtype)
    except OSError as exc:
        raise MissingWeights(f"{folder}: cannot load the target's weights ({exc})", file=str(folder)) from None
    model.to(device).eval()
    return model, folder_tokenizer(folder)


def folder_tokenizer(folder: Path) -> Any:
    """The folder's tokenizer, or None when it has none."""
    if not any((folder / n).is_file() for n in ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer  # transformers: seconds to import; only a model run pays it

    return AutoTokenizer.from_pretrained(str(folder))


def finish_target(model: nn.Module, folder: Path, device: str, dtype: torch.dtype | None) -> tuple[nn.Module, Any]:
    """A target built from its config and its weights loaded: the head tied where the config ties it, on
    ``device`` in ``dtype`` (float32 on CPU, bfloat16 elsewhere, by default), in eval mode, with the
    folder's tokenizer."""
    if model.config.tie_word_embeddings:
        model.tie_weights()
    model = model.to(device=device, dtype=dtype or (torch.float32 if device == "cpu" else torch.bfloat16)).eval()
    return model, folder_tokenizer(folder)


def text_config(target: nn.Module) -> Any:
    """The config of the decoder stack whose hidden states the drafter reads: the target's own, or
    its ``text_config`` for a multimodal target."""
    cfg = target.config
    return cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg


def _read_weights(folder: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file  # safetensors: the runner extra only

    single = folder / "model.safetensors"
    index = folder / "model.safetensors.index.json"
    if single.is_file():
        return load_file(str(single))
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        weights: dict[str, torch.Tensor] = {}
        for shard in shards:
            if not (folder / shard).is_file():
                raise MissingWeights(f"{folder / shard}: shard named in {index.name} is missing", file=str(index))
            weights.update(load_file(str(folder / shard)))
        return weights
    raise MissingWeights(
        f"{folder}: no model.safetensors (or model.safetensors.index.json); the drafter needs its weights",
        file=str(folder),
    )


def check_fit(spec: DrafterSpec, target_config: Any, weights: dict[str, torch.Tensor] | None = None) -> None:
    """Raise DrafterMismatch when the drafter cannot run against this target: layer ids out of range,
    hidden sizes that differ, a mask token outside the vocabulary, an ``fc`` that does not take
    len(ids) x hidden features.

    Example::

        >>> from types import SimpleNamespace as NS
        >>> spec = read_drafter_spec("tests/fixtures/models/drafter")
        >>> check_fit(spec, NS(num_hidden_layers=2, hidden_size=64, vocab_size=48))
        Traceback (most recent call last):
        ...
        draftguard.errors.DrafterMismatch: tests/fixtures/models/drafter/config.json: `dflash_config.target_layer_ids` [0, 2] reads layer 2, but the target has 2 layers (ids 0..1)
    """
    where = f"{spec.source}/config.json"
    n = int(target_config.num_hidden_layers)
    for i in spec.target_layer_ids:
        if not 0 <= i < n:
            raise DrafterMismatch(
                f"{where}: `dflash_config.target_layer_ids` {spec.target_layer_ids} reads layer {i}, but the "
                f"target has {n} layers (ids 0..{n - 1})", file=where, key="dflash_config.target_layer_ids")
    hidden = int(target_config.hidden_size)
    if spec.hidden_size != hidden:
        raise DrafterMismatch(
            f"{where}: `hidden_size` {spec.hidden_size} differs from the target's {hidden}; the drafter uses the "
            "target's embeddings and lm_head, so they must match", file=where, key="hidden_size")
    vocab = int(target_config.vocab_size)
    if spec.mask_token_id >= vocab:
        raise DrafterMismatch(
            f"{where}: `dflash_config.mask_token_id` {spec.mask_token_id} is outside the target's vocabulary "
            f"(vocab_size {vocab})", file=where, key="dflash_config.mask_token_id")
    if weights is not None and "fc.weight" in weights:
        want = len(spec.target_layer_ids) * hidden
        got = weights["fc.weight"].shape[-1]
        if got != want:
            raise DrafterMismatch(
                f"{spec.source}: `fc.weight` takes {got} features, but {len(spec.target_layer_ids)} target layer ids "
                f"x hidden {hidden} = {want}; `dflash_config.target_layer_ids` does not match the weights",
                file=where, key="dflash_config.target_layer_ids")


def load_drafter(
    name: str, target: nn.Module, view: str = "resolved", device: str | None = None, *, layer_offset: int = 1
) -> DFlashDrafter:
    """Build the drafter from its config.json (in ``view``) and load its safetensors weights exactly:
    every tensor the format names must be there with its shape, and nothing else.

    ``layer_offset`` 0 reads target layer i from hidden_states[i], one off: only for simulating that
    engine fault (``LAYER_IDS_ONE_OFF``).

    Example: ``drafter = load_drafter("z-lab/Qwen3-8B-DFlash-b16", target)``."""
    folder = _local_folder(name, "drafter")
    spec = read_drafter_spec(folder, view)
    spec.source = str(name)
    spec.layer_offset = layer_offset
    weights = _read_weights(folder)
    if any(k.startswith("candidate_selector.") or ".attention_conv." in k for k in weights):
        raise BadInput(f"{folder}: a DFlash2 drafter (candidate selector / convolutions); the reference backend "
                       "runs DFlash only", file=str(folder))
    text = text_config(target)
    check_fit(spec, text, weights)
    module = DFlashDrafter(spec, int(text.hidden_size))
    expected = module.state_dict()
    missing = sorted(set(expected) - set(weights) - {k for k in expected if k.startswith("rotary_emb.")})
    unexpected = sorted(set(weights) - set(expected))
    if missing:
        raise MissingWeights(f"{folder}: the weights lack {len(missing)} tensor(s) the config calls for: "
                             f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}", file=str(folder))
    if unexpected:
        raise DrafterMismatch(f"{folder}: the weights hold {len(unexpected)} tensor(s) the config does not call for: "
                              f"{', '.join(unexpected[:4])}{' ...' if len(unexpected) > 4 else ''}", file=str(folder))
    for key, tensor in weights.items():
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise DrafterMismatch(f"{folder}: `{key}` has shape {tuple(tensor.shape)}, the config calls for "
                                  f"{tuple(expected[key].shape)}", file=str(folder), key=key)
    module.load_state_dict(weights, strict=False)
    param = next(target.parameters())
    return module.to(device=device or param.device, dtype=param.dtype).eval()
