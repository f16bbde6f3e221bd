"""The judges of one changed value, and what they know about the config (``Context``).

In: a ``Context`` (the raw file, the resolved node, the class's evidence: traces, messages, aliases,
defaults) and one key whose raw and resolved values differ.
Out: the ``Finding`` of the first judge in ``_JUDGES`` that recognises the cause (an alias, a folded
table, a moved sub-config, a rename, a value the file asked for, the class's own words), else
"overridden". ``fidelity.judge_config`` runs them.
"""

from __future__ import annotations

import json
import re
from typing import Any, Iterator

from draftguard.check.agreement import attention_line as _attention_line, file_asked as _file_asked, shown_place as _shown_place
from draftguard.check.context import Context, same
from draftguard.check.findings import ABSENT, Finding, Severity, show


def _parent(path: str) -> str:
    return path.rsplit(".", 1)[0] if "." in path else path


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


def _file_leaves(tree: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _file_leaves(value, f"{prefix}{key}.")
        else:
            yield prefix + key, value


def _traced(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """Where the class put the value, from tracing (resolver.gather_evidence): moved unchanged is a
    rename; moved and then overwritten by another key of the file is a contradiction."""
    path = ctx.prefix + key
    places = ctx.landed(key)
    kept = [place for place, how, value in places if how == "same" and same(raw_value, value)]
    if not kept and "." in key:
        # A nested value the class refused to trace (a name it validates, such as rope_scaling.type):
        # renamed if its traced siblings landed in one table that holds it under another name.
        parent = key.rsplit(".", 1)[0]
        tables = {_parent(place) for k in _sibling_keys(ctx, parent) for place, how, _ in ctx.landed(k) if how == "same"}
        stored = ctx.evidence.get("stored_tables", {})
        for table in sorted(tables):
            for name, value in (stored.get(table) or {}).items():
                if same(raw_value, value):
                    kept.append(f"{table}.{name}")
    if kept:
        place = kept[0]
        top = place.split(".", 1)[0]
        if "." in place and top in ctx.values and isinstance(ctx.values[top], dict) and "__config__" in ctx.values[top] \
                and place == f"{top}.{key}" and not ctx.prefix:
            ctx.moved.setdefault(top, []).append(key)  # a flat key moved into text_config: one summary
            return _HANDLED
        if place.rsplit(".", 1)[-1].startswith("_"):
            return ctx.finding(
                "DG007", key, raw_value, place,
                f"`{key}` is kept by {ctx.config_class} as its runtime setting `{place}` (transformers "
                f"{ctx.version}): a choice for loading the model, not a value of the model.",
            )
        renamed = ctx.finding(
            "DG007", key, raw_value, raw_value,
            f"`{key}` is moved to `{_shown_place(ctx, place)}` by {ctx.config_class} (transformers {ctx.version}) "
            "with the same value: a rename.",
        )
        renamed.moved_to = place
        return renamed
    decider = ctx.evidence.get("deciders", {}).get(path)
    if decider is not None:
        return _decided(ctx, key, raw_value, *decider)
    translation = ctx.evidence.get("translations", {}).get(path)
    if translation:
        pairs = ", ".join(f"{a} -> {b}" for a, b in sorted(translation.items()))
        return ctx.finding(
            "DG009", key, raw_value, resolved,
            f"`{key}` is translated by {ctx.config_class} into its own names ({pairs}), one for one, and the "
            f"class keeps the translated list as it is (transformers {ctx.version}): the same layers, renamed.",
        )
    converted = [place for place, how, _ in places if how == "converted"]
    if converted and not kept:
        shown = ", ".join(f"`{_shown_place(ctx, p)}`" for p in converted[:3]) + (", ..." if len(converted) > 3 else "")
        return ctx.finding(
            "DG009", key, raw_value, resolved if resolved is not ABSENT else converted[0],
            f"`{key}` is read by {ctx.config_class} into {shown} in another form: tracing shows that "
            f"changing `{key}` changes what is stored there (transformers {ctx.version}). A legacy key the "
            "class converts on load; the model code reads the converted value."
            + (_attention_line(ctx) if ctx.prefix + "layer_types" in converted else ""),
        )
    # The value landed somewhere but another key of the file decided what is stored there.
    for place, how, value in places:
        if how != "same":
            continue
        for other, other_value in _file_leaves(ctx.root):
            if other == path or not same(other_value, value):
                continue
            if other == place or any(p == place for p, h, _ in ctx.evidence.get("landed", {}).get(other, [])):
                return ctx.finding(
                    "DG002", key, raw_value, value,
                    f"`{path}` is {show(raw_value)} but `{other}` is {show(other_value)}; both end up in "
                    f"`{place}` and transformers {ctx.version} keeps `{other}`'s value without a warning. "
                    f"Fix: keep only `{other}`, with the value you mean.",
                )
    return None


def _decided(ctx: Context, key: str, raw_value: Any, other: str, place: str, how: str, is_input: bool, value: Any) -> Finding:
    """Another value of the file decides what is stored in this key's place."""
    path = ctx.prefix + key
    other_value = _lookup(ctx.root, other)
    if how == "copies" and same(raw_value, other_value):
        duplicate = ctx.finding(
            "DG007", key, raw_value, raw_value,
            f"`{key}` is also given as `{other}` with the same value; {ctx.config_class} keeps it once, in "
            f"`{_shown_place(ctx, place)}` (transformers {ctx.version}): a rename.",
        )
        duplicate.moved_to = place
        return duplicate
    if not is_input:
        return ctx.finding(
            "DG009", key, raw_value, value,
            f"`{key}` {show(raw_value)} is not read by {ctx.config_class}: the class always sets `{place}` "
            f"from `{other}` ({show(other_value)} -> {show(value)}), whatever the file says (transformers "
            f"{ctx.version}). Remove `{key}` if you like; the model code reads {show(value)}.",
        )
    if how == "derives" and same(raw_value, other_value):
        return ctx.finding(
            "DG009", key, raw_value, value,
            f"`{key}` and `{other}` are both {show(raw_value)}; {ctx.config_class} computes `{place}` = "
            f"{show(value)} from `{other}` (tracing shows it follows that key), the same setting counted its "
            f"own way (transformers {ctx.version}).",
        )
    return ctx.finding(
        "DG002", key, raw_value, value,
        f"`{path}` is {show(raw_value)} but `{other}` is {show(other_value)}; both set `{place}`, and "
        f"transformers {ctx.version} keeps "
        + (f"`{other}`'s value" if how == "copies" else f"{show(value)}, computed from `{other}`,")
        + f" without a warning, so the model reads {show(value)}. Fix: keep only one of `{path}` and "
        f"`{other.split('.')[0]}`, with the value you mean.",
    )


def _sibling_keys(ctx: Context, parent: str) -> list[str]:
    table = _lookup(ctx.raw, parent)
    return [f"{parent}.{k}" for k in table] if isinstance(table, dict) else []


def _lookup(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return ABSENT
        tree = tree[part]
    return tree


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
    if not holders and ctx.prefix + key in ctx.evidence.get("ignored", []):
        return None  # no sub-config holds it, and the class sets it aside: judged where it was given
    for name, sub in holders[:1] or subs[:1]:
        sub_ctx = ctx.sub(sub)
        landed = sub["values"].get(key, ABSENT)
        for judge in _JUDGES:
            if judge in (_moved_into_sub_config, _traced) or (judge is _overridden and landed is ABSENT):
                continue
            finding = judge(sub_ctx, key, raw_value, landed)
            if finding is not None:
                finding.message = f"(moved into `{name}` by {ctx.config_class}) " + finding.message
                return finding
    return None


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


def _generation_setting(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """transformers pops generation parameters (num_beams, max_length...) out of the model config on
    purpose; GenerationConfig rebuilds them from config.json when the repo has no
    generation_config.json."""
    if resolved is not ABSENT or ctx.prefix + key not in ctx.evidence.get("generation", {}):
        return None
    return ctx.finding(
        "DG010", key, raw_value, raw_value,
        f"`{key}` is a generation setting: {ctx.config_class} leaves it to GenerationConfig, which reads "
        f"{show(raw_value)} from config.json when the repo has no generation_config.json (transformers "
        f"{ctx.version}). Nothing is lost; generation_config.json is its place if you add one.",
    )


# The soft-capping keys of the families whose eager attention alone caps the scores (Gemma 2, Grok).
SOFTCAPPING = ("attn_logit_softcapping", "final_logit_softcapping")


def _private_key(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """Keys with a leading underscore (`_attn_implementation`) are a library's private state saved
    with the file, such as the attention kernel it last ran with; no model code reads them as a value."""
    if not key.rsplit(".", 1)[-1].startswith("_"):
        return None
    capped = {k: ctx.raw.get(k) for k in SOFTCAPPING if isinstance(ctx.raw.get(k), (int, float))}
    if key == "_attn_implementation" and raw_value == "eager" and resolved != raw_value and capped:
        finding = ctx.finding(
            "DG001", key, raw_value, None if resolved is ABSENT else resolved,
            f"`{key}` \"eager\" is dropped by {ctx.config_class} (transformers {ctx.version}), and the model "
            f"soft-caps its logits ({', '.join(f'{k} {v:g}' for k, v in capped.items())}), which only its eager "
            "attention applies: loaded without it, transformers picks SDPA or FlashAttention, whose scores are "
            "not capped, and the outputs change. Fix: load with attn_implementation=\"eager\" (the file can no "
            "longer ask for it)")
        finding.severity = Severity.WARNING
        return finding
    return ctx.finding(
        "DG007", key, raw_value, resolved,
        f"`{key}` is private state saved with the file (a runtime choice such as the attention kernel); "
        f"{ctx.config_class} does not take it as a value of the model (transformers {ctx.version}).",
    )


def _class_label(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """A nested config's model_type is the label of the class that reads it; no model code reads it."""
    if key != "model_type" or not ctx.prefix or not isinstance(resolved, str):
        return None
    return ctx.finding(
        "DG007", key, raw_value, resolved,
        f"`{key}` {show(raw_value)} is read by {ctx.config_class}, whose own label is {show(resolved)} "
        f"(transformers {ctx.version}): a class label, which no model code reads.",
    )


def _said_by_class(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """A change the class makes on purpose, with its own evidence: it said so while building (a
    logged warning naming the key), or it writes the file's value back in to_dict() and reads a
    converted one."""
    name = key.rsplit(".", 1)[-1]
    for message in ctx.evidence.get("messages", []):
        if _names(message, name) and (_mentions(message, resolved) or _mentions(message, raw_value)):
            return ctx.finding(
                "DG009", key, raw_value, resolved,
                f"`{key}` {show(raw_value)} is corrected by {ctx.config_class} to {show(resolved)}, and the "
                f"class says so (transformers {ctx.version}): \"{_quote(message)}\"",
            )
    path = ctx.prefix + key
    if resolved is not ABSENT and any(place == path and how == "same" for place, how, _ in ctx.landed(key)):
        return ctx.finding(
            "DG009", key, raw_value, resolved,
            f"`{key}` {show(raw_value)} is read by {ctx.config_class} as {show(resolved)}, while any other value "
            f"is kept as written (tracing; transformers {ctx.version}): the class's own reading of "
            f"{show(raw_value)}, which for it means {show(resolved)}.",
        )
    if not ctx.prefix and key in ctx.evidence.get("serialised", {}) and resolved is not ABSENT:
        return ctx.finding(
            "DG009", key, raw_value, resolved,
            f"`{key}` {show(raw_value)} is converted by {ctx.config_class} to {show(resolved)} for the model "
            f"code, and the class saves {show(raw_value)} back when it writes config.json (transformers "
            f"{ctx.version}): the same setting in the form its code counts it in.",
        )
    return None


def _fixed_by_class(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """The class stores one value whatever the file says, and no switch of the class makes it keep
    the file's (a vision tower's rope type that is the only one it supports)."""
    path = ctx.prefix + key
    if path not in ctx.evidence.get("ignored", []) or path in ctx.evidence.get("gates", {}):
        return None
    if resolved is ABSENT:
        # A compatibility key the class accepts and sets aside (DETR's use_timm_backbone: true, the
        # form it builds backbone_config in anyway): with it, without it, the same config.
        return ctx.finding(
            "DG009", key, raw_value, resolved,
            f"`{key}` {show(raw_value)} is accepted by {ctx.config_class} and not kept: building the config "
            f"without it gives the model code the same values (tracing; transformers {ctx.version}). A "
            "compatibility key whose value is already how the class builds the model; remove it if you like.",
        )
    return ctx.finding(
        "DG009", key, raw_value, resolved,
        f"`{key}` {show(raw_value)} is not an input of {ctx.config_class}: the class stores {show(resolved)} "
        f"whatever the file says, and no flag of the class changes that (tracing; transformers {ctx.version}). "
        "Remove it if you like.",
    )


def _names(message: str, key: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(key)}(?![A-Za-z0-9_])", message) is not None


def _mentions(message: str, value: Any) -> bool:
    if value is ABSENT or value is None or isinstance(value, (dict, list)):
        return False
    text = value if isinstance(value, str) else json.dumps(value)
    return len(text) > 1 and text in message


def _quote(message: str) -> str:
    text = " ".join(message.split())
    return text if len(text) <= 300 else text[:297] + "..."


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
    gate = ctx.evidence.get("gates", {}).get(ctx.prefix + key)
    if gate is not None:
        flag = _shown_place(ctx, gate)
        return (
            f"{ctx.config_class} keeps `{key}` only when `{flag}` is true, and `{flag}` defaults to false; "
            "the file does not set it.",
            f'add "{flag}": true next to "{key}".',
        )
    if key == "sliding_window" and resolved is None and "use_sliding_window" in ctx.values:
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


_JUDGES = [_alias_contradiction, _generation_setting, _private_key, _class_label, _file_asked, _traced,
           _moved_into_sub_config, _dtype_renamed, _said_by_class, _fixed_by_class, _overridden]
