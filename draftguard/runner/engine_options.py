"""The vLLM backend's options and the drafter facts they depend on, in plain Python (vLLM is not imported).

In: ``draftguard accept``'s engine flags, a drafter and a target (folders or Hub ids).
Out: validated ``EngineOptions`` (``VllmOptionError`` names an option out of range), ``DrafterFacts``
(block size, window), the target's stop ids and the long-context prompt that runs past the drafter's
window. The engine itself is ``runner/vllm.py``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from draftguard.check.drafter.detect import detect_drafter, is_mtp_assistant
from draftguard.errors import VllmOptionError, install_hint
from draftguard.runner.mtp_weights import mtp_count
from draftguard.snapshot import BadInput, load_snapshot


INSTALL_HINT = install_hint("vllm")
MODEL_RUNNERS = ("auto", "v1", "v2")
# What --model-runner takes: one runner, or both (each measured, runner/model_runners.py).
MODEL_RUNNER_CHOICES = (*MODEL_RUNNERS, "both")
# vLLM reads this when the engine starts; unset means vLLM's own default for the model.
RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
# Where vLLM's logger writes; its default is stdout, which must carry only the result (--format json).
LOG_STREAM_ENV = "VLLM_LOGGING_STREAM"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tokenizer_config.json")
DTYPES = ("auto", "float32", "bfloat16", "float16")
METHODS = ("dflash", "eagle3", "mtp")
# vLLM's and the reference's draft length for an EAGLE-3 head when --num-speculative-tokens is not given.
EAGLE3_SPECULATIVE_TOKENS = 3


@dataclass
class EngineOptions:
    """vLLM engine settings for the acceptance test.

    ``long_context_tokens``: None picks twice the drafter's largest sliding window (no long prompt
    when the drafter has no sliding layers); 0 turns the long prompt off."""

    attention_backend: str | None = None
    draft_attention_backend: str | None = None
    model_runner: str = "auto"
    max_model_len: int | None = None
    long_context_tokens: int | None = None
    num_speculative_tokens: int | None = None
    gpu_memory_utilization: float | None = None  # None: vLLM's 0.85 on a GPU; on its CPU build see cpu_kv_cache_env
    enforce_eager: bool = False
    dtype: str = "auto"
    method: str = "dflash"  # vLLM's speculative_config method: dflash or eagle3 (``drafting_method``)
    compilation_config: dict[str, Any] | None = None  # vLLM's own --compilation-config, passed as it is

    def to_dict(self) -> dict[str, Any]:
        """The engine settings; ``method`` is left out: the result records it as ``run.method``."""
        out = asdict(self)
        out.pop("method")
        return out


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the vLLM engine options to ``draftguard accept``'s parser (used by --backend vllm|both).

    Example::

        >>> p = argparse.ArgumentParser(); add_engine_arguments(p)
        >>> engine_options(p.parse_args(["--model-runner", "v2", "--max-model-len", "4096"])).model_runner
        'v2'
    """
    g = parser.add_argument_group("vLLM engine (--backend vllm|both)")
    g.add_argument("--attention-backend", metavar="NAME",
                   help="vLLM attention backend for the target and the drafter, e.g. FLASH_ATTN, "
                   "FLASHINFER, TRITON_ATTN (default: vLLM picks)")
    g.add_argument("--draft-attention-backend", metavar="NAME",
                   help="attention backend for the drafter only (vLLM's speculative_config.attention_backend)")
    # No argparse choices: a bad value is one line and exit 2 (check_model_runner), not a usage block.
    g.add_argument("--model-runner", default="auto", metavar="{" + ",".join(MODEL_RUNNER_CHOICES) + "}",
                   help=f"vLLM's model runner: v1 or v2 ({RUNNER_ENV}=0/1); both: each in its own engine, and the "
                   "reference feeds an EAGLE-3 head the aux layers each runner reads, to name the runner that "
                   "collapses (docs/acceptance.md); default: vLLM's choice")
    g.add_argument("--max-model-len", type=int, metavar="N", help="vLLM max_model_len (default: the target's)")
    g.add_argument("--long-context-tokens", type=int, metavar="N",
                   help="add one prompt of N tokens, longer than the drafter's sliding window "
                   "(default: twice the window when the drafter slides; 0: none)")
    g.add_argument("--num-speculative-tokens", type=int, metavar="N",
                   help="tokens vLLM drafts per step (default: the drafter's block size - 1)")
    g.add_argument("--gpu-memory-utilization", type=float, metavar="F",
                   help=f"share of GPU memory vLLM may take (default {GPU_MEMORY_UTILIZATION}; on vLLM's CPU build, where it is the "
                   f"share of RAM reserved at start, a {CPU_KV_CACHE_GIB} GiB KV cache instead, or VLLM_CPU_KVCACHE_SPACE)")
    g.add_argument("--enforce-eager", action="store_true", help="no CUDA graphs: slower, starts faster")
    g.add_argument("--compilation-config", metavar="JSON",
                   help="vLLM's compilation config, a JSON object passed to the engine as it is, e.g. "
                   "'{\"custom_ops\": [\"-rotary_embedding\"]}' to run RoPE as plain PyTorch (docs/acceptance.md)")


def engine_options(args: argparse.Namespace) -> EngineOptions:
    """EngineOptions from parsed arguments; raises BadInput on values vLLM would reject late.

    Raises:
        VllmOptionError: An option is out of the range vLLM accepts (a BadInput, exit 2).

    Example::

        >>> engine_options(argparse.Namespace(max_model_len=0))
        Traceback (most recent call last):
        ...
        draftguard.errors.VllmOptionError: --max-model-len must be a positive number of tokens, got 0
    """
    runner = check_model_runner(getattr(args, "model_runner", None) or "auto")
    opts = EngineOptions(
        attention_backend=getattr(args, "attention_backend", None),
        draft_attention_backend=getattr(args, "draft_attention_backend", None),
        # both: each engine gets one runner (runs.run_cells sets it per view); the options stay neutral.
        model_runner="auto" if runner == "both" else runner,
        max_model_len=getattr(args, "max_model_len", None),
        long_context_tokens=getattr(args, "long_context_tokens", None),
        num_speculative_tokens=getattr(args, "num_speculative_tokens", None),
        gpu_memory_utilization=getattr(args, "gpu_memory_utilization", None),
        enforce_eager=bool(getattr(args, "enforce_eager", False)),
        # `accept --dtype` is one option for both backends: vLLM's "auto" runs float32 checkpoints in
        # bfloat16, so a differential run that left it out compared unlike with like.
        dtype=getattr(args, "dtype", None) or "auto",
        method=getattr(args, "method", None) if getattr(args, "method", None) in METHODS else "dflash",
        compilation_config=compilation_config(getattr(args, "compilation_config", None)),
    )
    validate_options(opts)
    return opts


def compilation_config(text: str | None) -> dict[str, Any] | None:
    """``--compilation-config``'s JSON object, or VllmOptionError (one line, exit 2) saying what it is instead.

    Example::

        >>> compilation_config('{"custom_ops": ["-rotary_embedding"]}')
        {'custom_ops': ['-rotary_embedding']}
    """
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise VllmOptionError(f"--compilation-config is not JSON ({e}): {text!r}", key="compilation_config") from None
    if not isinstance(value, dict):
        raise VllmOptionError(f"--compilation-config must be a JSON object, got {text!r}", key="compilation_config")
    return value


def check_model_runner(value: str) -> str:
    """``--model-runner``'s value, or VllmOptionError (one line, exit 2) naming the choices.

    Example::

        >>> check_model_runner("both")
        'both'
    """
    if value not in MODEL_RUNNER_CHOICES:
        raise VllmOptionError(f"--model-runner must be one of {', '.join(MODEL_RUNNER_CHOICES)}, got {value!r}",
                              key="model_runner")
    return value


def validate_options(opts: EngineOptions) -> None:
    """Raise VllmOptionError naming the first option that is out of range."""
    if opts.model_runner not in MODEL_RUNNERS:
        raise VllmOptionError(f"--model-runner must be one of {', '.join(MODEL_RUNNERS)}, got {opts.model_runner!r}")
    if opts.max_model_len is not None and opts.max_model_len <= 0:
        raise VllmOptionError(f"--max-model-len must be a positive number of tokens, got {opts.max_model_len}")
    if opts.long_context_tokens is not None and opts.long_context_tokens < 0:
        raise VllmOptionError(f"--long-context-tokens must be 0 or more, got {opts.long_context_tokens}")
    if opts.num_speculative_tokens is not None and opts.num_speculative_tokens < 1:
        raise VllmOptionError(f"--num-speculative-tokens must be at least 1, got {opts.num_speculative_tokens}")
    if opts.gpu_memory_utilization is not None and not 0.0 < opts.gpu_memory_utilization <= 1.0:
        raise VllmOptionError(f"--gpu-memory-utilization must be in (0, 1], got {opts.gpu_memory_utilization}")
    if opts.dtype not in DTYPES:
        raise VllmOptionError(f"--dtype must be one of {', '.join(DTYPES)}, got {opts.dtype!r}")


# --------------------------------------------------------------------------------------------------
# What the drafter and target say (raw config.json, no transformers, no torch)
# --------------------------------------------------------------------------------------------------


@dataclass
class DrafterFacts:
    """The drafter's raw block size and sliding window, as its config.json states them."""

    block_size: int
    sliding_window: int | None
    sliding_layers: int


def drafting_method(drafter: str, asked: str | None = None) -> str:
    """``dflash``, ``eagle3`` or ``mtp``: ``asked`` (``--method``) when given, else what the drafter's
    config.json is (``check.drafter.detect``); anything else runs as DFlash, whose loader then says
    what is missing.

    Example::

        >>> drafting_method("tests/fixtures/vllm-models/eagle3"), drafting_method("tests/fixtures/models/drafter")
        ('eagle3', 'dflash')
    """
    if asked in METHODS:
        return asked
    try:
        fmt = detect_drafter(load_snapshot(drafter).load_json())
    except BadInput:
        return "dflash"
    if fmt is not None and fmt.family == "mtp":
        return "mtp"  # the target's own MTP layers: --drafter names the target itself
    return "eagle3" if fmt is not None and fmt.family == "eagle3" else "dflash"


def drafter_facts(drafter: str, revision: str | None = None, method: str = "dflash") -> DrafterFacts:
    """Read block size and sliding window from the drafter's raw config.json (folder or Hub id).

    The raw file, not the config class: a window the class drops (the incident) is still the window
    the drafter was trained with, and the long prompt must run past it.

    Example::

        >>> drafter_facts("tests/fixtures/models/drafter-window-lost")
        DrafterFacts(block_size=4, sliding_window=6, sliding_layers=1)
    """
    snapshot = load_snapshot(drafter, revision)
    raw = snapshot.load_json()
    if method == "mtp" and is_mtp_assistant(raw):  # Gemma 4's assistant: one token per step, K the user's
        return DrafterFacts(block_size=EAGLE3_SPECULATIVE_TOKENS + 1, sliding_window=None, sliding_layers=0)
    if method == "mtp":  # the target's own MTP layers: K defaults to their number, as vLLM's recipes set it
        # as the config class resolves it (runner/mtp_weights.mtp_rewrite), which is what vLLM reads
        count = mtp_count(raw, snapshot.path_of("config.json"))[1] or 1
        return DrafterFacts(block_size=count + 1, sliding_window=None, sliding_layers=0)
    if method == "eagle3":  # a chain drafter: no block, no window; the block is the anchor and K drafts
        return DrafterFacts(block_size=EAGLE3_SPECULATIVE_TOKENS + 1, sliding_window=None, sliding_layers=0)
    block = raw.get("dflash_config") if isinstance(raw.get("dflash_config"), dict) else {}
    size = block.get("block_size", raw.get("block_size", 16))
    if not isinstance(size, int) or isinstance(size, bool) or size < 2:
        raise BadInput(f"{drafter}/config.json: `dflash_config.block_size` must be an int of at least 2, got {size!r}",
                       file=f"{drafter}/config.json", key="dflash_config.block_size")
    types = raw.get("layer_types") if isinstance(raw.get("layer_types"), list) else []
    sliding = sum(1 for t in types if t == "sliding_attention")
    window = raw.get("sliding_window")
    window = window if isinstance(window, int) and not isinstance(window, bool) and window > 0 else None
    return DrafterFacts(block_size=size, sliding_window=window if sliding else None, sliding_layers=sliding)


def cpu_mla_options(target: str, opts: EngineOptions, on_cpu: bool,
                    revision: str | None = None) -> tuple[EngineOptions, str | None]:
    """The options vLLM's CPU build needs to run an MLA target (DeepSeek-V2/V3 attention: config.json,
    or its ``text_config``, states ``kv_lora_rank``), and the line that says what was chosen. vLLM
    0.32's CPU build runs MLA only with its ``CPU_MLA`` backend in float32: its default where the CPU
    has AMX (``CPU_AMX_MLA``) packs bfloat16 weights only. An attention backend or a dtype the user
    gave is kept; off CPU, or for another attention, the options come back as they were.

    Example::

        >>> opts, line = cpu_mla_options("tests/fixtures/mtp-models/dsv3", EngineOptions(method="mtp"), on_cpu=True)
        >>> opts.attention_backend, opts.dtype
        ('CPU_MLA', 'float32')
    """
    if not on_cpu or (opts.attention_backend and opts.dtype != "auto"):
        return opts, None
    try:
        raw = load_snapshot(target, revision, names=("config.json",)).load_json()
    except BadInput:
        return opts, None  # the engine's own loader names what is wrong with the target
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    rank = text.get("kv_lora_rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
        return opts, None
    chosen = []
    if not opts.attention_backend:
        opts = replace(opts, attention_backend="CPU_MLA")
        chosen.append("--attention-backend CPU_MLA")
    if opts.dtype == "auto":
        opts = replace(opts, dtype="float32")
        chosen.append("--dtype float32")
    if not chosen:
        return opts, None
    return opts, (f"{target} uses MLA attention (kv_lora_rank {rank}), which vLLM's CPU build runs only with its "
                  f"CPU_MLA backend in float32: running with {' '.join(chosen)}")


ROPE_SWITCH = '{"custom_ops": ["-rotary_embedding"]}'  # vLLM's own: RoPE as plain PyTorch (forward_native)


def cpu_rope_note(target: str, opts: EngineOptions, on_cpu: bool, revision: str | None = None) -> str | None:
    """On vLLM's CPU build, for a HY-V4 target whose RoPE runs as its rotary custom op: the sentence naming that
    build's fault (its rotary kernel turns HY-V4's query and key wrong; docs/acceptance.md) and the switch that
    runs RoPE as plain PyTorch. None elsewhere: off CPU, another family, or the switch already given.

    Example::

        >>> cpu_rope_note("t", EngineOptions(compilation_config={"custom_ops": ["-rotary_embedding"]}), True) is None
        True
    """
    ops = (opts.compilation_config or {}).get("custom_ops") or []
    if not on_cpu or (isinstance(ops, list) and "-rotary_embedding" in ops):
        return None
    try:
        raw = load_snapshot(target, revision, names=("config.json",)).load_json()
    except BadInput:
        return None
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    if "hy_v4" not in (raw.get("model_type"), text.get("model_type")):
        return None
    return ("vLLM 0.32's CPU build turns HY-V4's RoPE wrong in its rotary kernel (RotaryEmbedding.forward_cpu on "
            "HY-V4's multi-head query and one-head key views), so its τ reads low; --compilation-config "
            f"'{ROPE_SWITCH}' runs RoPE as vLLM's plain-PyTorch forward_native (docs/acceptance.md)")


GPU_MEMORY_UTILIZATION = 0.85  # vLLM's --gpu-memory-utilization where the user gives none (off its CPU build)
CPU_KV_CACHE_GIB = 4  # the KV cache draftguard gives vLLM's CPU build where the user chose no memory setting
CPU_KV_CACHE_ENV = "VLLM_CPU_KVCACHE_SPACE"  # GiB; vLLM's CPU build reads it (kv_cache_memory_bytes)


def cpu_kv_cache_env(opts: EngineOptions, on_cpu: bool, environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """The environment vLLM's CPU build starts with when the user set neither ``--gpu-memory-utilization``
    nor ``VLLM_CPU_KVCACHE_SPACE``, and the line that says so. There the fraction is of the machine's RAM,
    reserved at start as KV cache: vLLM 0.32 refuses to start unless 85% of it is free ("Available memory
    on node 0 (19.57/23.54 GiB) on startup is less than desired CPU memory utilization"), which a laptop
    with a browser open, or a second engine, never has; a short acceptance run needs a few GiB at most.
    A setting the user gave is kept; off CPU nothing changes.

    Example::

        >>> cpu_kv_cache_env(EngineOptions(), on_cpu=True, environ={})[0]
        {'VLLM_CPU_KVCACHE_SPACE': '4'}
        >>> cpu_kv_cache_env(EngineOptions(gpu_memory_utilization=0.5), on_cpu=True, environ={})
        ({}, None)
    """
    if not on_cpu or opts.gpu_memory_utilization is not None or environ.get(CPU_KV_CACHE_ENV, "") != "":
        return {}, None
    return {CPU_KV_CACHE_ENV: str(CPU_KV_CACHE_GIB)}, (
        f"vLLM's CPU build reserves --gpu-memory-utilization (default {GPU_MEMORY_UTILIZATION}) of the machine's RAM at start: "
        f"running with a {CPU_KV_CACHE_GIB} GiB KV cache instead ({CPU_KV_CACHE_ENV}={CPU_KV_CACHE_GIB}; set it, "
        "or --gpu-memory-utilization, to choose)")


def target_stop_ids(target: str, revision: str | None = None) -> list[int]:
    """End-of-sequence ids of the target, as the reference backend stops on them: generation_config.json's
    ``eos_token_id``, else config.json's. Passed to vLLM explicitly, so both stop on the same tokens
    even when vLLM runs without a tokenizer.

    Example::

        >>> target_stop_ids("tests/fixtures/models/target")
        [41]
    """
    snap = load_snapshot(target, revision, names=("config.json", "generation_config.json"))
    ids: Any = None
    if "generation_config.json" in snap.files:
        ids = snap.load_json("generation_config.json").get("eos_token_id")
    if ids is None:
        ids = snap.load_json().get("eos_token_id")
    if ids is None:
        return []
    return [int(i) for i in (ids if isinstance(ids, list) else [ids])]


def has_tokenizer(target: str) -> bool:
    """A local folder without tokenizer files runs with ``skip_tokenizer_init`` (prompts are token ids
    already); a Hub repo is assumed to have one."""
    folder = Path(target)
    if folder.is_dir():
        return any((folder / n).is_file() for n in TOKENIZER_FILES)
    return True


def long_context_prompt(prompts: Sequence[Sequence[int]], length: int) -> list[int]:
    """One prompt of exactly ``length`` tokens, made by joining the given prompts end to end (again
    from the first when they run out). Real text keeps the target in its domain, so the drafter's
    acceptance there still means something, while the context runs past the sliding window.

    Example::

        >>> long_context_prompt([[1, 2, 3], [4, 5]], 7)
        [1, 2, 3, 4, 5, 1, 2]
    """
    pool = [list(p) for p in prompts if len(p)]
    if length <= 0 or not pool:
        raise BadInput("a long-context prompt needs at least one non-empty prompt and a positive length")
    out: list[int] = []
    while len(out) < length:
        for p in pool:
            out.extend(p)
            if len(out) >= length:
                break
    return out[:length]


# Past any real sliding window (Gemma's 4096, Qwen's up to 32768) twice over; the runner may ask for
# more with --long-context-tokens.
MAX_LONG_CONTEXT_TOKENS = 65536


def long_context_length(opts: EngineOptions, facts: DrafterFacts, max_new_tokens: int) -> int:
    """Tokens of the long-context prompt: the option, else twice the window (0 when nothing slides),
    at most ``MAX_LONG_CONTEXT_TOKENS``: the window comes from the pull request's config, which must
    not size what the runner builds (R6 of issue 25). Capped so prompt plus output fit ``max_model_len``.

    Example::

        >>> long_context_length(EngineOptions(), DrafterFacts(4, 6, 1), 32)
        12
        >>> long_context_length(EngineOptions(max_model_len=100), DrafterFacts(16, 2048, 3), 32)
        52
        >>> long_context_length(EngineOptions(), DrafterFacts(16, 10**12, 3), 32)  # a forged window
        65536
    """
    want = opts.long_context_tokens
    if want is None:
        want = min(2 * facts.sliding_window, MAX_LONG_CONTEXT_TOKENS) if facts.sliding_window else 0
    if want and opts.max_model_len:
        room = opts.max_model_len - max_new_tokens - facts.block_size
        if room <= facts.block_size:
            raise VllmOptionError(
                f"--max-model-len {opts.max_model_len} leaves no room for a long-context prompt and "
                f"{max_new_tokens} new tokens; raise it or pass --long-context-tokens 0")
        want = min(want, room)
    return max(0, want)
