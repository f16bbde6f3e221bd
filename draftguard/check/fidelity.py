"""The fidelity engine: judge every difference between config.json and what the model code reads.

``resolver.resolve`` gives the resolved node (JSON, possibly from another transformers version).
``judge_config`` walks the raw file against it and sorts each difference into:

- error: an explicit value changed or dropped with nothing in the file asking for it, or two keys
  that contradict each other where one wins silently;
- warning: a missing key filled with a default that the file's other values contradict;
- info: renames that keep the value, and changes that another key of the file asked for.

Then it builds the effective-attention view: what each layer will run against what the file says.
The judges of one changed value, and their ``Context``, are ``check/judges.py``.

In: ``judge_config(raw, resolved, version=, file=, line_of=)``: config.json as parsed, its resolver
node (values, class name, evidence), the transformers version, the file's name and a key -> line lookup.
Out: ``(findings, attention)``: a list of ``Finding`` and a list of ``LayerAttention`` (empty when the
model has no per-layer attention types). Pure: no I/O. CheckOverBudget (a BadInput naming the file)
when the config's time budget runs out.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

from draftguard.check.budget import spend, within_budget
from draftguard.check.drafter.engines import WINDOW_LOST_ENGINES
from draftguard.check.findings import ABSENT, Finding, LayerAttention, is_int as _is_int, show
from draftguard.check.judges import (  # noqa: F401 (Context, same: importable from here as before)
    Context,
    same,
    _HANDLED,
    _JUDGES,
    _mentions,
    _parent,
    _quote,
)
from draftguard.check.agreement import ranges as _ranges
from draftguard.check.resolver import BOOKKEEPING_KEYS


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
    evidence = resolved.get("evidence") or {}

    def walk(raw_node: dict[str, Any], node: dict[str, Any], prefix: str) -> None:
        nonlocal top_attention
        ctx = Context(raw_node, node, prefix, node["__config__"], version, file, line_of, evidence=evidence, root=raw)
        for key, raw_value in raw_node.items():
            spend()
            if key in BOOKKEEPING_KEYS:
                continue
            resolved_value = ctx.values.get(key, ABSENT)
            if isinstance(resolved_value, dict) and "__config__" in resolved_value:
                if isinstance(raw_value, dict):
                    walk(raw_value, resolved_value, prefix + key + ".")
                continue
            findings.extend(_compare(ctx, key, raw_value, resolved_value))
        for name, keys in ctx.moved.items():
            findings.append(ctx.finding(
                "DG007", name, {k: raw_node[k] for k in keys}, name,
                f"{len(keys)} flat key(s) ({', '.join(keys[:6])}{', ...' if len(keys) > 6 else ''}) are "
                f"moved into `{name}` by {ctx.config_class} (transformers {version}) with their values: "
                "a rename.",
                line_key=keys[0],
            ))
        if not prefix:
            findings.extend(_unread_aliases(ctx))
        findings.extend(_injected(ctx))
        layers, attention_findings = _attention(ctx)
        # The attention check's verdict on layer_types names the layers and the cause; the value
        # judge's verdict on the whole list would only say the list changed.
        retold = {f.key for f in attention_findings if f.key == prefix + "layer_types"}
        findings[:] = [f for f in findings if f.key not in retold]
        findings.extend(attention_findings)
        if not prefix:
            top_attention = layers

    with within_budget(file):  # the config's time budget (check/budget.py), looked at per key
        walk(raw, resolved, "")
    return _one_verdict_per_cause(findings), top_attention


def _one_verdict_per_cause(findings: list[Finding]) -> list[Finding]:
    """An info finding never stands beside an error or warning on the same key: the louder one is
    the verdict, and the info one would only contradict it."""
    loud = {f.key for f in findings if f.severity.value != "info"}
    return [f for f in findings if f.severity.value != "info" or f.key not in loud]


def _compare(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Iterator[Finding]:
    if same(raw_value, resolved):
        return
    if isinstance(raw_value, dict) and raw_value and (isinstance(resolved, dict) or resolved is ABSENT):
        # A plain nested dict (rope_scaling, rope_parameters, dflash_config): judge each key the file
        # gave. When the class moved every one of them unchanged, that is one rename, not several.
        table = resolved if isinstance(resolved, dict) else {}
        parts = [f for sub, sub_raw in raw_value.items() for f in _compare(ctx, f"{key}.{sub}", sub_raw, table.get(sub, ABSENT))]
        renamed = [f for f in parts if f.rule == "DG007" and f.moved_to is not None]
        if parts and len(renamed) == len(parts) and len(parts) == len(raw_value):
            places = sorted({_parent(str(f.moved_to)) for f in renamed})
            folded = ctx.finding(
                "DG007", key, raw_value, raw_value,
                f"`{key}` is moved into `{'`, `'.join(places)}` by {ctx.config_class} (transformers "
                f"{ctx.version}) with the same values: a rename.",
            )
            folded.moved_to = ", ".join(places)
            yield folded
            return
        yield from parts
        return
    for judge in _JUDGES:
        finding = judge(ctx, key, raw_value, resolved)
        if finding is _HANDLED:
            return
        if finding is not None:
            yield finding
            return


# --- keys the file did not give -------------------------------------------------------------------


# Keys the serving engines read by name from the config object, which transformers' model code
# does not (vLLM 0.32 ModelArchConfigConvertorBase.derive_max_model_len_and_key; ENGINE-FACTS.md).
ENGINE_KEYS = {
    "model_max_length": "vLLM takes `model_max_length` as the served context length over every other "
                        "length key, and SGLang serves it too",
}


def _unread_aliases(ctx: Context) -> Iterator[Finding]:
    """A key the class does not read, which other transformers classes read as a name of one of this
    class's fields (Mamba: n_layer for num_hidden_layers), with another value than the field.

    Not where the file names its own code (``auto_map``): the config class keeps every unknown key as
    an attribute, and the repo's modeling code may read it under its own meaning (SpecForge's Domino
    drafter reads ``emb_dim`` 256 beside ``hidden_size`` 4096)."""
    if "auto_map" in ctx.root:
        return
    for key, field_name in ctx.evidence.get("unread", {}).items():
        raw_value, reads = ctx.raw.get(key, ABSENT), ctx.values.get(field_name, ABSENT)
        if reads is ABSENT or same(raw_value, reads):
            continue
        if key in ENGINE_KEYS:
            yield ctx.finding(
                "DG013", key, raw_value, raw_value,
                f"`{key}` is {show(raw_value)} and `{field_name}` is {show(reads)}"
                + ("" if field_name in ctx.raw else " (the class default)")
                + f"; {ctx.config_class} keeps `{key}` as it is and its model code does not read it "
                f"(transformers {ctx.version}), but the engines do: {ENGINE_KEYS[key]}, so they serve "
                f"{show(raw_value)}. Make the two agree if the model was not trained for {show(raw_value)}.",
            )
            continue
        if field_name in ctx.raw:
            yield ctx.finding(
                "DG002", key, raw_value, reads,
                f"`{key}` is {show(raw_value)} but `{field_name}` is {show(ctx.raw[field_name])}; other "
                f"transformers classes read `{key}` as `{field_name}`, but {ctx.config_class} reads only "
                f"`{field_name}`, so the model is built with {show(reads)} (transformers {ctx.version}). "
                f"Fix: keep one of the two keys, with the value you mean.",
            )
        else:
            yield ctx.finding(
                "DG011", key, raw_value, reads,
                f"`{key}` is {show(raw_value)}, but {ctx.config_class} does not read `{key}`: it reads "
                f"`{field_name}` (a name other classes give `{key}`), which is not in the file, so the model is "
                f"built with its default {show(reads)} (transformers {ctx.version}). Fix: add "
                f"\"{field_name}\": {show(raw_value)}.",
            )



def _injected(ctx: Context) -> Iterator[Finding]:
    values, raw, amap = ctx.values, ctx.raw, ctx.node["attribute_map"]
    given = {amap.get(k, k) for k in raw}
    head_dim = values.get("head_dim")
    hidden, heads = values.get("hidden_size"), values.get("num_attention_heads")
    defaults = ctx.node.get("defaults")
    if (
        "head_dim" not in given
        and _is_default(defaults, "head_dim", head_dim)
        and _class_ties_head_dim(defaults)
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


def _class_ties_head_dim(defaults: dict[str, Any] | None) -> bool:
    """Whether the class's own defaults have head_dim = hidden_size / num_attention_heads (Qwen3:
    4096 / 32 = 128). Gemma 3's do not (2304 / 8 != 256): its head size was never hidden / heads, so a
    default head_dim that differs from that ratio contradicts nothing."""
    if not defaults or not all(k in defaults for k in ("head_dim", "hidden_size", "num_attention_heads")):
        return defaults is None  # a node from an older resolver: judge as before
    head_dim, hidden, heads = defaults["head_dim"], defaults["hidden_size"], defaults["num_attention_heads"]
    if not (_is_int(head_dim) and _is_int(hidden) and _is_int(heads)) or heads <= 0:
        return False
    return hidden // heads == head_dim


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
        return _window_unread(ctx)
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
    # The agreement rule (judges._file_asked): a flag of the file that switches the window off does
    # not make this intended while layer_types declares these layers sliding; the file contradicts
    # itself, and the layers run full.
    switched_off = ctx.evidence.get("flags", {}).get(ctx.prefix + "sliding_window")
    # Two causes: the window is lost (every sliding layer runs full), or the class rewrites some
    # layers' type while the window survives (Gemma 4 forces its last layer to full_attention).
    retyped = [i for i in lost if isinstance(raw_types, list) and len(raw_types) == len(types)
               and types[i] != raw_types[i] and _is_int(window)]
    lost = [i for i in lost if i not in retyped]
    if lost:
        findings.append(ctx.finding(
            "DG005", "layer_types",
            ", ".join(sorted({layers[i].declared for i in lost})) + f" at layers {_ranges(lost)}",
            f"full at layers {_ranges(lost)}",
            f"layers {_ranges(lost)} are declared sliding_attention, but will run full causal attention: "
            f"the window resolved to {show(window)}"
            + (f", because the file also sets `{switched_off[len(ctx.prefix):]}: false`" if switched_off else "")
            + f" ({ctx.config_class}, transformers {ctx.version}). "
            "An engine or drafter trained with a window now attends to the whole context. "
            f"{WINDOW_LOST_ENGINES + ' ' if ctx.raw.get('dflash_config') is not None else ''}"
            "Fix: make the window survive loading (see the `sliding_window` finding).",
        ))
    if retyped:
        findings.append(_retyped(ctx, layers, retyped, [types[i] for i in retyped]))
    if (
        not isinstance(raw_types, list)
        and set(types) <= {"full_attention", "sliding_attention"}  # other kinds may use the window their own way
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


def _window_unread(ctx: Context) -> tuple[list[LayerAttention], list[Finding]]:
    """A window the file sets and the class keeps, which the class's model code never reads
    (resolver.modeling): transformers runs every layer full, the engines that read the key by name
    slide every layer. The attention rows say so (declared sliding, effective full), and the engine
    views judge it per engine (DG201) where one slides."""
    window = ctx.raw.get("sliding_window")
    count = ctx.values.get("num_hidden_layers")
    if (ctx.prefix or "sliding_window" not in ctx.evidence.get("model_code_unread", [])
            or not _is_int(window) or window <= 0 or ctx.raw.get("use_sliding_window") is False
            or not _is_int(count) or count < 1):
        return [], []
    layers = [LayerAttention(i, f"sliding({window})", "full") for i in range(count)]
    return layers, [ctx.finding(
        "DG015", "sliding_window", window, window,
        f"`sliding_window` is {window}, and {ctx.config_class} keeps it, but the model code transformers "
        f"builds for `{ctx.raw.get('model_type')}` never reads it (transformers {ctx.version}): every layer "
        "runs full causal attention there, as if the key were absent. Engines that read the key by name "
        f"(vLLM) slide every layer with a window of {window}, so the model served differs from the one "
        "transformers runs and evaluates past the window. Fix: remove the key if the model was trained "
        "with full attention; if it was trained with a window, use an architecture whose code applies "
        "it (Mistral's).",
    )]


def _retyped(ctx: Context, layers: list[LayerAttention], retyped: list[int], now: list[str]) -> Finding:
    """Layers declared sliding that the class gives another type, the window intact: a correction
    the class says it makes (DG009), or a silent rewrite (DG005)."""
    which = f"{'layer' if len(retyped) == 1 else 'layers'} {_ranges(retyped)}"
    declared = f"{layers[retyped[0]].declared} at {which}"
    kinds = sorted(set(now))
    resolved = f"{' and '.join(kinds)} at {which}"
    window = show(ctx.values.get("sliding_window"))
    for message in ctx.evidence.get("messages", []):
        if all(_mentions(message, kind) for kind in kinds):
            return ctx.finding(
                "DG009", "layer_types", declared, resolved,
                f"{which} {'is' if len(retyped) == 1 else 'are'} declared sliding_attention; {ctx.config_class} "
                f"runs {'it' if len(retyped) == 1 else 'them'} as {' and '.join(kinds)} and says so (transformers "
                f"{ctx.version}): \"{_quote(message)}\" The window ({window}) is kept for the other sliding "
                "layers. Declare those layers as the class runs them, so engines and drafters read the same.",
            )
    return ctx.finding(
        "DG005", "layer_types", declared, resolved,
        f"{which} {'is' if len(retyped) == 1 else 'are'} declared sliding_attention, but {ctx.config_class} "
        f"rewrites the type to {' and '.join(kinds)} without saying so (transformers {ctx.version}); the window "
        f"({window}) is kept for the other sliding layers. An engine or drafter trained with a window there "
        "now attends to the whole context. Fix: declare those layers as the model was trained, in a form the "
        "class keeps.",
    )


def _kind(layer_type: str, window: Any) -> str:
    if layer_type == "sliding_attention":
        return f"sliding({window})" if _is_int(window) else ("sliding(?)" if window is ABSENT else "full")
    return "full" if layer_type == "full_attention" else layer_type
