"""The vLLM backend: the drafter as users serve it, measured with vLLM's own counters.

vLLM runs the target with ``speculative_config={"method": "dflash", "model": <drafter>,
"num_speculative_tokens": N}``; N defaults to the drafter's block size minus one (the block is the
anchor plus N drafted tokens), so the per-position figures line up with the reference backend's.
Each prompt runs alone, greedy, and its figures are the change in ``LLM.get_metrics()``'s
speculative-decoding counters across it (see ``metrics.py``).

The engine settings that decided the known bugs are options (``add_engine_arguments``): the attention
backend (target and drafter), vLLM's V1/V2 model runner (``VLLM_USE_V2_MODEL_RUNNER``), the maximum
model length, and a long-context prompt that runs past the drafter's sliding window, the only place
where a window that was dropped shows.

vLLM is imported only inside ``import_vllm``: the rest of this module is plain Python, so the CLI can
build options and report a missing install without it. Checked against vLLM 0.33.0 (``LLM.__init__``,
``LLM.get_metrics``, ``SamplingParams``, ``AttentionConfig.backend``, ``SpeculativeConfig``).

In: a target and a drafter (folders or Hub ids), ``EngineOptions``, and prompts as token ids.
Out: ``VllmBackend.run_prompt`` -> (``PromptResult``, generated tokens) per prompt; ``VllmMissing``,
``EngineStartError`` or ``EngineRunError`` with vLLM's own reason, in one line, when it cannot run.

Example (on a GPU runner with the ``vllm`` extra installed)::

    backend = VllmBackend("Qwen/Qwen3-8B", "z-lab/Qwen3-8B-DFlash-b16", EngineOptions(max_model_len=8192))
    result, tokens = backend.run_prompt(0, prompt_ids, max_new_tokens=256)
"""

from __future__ import annotations

import collections
import gc
import json
import os
import re
import sys
import threading
import time
from types import ModuleType
from typing import Any, Sequence

from draftguard.errors import EngineRunError, EngineStartError, VllmMissing
from draftguard.runner.engine_options import (
    CPU_KV_CACHE_ENV,
    GPU_MEMORY_UTILIZATION,
    INSTALL_HINT,
    LOG_STREAM_ENV,
    RUNNER_ENV,
    EngineOptions,
    cpu_kv_cache_env,
    cpu_mla_options,
    cpu_rope_note,
    drafter_facts,
    has_tokenizer,
    target_stop_ids,
    validate_options,
)
from draftguard.runner.metrics import SpecDecodeCounts, prompt_result, read_counts, require_spec_decode
from draftguard.runner.result import PromptResult
from draftguard.snapshot import BadInput


# --------------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------------


def _on_cpu() -> bool:
    """Whether the vLLM imported here is its CPU build (``current_platform``)."""
    try:
        from vllm.platforms import current_platform  # vllm: the vllm extra only; imported by import_vllm already
    except ImportError:  # a vLLM without the platforms module (or a stand-in module): not its CPU build
        return False
    return bool(current_platform.is_cpu())


def import_vllm() -> ModuleType:
    """Import vLLM, or raise VllmMissing saying what to install and where. vLLM's logger is pointed
    at stderr first: it reads ``VLLM_LOGGING_STREAM`` once, when it is imported."""
    os.environ[LOG_STREAM_ENV] = "ext://sys.stderr"
    try:
        import vllm  # vllm: the vllm extra only (GPU runners)
    except ImportError as exc:
        raise VllmMissing(
            f"--backend vllm needs vLLM, which is not installed here ({exc.name or 'vllm'} cannot be imported): "
            f"run on a GPU runner (Linux, NVIDIA CUDA) with {INSTALL_HINT}, or use the `runner` image; "
            "--backend reference runs without it"
        ) from None
    return vllm


# An exception as a log line shows it: "RuntimeError: ...", "torch.OutOfMemoryError: ...", with or
# without vLLM's "(EngineCore pid=1) ERROR 11-30 20:00:00 [core.py:1]" prefix in front.
_EXCEPTION_LINE = re.compile(r"(?:^|[\s\]])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)): (\S.*)$")
# What vLLM's GPU, CPU and XPU workers log when they build the V2 model runner (logger.info_once).
V2_RUNNER_LOG = b"Using V2 Model Runner"
# Exceptions that only say the engine died or failed, never why.
_ENVELOPES = ("EngineDeadError", "EngineGenerateError")


class EngineConsole:
    """While vLLM runs, this process's stdout and stderr (file descriptors 1 and 2, which vLLM's engine
    processes inherit) go to a pipe; a thread copies everything to the real stderr and keeps the last
    lines.

    Why: vLLM and the C++ ops under it print to stdout, which must carry only the result
    (``--format json`` is parsed by the GPU worker), and when vLLM's engine process dies, the cause
    is only in that process's own log: the parent gets ``EngineDeadError`` and nothing more.

    Example::

        with EngineConsole() as console:
            backend = VllmBackend(target, drafter, options, console=console)
        console.last_error()  # "RuntimeError: ..." as the engine logged it, or None
    """

    def __init__(self, keep_lines: int = 400):
        self._lines: collections.deque[str] = collections.deque(maxlen=keep_lines)
        self._partial = b""
        self._thread: threading.Thread | None = None
        self._saved: tuple[int, int] | None = None
        self._python_stdout: Any = None
        self._last_read = 0.0
        # Which model runner the worker built, as it logged (kept apart from the last lines, which roll).
        self.v2_runner_logged = self.info_logged = False

    def __enter__(self) -> "EngineConsole":
        sys.stdout.flush()
        sys.stderr.flush()
        saved_out, saved_err = os.dup(1), os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._saved = (saved_out, saved_err)
        # Python-level writes too, where sys.stdout is not file descriptor 1 (a test's capture).
        self._python_stdout, sys.stdout = sys.stdout, sys.stderr
        # The copy keeps its own duplicate of the real stderr: an engine process that outlives the
        # block may still write, and the pump runs until the last writer is gone.
        self._thread = threading.Thread(target=self._pump, args=(read_end, os.dup(saved_err)), daemon=True)
        self._thread.start()
        return self

    def _pump(self, read_end: int, out: int) -> None:
        try:
            while chunk := os.read(read_end, 65536):
                self._last_read = time.monotonic()
                try:
                    os.write(out, chunk)
                except OSError:
                    pass
                *done, self._partial = (self._partial + chunk).split(b"\n")
                self._lines.extend(line.decode("utf-8", "replace") for line in done)
                self.v2_runner_logged = self.v2_runner_logged or any(V2_RUNNER_LOG in line for line in done)
                self.info_logged = self.info_logged or any(b" INFO " in line for line in done)
        finally:
            os.close(read_end)
            os.close(out)

    def __exit__(self, *exc: Any) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        if self._saved is None:
            return
        saved_out, saved_err = self._saved
        self._saved = None
        sys.stdout = self._python_stdout
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        os.close(saved_out)
        os.close(saved_err)
        if self._thread is not None:
            self._thread.join(timeout=2.0)  # ends at once unless an engine process lingers

    def lines(self) -> list[str]:
        """The last lines written so far."""
        return list(self._lines) + ([self._partial.decode("utf-8", "replace")] if self._partial else [])

    def last_error(self, settle: float = 0.2, wait: float = 2.0) -> str | None:
        """The last exception the output shows, as ``Type: message``, leaving out the envelopes that
        only say the engine died (``EngineDeadError``). Waits until the output has been quiet for
        ``settle`` seconds (at most ``wait``): the engine process logs its cause just before the
        parent learns that it died, and the copy may not have read it yet."""
        deadline = time.monotonic() + wait
        while time.monotonic() - self._last_read < settle and time.monotonic() < deadline:
            time.sleep(0.05)
        return last_exception(self.lines())


def last_exception(lines: Sequence[str]) -> str | None:
    """The last ``SomeError: message`` in log lines, envelopes like ``EngineDeadError`` left out.

    Example::

        >>> last_exception(["(EngineCore pid=7) ERROR 11-30 20:00:01 [core.py:9] RuntimeError: head size 16 is not supported",
        ...                 "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue."])
        'RuntimeError: head size 16 is not supported'
    """
    for line in reversed(lines):
        match = _EXCEPTION_LINE.search(line.strip())
        if match and match.group(1).rsplit(".", 1)[-1] not in _ENVELOPES:
            return f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2).strip()}"
    return None


def exception_reason(exc: BaseException, limit: int = 600) -> str:
    """One line that says why, from an exception vLLM raised. A pydantic ValidationError's first line
    is only "1 validation error for VllmConfig": its reasons are in ``errors()``.

    Example::

        >>> exception_reason(ValueError("bad block size\\n  more detail"))
        'ValueError: bad block size | more detail'
    """
    errors = getattr(exc, "errors", None)
    parts: list[str] = []
    if callable(errors):
        try:
            for e in errors():
                where = ".".join(str(p) for p in e.get("loc") or ())
                parts.append(f"{where}: {e.get('msg')}" if where else str(e.get("msg")))
        except Exception:  # not pydantic's errors() after all
            parts = []
    if not parts:
        parts = [line.strip() for line in str(exc).splitlines()
                 if line.strip() and not line.strip().startswith("For further information visit")]
    text = " | ".join(parts) or "no message"
    return f"{type(exc).__name__}: {text}"[:limit]


def speculative_config(drafter: str, num_speculative_tokens: int, opts: EngineOptions,
                       revision: str | None = None) -> dict[str, Any]:
    """vLLM's speculative_config for a DFlash drafter.

    Example::

        >>> speculative_config("z-lab/Qwen3-8B-DFlash-b16", 15, EngineOptions(draft_attention_backend="FLASH_ATTN"))
        {'method': 'dflash', 'model': 'z-lab/Qwen3-8B-DFlash-b16', 'num_speculative_tokens': 15, 'attention_backend': 'FLASH_ATTN'}
    """
    spec: dict[str, Any] = {"method": opts.method, "model": drafter, "num_speculative_tokens": num_speculative_tokens}
    if revision:
        spec["revision"] = revision
    backend = opts.draft_attention_backend or opts.attention_backend
    if backend:
        spec["attention_backend"] = backend
    return spec


def llm_kwargs(target: str, drafter: str, opts: EngineOptions, *, num_speculative_tokens: int,
               tokenizer: bool = True, revision: str | None = None,
               drafter_revision: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM``. Stats logging must be on: ``LLM`` turns it off by default,
    and ``get_metrics()`` then refuses to answer.

    Example::

        >>> kw = llm_kwargs("t", "d", EngineOptions(max_model_len=4096), num_speculative_tokens=3)
        >>> kw["disable_log_stats"], kw["max_model_len"], kw["speculative_config"]["method"]
        (False, 4096, 'dflash')
    """
    kw: dict[str, Any] = {
        "model": target,
        "speculative_config": speculative_config(drafter, num_speculative_tokens, opts, drafter_revision),
        "disable_log_stats": False,
        "gpu_memory_utilization": GPU_MEMORY_UTILIZATION if opts.gpu_memory_utilization is None else opts.gpu_memory_utilization,
        "enforce_eager": opts.enforce_eager,
        "dtype": opts.dtype,
        "seed": 0,
        # Remote code from a pull request never runs here (see the design notes).
        "trust_remote_code": False,
    }
    if revision:
        kw["revision"] = revision
    if opts.max_model_len:
        kw["max_model_len"] = opts.max_model_len
    if opts.attention_backend:
        kw["attention_config"] = {"backend": opts.attention_backend}
    if opts.compilation_config is not None:
        kw["compilation_config"] = opts.compilation_config
    if not tokenizer:
        kw["skip_tokenizer_init"] = True
    if opts.method == "mtp" and mamba_target(target):
        # vLLM 0.32 turns a Mamba target's prefix caching into mamba_cache_mode "align", whose state copy for
        # speculative decoding is a Triton kernel (none in the CPU build: "'function' object is not
        # subscriptable" at the first step). One greedy prompt at a time drafts the same without the cache.
        kw["enable_prefix_caching"] = False
    return kw


def mamba_target(target: str) -> bool:
    """Whether a local target folder's config declares Mamba layers (Nemotron-H's ``hybrid_override_pattern``
    with ``M``, or its ``layers_block_type`` with ``linear_attention``); False for a Hub id or no config.

    Example::

        >>> mamba_target("tests/fixtures/mtp-models/mimo")
        False
    """
    path = os.path.join(target, "config.json")
    if not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError):
        return False  # the engine names a bad config
    if not isinstance(raw, dict):
        return False
    node = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    layers = node.get("layers_block_type")
    return ("M" in str(node.get("hybrid_override_pattern") or "")
            or (node.get("model_type", raw.get("model_type")) == "nemotron_h" and isinstance(layers, list)
                and "linear_attention" in layers))


def runner_env(opts: EngineOptions) -> dict[str, str | None]:
    """Environment for the model-runner switch (None: unset it, and let vLLM decide).

    Example::

        >>> runner_env(EngineOptions(model_runner="v2"))
        {'VLLM_USE_V2_MODEL_RUNNER': '1'}
    """
    return {RUNNER_ENV: {"auto": None, "v1": "0", "v2": "1"}[opts.model_runner]}


class VllmBackend:
    """vLLM with the drafter, one greedy prompt at a time; the same ``run_prompt`` as the reference
    backend, so ``draftguard accept`` drives either.

    vLLM's metrics live in a process-wide registry and its engine does not hand its GPU memory back,
    so run one VllmBackend per process (``draftguard accept`` is one process per test)."""

    name = "vllm"

    def __init__(self, target: str, drafter: str, options: EngineOptions | None = None, *,
                 block_size: int | None = None, revision: str | None = None, drafter_revision: str | None = None,
                 console: EngineConsole | None = None):
        self.options = options or EngineOptions()
        self.console = console
        validate_options(self.options)
        self.target, self.drafter = target, drafter
        self.facts = drafter_facts(drafter, drafter_revision, self.options.method)
        self.block_size = block_size or self.facts.block_size
        self.num_speculative_tokens = self.options.num_speculative_tokens or self.block_size - 1
        if self.options.method in ("eagle3", "mtp"):  # a chain: the block is the anchor and the K drafted
            self.block_size = self.num_speculative_tokens + 1
        self.stop_ids = target_stop_ids(target, revision)
        self.tokenizer = has_tokenizer(target)
        vllm = import_vllm()
        on_cpu = _on_cpu()
        self.options, chosen = cpu_mla_options(target, self.options, on_cpu, revision)
        kv_env, said = cpu_kv_cache_env(self.options, on_cpu, os.environ)
        # A known fault of the CPU build for this target: said now, and beside an engine mismatch (runs._run_vllm).
        self.engine_note = cpu_rope_note(target, self.options, on_cpu, revision)
        for line in (chosen, said, self.engine_note):
            if line:
                print(f"draftguard: {line}", file=sys.stderr)
        for key, value in {**runner_env(self.options), **kv_env}.items():
            # Set before the engine starts: its worker processes inherit the environment.
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        envs = sys.modules.get("vllm.envs")
        if envs is not None and getattr(envs, "_is_envs_cache_enabled", lambda: False)():
            # An engine core that ran in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0) froze vLLM's
            # variables; this engine's runner (--model-runner both) must be read afresh.
            envs.disable_envs_cache()
        # What the run records of the engine's memory: the share it was given, and on the CPU build its KV cache.
        self.kv_cache_gib = (os.environ.get(CPU_KV_CACHE_ENV) or None) if on_cpu else None
        self.kwargs = llm_kwargs(target, drafter, self.options, num_speculative_tokens=self.num_speculative_tokens,
                                 tokenizer=self.tokenizer, revision=revision, drafter_revision=drafter_revision)
        self.llm: Any = None
        try:
            self.llm = vllm.LLM(**self.kwargs)
        except Exception as exc:  # vLLM's reasons are many; pass them on in one line, not its traceback
            raise EngineStartError(
                f"vLLM {getattr(vllm, '__version__', '?')} could not start {target} with the {self.method_label} drafter "
                f"{drafter}: {self._reason(exc)}"
            ) from None
        self._sampling = vllm.SamplingParams

    @property
    def method_label(self) -> str:
        return {"dflash": "DFlash", "eagle3": "EAGLE-3"}.get(self.options.method, self.options.method)

    def _reason(self, exc: BaseException) -> str:
        """Why vLLM failed: its exception, and when that only says the engine process died, the cause
        that process logged (kept by the console)."""
        reason = exception_reason(exc)
        logged = self.console.last_error() if self.console is not None else None
        if logged and logged not in reason:
            reason += f"; the engine process logged {logged}"
        return reason

    @property
    def engine_dtype(self) -> str | None:
        """The dtype vLLM actually runs the target in (its ``model_config.dtype``)."""
        config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        dtype = getattr(config, "dtype", None)
        return str(dtype).replace("torch.", "") if dtype is not None else None

    @property
    def version(self) -> str:
        import vllm  # vllm: the vllm extra only (GPU runners)

        return str(getattr(vllm, "__version__", "?"))

    def counts(self) -> SpecDecodeCounts:
        """The speculative-decoding counters now (process totals)."""
        counts = read_counts(self.llm.get_metrics())
        require_spec_decode(counts)
        return counts

    def sampling_params(self, max_new_tokens: int) -> Any:
        """Greedy, with the target's stop tokens, like the reference backend."""
        return self._sampling(temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=list(self.stop_ids),
                              detokenize=self.tokenizer, seed=0)

    def run_prompt(self, index: int, input_ids: Sequence[int], max_new_tokens: int, *,
                   block_size: int | None = None, label: str | None = None) -> tuple[PromptResult, list[int]]:
        """Generate for one prompt; its counters are the change in vLLM's metrics across it."""
        if block_size is not None and block_size != self.block_size:
            raise BadInput(f"--block-size {block_size}: the vLLM engine was started with block {self.block_size}; "
                           "pass it when the backend is created")
        before = self.counts()
        t0 = time.perf_counter()
        try:
            outputs = self.llm.generate([{"prompt_token_ids": [int(t) for t in input_ids]}],
                                        self.sampling_params(max_new_tokens), use_tqdm=False)
        except Exception as exc:  # the engine's failure, not ours: say so, and what it logged
            raise EngineRunError(
                f"vLLM {self.version}'s engine failed while generating prompt {label or index} for {self.target} "
                f"with the {self.method_label} drafter {self.drafter}: {self._reason(exc)}"
            ) from None
        wall = time.perf_counter() - t0
        tokens = [int(t) for t in outputs[0].outputs[0].token_ids]
        change = self.counts() - before
        return prompt_result(index, change, new_tokens=len(tokens), wall_seconds=wall, label=label,
                             positions=self.num_speculative_tokens), tokens

    def model_runner_used(self) -> str | None:
        """The runner the engine's worker says it built: "v2" when it logged "Using V2 Model Runner"
        (vLLM's GPU, CPU and XPU workers do), "v1" when vLLM logged at INFO without it, None when
        there is no console or no INFO line to tell by."""
        if self.console is None:
            return None
        if self.console.v2_runner_logged:
            return "v2"
        return "v1" if self.console.info_logged else None

    def run_info(self) -> dict[str, Any]:
        """What the ``run`` block of the AcceptanceResult records about this engine."""
        return {
            "model_runner_used": self.model_runner_used(),
            "backend": self.name,
            "vllm_version": self.version,
            "num_speculative_tokens": self.num_speculative_tokens,
            "method": self.options.method,
            "engine": {**{k: v for k, v in self.options.to_dict().items() if v not in (None, False, "auto")},
                       "gpu_memory_utilization": self.kwargs["gpu_memory_utilization"],
                       **({"cpu_kv_cache_gib": self.kv_cache_gib} if self.kv_cache_gib else {})},
            "engine_dtype": self.engine_dtype,
            "model_runner_env": os.environ.get(RUNNER_ENV),
        }

    def close(self) -> None:
        """Stop the engine and give its GPU memory back, so the reference backend can run next in
        this process (``--backend both``). vLLM's engine core is a child process: shutting it down
        is what frees the memory; dropping the LLM object alone waits for the garbage collector."""
        llm, self.llm = self.llm, None
        if llm is None:
            return
        core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            shutdown()
        del llm, core, shutdown
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
