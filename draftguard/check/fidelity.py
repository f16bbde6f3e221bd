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

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from draftguard.check.findings import ABSENT, RULES, Finding, LayerAttention
from draftguard.check.resolver import BOOKKEEPING_KEYS

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
    # The top node's evidence (resolver.gather_evidence), shared by nested contexts; paths in it
    # are dotted from the top of the file.
    evidence: dict[str, Any] = field(default_factory=dict)
    # The whole file, for evidence that names a key outside this node.
    root: dict[str, Any] = field(default_factory=dict)

    @property
    def values(self) -> dict[str, Any]:
        return self.node["values"]

    def landed(self, key: str) -> list[tuple[str, str, Any]]:
        """Where tracing saw the class store this key's value: (storage path, how, value there)."""
        return [tuple(item) for item in self.evidence.get("landed", {}).get(self.prefix + key, [])]

    def sub(self, node: dict[str, Any], prefix: str | None = None) -> "Context":
        return Context(self.raw, node, self.prefix if prefix is None else prefix, node["__config__"], self.version,
                       self.file, self.line_of, evidence=self.evidence, root=self.root)

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


def show(value: Any) -> str:
    if value is ABSENT:
        return "absent"
    import json

    text = json.dumps(value, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


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
        findings.extend(attention_findings)
        if not prefix:
            top_attention = layers

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
            "class converts on load; the model code reads the converted value.",
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


def _shown_place(ctx: Context, place: str) -> str:
    return place[len(ctx.prefix):] if ctx.prefix and place.startswith(ctx.prefix) else place


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


def _file_asked(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """Changes the file itself asked for: a value of a feature that the file's own flag switches off
    (Qwen2.5's use_sliding_window: false beside a vestigial sliding_window, in every family, whether
    the class then stores null or 0), and nulls that ask for the default."""
    flag = ctx.evidence.get("flags", {}).get(ctx.prefix + key)
    if flag is not None:
        return ctx.finding(
            "DG008", key, raw_value, resolved,
            f"`{key}` {show(raw_value)} resolves to {show(resolved)} because the file sets `{flag}: false`, "
            f"which switches off the feature it belongs to ({ctx.config_class} keeps {show(raw_value)} when "
            f"`{flag}` is true; transformers {ctx.version}). Intended; remove the vestigial `{key}` if you like.",
        )
    gate = ctx.evidence.get("gates", {}).get(ctx.prefix + key)
    if gate is not None and not _feature_named_elsewhere(ctx, key):
        flag = _shown_place(ctx, gate)
        return ctx.finding(
            "DG008", key, raw_value, resolved,
            f"`{key}` {show(raw_value)} resolves to {show(resolved)}: {ctx.config_class} keeps it only when "
            f"`{flag}` is true, `{flag}` defaults to false, and nothing in the file switches the feature on "
            f"(transformers {ctx.version}). A vestigial value; add \"{flag}\": true if the model was trained "
            "with it.",
        )
    if raw_value is None:
        return ctx.finding(
            "DG008", key, raw_value, resolved,
            f"`{key}: null` asks {ctx.config_class} for its default, {show(resolved)}."
            if resolved is not ABSENT else f"`{key}: null` sets nothing, and {ctx.config_class} keeps nothing.",
        )
    if isinstance(raw_value, dict) and not raw_value and (isinstance(resolved, dict) or resolved is ABSENT):
        return ctx.finding(
            "DG008", key, raw_value, resolved,
            f"`{key}: {{}}` asks {ctx.config_class} for its default, {show(resolved)}.",
        )
    return None


def _feature_named_elsewhere(ctx: Context, key: str) -> bool:
    """Whether another value of the file names the feature a gated key belongs to: layer_types
    listing "sliding_attention" beside a sliding_window (the Qwen3 drafter incident). Without such a
    value, a gated key that the class's default switches off is vestigial (Qwen2-Audio's window)."""
    word = key.rsplit(".", 1)[-1].split("_")[0].lower()
    if len(word) < 4:
        return True  # too short to tell a feature by: judge the change as a change
    for other, value in ctx.raw.items():
        if other == key:
            continue
        texts = value if isinstance(value, list) else [value]
        if any(isinstance(t, str) and word in t.lower() for t in texts):
            return True
    return False


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


def _private_key(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """Keys with a leading underscore (`_attn_implementation`) are a library's private state saved
    with the file, such as the attention kernel it last ran with; no model code reads them as a value."""
    if not key.rsplit(".", 1)[-1].startswith("_"):
        return None
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
    if resolved is ABSENT or path not in ctx.evidence.get("ignored", []) or path in ctx.evidence.get("gates", {}):
        return None
    return ctx.finding(
        "DG009", key, raw_value, resolved,
        f"`{key}` {show(raw_value)} is not an input of {ctx.config_class}: the class stores {show(resolved)} "
        f"whatever the file says, and no flag of the class changes that (tracing; transformers {ctx.version}). "
        "Remove it if you like.",
    )


def _names(message: str, key: str) -> bool:
    import re

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


# --- keys the file did not give -------------------------------------------------------------------


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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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
    switched_off = ctx.evidence.get("flags", {}).get(ctx.prefix + "sliding_window")
    if lost and switched_off is not None:
        # The file's own flag switched the window off: the sliding_window finding (DG008) is the
        # one verdict on this cause.
        lost = []
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
