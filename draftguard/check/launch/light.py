"""The launch's light tier: what vLLM 0.32.0 does with a ``vllm serve`` line and the configs it names,
from that version's code written down as rules (no vLLM import). The real tier (``vllm_probe``'s
"launch" request: vLLM's own serve parser and ``create_engine_config()``) is the authority; a test
marked ``vllm`` holds the two equal on every launch in tests/data.

Rules, with vLLM 0.32.0's source:
- length: ``--max-model-len`` above the derived length (``check.engines.light.vllm_max_len``) is
  refused unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` (vllm/config/model.py ``_get_and_verify_max_len``);
- dtype: float16 is refused for the model types of ``_FLOAT16_NOT_SUPPORTED_MODELS`` (gemma2, gemma3,
  gemma3_text, glm4 in 0.32.0), read from the version's generated registry (``check.engines.registry``);
- speculative: the draft architecture is renamed by method (``EAGLEConfig``: ``Eagle``+X unless it starts
  with Eagle, ``Eagle3``+X unless it starts or ends with Eagle3, ``DFlash``+X unless it starts or ends with
  DFlash or is LiLiCorrDraftModel; ``check.engines.registry.draft_architecture``) and must be in the
  version's registry (the generated one: a new release needs no hand list); EAGLE/EAGLE-3 drafts take the target's length, DFlash ``min(draft, target)``
  (``_maybe_override_draft_max_model_len``); the runner is V2 unless ``VLLM_USE_V2_MODEL_RUNNER`` says
  otherwise or V2 lacks a feature; which target layers each runner reads is ``check.engines.light``'s.

In: the parsed ``Flags``, the launch environment, the target's raw config and resolved values, and the
drafter's (or None).
Out: ``LaunchView`` (the fields both tiers fill). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from draftguard.check.drafter.engines import dflash_v1_refusal, eagle3_default_aux_ids
from draftguard.check.engines.light import (DTYPES, _draft_layer_windows, declared_dtype, dflash_vllm_aux,
                                           sglang_max_len, vllm_max_len)
from draftguard.check.engines import releases
from draftguard.check.engines.registry import data, draft_architecture
from draftguard.check.engines.view import text_values
from draftguard.check.findings import is_int
from draftguard.check.launch.flags import Flags, human_int, invalid_choice, unknown_option

# The engine versions whose launch code these rules encode: a launch asks these unless --engine names
# another (vLLM 0.33.0's serve and speculative code was not read for launches; its registry is).
LAUNCH_RULES = {"vllm": "0.32.0", "sglang": "0.5.23"}
TRUE = ("1", "true", "yes", "on")


@dataclass
class LaunchView:
    """What one engine version makes of one launch: the fields both tiers fill."""

    engine: str  # "vLLM 0.32.0"
    tier: str  # "light" or "engine"
    runner: str = ""  # the model runner this launch gets ("V1", "V2")
    refusal: str | None = None  # the engine's own words when it will not start
    refusal_where: str = ""
    architecture: str | None = None
    max_model_len: int | None = None
    derived_max_len: int | None = None  # what the engine derives from the config alone
    dtype: str | None = None
    method: str | None = None
    num_speculative_tokens: int | None = None
    draft_architecture: str | None = None
    draft_max_model_len: int | None = None
    layers_read: list[int] | None = None  # 0-based target layers the drafter is fed by this runner
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def renamed_draft(arch: str | None, method: str) -> str | None:
    """The architecture vLLM builds for a draft under ``method`` (EAGLEConfig); other methods keep it.

    Example::

        >>> renamed_draft("LlamaForCausalLMEagle3", "eagle"), renamed_draft("DFlashDraftModel", "eagle3")
        ('EagleLlamaForCausalLMEagle3', 'Eagle3DFlashDraftModel')
    """
    if arch is None or method not in ("eagle", "eagle3", "dflash"):
        return arch
    return draft_architecture(arch, method)


def _dashed(unknown: str, flags: Flags) -> str:
    """How argparse names it: an option with its dashes, a positional word as written."""
    return f"--{unknown}" if unknown in flags.options or any(n.split(".")[0] == unknown for n in flags.options) \
        else unknown


def with_overrides(values: dict[str, Any], overrides: Any) -> dict[str, Any]:
    """The values vLLM's ``get_config`` makes of a dict ``--hf-overrides``: each key set, a dict value merged
    into the sub-config it names (``ModelConfig._apply_dict_overrides``); anything else leaves them.

    Example::

        >>> with_overrides({"max_position_embeddings": 32768, "rope_parameters": {"rope_type": "default"}},
        ...                {"max_position_embeddings": 65536, "rope_parameters": {"factor": 2.0}})
        {'max_position_embeddings': 65536, 'rope_parameters': {'rope_type': 'default', 'factor': 2.0}}
    """
    if not isinstance(overrides, dict):
        return values
    out = dict(values)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = with_overrides(out[key], value)
        else:
            out[key] = value
    return out


def is_mtp(method: Any) -> bool:
    """vLLM's MTP methods: ``mtp`` and the per-family ``*_mtp`` names (``deepseek_mtp``, ``qwen3_5_mtp``)."""
    return isinstance(method, str) and (method == "mtp" or method.endswith("_mtp"))


def _parser_refusal(view: LaunchView, flags: Flags, prog: str, where: str) -> bool:
    """The release's parser refusing the launch at parse time, in argparse's words: an option it does
    not know, or a value outside an option's choices. True when it refuses (``view`` then says so)."""
    if (unknown := unknown_option(flags)) is not None:
        view.refusal = f"{prog}: error: unrecognized arguments: {_dashed(unknown, flags)}"
    elif (bad := invalid_choice(flags)) is not None:
        name, value, allowed = bad
        shown = ", ".join(repr(c) for c in allowed[:12]) + (", ..." if len(allowed) > 12 else "")
        view.refusal = f"{prog}: error: argument --{name}: invalid choice: {value!r} (choose from {shown})"
    else:
        return False
    view.refusal_where = where
    return True


def _release_facts(version: str) -> Any:
    """vLLM ``version``'s generated facts (``releases.ReleaseFacts``), or None where it has none."""
    return releases.facts("vllm", version) if version in releases.known("vllm") else None


def _release_methods(version: str) -> frozenset[str]:
    """The speculative methods vLLM ``version``'s own code names (empty where the release is not known)."""
    facts = _release_facts(version)
    return frozenset(facts.speculative_methods or ()) if facts is not None else frozenset()


def _unknown_quantization(version: str, method: str) -> bool:
    """A ``--quantization`` the release's methods lack (vLLM checks the asked method against them)."""
    return _release_facts(version) is not None and releases.refuses_value("vllm", version, "quantization", method)


def _env_true(env: dict[str, str], name: str) -> bool | None:
    value = env.get(name)
    return None if value is None else value.strip().lower() in TRUE


def vllm_view(flags: Flags, env: dict[str, str], raw: dict[str, Any], values: dict[str, Any],
              draft_raw: dict[str, Any] | None, draft_values: dict[str, Any] | None,
              engine: str = "vLLM 0.32.0", version: str = LAUNCH_RULES["vllm"]) -> LaunchView:
    """vLLM ``version``'s light view; its float16 refusals and registered architectures are that
    version's generated registry's (every version ``specs.KNOWN`` names ships one)."""
    view = LaunchView(engine, "light")
    if _parser_refusal(view, flags, "vllm serve", f"argparse (vLLM {version}'s vllm serve parser)"):
        return view
    quantization = (flags.value("quantization") or "").lower()
    if quantization and _unknown_quantization(version, quantization):
        view.refusal = f"Unknown quantization method: {quantization}."
        view.refusal_where = f"vllm/config/model.py ModelConfig._verify_quantization (vLLM {version}), at configuration"
        return view
    facts = data("vllm", version)
    if facts is None:  # a release whose parser and methods were read, not its model registry
        view.notes.append(f"vLLM {version}'s model registry was not generated: its architectures and float16 "
                          "refusals are not judged")
        facts = {"float16_not_supported": {}, "architectures": None}
    own = text_values(values)
    text = with_overrides(own, flags.data("hf-overrides"))
    archs = text.get("architectures") or raw.get("architectures") or [None]
    view.architecture = archs[0]
    default, _ = vllm_max_len(text)
    derived, _ = vllm_max_len(text, cap=True)  # LongRoPE: the trained length, though it serves the original by default
    asked = human_int(flags.value("max-model-len"))
    view.max_model_len = asked or default
    # what vLLM derives for this launch: its default, or the length asked where the model takes it (LongRoPE)
    view.derived_max_len = min(derived, asked) if asked and default and derived and asked > default else default
    if asked is not None and derived is not None and asked > derived and not _env_true(env, "VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        view.refusal = (f"User-specified max_model_len ({asked}) is greater than the derived max_model_len")
        view.refusal_where = "vllm/config/model.py _get_and_verify_max_len"
        return view
    dtype = (flags.value("dtype") or "auto").lower()
    stated = declared_dtype(raw)
    view.dtype = DTYPES.get(dtype) or ({"float32": "bfloat16"}.get(stated or "", stated) if dtype == "auto" else dtype)
    model_type = text.get("model_type") or raw.get("model_type")
    no_fp16 = facts["float16_not_supported"]
    if view.dtype == "float16" and isinstance(model_type, str) and model_type in no_fp16:
        view.refusal = f"The model type {model_type!r} does not support float16. Reason: {no_fp16[model_type]}"
        view.refusal_where = "vllm/config/model.py _check_valid_dtype"
        return view
    spec = flags.data("speculative-config")
    v2 = _env_true(env, "VLLM_USE_V2_MODEL_RUNNER")
    view.runner = "V1" if v2 is False else "V2"
    if not isinstance(spec, dict):
        return view
    method = spec.get("method")
    view.method = method
    methods = _release_methods(version)
    if isinstance(method, str) and methods and method not in methods:
        view.refusal = (f"speculative method {method!r} is not one of vLLM {version}'s methods "
                        f"({', '.join(sorted(methods))})")
        view.refusal_where = f"vllm/config/speculative.py SpeculativeConfig.method (vLLM {version})"
        return view
    view.num_speculative_tokens = spec.get("num_speculative_tokens") if is_int(spec.get("num_speculative_tokens")) else None
    if method in ("suffix", "medusa", "mlp_speculator", "custom_class") and v2 is None:
        view.runner = "V1"
    if is_mtp(method):  # the MTP draft's config is the target's as config.json states it (vllm-project/vllm 58080)
        view.draft_max_model_len, _ = vllm_max_len(own)
        if releases.mtp_drafter(version, raw) is None:  # the release's own hf_config_override, run on probes
            later = releases.first_mtp_drafting(raw, after=version)
            named = ", ".join(k.split(":", 1)[1] for k in releases.mtp_keys(raw)) or "it"
            served = facts["architectures"] is not None and view.architecture in facts["architectures"]
            view.refusal = (f"vLLM {version} maps no MTP draft model for {named} and stops at configuration "
                            "(NotImplementedError: the draft is not an MTP model type"
                            + (")" if served else ", or earlier where it does not serve the architecture at all)")
                            + (f"; vLLM {later} is the first release known here that drafts for it" if later else
                               "; no release known here drafts for it"))
            view.refusal_where = f"vllm/config/speculative.py SpeculativeConfig.hf_config_override (vLLM {version})"
            return view
    if draft_raw is None or draft_values is None or method not in ("eagle", "eagle3", "dflash"):
        return view
    draft_arch = (draft_raw.get("architectures") or [None])[0]
    view.draft_architecture = renamed_draft(draft_arch, method)
    if facts["architectures"] is not None and view.draft_architecture not in facts["architectures"]:
        view.refusal = f"Model architectures [{view.draft_architecture!r}] are not supported for now."
        view.refusal_where = "vllm/model_executor/models/registry.py, for the draft model"
        return view
    draft_len, _ = vllm_max_len(text_values(draft_values))
    served = view.max_model_len
    view.draft_max_model_len = served if method != "dflash" or draft_len is None or served is None else min(draft_len, served)
    n = text.get("num_hidden_layers")
    if method == "dflash":
        if view.runner == "V1" and (reason := dflash_v1_refusal(draft_values.get("layer_types"), draft_arch)):
            view.refusal = f"Model Runner V1 does not support: {reason}"
            view.refusal_where = "vllm/config/vllm.py _get_v1_model_runner_unsupported_features"
            return view
        windows, _, sliding = _draft_layer_windows(draft_values, draft_raw)
        if any(sliding) and not any(w is not None for w, s in zip(windows, sliding) if s):
            view.refusal = "DFlash sliding attention requires a window size"
            view.refusal_where = "vllm/model_executor/models/qwen3_dflash.py _resolve_layer_attention, at model build"
            return view
        if is_int(n):
            aux, _ = dflash_vllm_aux(draft_raw, view.runner, n)
            view.layers_read = [i - 1 for i in aux]
    elif method == "eagle3" and is_int(n):
        top = draft_raw.get("eagle_aux_hidden_state_layer_ids")
        nested = (draft_raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids") \
            if isinstance(draft_raw.get("eagle_config"), dict) else None
        aux = top or (nested if view.runner == "V1" else None) or eagle3_default_aux_ids(n)
        view.layers_read = [i - 1 for i in aux]
    return view


def sglang_view(flags: Flags, env: dict[str, str], raw: dict[str, Any], values: dict[str, Any],
                draft_raw: dict[str, Any] | None, engine: str = "SGLang 0.5.23") -> LaunchView:
    """SGLang's light view: the context length it derives (``check.engines.light.sglang_max_len``)
    against ``--context-length`` (refused above it unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN),
    and the speculative algorithm."""
    view = LaunchView(engine, "light")
    if _parser_refusal(view, flags, "sglang", "argparse (ServerArgs.add_cli_args)"):
        return view
    text = text_values(values)
    view.architecture = (text.get("architectures") or [None])[0]
    derived, _ = sglang_max_len(text)
    view.derived_max_len = derived
    asked = human_int(flags.value("context-length"))
    view.max_model_len = asked or derived
    if asked and derived and asked > derived and not _env_true(env, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"):
        view.refusal = (f"Warning: User-specified context_length ({asked}) is greater than the derived "
                        f"context_length ({derived}).")
        view.refusal_where = "python/sglang/srt/configs/model_config.py"
    view.dtype = DTYPES.get((flags.value("dtype") or "").lower())
    algorithm = flags.value("speculative-algorithm")
    view.method = algorithm.lower() if algorithm else None
    if draft_raw is not None:
        view.draft_architecture = (draft_raw.get("architectures") or [None])[0]
    return view
