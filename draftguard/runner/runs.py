"""The acceptance test's runs: prompts through one backend, or through every (config view, backend) cell.

In: parsed ``draftguard accept`` options, prompt specs and thresholds.
Out: an ``AcceptanceResult`` per run (combined, with its diagnosis, when several cells ran). torch
and vLLM are imported inside the functions that need them, never at import time: ``draftguard
check`` shares the CLI's parser.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from draftguard.runner import differential
from draftguard.runner.diagnosis import REFERENCE, diagnose, light_check_rewrites, raw_view_folder, with_diagnosis
from draftguard.errors import EngineStartError
from draftguard.runner.engine_options import engine_options, long_context_length, long_context_prompt
from draftguard.runner.model_runners import RUNNERS, runner_readings
from draftguard.runner.prompts import encode_all
from draftguard.runner.result import CATASTROPHIC, FAIL, AcceptanceResult, PromptResult, Thresholds
from draftguard.runner.stats import EARLY_STOP_CONFIDENCE, EarlyStop, verdict
from draftguard.snapshot import BadInput
from draftguard.runner.vllm import EngineConsole, VllmBackend  # plain Python: vLLM loads inside import_vllm


def _progress(total: int, quiet: bool) -> tuple[Callable[[str], None], Callable[[], None]]:
    """A progress bar over prompts on stderr (rich), or nothing when quiet or not a terminal."""
    if quiet or not sys.stderr.isatty():
        return (lambda _label: None), (lambda: None)
    from rich.console import Console  # rich: ~20 ms to import; only drawn output pays it
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=Console(stderr=True), transient=True)
    task = bar.add_task("prompts", total=total)
    bar.start()
    return (lambda label: bar.update(task, advance=1, description=f"prompts ({label})")), bar.stop


def run_prompts(
    backend: Any,
    prompts: Sequence[Sequence[int]],
    labels: Sequence[str],
    *,
    max_new_tokens: int,
    thresholds: Thresholds,
    block_size: int | None = None,
    early_stop: bool = True,
    on_prompt: Callable[[str], None] | None = None,
    run: dict[str, Any] | None = None,
) -> tuple[AcceptanceResult, list[list[int]]]:
    """Run prompts through a backend (anything with ``run_prompt``), stop once the verdict is settled,
    and return the AcceptanceResult with its verdict and the generated tokens of each prompt run.

    Example::

        backend = ReferenceBackend("tests/fixtures/models/target", "tests/fixtures/models/drafter")
        result, tokens = run_prompts(backend, [[40, 1, 2, 3]], ["p0"], max_new_tokens=32,
                                     thresholds=make_thresholds(3.0))
    """

    stop = EarlyStop(thresholds, enabled=early_stop)
    done: list[PromptResult] = []
    outputs: list[list[int]] = []
    t0 = time.perf_counter()
    stopped = False
    for i, (ids, label) in enumerate(zip(prompts, labels)):
        result, tokens = backend.run_prompt(i, ids, max_new_tokens, block_size=block_size, label=label)
        done.append(result)
        outputs.append(tokens)
        if on_prompt is not None:
            on_prompt(label)
        if i + 1 < len(prompts) and stop.settled(done):
            stopped = True
            break
    wall = time.perf_counter() - t0
    info = dict(run or {})
    info.update(prompts_given=len(prompts), prompts_run=len(done), stopped_early=stopped,
                max_new_tokens=max_new_tokens)
    result = AcceptanceResult.from_prompts(done, wall_seconds=wall, verdict=verdict(done, thresholds),
                                           thresholds=thresholds, run=info)
    return result, outputs


def config_views(asked: str, drafter: str) -> tuple[tuple[str, ...], str | None, list[Any]]:
    """The config views to run, the drafter's config class and the keys it rewrites (the light check's
    report of the drafter). ``auto`` runs both views only where that report names a rewritten key; a
    drafter the light check cannot read (a Hub id offline) runs the resolved view.

    Example::

        >>> config_views("auto", "tests/fixtures/models/drafter-window-lost")[0]
        ('resolved', 'raw')
        >>> config_views("auto", "tests/fixtures/models/drafter")[0]
        ('resolved',)
    """

    if asked not in ("both", "auto"):
        return (asked,), None, []
    try:
        config_class, rewrites = light_check_rewrites(drafter)
    except BadInput:
        if Path(drafter).is_dir():
            raise  # a local config the light check cannot read is the user's to fix, as in `check`
        config_class, rewrites = None, []
    if asked == "both" or rewrites:
        return ("resolved", "raw"), config_class, rewrites
    return ("resolved",), config_class, rewrites


def _note_catastrophic(result: AcceptanceResult, view: str, backend: str, thresholds: Thresholds) -> None:
    """A single run that failed against the floor carries the cause, as a multi-view run does."""

    if result.verdict.status != FAIL or thresholds.bar is not None:
        return
    d = diagnose({(view, backend): result}, thresholds)
    if d.cause == CATASTROPHIC:
        result.diagnosis = d.to_dict()


def _reference_backend(args: argparse.Namespace, views: Sequence[str] | None = None,
                       runners: dict[str, Any] | None = None) -> Any:
    import torch  # torch: the runner extra only

    from draftguard.runner.reference import ReferenceBackend  # torch, only when the reference backend runs

    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    if getattr(args, "method", None) == "eagle3":
        from draftguard.runner.eagle3 import Eagle3Backend  # torch, only when the reference backend runs

        # The aux ids each view's head reads: each runner's reading (--model-runner both), or the one
        # runner asked for; else the head as V1 reads it (read_eagle3_spec).
        asked = getattr(args, "model_runner", "auto")
        if runners is None and asked in RUNNERS:
            runners = runner_readings(args.drafter, args.target, "eagle3")
            views = (asked,)
        aux = {v: runners[v].aux_ids for v in views or () if runners and v in runners} or None
        return Eagle3Backend(args.target, args.drafter, device=args.device, dtype=dtype,
                             num_speculative_tokens=getattr(args, "num_speculative_tokens", None), aux_ids=aux,
                             max_model_len=getattr(args, "max_model_len", None))
    if getattr(args, "method", None) == "mtp" and args.drafter != args.target:
        from draftguard.runner.mtp_gemma4 import Gemma4Backend  # torch, only when the reference backend runs

        # An MTP assistant beside its target (cli._mtp_drafter lets no other --drafter through)
        return Gemma4Backend(args.target, args.drafter, device=args.device, dtype=dtype,
                             num_speculative_tokens=getattr(args, "num_speculative_tokens", None))
    if getattr(args, "method", None) == "mtp":
        from draftguard.runner.mtp_model import MtpBackend  # torch, only when the reference backend runs

        return MtpBackend(args.target, device=args.device, dtype=dtype,
                          num_speculative_tokens=getattr(args, "num_speculative_tokens", None))
    return ReferenceBackend(args.target, args.drafter, device=args.device, view=args.config_view, dtype=dtype,
                            views=views)


def _run_reference(args: argparse.Namespace, specs: Sequence[Any], thresholds: Thresholds, run: dict[str, Any],
                   prompts: Sequence[Sequence[int]] | None = None, early_stop: bool | None = None
                   ) -> tuple[AcceptanceResult, list[list[int]]]:
    from draftguard.runner.dflash_model import text_config  # torch, only when the reference backend runs

    backend = _reference_backend(args)
    if prompts is None:
        prompts = encode_all(specs, backend.tokenizer, int(text_config(backend.target).vocab_size))
    labels = [s.label for s in specs] + [f"extra-{i}" for i in range(len(prompts) - len(specs))]
    step, finish = _progress(len(prompts), args.quiet)
    try:
        result, tokens = run_prompts(
            backend, prompts, labels, max_new_tokens=args.max_new_tokens, thresholds=thresholds,
            block_size=args.block_size, early_stop=not args.no_early_stop if early_stop is None else early_stop,
            on_prompt=step,
            run={**run, "backend": "reference", "device": args.device, "method": getattr(args, "method", "dflash"),
                 "block_size": args.block_size or backend.block_size,
                 "dtype": str(next(backend.target.parameters()).dtype).replace("torch.", "")},
        )
    finally:
        finish()
    return result, tokens


def _engine_options(args: argparse.Namespace) -> Any:
    """vLLM's engine options from the flags; with ``--backend both`` and ``--dtype auto``, the
    reference's dtype, so that the two are judged like with like (vLLM's "auto" would run a float32
    checkpoint in bfloat16 beside a float32 reference on CPU)."""

    opts = engine_options(args)
    if args.backend == "both" and opts.dtype == "auto":
        opts.dtype = "float32" if args.device == "cpu" else "bfloat16"
    return opts


def _run_vllm(args: argparse.Namespace, specs: Sequence[Any], thresholds: Thresholds,
              run: dict[str, Any]) -> AcceptanceResult:
    """``--backend vllm``: vLLM alone; ``both``: vLLM and the reference on the same prompts, judged
    against each other (draftguard.runner.differential)."""

    opts = _engine_options(args)
    both = args.backend == "both"
    # vLLM prints to stdout, which carries only the result; the console sends it all to stderr.
    with EngineConsole() as console:
        backend = VllmBackend(args.target, args.drafter, opts, block_size=args.block_size, console=console)
        try:
            tokenizer = None
            if backend.tokenizer:
                from transformers import AutoTokenizer  # transformers: seconds to import; only a model run pays it

                tokenizer = AutoTokenizer.from_pretrained(args.target)
            prompts = encode_all(specs, tokenizer)
            extra = long_context_length(opts, backend.facts, args.max_new_tokens)
            if extra:
                prompts.append(long_context_prompt(prompts, extra))
            labels = [s.label for s in specs] + (["long-context"] if extra else [])
            step, finish = _progress(len(prompts), args.quiet)
            try:
                engine, engine_tokens = run_prompts(
                    backend, prompts, labels, max_new_tokens=args.max_new_tokens, thresholds=thresholds,
                    block_size=None, early_stop=not (args.no_early_stop or both), on_prompt=step,
                    run={**run, **backend.run_info(), "block_size": backend.block_size},
                )
            finally:
                finish()
        finally:
            backend.close()  # stops vLLM's engine process: its memory is free for the reference
    if not both:
        return engine
    reference, ref_tokens = _run_reference(args, specs, thresholds, run, prompts=prompts, early_stop=False)
    diff = differential.compare(reference, engine, reference_tokens=ref_tokens, engine_tokens=engine_tokens)
    if diff.kind == differential.ENGINE_MISMATCH and getattr(backend, "engine_note", None):
        diff.reason += f"; {backend.engine_note}"
    return differential.combine(reference, engine, diff)


def run_prompts_views(
    backend: Any,
    prompts: Sequence[Sequence[int]],
    labels: Sequence[str],
    *,
    max_new_tokens: int,
    thresholds: Thresholds,
    block_size: int | None = None,
    early_stop: bool = True,
    on_prompt: Callable[[str], None] | None = None,
    run: dict[str, Any] | None = None,
    settled: Callable[[dict[str, list[PromptResult]]], bool] | None = None,
) -> dict[str, tuple[AcceptanceResult, list[list[int]]]]:
    """``run_prompts`` for a backend with several config views (``ReferenceBackend(views=...)``): every
    view on every prompt, sharing the target's work; stops early once ``settled`` says the diagnosis is
    decided (from the 8th prompt on). Returns each view's result and tokens."""

    done: dict[str, list[PromptResult]] = {v: [] for v in backend.views}
    outputs: dict[str, list[list[int]]] = {v: [] for v in backend.views}
    t0 = time.perf_counter()
    stopped = False
    for i, (ids, label) in enumerate(zip(prompts, labels)):
        for view, (result, tokens) in backend.run_prompt_views(i, ids, max_new_tokens, block_size=block_size,
                                                               label=label).items():
            done[view].append(result)
            outputs[view].append(tokens)
        if on_prompt is not None:
            on_prompt(label)
        if early_stop and settled is not None and i + 1 >= 8 and i + 1 < len(prompts) and settled(done):
            stopped = True
            break
    wall = time.perf_counter() - t0
    out = {}
    for view in backend.views:
        info = dict(run or {})
        n = len(done[view])
        info.update(config_view=view, prompts_given=len(prompts), prompts_run=n, stopped_early=stopped,
                    max_new_tokens=max_new_tokens, shared_wall_seconds=wall)
        # Each view's own time: the first view's includes the target passes, the others' drafter passes only.
        own = sum(p.wall_seconds for p in done[view])
        out[view] = (AcceptanceResult.from_prompts(done[view], wall_seconds=own, verdict=verdict(done[view], thresholds),
                                                   thresholds=thresholds, run=info), outputs[view])
    return out


def _engine_backend(args: argparse.Namespace, view: str, rewrites: Sequence[Any], scratch: str,
                    console: Any = None) -> Any:
    """vLLM for one config view: the drafter folder as is for resolved (vLLM reads config.json through
    the config class), a copy that keeps the raw values for raw (``diagnosis.raw_view_folder``).
    ``console`` (an ``EngineConsole``) keeps vLLM's output off stdout and its last error."""

    drafter = args.drafter
    if view == "raw" and rewrites:
        drafter = raw_view_folder(args.drafter, rewrites, str(Path(scratch) / "raw-view"))
    opts = _engine_options(args)
    if view in RUNNERS:  # --model-runner both: this engine runs one runner (VLLM_USE_V2_MODEL_RUNNER)
        opts.model_runner = view
    return VllmBackend(args.target, drafter, opts, block_size=args.block_size, console=console)


def _engine_console() -> Any:
    return EngineConsole()


def run_cells(args: argparse.Namespace, specs: Sequence[Any], thresholds: Thresholds, run: dict[str, Any],
              views: Sequence[str], *, config_class: str | None = None, rewrites: Sequence[Any] = (),
              engine: Callable[[str], Any] | None = None, runners: dict[str, Any] | None = None) -> AcceptanceResult:
    """Config views x backends on the same prompts, then one diagnosis (draftguard.runner.differential).

    The reference runs every view on one target load (``run_prompts_views``). An engine (vLLM for
    ``--backend vllm|both``; ``engine`` builds one per view instead, as tests do with a simulated
    fault) runs each view in turn over the same prompts, without early stop so the prompts pair up.
    The result's top-level figures are the served cell's: the resolved view, the engine's when one ran.

    Views "v1" and "v2" are vLLM's model runners (``--model-runner both``, ``runners`` their readings):
    an engine per runner, and an engine that cannot start on one runner (V2 on CPU: no Triton) is
    left out with a note in ``run.notes`` while the other runner's cells still run.
    """
    cells: dict[tuple[str, str], AcceptanceResult] = {}
    tokens: dict[tuple[str, str], list[list[int]]] = {}
    prompts: list[list[int]] | None = None
    labels: list[str] = []
    use_engine = args.backend in ("vllm", "both") or engine is not None
    use_reference = args.backend in ("reference", "both")
    engine_name = None
    notes: list[str] = []
    with tempfile.TemporaryDirectory(prefix="draftguard-views-") as scratch:
        for view in views if use_engine else ():
            # vLLM prints to stdout, which carries only the result; its console sends it all to stderr.
            with contextlib.nullcontext() if engine is not None else _engine_console() as console:
                try:
                    backend = (engine(view) if engine is not None
                               else _engine_backend(args, view, rewrites, scratch, console=console))
                except EngineStartError as exc:
                    if view not in RUNNERS or (view == views[-1] and not cells):
                        raise  # a config view the engine refuses, or no runner at all: nothing to compare
                    notes.append(runner_not_runnable(view, str(exc), reference=use_reference))
                    continue
                used = backend.model_runner_used() if view in RUNNERS and hasattr(backend, "model_runner_used") else None
                if used is not None and used != view:  # vLLM chose the other runner: never measure one twice
                    if hasattr(backend, "close"):
                        backend.close()
                    notes.append(runner_not_runnable(view, f"vLLM's worker built the {used.upper()} runner when "
                                                     f"{view.upper()} was asked", reference=use_reference))
                    continue
                engine_name = getattr(backend, "name", "engine")
                if prompts is None:
                    prompts, labels = _engine_prompts(args, specs, backend)
                step, finish = _progress(len(prompts), args.quiet)
                try:
                    info = backend.run_info() if hasattr(backend, "run_info") else {"backend": engine_name}
                    cells[(view, engine_name)], tokens[(view, engine_name)] = run_prompts(
                        backend, prompts, labels, max_new_tokens=args.max_new_tokens, thresholds=thresholds,
                        block_size=args.block_size, early_stop=False,
                        on_prompt=step, run={**run, **info, "config_view": view,
                                             "block_size": args.block_size or backend.block_size})
                finally:
                    finish()
                    if hasattr(backend, "close"):
                        backend.close()  # frees the engine's memory for the next view or the reference
    if use_reference:
        backend = _reference_backend(args, views, runners)
        if prompts is None:
            from draftguard.runner.dflash_model import text_config  # torch, only when the reference backend runs

            prompts = encode_all(specs, backend.tokenizer, int(text_config(backend.target).vocab_size))
            labels = [s.label for s in specs]
        step, finish = _progress(len(prompts), args.quiet)

        def settled(done: dict[str, list[PromptResult]]) -> bool:
            partial = {(v, REFERENCE): AcceptanceResult.from_prompts(ps, wall_seconds=0.0)
                       for v, ps in done.items()}
            return diagnose(partial, thresholds, rewrites=rewrites, runners=runners,
                            confidence=EARLY_STOP_CONFIDENCE).cause is not None
        try:
            per_view = run_prompts_views(
                backend, prompts, labels, max_new_tokens=args.max_new_tokens, thresholds=thresholds,
                block_size=args.block_size, early_stop=not (args.no_early_stop or use_engine), on_prompt=step,
                run={**run, "backend": "reference", "device": args.device, "method": getattr(args, "method", "dflash"),
                     "block_size": args.block_size or backend.block_size,
                     "dtype": str(next(backend.target.parameters()).dtype).replace("torch.", "")},
                settled=settled)
        finally:
            finish()
        for view, (result, toks) in per_view.items():
            cells[(view, REFERENCE)], tokens[(view, REFERENCE)] = result, toks
    if use_engine and engine_name is None and not use_reference:  # every runner left out: nothing measured
        raise EngineStartError("; ".join(notes) or "no engine ran")
    diagnosis = diagnose(cells, thresholds, rewrites=rewrites, config_class=config_class, runners=runners)
    served_view = "resolved" if "resolved" in views else views[0]
    if engine_name is not None and (served_view, engine_name) not in cells:
        served_view = next(v for v, b in cells if b == engine_name)  # the runner that ran
    if engine_name is not None and use_reference:
        key_ref, key_eng = (served_view, REFERENCE), (served_view, engine_name or "engine")
        diff = differential.compare(cells[key_ref], cells[key_eng], reference_tokens=tokens[key_ref],
                                    engine_tokens=tokens[key_eng])
        served = differential.combine(cells[key_ref], cells[key_eng], diff)
    else:
        served = cells[(served_view, engine_name if engine_name is not None else REFERENCE)]
    served.run["config_view"] = run.get("config_view", "both" if len(views) > 1 else views[0])
    if notes:
        served.run["notes"] = [*served.run.get("notes", []), *notes]
    return with_diagnosis(served, cells, diagnosis)


def runner_not_runnable(view: str, reason: str, *, reference: bool) -> str:
    """The run note for a model runner vLLM would not start here (``--model-runner both``).

    Example::

        >>> runner_not_runnable("v2", "... ValidationError: Value error, Model Runner V2 requires Triton.", reference=False)
        'the V2 model runner cannot run here, so vLLM measured V1 alone (... ValidationError: Value error, Model Runner V2 requires Triton.)'
    """
    name, other = ("V2", "V1") if view == "v2" else ("V1", "V2")
    also = f"; the reference still measured the head as {name} reads it" if reference else ""
    return f"the {name} model runner cannot run here, so vLLM measured {other} alone ({reason}){also}"


def _engine_prompts(args: argparse.Namespace, specs: Sequence[Any], backend: Any) -> tuple[list[list[int]], list[str]]:
    """Prompts as an engine gets them: its target's tokenizer, plus vLLM's long-context prompt past the
    drafter's sliding window when the backend has one (``facts``)."""

    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is True:  # vLLM's flag: the target has a tokenizer; load it here to encode
        from transformers import AutoTokenizer  # transformers: seconds to import; only a model run pays it

        tokenizer = AutoTokenizer.from_pretrained(args.target)
    elif tokenizer is False:
        tokenizer = None
    vocab = None
    if hasattr(backend, "target") and not isinstance(backend.target, str):
        from draftguard.runner.dflash_model import text_config  # torch, only when the reference backend runs

        vocab = int(text_config(backend.target).vocab_size)
    prompts = encode_all(specs, tokenizer, vocab) if vocab is not None else encode_all(specs, tokenizer)
    labels = [s.label for s in specs]
    facts = getattr(backend, "facts", None)
    if facts is not None:

        extra = long_context_length(engine_options(args), facts, args.max_new_tokens)
        if extra:
            prompts.append(long_context_prompt(prompts, extra))
            labels.append("long-context")
    return prompts, labels
