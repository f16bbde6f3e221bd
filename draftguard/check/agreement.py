"""The agreement rule, and what the file states about attention: a change is intended only when
everything the file states agrees with it (issue 23).

In: a judges ``Context`` (the raw node, the resolved node, the class's evidence) and one key whose
value changed; or the node's values alone (``attention_line``, ``window_covers_context``).
Out: ``file_asked``, the judge of changes the file itself asked for (a flag it switches off, a gate
it leaves out, a null) as a ``Finding`` or None; ``declared_sliding_run_full`` (layers the file
declares sliding that run full), ``window_covers_context``, ``attention_line`` and ``ranges`` for the
messages of check/judges.py and check/fidelity.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from draftguard.check.findings import ABSENT, Finding, is_int as _is_int, show

if TYPE_CHECKING:
    from draftguard.check.context import Context


def shown_place(ctx: Context, place: str) -> str:
    return place[len(ctx.prefix):] if ctx.prefix and place.startswith(ctx.prefix) else place


def file_asked(ctx: Context, key: str, raw_value: Any, resolved: Any) -> Finding | None:
    """Changes the file itself asked for, judged by the agreement rule: a change is intended only
    when everything the file states agrees with it.

    - A value of a feature that the file's own flag switches off (Qwen2.5's `use_sliding_window:
      false` beside a vestigial `sliding_window`, whether the class then stores null or 0) is
      intended, unless another statement of the file turns the feature on: layers that `layer_types`
      declares sliding, which now run full attention. Then the file contradicts itself (an error).
    - A value kept only behind a switch that the file leaves out (the class's default is off): the
      author must settle it. An error where declared sliding layers run full (``_overridden``), a
      warning where only the value is set (DG012), and intended only where the value could change
      nothing the model computes (a window no shorter than every sequence the model reads).
    - Nulls and empty tables that ask for the default."""
    path = ctx.prefix + key
    flag = ctx.evidence.get("flags", {}).get(path)
    gate = ctx.evidence.get("gates", {}).get(path)
    lost = declared_sliding_run_full(ctx) if key == "sliding_window" else []
    if flag is not None and lost:
        shown = shown_place(ctx, flag)
        return ctx.finding(
            "DG001", key, raw_value, resolved,
            f"`{key}` {show(raw_value)} resolves to {show(resolved)} because the file sets `{shown}: false`, but "
            f"`layer_types` declares layers {ranges(lost)} sliding_attention: the file states both, and "
            f"{ctx.config_class} runs those layers with full attention (transformers {ctx.version}). Fix: settle "
            f'it: "{shown}": true if the model was trained with the window, else declare those layers '
            '"full_attention" and remove the window.',
        )
    if flag is not None:
        return ctx.finding(
            "DG008", key, raw_value, resolved,
            f"`{key}` {show(raw_value)} resolves to {show(resolved)} because the file sets `{shown_place(ctx, flag)}: "
            f"false`, which switches off the feature it belongs to, and nothing else in the file turns it on "
            f"({ctx.config_class} keeps {show(raw_value)} when `{shown_place(ctx, flag)}` is true; transformers "
            f"{ctx.version}). Intended; remove the vestigial `{key}` if you like.",
        )
    if gate is not None and not lost:
        shown = shown_place(ctx, gate)
        reach = window_covers_context(ctx, key, raw_value)
        if reach is not None:
            return ctx.finding(
                "DG008", key, raw_value, resolved,
                f"`{key}` {show(raw_value)} resolves to {show(resolved)}: {ctx.config_class} keeps it only when "
                f"`{shown}` is true, and `{shown}` defaults to false (transformers {ctx.version}). Nothing is lost: "
                f"a window of {show(raw_value)} is no shorter than the {reach} positions the model reads, so no "
                f"layer would attend differently with it. A vestigial value; remove it if you like.",
            )
        return ctx.finding(
            "DG012", key, raw_value, resolved,
            f"`{key}` is {show(raw_value)}, but {ctx.config_class} keeps it only when `{shown}` is true, `{shown}` "
            f"defaults to false, and the file leaves `{shown}` out, so the model code gets {show(resolved)} "
            f"(transformers {ctx.version}). The file sets a value of a feature without saying whether the feature "
            f'is on. Fix: settle it: add "{shown}": true if the model was trained with it, or '
            f'"{shown}": false (or remove `{key}`) if not.',
            line_key=key,
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


def declared_sliding_run_full(ctx: Context) -> list[int]:
    """The layers this node's own `layer_types` declares sliding_attention (with its own window) that
    the model will run with full attention: what the file states against what it gets."""
    raw_types, types = ctx.raw.get("layer_types"), ctx.values.get("layer_types")
    if not (isinstance(raw_types, list) and isinstance(types, list) and len(raw_types) == len(types)):
        return []
    window = ctx.values.get("sliding_window")
    if _is_int(window):
        return []  # the window survived: a retyped layer is the attention check's to judge
    return [i for i, t in enumerate(raw_types) if t == "sliding_attention" and types[i] in ("sliding_attention", "full_attention")]


def window_covers_context(ctx: Context, key: str, window: Any) -> int | None:
    """The number of positions the model reads, when a sliding window of ``window`` covers them all
    (a window that long is full attention); else None. The positions are `max_position_embeddings`,
    times a rope scaling factor where the file extends the context."""
    if key != "sliding_window" or not _is_int(window):
        return None
    positions = ctx.values.get("max_position_embeddings")
    if not _is_int(positions) or positions <= 0:
        return None
    for table in (ctx.values.get("rope_parameters"), ctx.values.get("rope_scaling")):
        factor = table.get("factor") if isinstance(table, dict) else None
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor > 1:
            positions = int(positions * factor)
            break
    return positions if window >= positions else None


def ranges(indices: list[int]) -> str:
    parts, start = [], None
    for i, n in enumerate(indices):
        if start is None:
            start = n
        if i + 1 == len(indices) or indices[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


def attention_line(ctx: Context) -> str:
    """What a legacy attention key became, layer by layer (Cohere2's sliding_window_pattern: 4 is
    three sliding layers and one full, repeated), for the reader to compare with the file."""
    types, window = ctx.values.get("layer_types"), ctx.values.get("sliding_window")
    if not isinstance(types, list) or not types:
        return ""
    kinds: dict[str, list[int]] = {}
    for i, kind in enumerate(types):
        label = f"sliding({window})" if kind == "sliding_attention" and _is_int(window) else (
            "full" if kind in ("full_attention", "sliding_attention") else str(kind))
        kinds.setdefault(label, []).append(i)
    return " The model runs " + "; ".join(f"{label} at layers {ranges(at)}" for label, at in kinds.items()) + "."
