"""Findings from engine views (DG200-DG206): what an engine serves that the file, transformers, the
trainer or another engine does not. Each message names the engine, its version, the runner, the
transformers version and the tier that made the view.

In: ``EngineView`` objects of one config (any tier), its raw config, its ``TargetResult``, a
``line_of`` for its keys, and for a drafter its family and target layer count.
Out: a list of ``Finding``. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Callable

from draftguard.check.engines.light import declared_dtype
from draftguard.check.engines.view import EngineView, transformers_windows
from draftguard.check.findings import RULES, Finding, Severity, TargetResult, is_int, show


def _runs(indices: list[int]) -> str:
    parts, start = [], None
    for i, n in enumerate(indices):
        start = n if start is None else start
        if i + 1 == len(indices) or indices[i + 1] != n + 1:
            parts.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ", ".join(parts)


class _Judge:
    def __init__(self, raw: dict[str, Any], result: TargetResult, line_of: Callable[..., int | None]):
        self.raw, self.result, self.line_of = raw, result, line_of
        self.findings: list[Finding] = []

    def add(self, rule: str, key: str, raw: Any, resolved: Any, message: str, severity: Severity | None = None) -> None:
        line = self.line_of(key.split(".")[0]) if key in self.raw or key.split(".")[0] in self.raw else None
        self.findings.append(Finding(rule, severity or RULES[rule].severity, key, raw, resolved, self.result.file,
                                     line, message))


def judge_views(views: list[EngineView], raw: dict[str, Any], result: TargetResult,
                line_of: Callable[..., int | None], *, family: str | None = None,
                num_target_layers: int | None = None, weights_dtype: str | None = None) -> list[Finding]:
    """Every engine finding for one config, from its views (one per engine version and runner)."""
    judge = _Judge(raw, result, line_of)
    for view in views:
        _refusal(judge, view)
        _windows(judge, view, drafter=family is not None)
        if family is None:
            _max_len(judge, view)
        if family is not None and num_target_layers is not None and "prenorm" in view.notes:
            _prenorm(judge, view, num_target_layers, family)
    if family is None:
        _dtype(judge, views, weights_dtype)
    if family == "dflash":
        _layers_read(judge, views)
    return judge.findings


def _refusal(judge: _Judge, view: EngineView) -> None:
    if view.refusal is None:
        return
    judge.add("DG200", "architectures", None, view.refusal,
              f"{view.who} will not serve this: \"{view.refusal}\""
              + (f" ({view.refusal_where})" if view.refusal_where else "") + ". Fix: make the config load as it was trained "
              "(the other findings on this file say what is lost), or serve it with an engine that runs it.")


def _windows(judge: _Judge, view: EngineView, *, drafter: bool) -> None:
    effective = transformers_windows(judge.result)
    if view.windows is None or view.refusal is not None or len(view.windows) != len(effective):
        return
    limit = view.max_model_len
    dropped = [i for i, (t, e) in enumerate(zip(effective, view.windows))
               if t is not None and e is None and not (limit and t >= limit)]
    added = [i for i, (t, e) in enumerate(zip(effective, view.windows)) if t is None and e is not None]
    if dropped:
        window = effective[dropped[0]]
        judge.add("DG201", "sliding_window", window, f"full attention at layers {_runs(dropped)}",
                  f"Layers {_runs(dropped)} slide with a window of {window} in transformers, but {view.who} runs "
                  f"them with full attention: {view.windows_why}. The model attends to the whole context where "
                  "it was trained to slide, and quality drops past the window with no error. Fix: serve it "
                  "with an engine that keeps the window, or cap requests at the window.")
    if added and not drafter and is_int(judge.raw.get("sliding_window")):
        # The file's own window, which transformers never applies (DG015) and this engine does.
        window = view.windows[added[0]]
        judge.add("DG201", "sliding_window", judge.raw["sliding_window"], f"sliding({window}) at layers {_runs(added)}",
                  f"Layers {_runs(added)} run full attention in transformers, which never applies this "
                  f"`sliding_window`, but {view.who} gives them a window of {window}: {view.windows_why}. "
                  f"Served there, they see only the last {window} tokens, where the model transformers runs "
                  "(and evaluates) sees the whole context. Fix: remove the key if the model was trained with "
                  "full attention (or serve with --disable-sliding-window); if it was trained with a window, "
                  "state it in a form transformers applies.")
    elif added:
        window = view.windows[added[0]]
        judge.add("DG201", "layer_types", None, f"sliding({window}) at layers {_runs(added)}",
                  f"Layers {_runs(added)} run full attention in transformers{' (as trained)' if drafter else ''}, "
                  f"but {view.who} gives them a window of {window}: {view.windows_why}. They see only the last "
                  f"{window} tokens. Fix: give the target and the drafter their own windows explicitly, or "
                  "serve the drafter where its full layers stay full.")


def _max_len(judge: _Judge, view: EngineView) -> None:
    stated = judge.raw.get("max_position_embeddings", (judge.result.values or {}).get("max_position_embeddings"))
    if not is_int(stated) or view.max_model_len is None or view.max_model_len == stated:
        return
    judge.add("DG202", "max_position_embeddings", stated, view.max_model_len,
              f"config.json says {stated} positions, but {view.who} serves a max_model_len of {view.max_model_len} "
              f"({view.max_len_why}). Requests past {min(stated, view.max_model_len)} tokens "
              f"{'are refused' if view.max_model_len < stated else 'run past the trained length'}. Fix: pass "
              f"--max-model-len explicitly when serving, or state the length the engine should use.")


def _dtype(judge: _Judge, views: list[EngineView], weights_dtype: str | None) -> None:
    stated = declared_dtype(judge.raw)
    trained = stated or weights_dtype
    served = {v.engine: v for v in views if v.dtype is not None}
    if not served:
        return
    disagree = len({v.dtype for v in served.values()}) > 1
    for view in served.values():
        if view.dtype == stated and not disagree:
            continue
        fp16_for_bf16 = view.dtype == "float16" and trained == "bfloat16"
        severity = Severity.WARNING if (fp16_for_bf16 or disagree) else Severity.INFO
        others = "; ".join(f"{v.engine} runs {v.dtype}" for v in served.values() if v is not view)
        judge.add("DG205", "torch_dtype" if "torch_dtype" in judge.raw else "dtype", stated or None, view.dtype,
                  f"{view.who} runs this model in {view.dtype} ({view.dtype_why})."
                  + (f" The engines disagree: {others}." if disagree else "")
                  + (" float16 overflows where bfloat16 does not; a model trained in bfloat16 or float32 can "
                     "produce inf/NaN." if view.dtype == "float16" else "")
                  + " Fix: pass --dtype explicitly when serving, or state the trained dtype in config.json.",
                  severity)


def _prenorm(judge: _Judge, view: EngineView, n: int, family: str) -> None:
    key = "dflash_config.target_layer_ids" if family == "dflash" else "eagle_aux_hidden_state_layer_ids"
    judge.add("DG204", key, n - 1, "pre-norm residual",
              f"The drafter reads target layer {n - 1}, the last of {n}. {view.who} feeds it that layer's "
              "residual stream before the final norm (aux id N is captured inside the layer loop; the norm "
              "comes after it), while transformers' hidden_states[-1], which drafters are trained on, is after "
              "the norm. The features differ in scale and acceptance drops with no error. Fix: train on and "
              f"state layers up to {n - 2} (z-lab's default ends at N-3), or train on the pre-norm stream.")


def _layers_read(judge: _Judge, views: list[EngineView]) -> None:
    read = [v for v in views if v.layers_read is not None and v.refusal is None]
    for v in views:
        if "uncaptured" in v.notes:
            judge.add("DG200", "dflash_config.target_layer_ids", v.layers_read, None,
                      f"{v.who} cannot feed this drafter: it captures the hidden state entering each target layer, "
                      "so the last layer's output (the drafter's last id) is never captured, the feature list "
                      "comes up short and the draft fails at its first forward. Fix: state layers below N-1.")
    if len({tuple(v.layers_read) for v in read}) < 2:
        return
    stated = judge.raw.get("dflash_config", {}).get("target_layer_ids") if isinstance(judge.raw.get("dflash_config"), dict) else None
    stated = stated if stated is not None else judge.raw.get("target_layer_ids")
    known = isinstance(stated, list) and stated
    wrong = [v for v in read if known and v.layers_read != stated]
    each = "; ".join(f"{v.who} {v.layers_why}, so target layers {show(v.layers_read)}" for v in read)
    severity = Severity.ERROR if wrong else Severity.WARNING
    key = "target_layer_ids" if "target_layer_ids" in judge.raw else "dflash_config.target_layer_ids"
    judge.add("DG203", key, stated, [v.layers_read for v in read],
              f"The engines feed this drafter different target layers: {each}."
              + (f" It states {show(stated)}, which its trainer read, so "
                 + ", ".join(v.who for v in wrong) + " feed it the wrong features." if wrong else "")
              + " Fix: state the ids in `dflash_config.target_layer_ids`, which every runner and engine reads.",
              severity)
