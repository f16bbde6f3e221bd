"""A launch's view judged: rules DG300-DG309, each finding on the launch file's line of the flag (or
environment variable) it is about, naming engine, version, runner and tier.

In: the ``LaunchView`` (real or light tier), the ``Launch`` and its ``Flags``, the target's raw config
and resolved values, the drafter's (or None) and its detected format.
Out: ``judge`` -> ``Finding`` list. Pure: no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from draftguard.check.drafter.detect import DrafterFormat
from draftguard.check.engines.light import declared_dtype, vllm_max_len
from draftguard.check.engines.view import text_values
from draftguard.check.findings import RULES, Finding, Severity, is_int
from draftguard.check.launch.flags import Flags
from draftguard.check.launch.light import LaunchView, is_mtp
from draftguard.check.launch.sources import Launch

# The method (vLLM "method", SGLang --speculative-algorithm) each drafter family is served with.
METHOD_FOR = {"vllm": {"eagle": "eagle", "eagle3": "eagle3", "dflash": "dflash", "mtp": "mtp"},
              "sglang": {"eagle": "EAGLE", "eagle3": "EAGLE3", "dflash": "DFLASH", "mtp": "EAGLE"}}
LEN_FLAG = {"vllm": "max-model-len", "sglang": "context-length"}
SPEC_FLAGS = ("speculative-config", "speculative-algorithm", "speculative-draft-model-path",
              "speculative-num-draft-tokens")


class _Out:
    def __init__(self, view: LaunchView, launch: Launch):
        self.view, self.launch, self.found = view, launch, []
        runner = f"{view.runner} runner, " if view.runner else ""
        self.who = f"{view.engine} ({runner}{view.tier} tier)"

    def add(self, rule: str, key: str, line: int | None, raw: Any, resolved: Any, message: str, severity: Any = None) -> None:
        where = f" [{self.launch.where}]" if self.launch.where else ""
        self.found.append(Finding(rule, severity or RULES[rule].severity, key, raw, resolved, self.launch.file,
                                  line or self.launch.line, f"{self.who}{where}: {message}"))


def _flag_line(flags: Flags, *names: str) -> int | None:
    return next((flags.get(n).line for n in names if flags.get(n) is not None), None)


def _refusal_line(view: LaunchView, flags: Flags) -> tuple[str, int | None]:
    """The flag a refusal is about, by the engine's words."""
    text = (view.refusal or "").lower()
    if "repo id" in (view.refusal_where or "") and flags.model is not None:  # the model reference itself
        return "model", flags.model.line
    for word, names in (("max_model_len", ("max-model-len",)), ("context_length", ("context-length",)),
                        ("float16", ("dtype",)), ("dtype", ("dtype",)), ("quantization method", ("quantization",)),
                        ("--", ())):
        if word in text:
            if word == "--":
                flag = next((n for n in flags.options if f"--{n}" in text), None)
                return (f"--{flag}", flags.get(flag).line) if flag else ("command", None)
            line = _flag_line(flags, *names)
            if line is not None:
                return f"--{names[0]}", line
    if view.method or any(n in flags.options for n in SPEC_FLAGS):
        name = next((n for n in SPEC_FLAGS if n in flags.options), "speculative-config")
        return f"--{name}", _flag_line(flags, name)
    return "command", None


def judge(view: LaunchView, launch: Launch, flags: Flags, raw: dict[str, Any], values: dict[str, Any],
          draft_raw: dict[str, Any] | None, draft_values: dict[str, Any] | None,
          fmt: DrafterFormat | None) -> list[Finding]:
    out = _Out(view, launch)
    _method(out, flags, fmt, launch.engine)
    if view.refusal:
        key, line = _refusal_line(view, flags)
        out.add("DG300", key, line, None, view.refusal, f"the engine refuses this launch: \"{view.refusal}\"")
        _overrides(out, flags, raw)
        return out.found
    _context(out, flags, values, launch)
    _dtype(out, flags, raw)
    _mtp_overrides(out, flags, view)
    if draft_values is not None and fmt is not None:
        _draft_len(out, flags, draft_values, view)
        _block(out, flags, fmt, view)
        _layers(out, flags, fmt, view)
    _overrides(out, flags, raw)
    return out.found


def _method(out: _Out, flags: Flags, fmt: DrafterFormat | None, engine: str) -> None:
    if fmt is None or fmt.family not in METHOD_FOR[engine]:
        return
    if engine == "vllm":
        spec = flags.data("speculative-config") or {}
        asked, key = spec.get("method"), "--speculative-config"
    else:
        asked, key = flags.value("speculative-algorithm"), "--speculative-algorithm"
    want = METHOD_FOR[engine][fmt.family]
    if asked is None or str(asked).lower() == want.lower() or (engine == "vllm" and fmt.family == "mtp"):
        return
    if engine == "sglang" and str(asked).upper() in ("NEXTN",) and fmt.family == "mtp":
        return
    out.add("DG304", key, _flag_line(flags, key[2:]), asked, want,
            f"the drafter is {fmt.article} {fmt.label} head ({fmt.architecture or fmt.kind}) but the launch asks for "
            f"method {asked!r}: it is served as another format (an EAGLE-3 head run as EAGLE accepts about one token "
            f"per step). Use {want!r}")


def _context(out: _Out, flags: Flags, values: dict[str, Any], launch: Launch) -> None:
    view, text = out.view, text_values(values)
    served, derived = view.max_model_len, view.derived_max_len
    name = LEN_FLAG[launch.engine]
    line = _flag_line(flags, name)
    if is_int(served) and is_int(derived) and served > derived:
        allow = "VLLM_ALLOW_LONG_MAX_MODEL_LEN" if launch.engine == "vllm" else "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
        set_at = launch.env.get(allow, (None, None))[1]
        out.add("DG301", f"--{name}", line, served, derived,
                f"serves {served} tokens of context, past the {derived} the model's config allows; {allow}"
                f"{f' (line {set_at})' if set_at else ''} lets it start. Positions past {derived} were never "
                "trained: RoPE models give NaN or garbage there, absolute positions index out of bounds")
        return
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    original = (rope.get("original_max_position_embeddings") if isinstance(rope, dict) else None) \
        or text.get("original_max_position_embeddings")
    kind = rope.get("rope_type") or rope.get("type") if isinstance(rope, dict) else None
    if is_int(served) and is_int(original) and served > original and kind not in (None, "default"):
        out.add("DG302", f"--{name}" if line else "max_model_len", line, served, original,
                f"serves {served} tokens, past the {original} the model was pre-trained on "
                f"(original_max_position_embeddings); RoPE {kind} scaling"
                f"{' factor ' + format(rope.get('factor'), 'g') if isinstance(rope.get('factor'), (int, float)) else ''}"
                " carries it there. Quality past the original length is the scaling's, not the training's")


def _dtype(out: _Out, flags: Flags, raw: dict[str, Any]) -> None:
    asked = flags.get("dtype")
    stated = declared_dtype(raw)
    served = out.view.dtype
    if asked is None or served is None or stated is None or served == stated:
        return
    severity = RULES["DG303"].severity
    if served == "float16" and stated == "bfloat16":
        severity = Severity.WARNING
    out.add("DG303", "--dtype", asked.line, stated, served,
            f"runs the weights in {served}, cast from the {stated} config.json states"
            + (": bfloat16 values past float16's range overflow to inf" if severity.value == "warning" else ""),
            severity)


def _draft_len(out: _Out, flags: Flags, draft_values: dict[str, Any], view: LaunchView) -> None:
    own, _ = vllm_max_len(text_values(draft_values))
    served = view.max_model_len
    if not (is_int(own) and is_int(served)) or own >= served:
        return
    if out.launch.engine == "sglang":
        happens = "SGLang runs the draft for the target's whole context"
    elif view.method == "dflash":
        happens = (f"vLLM serves the draft with max_model_len {view.draft_max_model_len}, and its proposer runs "
                   f"to the target's {served} anyway")
    else:
        happens = f"vLLM raises the draft's max_position_embeddings to {served} (vLLM #48894)"
    key = "--speculative-config" if out.launch.engine == "vllm" else "--speculative-draft-model-path"
    out.add("DG305", key, _flag_line(flags, "speculative-config", "speculative-draft-model-path"),
            own, served, f"the drafter was built for {own} positions and this launch serves {served}: {happens}; "
            f"past {own} the drafter runs positions it never trained on, and acceptance drops there")


def _mtp_overrides(out: _Out, flags: Flags, view: LaunchView) -> None:
    """vLLM's MTP draft is built from the target's config as config.json states it: a dict ``--hf-overrides``
    that lengthens the target is not inherited (vllm-project/vllm 58080). Past the draft's own length it
    drafts dummy token 0, and acceptance falls to about 0 there: an error."""
    own, served = view.draft_max_model_len, view.max_model_len
    if out.launch.engine != "vllm" or not is_mtp(view.method) or not isinstance(flags.data("hf-overrides"), dict):
        return
    if not (is_int(own) and is_int(served)) or served <= own:
        return
    out.add("DG305", "--hf-overrides", _flag_line(flags, "hf-overrides"), own, served,
            f"--hf-overrides lengthens the target to {served} tokens, but the MTP draft does not inherit a dict "
            f"--hf-overrides (vllm-project/vllm 58080): it keeps the {own} of config.json, and past {own} it drafts "
            "dummy token 0, so acceptance falls to about 0 there. Fix: state the length in config.json (or serve "
            f"--max-model-len {own} at most)", Severity.ERROR)


def _block(out: _Out, flags: Flags, fmt: DrafterFormat, view: LaunchView) -> None:
    block = next((s.value for s in fmt.block_sizes if is_int(s.value)), None)
    n = view.num_speculative_tokens
    if fmt.family != "dflash" or not is_int(block) or not is_int(n) or n <= block - 1:
        return
    out.add("DG306", "--speculative-config", _flag_line(flags, "speculative-config", "speculative-num-draft-tokens"),
            n, block - 1, f"num_speculative_tokens {n} is more than the {block - 1} a DFlash block of {block} "
            f"drafts: the drafter was trained on blocks of {block} (one anchor, {block - 1} masks), and the tokens "
            "past that are positions it never saw")


def _layers(out: _Out, flags: Flags, fmt: DrafterFormat, view: LaunchView) -> None:
    if view.layers_read is None:
        return
    stated = [s.value for s in fmt.target_ids if isinstance(s.value, list)]
    aux = [s.value for s in fmt.aux_ids if isinstance(s.value, list)]
    trained = stated[0] if stated else ([i - 1 for i in aux[0]] if aux else None)
    line = _flag_line(flags, "speculative-config", "speculative-draft-model-path")
    if trained is not None and list(trained) != list(view.layers_read):
        out.add("DG307", "--speculative-config", line, trained, view.layers_read,
                f"feeds the drafter target layers {view.layers_read}, but it states {list(trained)}: the "
                f"{view.runner or 'engine'} runner this launch gets reads another list", RULES["DG203"].severity)
        return
    out.add("DG307", "--speculative-config", line, trained, view.layers_read,
            f"feeds the drafter target layers {view.layers_read} (the {view.runner or 'engine'} runner this launch gets)")


def _overrides(out: _Out, flags: Flags, raw: dict[str, Any]) -> None:
    name = "hf-overrides" if out.launch.engine == "vllm" else "json-model-override-args"
    data = flags.data(name)
    if isinstance(data, dict):
        for key, value in data.items():
            if key in raw and raw[key] != value:
                out.add("DG308", f"--{name}", flags.get(name).line, raw[key], value,
                        f"overrides `{key}` {json.dumps(raw[key])[:60]} from config.json with {json.dumps(value)[:60]}: "
                        "the repo's own setting is undone for this deployment")
    if flags.get("disable-sliding-window") is not None and (raw.get("sliding_window") or "sliding_attention" in
                                                           json.dumps(raw.get("layer_types") or [])):
        out.add("DG308", "--disable-sliding-window", flags.get("disable-sliding-window").line,
                raw.get("sliding_window"), None,
                "turns off the sliding window config.json sets: every layer attends to the whole context, which the "
                "model was not trained to do")
