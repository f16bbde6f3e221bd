"""The fidelity engine: judge every difference between config.json and what the model code reads.

``resolver.resolve`` gives the resolved node (JSON, possibly from another transformers version).
``judge_config`` walks the raw file against it and sorts each difference into:

- error: an explicit value changed or dropped with nothing in the file asking for it, or two keys
  that contradict each other where one wins silently;
- warning: a missing key filled with a default that the file's other values contradict;
- info: renames that keep the value, and changes that another key of the file asked for.

Then it builds the effective-attention view: what each layer will run against what the file says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from draftguard.check.findings import ABSENT, RULES, Finding, LayerAttention, is_int as _is_int, show
from draftguard.check.resolver import BOOKKEEPING_KEYS

# Keys that transformers 5.x folds into `rope_parameters`, and the sub-key each lands in.
ROPE_FOLDED = {"rope_theta": "rope_theta", "partial_rotary_factor": "partial_rotary_factor",
               "rope_local_base_freq": "rope_theta"}
# Old keys that 5.x may keep as aliases of rope_parameters itself.
ROPE_ALIASES = ("rope_scaling",)
# Keys inside rope_scaling that 5.x renames on the way into rope_parameters.
ROPE_SUBKEY_RENAMES = {"type": "rope_type"}


@dataclass
class Context:
    """What a judgement may look at: the whole raw node, the resolved node, and where to point."""

    raw: dict[str, Any]
    node: dict[str, Any]
    prefix: str
    config_class: str
    version: str
    file: str
    line_of: Callable[[str], int | None]
    moved: dict[str, list[str]] = field(default_factory=dict)

    @property
    def values(self) -> dict[str, Any]:
        return self.node["values"]

    def finding(self, rule: str, key: str, raw: Any, resolved: Any, message: str, line_key: str | None = None) -> Finding:
        path = self.prefix + key
        return Finding(
            rule=rule,
            severity=RULES[rule].severity,
            key=path,
            raw=raw,
            resolved=resolved,
            file=self.file,
            line=self.line_of(self.prefix + (line_key or key)),
            message=message,
        )


def same(a: Any, b: Any) -> bool:
    """Equal as the model code would use them: JSON lists and tuples alike, 1 == 1.0, but a bool is
    not a number and a string is not a number."""
    if a is ABSENT or b is ABSENT:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def judge_config(
    raw: dict[str, Any],
    resolved: dict[str, Any],
    *,
    version: str,
    file: str,
    line_of: Callable[[str], int | None],
) -> tuple[list[Finding], list[LayerAttention]]:
    """Judge ``raw`` (config.json as parsed) against ``resolved`` (a resolver node).

    Returns the findings and the effective-attention view of the top-level config (empty when the
    model has no per-layer attention types).

    Example::

        >>> from draftguard.check.resolver import resolve
        >>> raw = {"model_type": "qwen3", "num_hidden_layers": 2, "sliding_window": 8,
        ...        "layer_types": ["sliding_attention", "full_attention"]}
        >>> findings, layers = judge_config(raw, resolve(raw), version="5.24.0", file="config.json",
        ...                                 line_of=lambda key: None)
        >>> sorted(f.rule for f in findings)
        ['DG001', 'DG005']
    """
    findings: list[Finding] = []
    top_attention: list[LayerAttention] = []

    def walk(raw_node: dict[str, Any], node: dict[str, Any], prefix: str) -> None:
        nonlocal top_attention
        ctx = Context(raw_node, node, prefix, node["__config__"], version, file, line_of)
        for key, raw_value in raw_node.items():
            if key in BOOKKEEPING_KEYS:
                continue
            resolved = ctx.values.get(key, ABSENT)
            if isinstance(resolved, dict) and "__config__" in resolved:
                if isinstance(raw_value, dict):
                    walk(raw_value, resolved, prefix + key + ".")
                continue
            findings.extend(_compare(ctx, key, raw_value, resolved))
        for name, keys in ctx.moved.items():
            findings.append(ctx.finding(
                "DG007", name, {k: raw_node[k] for k in keys}, name,
                f"{len(keys)} flat key(s) ({', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''}) are "
                f"moved into `{name}` by {ctx.config_class} (transformers {version}) with their values: "
                "a rename.",
                line_key=keys[0],
            ))
        findings.extend(_injected(ctx))
        layers, attention_findings = _attention(ctx)
        findings.extend(attention_findings)
        if not prefix:
            top_attention = layers

    walk(raw, resolved, "")
    return findings, top_attention


def _compare(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Iterator[Finding]:
    if same(raw_value, resolved):
        return
    if isinstance(raw_value, dict) and isinstance(resolved, dict) and key not in ROPE_ALIASES:
        # A plain nested dict (rope_parameters, dflash_config): judge each key the file gave.
        for sub, sub_raw in raw_value.items():
            yield from _compare(ctx, f"{key}.{sub}", sub_raw, resolved.get(sub, ABSENT))
        return
    for judge in _JUDGES:
        finding = judge(ctx, key, raw_value, resolved)
        if finding is _HANDLED:
            return
        if finding is not None:
            yield finding
            return


# A judge's answer for "recognised, and reported elsewhere".
_HANDLED: Any = object()


# --- judges, tried in order; the first that recognises the change decides ------------------------


def _alias_contradiction(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """gpt2's n_embd and hidden_size are one attribute; given both with different values, the alias
    (set last) wins and nothing warns."""
    amap = ctx.node["attribute_map"]
    canonical = amap.get(key, key)
    twins = [k for k in ctx.raw if k != key and amap.get(k, k) == canonical]
    for twin in twins:
        if same(ctx.raw[twin], resolved):
            return ctx.finding(
                "DG002", key, raw_value, resolved,
                f"`{key}` is {show(raw_value)} but `{twin}` is {show(ctx.raw[twin])}, and both set the "
                f"same attribute of {ctx.config_class} (attribute_map: {_alias_text(amap, canonical)}). "
                f"transformers {ctx.version} keeps `{twin}`'s value without a warning. "
                f"Fix: keep one of the two keys, with the value you mean.",
            )
    return None


def _alias_text(amap: dict[str, str], canonical: str) -> str:
    aliases = [a for a, c in amap.items() if c == canonical]
    return ", ".join(f"{a} -> {canonical}" for a in aliases) or canonical


def _rope_tables(params: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """rope_parameters is one dict, or (gemma3 and others) one dict per layer type."""
    if params and all(isinstance(v, dict) for v in params.values()):
        return [(f"rope_parameters.{k}", v) for k, v in params.items()]
    return [("rope_parameters", params)]


def _rope_has(table: dict[str, Any], key: str, value: Any) -> bool:
    return same(value, table.get(key, ABSENT)) or same(value, table.get(ROPE_SUBKEY_RENAMES.get(key, key), ABSENT))


def _rope_folded(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """5.x folds rope_theta, rope_scaling and partial_rotary_factor into rope_parameters."""
    params = ctx.values.get("rope_parameters")
    if not isinstance(params, dict):
        return None
    # 5.x drops the old keys, or keeps `rope_scaling` as a property that returns rope_parameters.
    if resolved is not ABSENT and not (key in ROPE_ALIASES and same(resolved, params)):
        return None
    tables = _rope_tables(params)
    if key == "rope_scaling":
        if raw_value is None:
            return ctx.finding(
                "DG007", key, raw_value, resolved,
                f"`rope_scaling: null` is folded into `rope_parameters` by transformers {ctx.version}; "
                "nothing is lost.",
            )
        if not isinstance(raw_value, dict):
            return None
        for label, table in tables:
            if all(_rope_has(table, k, v) for k, v in raw_value.items()):
                return ctx.finding(
                    "DG007", key, raw_value, table,
                    f"`rope_scaling` is folded into `{label}` by transformers {ctx.version} with the same "
                    "values: a rename.",
                )
        label, table = max(tables, key=lambda lt: sum(_rope_has(lt[1], k, v) for k, v in raw_value.items()))
        sub = next(k for k, v in raw_value.items() if not _rope_has(table, k, v))
        landed = table.get(ROPE_SUBKEY_RENAMES.get(sub, sub), ABSENT)
        return ctx.finding(
            "DG001", f"{key}.{sub}", raw_value[sub], landed,
            f"`rope_scaling.{sub}` is {show(raw_value[sub])}, but after transformers {ctx.version} folds "
            f"rope_scaling into {label} the model reads {show(landed)}. "
            "Fix: state the RoPE settings once, in `rope_parameters`.",
        )
    if key in ROPE_FOLDED:
        target = ROPE_FOLDED[key]
        for label, table in tables:
            if same(raw_value, table.get(target, ABSENT)):
                return ctx.finding(
                    "DG007", key, raw_value, raw_value,
                    f"`{key}` is folded into `{label}.{target}` by transformers {ctx.version} with the "
                    "same value: a rename.",
                )
        label, table = tables[0]
        landed = table.get(target, ABSENT)
        raw_params = ctx.raw.get("rope_parameters")
        if isinstance(raw_params, dict) and target in raw_params:
            return ctx.finding(
                "DG002", key, raw_value, landed,
                f"`{key}` is {show(raw_value)} but `rope_parameters.{target}` is "
                f"{show(raw_params[target])}; transformers {ctx.version} keeps "
                f"{show(landed)} and drops `{key}` without a warning. Fix: keep only "
                f"`rope_parameters.{target}`, with the value you mean.",
            )
        return ctx.finding(
            "DG001", key, raw_value, landed,
            f"`{key}` is {show(raw_value)}, but the model reads {label}.{target} = {show(landed)} "
            f"(transformers {ctx.version} folds `{key}` into rope_parameters). "
            f"Fix: set `{label}.{target}` to the value you mean.",
        )
    return None


def _moved_into_sub_config(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """Composite classes (qwen2_vl...) move flat legacy keys into their text_config. A key moved
    with its value is collected into one summary finding; one that changed on the way is judged
    against the sub-config, with the whole file's keys as context (use_sliding_window...)."""
    if resolved is not ABSENT:
        return None
    subs = [(name, sub) for name, sub in ctx.values.items() if isinstance(sub, dict) and "__config__" in sub]
    subs.sort(key=lambda item: item[0] != "text_config")  # text settings land in text_config
    holders = [(name, sub) for name, sub in subs if key in sub["values"]]
    for name, sub in holders:
        if same(raw_value, sub["values"][key]):
            ctx.moved.setdefault(name, []).append(key)
            return _HANDLED
    for name, sub in holders[:1] or subs[:1]:
        sub_ctx = Context(ctx.raw, sub, ctx.prefix, sub["__config__"], ctx.version, ctx.file, ctx.line_of)
        landed = sub["values"].get(key, ABSENT)
        for judge in _JUDGES:
            if judge is _moved_into_sub_config or (judge is _overridden and landed is ABSENT):
                continue
            finding = judge(sub_ctx, key, raw_value, landed)
            if finding is not None:
                finding.message = f"(moved into `{name}` by {ctx.config_class}) " + finding.message
                return finding
    return None


def _rope_scaling_wins(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """rope_parameters.X changed because rope_scaling (or rope_theta) said otherwise: they contradict."""
    if not key.startswith("rope_parameters."):
        return None
    sub = key.rsplit(".", 1)[1]
    sources = []
    scaling = ctx.raw.get("rope_scaling")
    if isinstance(scaling, dict):
        sources += [f"rope_scaling.{k}" for k, v in scaling.items() if ROPE_SUBKEY_RENAMES.get(k, k) == sub and same(v, resolved)]
    for flat, landed in ROPE_FOLDED.items():
        if landed == sub and flat in ctx.raw and same(ctx.raw[flat], resolved):
            sources.append(flat)
    if not sources:
        return None
    return ctx.finding(
        "DG002", key, raw_value, resolved,
        f"`{key}` is {show(raw_value)} but `{sources[0]}` is {show(resolved)}; transformers "
        f"{ctx.version} lets `{sources[0]}` win without a warning, so the model reads {show(resolved)}. "
        f"Fix: remove `{sources[0].split('.')[0]}` and keep the value you mean in `rope_parameters`.",
    )


def _dtype_renamed(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    if key != "torch_dtype":
        return None
    dtype = ctx.values.get("dtype", ABSENT)
    if resolved is ABSENT and same(_dtype_text(raw_value), _dtype_text(dtype)):
        return ctx.finding(
            "DG007", key, raw_value, dtype,
            f"`torch_dtype` is read as `dtype` by transformers {ctx.version}, with the same value: a rename.",
        )
    if same(_dtype_text(raw_value), _dtype_text(resolved)):
        return ctx.finding("DG007", key, raw_value, resolved, "`torch_dtype` spelled differently, same dtype.")
    return None


def _dtype_text(value: Any) -> Any:
    return value[len("torch."):] if isinstance(value, str) and value.startswith("torch.") else value


def _file_asked(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """Changes the file itself asked for, such as Qwen2.5's use_sliding_window: false beside a
    vestigial sliding_window."""
    if key == "sliding_window" and resolved is None and ctx.raw.get("use_sliding_window") is False:
        return ctx.finding(
            "DG008", key, raw_value, resolved,
            f"`sliding_window` {show(raw_value)} resolves to no window because the file sets "
            "`use_sliding_window: false`. Intended; remove the vestigial `sliding_window` if you like.",
        )
    if raw_value is None and resolved is not ABSENT:
        return ctx.finding(
            "DG008", key, raw_value, resolved,
            f"`{key}: null` asks {ctx.config_class} for its default, {show(resolved)}.",
        )
    if isinstance(raw_value, dict) and not raw_value and isinstance(resolved, dict):
        return ctx.finding(
            "DG008", key, raw_value, resolved,
            f"`{key}: {{}}` asks {ctx.config_class} for its default, {show(resolved)}.",
        )
    return None


def _overridden(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding:
    what = (
        f"`{key}` is {show(raw_value)} in config.json, but {ctx.config_class} drops it: the model code "
        "never sees it"
        if resolved is ABSENT
        else f"`{key}` is {show(raw_value)} in config.json, but {ctx.config_class} gives the model code "
        f"{show(resolved)}"
    )
    why, fix = _mechanism(ctx, key, raw_value, resolved)
    return ctx.finding("DG001", key, raw_value, resolved, f"{what} (transformers {ctx.version}). {why} Fix: {fix}")


def _mechanism(ctx: Context, key: str, raw_value: Any, resolved: Any) -> tuple[str, str]:
    if key == "sliding_window" and resolved is None and "use_sliding_window" in ctx.values:
        if "use_sliding_window" not in ctx.raw:
            return (
                f"{ctx.config_class} keeps `sliding_window` only when `use_sliding_window` is true, and "
                "`use_sliding_window` defaults to false; the file does not set it.",
                'add "use_sliding_window": true next to "sliding_window".',
            )
        return (
            f"{ctx.config_class} keeps `sliding_window` only when `use_sliding_window` is true.",
            'set "use_sliding_window": true, or remove the window if none is meant.',
        )
    if key == "layer_types":
        return (
            f"{ctx.config_class} rewrote the per-layer attention types.",
            "check `layer_types` against `num_hidden_layers`.",
        )
    return (
        f"{ctx.config_class}'s own initialisation rewrote the value.",
        f"set `{key}` to a value the class keeps, or remove it if the class's value is what you mean.",
    )


_JUDGES = [_alias_contradiction, _rope_folded, _moved_into_sub_config, _rope_scaling_wins, _dtype_renamed, _file_asked, _overridden]


# --- keys the file did not give -------------------------------------------------------------------


def _injected(ctx: Context) -> Iterator[Finding]:
    values, raw, amap = ctx.values, ctx.raw, ctx.node["attribute_map"]
    given = {amap.get(k, k) for k in raw}
    head_dim = values.get("head_dim")
    hidden, heads = values.get("hidden_size"), values.get("num_attention_heads")
    defaults = ctx.node.get("defaults")
    if (
        "head_dim" not in given
        and _is_default(defaults, "head_dim", head_dim)
        and _is_int(head_dim) and _is_int(hidden) and _is_int(heads) and heads > 0
        and hidden % heads == 0 and hidden // heads != head_dim
    ):
        yield ctx.finding(
            "DG003", "head_dim", ABSENT, head_dim,
            f"`head_dim` is not in config.json, so {ctx.config_class} uses its default {head_dim}, but "
            f"hidden_size / num_attention_heads = {hidden} / {heads} = {hidden // heads} "
            f"(transformers {ctx.version}). Fix: add \"head_dim\": {hidden // heads}, or the head size "
            "the weights were trained with.",
            line_key="num_attention_heads",
        )
    window = values.get("sliding_window")
    if (
        "sliding_window" not in given
        and _is_default(defaults, "sliding_window", window)
        and _is_int(window)
        and _sliding_layers(values)
    ):
        yield ctx.finding(
            "DG004", "sliding_window", ABSENT, window,
            f"config.json sets no `sliding_window`, but {ctx.config_class} injects {window} and "
            f"{len(_sliding_layers(values))} layer(s) will attend within it (transformers {ctx.version}). "
            f"Fix: add \"sliding_window\" with the window the model was trained with.",
            line_key="use_sliding_window" if "use_sliding_window" in raw else "layer_types",
        )


def _is_default(defaults: dict[str, Any] | None, key: str, value: Any) -> bool:
    """Whether ``value`` is the class default for ``key``, not derived from another key of the file
    (DeepSeek's head_dim is its qk_rope_head_dim). Nodes without defaults cannot tell: assume so."""
    if defaults is None or key not in defaults:
        return defaults is None
    return same(defaults[key], value)


def _sliding_layers(values: dict[str, Any]) -> list[int]:
    types = values.get("layer_types")
    if not isinstance(types, list):
        return []
    return [i for i, t in enumerate(types) if t == "sliding_attention"]


# --- effective attention -------------------------------------------------------------------------


def _attention(ctx: Context) -> tuple[list[LayerAttention], list[Finding]]:
    values, raw = ctx.values, ctx.raw
    types = values.get("layer_types")
    if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
        return [], []
    window = values.get("sliding_window")
    effective = [_kind(t, window) for t in types]
    raw_types = raw.get("layer_types")
    raw_window = raw.get("sliding_window", ABSENT)
    if isinstance(raw_types, list) and len(raw_types) == len(types):
        declared = [_kind(t, raw_window) for t in raw_types]
    else:
        declared = list(effective)
    layers = [LayerAttention(i, d, e) for i, (d, e) in enumerate(zip(declared, effective))]
    findings: list[Finding] = []
    lost = [layer.index for layer in layers if layer.declared.startswith("sliding") and layer.effective == "full"]
    if lost:
        findings.append(ctx.finding(
            "DG005", "layer_types",
            ", ".join(sorted({layers[i].declared for i in lost})) + f" at layers {_ranges(lost)}",
            f"full at layers {_ranges(lost)}",
            f"layers {_ranges(lost)} are declared sliding_attention, but will run full causal attention: "
            f"the window resolved to {show(window)} ({ctx.config_class}, transformers {ctx.version}). "
            "An engine or drafter trained with a window now attends to the whole context. Fix: make "
            "the window survive loading (see the `sliding_window` finding).",
        ))
    if (
        not isinstance(raw_types, list)
        and _is_int(raw.get("sliding_window"))
        and raw.get("use_sliding_window") is not False
        and _is_int(window)
        and not _sliding_layers(values)
    ):
        limit = values.get("max_window_layers")
        why = (
            f"sliding layers start at max_window_layers ({limit}), and there are only {len(types)} layers"
            if _is_int(limit) and limit >= len(types)
            else "the derived layer_types hold no sliding layer"
        )
        findings.append(ctx.finding(
            "DG006", "sliding_window", raw.get("sliding_window"), window,
            f"`sliding_window` is {window}, but no layer will use it: {why} ({ctx.config_class}, "
            f"transformers {ctx.version}). Fix: list the attention of every layer in `layer_types`"
            + (", or lower `max_window_layers`." if _is_int(limit) else "."),
        ))
    return layers, findings


def _kind(layer_type: str, window: Any) -> str:
    if layer_type == "sliding_attention":
        return f"sliding({window})" if _is_int(window) else ("sliding(?)" if window is ABSENT else "full")
    return "full" if layer_type == "full_attention" else layer_type


def _ranges(indices: list[int]) -> str:
    parts, start = [], None
    for i, n in enumerate(indices):
        if start is None:
            start = n
        if i + 1 == len(indices) or indices[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)
