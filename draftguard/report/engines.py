"""What the engines serve (``--engine``), as the text view and the markdown views show it: per config, an
effective-attention line per engine (and per vLLM runner where they differ) beside transformers', and
the engine section of the sticky comment and step summary.

In: a ``Report`` whose ``TargetResult``s hold ``engine_views`` (``check.engines.EngineView``).
Out: ``window_text`` (per-layer windows as runs), ``attention_lines`` (label, text) for one target, and
``render_engines_section`` -> markdown, or None when no target has an engine view.
"""

from __future__ import annotations

from typing import Any

from draftguard.check.engines.view import transformers_windows
from draftguard.check.findings import LayerAttention, Report, TargetResult, attention_runs
from draftguard.report.comment import code, esc, esc_message


def _layer_text(window: int | None) -> str:
    return "full" if window is None else f"sliding({window})"


def window_text(windows: list[int | None] | None) -> str:
    """Per-layer windows (None: full attention) as runs of layers, the way the attention table names them.

    Example::

        >>> window_text([4096, 4096, None]), window_text([]), window_text(None)
        ('sliding(4096) at layers 0-1, full at layer 2', 'not known', 'not known')
    """
    if not windows:
        return "not known"
    rows = [LayerAttention(i, _layer_text(w), _layer_text(w)) for i, w in enumerate(windows)]
    return ", ".join(f"{kind} at layer{'s' if '-' in layers else ''} {layers}"
                     for layers, kind, _ in attention_runs(rows))


def engine_label(view: Any) -> str:
    """"vLLM 0.32.0, V2 runner (light tier)": who a line speaks for, shorter than ``EngineView.who``."""
    runner = f", {view.runner} runner{'s' if ' and ' in view.runner else ''}" if view.runner else ""
    return f"{view.engine}{runner} ({view.tier} tier)"


def view_attention(view: Any) -> str:
    """What one engine view runs: its layers' windows, or its refusal in the engine's own words."""
    if view.refusal:
        return f'refuses to serve it: "{view.refusal}"'
    return window_text(view.windows)


def attention_lines(result: TargetResult, transformers_version: str) -> list[tuple[str, str]]:
    """(who, effective attention) for transformers and then each engine view of one target; empty
    when no engine was asked for.

    Example::

        >>> from types import SimpleNamespace as NS
        >>> from draftguard.check.engines.view import EngineView
        >>> t = NS(attention=[], values={"sliding_window": 8, "num_hidden_layers": 2},
        ...        engine_views=[EngineView("SGLang 0.5.23", "5.19.0", "light", windows=[None, None])])
        >>> attention_lines(t, "5.24.0")
        [('transformers 5.24.0', 'sliding(8) at layers 0-1'), ('SGLang 0.5.23 (light tier)', 'full at layers 0-1')]
    """
    if not result.engine_views:
        return []
    lines = [(f"transformers {transformers_version}", window_text(transformers_windows(result)))]
    return lines + [(engine_label(v), view_attention(v)) for v in result.engine_views]


def _layers(view: Any) -> str:
    if view.layers_read is None:
        return ""
    return code(", ".join(str(i) for i in view.layers_read)) + (f" ({esc_message(view.layers_why)})" if view.layers_why else "")


def render_engines_section(report: Report) -> str | None:
    """The engine section: per config, per engine and runner, what it serves (max_model_len, each
    layer's window, the target layers a drafter reads, dtype) or its refusal. None without engines."""
    targets = [t for t in report.targets if t.engine_views]
    if not targets:
        return None
    out = ["### What the engines serve", ""]
    for t in targets:
        out += [f"{code(t.file)} (transformers {esc(report.transformers_version)}: "
                f"{esc(window_text(transformers_windows(t)))})", "",
                "| engine | max_model_len | attention | target layers read | dtype | refuses |",
                "|---|---|---|---|---|---|"]
        for v in t.engine_views:
            length = code(v.max_model_len) if v.max_model_len is not None else ""
            dtype = code(v.dtype) if v.dtype else ""
            refusal = f':x: "{esc(v.refusal)}" ({esc(v.refusal_where)})' if v.refusal else ""
            attention = "not served" if v.refusal else esc(window_text(v.windows))
            out.append(f"| {esc(engine_label(v))} | {length} | {attention} | {_layers(v)} | "
                       f"{dtype} | {refusal} |")
        out.append("")
    out.append("The findings DG200-DG205 above say where these differ from the file, transformers or the trainer.")
    return "\n".join(out).rstrip()
