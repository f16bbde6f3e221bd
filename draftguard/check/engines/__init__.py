"""The engine's view: what vLLM and SGLang serve for a config, and where that differs from the file,
transformers, the trainer or each other (DG200-DG206). Two tiers make the same ``EngineView``: the
light tier (``light``: each engine version's code as rules, base install) always; the real engine
(``real``: vLLM's own config path and model classes on torch's meta device, in its own environment)
where one is installed. docs/engines.md says what each engine reads, with source lines.

In: a checked ``Snapshot`` and its ``TargetResult``, the ``EngineSpec`` list (``parse_engines``), an
explicit drafter target, and the run's cache of fetched targets.
Out: ``check_engines`` -> (findings, views): the engine findings for that config and the views they
came from (for the text view and the tier comparison).
"""

from __future__ import annotations

from typing import Any

from draftguard.check import resolver
from draftguard.check.drafter.check import _cached_target
from draftguard.check.drafter.detect import detect_drafter, layer_config
from draftguard.check.drafter.target import find_target
from draftguard.check.engines import light, releases
from draftguard.check.engines.rules import judge_views
from draftguard.check.engines.specs import EngineSpec, parse_engines, sort_key
from draftguard.check.engines.view import EngineView, transformers_windows
from draftguard.check.findings import Finding, TargetResult, is_int
from draftguard.check.weights import read_weights
from draftguard.snapshot import BadInput, Snapshot

__all__ = ["EngineSpec", "EngineView", "check_engines", "parse_engines", "views_for"]


def views_for(spec: EngineSpec, raw: dict[str, Any], result: TargetResult, family: str | None,
              target_values: dict[str, Any] | None, weights_dtype: str | None = None) -> list[EngineView]:
    """The light tier's views of one config by one engine version. The values are those of the
    transformers installed here; each view names it beside the one the engine installs."""
    values = result.values or {}
    if family in ("dflash", "eagle3"):
        views = light.drafter_views(spec, raw, values, family, target_values)
    else:
        views = light.target_views(spec, raw, values, transformers_windows(result), weights_dtype)
    here = resolver.transformers_version()
    if here != spec.transformers:
        for view in views:
            view.transformers = f"{here}; {spec.shown} installs {spec.transformers}"
    return views


def merge_runners(views: list[EngineView]) -> list[EngineView]:
    """One view for vLLM's V1 and V2 runners where they serve the same thing, so a finding is said once.

    Example::

        >>> a, b = EngineView("vLLM 0.32.0", "5.19.0", "light", runner="V1"), EngineView("vLLM 0.32.0", "5.19.0", "light", runner="V2")
        >>> [v.runner for v in merge_runners([a, b])]
        ['V1 and V2']
    """
    out: list[EngineView] = []
    for view in views:
        twin = next((o for o in out if o.engine == view.engine and o.runner == "V1" and view.runner == "V2"
                     and _served(o) == _served(view)), None)
        if twin is not None:
            twin.runner = "V1 and V2"
        else:
            out.append(view)
    return out


def _served(view: EngineView) -> tuple:
    """What a view says is served, without the words on why (which name the runner)."""
    return (view.architecture, view.max_model_len, view.dtype, view.windows, view.layers_read, view.refusal,
            sorted(view.notes))


def _weights_dtype(snapshot: Snapshot) -> str | None:
    """The dtype most tensors hold, from local safetensors headers only (vLLM reads them when
    config.json names no dtype); a Hub snapshot is not fetched for it."""
    if snapshot.is_hub:
        return None
    weights = read_weights(snapshot)
    counts = weights.dtypes if weights is not None else {}
    top = max(counts, key=counts.get) if counts else None
    return {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}.get(top or "")


_FETCH = object()  # check_engines' default: find and read a drafter's target itself


def check_engines(snapshot: Snapshot, result: TargetResult, specs: list[EngineSpec], *, target: str | None = None,
                  trust_remote_code: bool = False, cache: dict | None = None,
                  real: Any = None, target_model: Any = _FETCH) -> tuple[list[Finding], list[EngineView]]:
    """The engine findings of one checked config, and the views they came from. ``real`` is a
    ``real.RealEngines`` (or None): where it serves an engine version, its views replace the light
    tier's for that version. ``target_model``: a drafter's target already read by the caller (a
    ``TargetModel``, or None when it has none), which is then not looked for again."""
    full = snapshot.load_json()
    raw, prefix = layer_config(full)
    fmt = detect_drafter(full)
    family = fmt.family if fmt is not None and fmt.family in ("dflash", "eagle3") and not prefix else None
    if target_model is _FETCH:
        target_model = _target(snapshot, fmt, target, trust_remote_code, cache) if family is not None else None
    target_values = dict(target_model.values) if target_model is not None else None
    folder = str(snapshot.local_dir) if snapshot.local_dir is not None else None
    target_folder = (str(target_model.snapshot.local_dir) if target_model is not None
                     and target_model.snapshot.local_dir is not None else None)
    weights_dtype = _weights_dtype(snapshot) if family is None and light.declared_dtype(raw) is None else None
    views: list[EngineView] = []
    for spec in specs:
        if (gone := removed_method(spec, fmt)) is not None:  # the release has no method to serve it with
            views.append(gone)
            continue
        # vLLM serves a DSpark drafter with its own method ("dspark"), not as a DFlash one
        method = "dspark" if fmt is not None and fmt.label == "DSpark" and family == "dflash" else family
        got = real.views(spec, folder, method, target_folder) if real is not None else None
        if got is None:
            got = views_for(spec, raw, result, family, target_values, weights_dtype)
            failed = [w for s, f, w in (getattr(real, "fallbacks", None) or []) if s == spec and f == folder]
            for view in got if failed else []:  # the real engine ran and failed here: say so, claim no more
                view.fallback = f"{spec.shown} itself could not take it here: {failed[-1][:200]}"
        views.extend(got)
    views = merge_runners(views)
    n = target_values.get("num_hidden_layers") if target_values else None
    findings = judge_views(views, raw, result, snapshot.line_of, family=family,
                           num_target_layers=n if is_int(n) else None, weights_dtype=weights_dtype)
    for finding in findings:
        finding.key = prefix + finding.key
    return findings, views


# The vLLM speculative method each drafter family is served with.
SERVED_WITH = {"medusa": "medusa", "mlp_speculator": "mlp_speculator", "eagle": "eagle", "eagle3": "eagle3",
               "dflash": "dflash", "mtp": "mtp"}


def removed_method(spec: EngineSpec, fmt: Any) -> EngineView | None:
    """A refusal view where vLLM release ``spec`` has no speculative method for the drafter's family
    (Medusa and MLPSpeculator heads from vLLM 0.33.0 on): the release's methods are its own code's
    (``releases``), and the message names the last release that served it. None where it has one, or
    the release's methods are not known."""
    method = SERVED_WITH.get(fmt.family) if fmt is not None and spec.name == "vllm" else None
    if method is None or spec.version not in releases.known("vllm"):
        return None
    methods = releases.facts("vllm", spec.version).speculative_methods
    if not methods or method in methods:
        return None
    served = [v for v in releases.known("vllm") if method in (releases.facts("vllm", v).speculative_methods or ())]
    older = [v for v in served if sort_key(v) < sort_key(spec.version)]
    view = EngineView(spec.shown, spec.transformers, light.LIGHT, architecture=fmt.architecture)
    view.refusal = (f"vLLM {spec.version} has no speculative method {method!r} to serve this {fmt.label} drafter"
                    + (f" (last served by vLLM {older[-1]})" if older else ""))
    view.refusal_where = (f"vllm/config/speculative.py SpeculativeConfig.method, whose methods in vLLM {spec.version} "
                          "are read from its own code, at configuration")
    return view


def _target(snapshot: Snapshot, fmt: Any, target: str | None, trust_remote_code: bool,
            cache: dict | None) -> Any:
    """The drafter's target (a ``TargetModel``), fetched once per run (the drafter check's cache)."""
    try:
        where = find_target(snapshot, fmt, target)
        if where is None:
            return None
        return _cached_target(snapshot, where, {} if cache is None else cache, trust_remote_code)
    except BadInput:
        return None  # the drafter check already reported the target it could not read
