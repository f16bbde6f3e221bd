"""``draftguard accept``: the acceptance test of a speculative-decoding drafter against its target.

Registered by ``draftguard/cli.py`` through ``add_accept_parser``. This module imports no torch at
import time: the parser is built for every command, and ``draftguard check`` must never load torch.
torch (and vLLM for ``--backend vllm|both``) is imported inside ``cmd_accept`` only.

Exit codes: 0 pass (or no threshold set: a report only); 1 fail, or inconclusive against a threshold;
2 bad input (one line on stderr); 3 a bug.

Example::

    draftguard accept --target tests/fixtures/models/target --drafter tests/fixtures/models/drafter \\
        --prompts tests/fixtures/models/prompts.jsonl --max-new-tokens 32 --min-acceptance-length 3
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from draftguard.runner.result import FAIL, PASS, AcceptanceResult, PromptResult, Thresholds
from draftguard.runner.stats import EARLY_STOP_CONFIDENCE
from draftguard.snapshot import BadInput

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_MAX_NEW_TOKENS = 128
# Drafter-vs-target findings that make a pair impossible to run (bad input). The others (window
# unused, mask token that is a regular word, differing tokenizers...) still run: measuring what they
# do to acceptance is this test's job.
FATAL_RULES = frozenset({"DG101", "DG102", "DG103", "DG104", "DG106", "DG109", "DG111", "DG112", "DG120",
                         "DG121", "DG122", "DG123"})


def add_accept_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``accept`` subcommand to the ``draftguard`` subparsers.

    Example::

        >>> p = argparse.ArgumentParser(); s = p.add_subparsers(dest="command")
        >>> _ = add_accept_parser(s)
        >>> p.parse_args(["accept", "--target", "t", "--drafter", "d"]).config_view
        'auto'
    """
    p = sub.add_parser(
        "accept",
        help="acceptance test: speculative decoding on real prompts, τ and a verdict (needs the runner extra)",
        description="Run the drafter against its target with greedy speculative decoding, measure the mean "
        "acceptance length τ and the per-position acceptance, and judge it against --min-acceptance-length or "
        "a --baseline result. Needs torch (pip install 'draftguard[runner]'); --backend vllm needs vLLM.",
    )
    p.add_argument("--target", help="the target model: a folder or a Hub repo id (default: .draftguard.yml target)")
    p.add_argument("--drafter", required=True, help="the drafter: a folder or a Hub repo id (z-lab DFlash format)")
    p.add_argument("--backend", choices=["reference", "vllm", "both"],
                   help="reference: draftguard's own DFlash implementation (CPU or GPU); vllm: vLLM's; both: "
                   "the two on the same prompts, judged against each other (default: reference)")
    p.add_argument("--device", default="cpu", help="cpu or cuda (reference backend; default cpu)")
    p.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                   help="weights' dtype, for both backends (auto: the reference runs float32 on CPU and bfloat16 "
                   "on GPU; vLLM picks its own, bfloat16 for float32 checkpoints; --backend both runs vLLM in the "
                   "reference's dtype)")
    p.add_argument("--prompts",
                   help="builtin (chat, math, code; the default) or a JSONL file: {\"prompt\"}, {\"messages\"} or "
                   "{\"input_ids\"} lines")
    p.add_argument("--num-prompts", type=int, metavar="N", help="use the first N prompts (default: all)")
    p.add_argument("--max-new-tokens", type=int, metavar="M", help=f"new tokens per prompt (default {DEFAULT_MAX_NEW_TOKENS})")
    p.add_argument("--block-size", type=int, metavar="B", help="anchor + drafted tokens per step (default: the drafter's)")
    p.add_argument("--config-view", choices=["auto", "resolved", "raw", "both"], default="auto",
                   help="build the drafter from config.json as transformers resolves it (what an engine that "
                   "trusts the config class runs), as the file says (raw), or both on the same prompts, compared "
                   "prompt by prompt to name the cause; auto (default): both where the light check finds keys the "
                   "config class rewrites, else resolved")
    p.add_argument("--min-first-position", type=float, metavar="F", default=None,
                   help="with no bar, fail as catastrophic when the first drafted position's acceptance interval "
                   "lies wholly below F (default 0.2; a healthy drafter's is far higher)")
    p.add_argument("--min-acceptance-length", type=float, metavar="X", help="the τ a pass needs")
    p.add_argument("--baseline", metavar="FILE", help="an earlier result (--format json); the bar is --tolerance x its τ")
    p.add_argument("--tolerance", type=float, metavar="F", help="share of the baseline's τ a pass needs (default 0.95)")
    p.add_argument("--no-early-stop", action="store_true", help="run every prompt even once the verdict is settled")
    p.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    p.add_argument("--output", metavar="FILE", help="also write the result as JSON to FILE")
    p.add_argument("--plot", metavar="FILE.png", help="write a per-position acceptance chart (needs the plot extra)")
    p.add_argument("--settings", metavar="DIR", default=".", help="folder whose .draftguard.yml supplies defaults (default: .)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    try:
        from draftguard.runner.vllm import add_engine_arguments
    except ImportError:  # the vLLM backend's options are optional; the reference runs without them
        pass
    else:
        add_engine_arguments(p)
    p.set_defaults(func=cmd_accept)
    return p


def _check_fit(target: str, drafter: str) -> None:
    """The drafter-vs-target rules (draftguard.check.drafter) that make a pair impossible to run."""
    from draftguard.check.drafter import check_drafter
    from draftguard.check.findings import TargetResult
    from draftguard.snapshot import load_snapshot

    if not Path(drafter).is_dir():
        return  # Hub drafters: checked after download, by the loader's own shape checks
    snapshot = load_snapshot(drafter)
    result = TargetResult(source=drafter, file=snapshot.path_of("config.json"), revision=None, model_type=None,
                          config_class=None, findings=[], attention=[])
    for f in check_drafter(snapshot, result, target=target):
        if f.rule in FATAL_RULES:
            where = f"{f.file}:{f.line}" if f.line else (f.file or drafter)
            raise BadInput(f"{where}: {f.message} [{f.rule}] (`{f.key}`); this drafter does not fit {target}",
                           file=f.file, line=f.line, key=f.key)


def _progress(total: int, quiet: bool) -> tuple[Callable[[str], None], Callable[[], None]]:
    """A progress bar over prompts on stderr (rich), or nothing when quiet or not a terminal."""
    if quiet or not sys.stderr.isatty():
        return (lambda _label: None), (lambda: None)
    from rich.console import Console
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
    from draftguard.runner.stats import EarlyStop, verdict

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


def _settings(args: argparse.Namespace) -> None:
    """Fill options the command line left out from .draftguard.yml (the command line wins)."""
    from draftguard.settings import load_settings

    s = load_settings(args.settings)
    for name in ("target", "min_acceptance_length", "baseline", "tolerance", "num_prompts", "max_new_tokens",
                 "block_size", "backend"):
        if getattr(args, name, None) is None and getattr(s, name, None) is not None:
            value = getattr(s, name)
            if name == "tolerance" and s.baseline is None and args.baseline is None:
                continue  # the settings' default tolerance means nothing without a baseline
            setattr(args, name, value)
    if args.prompts is None and s.prompts:
        given = Path(s.prompts)
        # A prompt file named in .draftguard.yml is relative to the folder that holds it.
        args.prompts = s.prompts if s.prompts == "builtin" or given.is_absolute() else str(Path(args.settings) / given)
    args.prompts = args.prompts or "builtin"
    args.backend = args.backend or "reference"
    args.max_new_tokens = args.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
    if not args.target:
        raise BadInput("accept needs the target model: --target, or `target:` in .draftguard.yml", key="target")
    if args.max_new_tokens < 1:
        raise BadInput(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}", key="max_new_tokens")
    if args.block_size is not None and args.block_size < 2:
        raise BadInput(f"--block-size must be at least 2 (an anchor and one drafted token), got {args.block_size}",
                       key="block_size")


def cmd_accept(args: argparse.Namespace) -> int:
    """The ``accept`` command: returns the exit code; bad input is one line on stderr and exit 2."""
    try:
        result = _accept(args)
    except BadInput as exc:
        print(f"draftguard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = sys.stdout
    if args.format == "json":
        out.write(result.to_json())
    elif args.format == "markdown":
        from draftguard.runner.render import render_markdown

        out.write(render_markdown(result))
    else:
        from draftguard.runner.render import render_text

        render_text(result, out)
    if args.output:
        Path(args.output).write_text(result.to_json(), encoding="utf-8")
    status = result.verdict.status
    if status == PASS:
        return EXIT_OK
    if status == FAIL:
        return EXIT_FAIL
    return EXIT_FAIL if result.thresholds.bar is not None else EXIT_OK


def _accept(args: argparse.Namespace) -> AcceptanceResult:
    from draftguard.runner.prompts import select_prompts
    from draftguard.runner.stats import MIN_FIRST_POSITION, make_thresholds

    _settings(args)
    device = args.device
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise BadInput(f"--device must be cpu or cuda, got {device!r}")
    baseline = None
    if args.baseline:
        path = Path(args.baseline)
        if not path.is_file():
            raise BadInput(f"{path}: baseline result not found (write one with --format json or --output)",
                           file=str(path))
        baseline = AcceptanceResult.from_json(path.read_bytes(), str(path))
    floor = MIN_FIRST_POSITION if args.min_first_position is None else args.min_first_position
    thresholds = make_thresholds(args.min_acceptance_length, baseline, args.baseline, args.tolerance, floor)
    specs = select_prompts(args.prompts, args.num_prompts)
    if args.plot:
        try:  # fail before the run, not after it
            import matplotlib  # noqa: F401
        except ImportError:
            raise BadInput("--plot needs matplotlib: pip install 'draftguard[plot]'") from None
    try:
        import torch
    except ImportError:
        raise BadInput("draftguard accept needs torch: pip install 'draftguard[runner]'") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BadInput(f"--device {device}: no CUDA GPU is visible to torch here; run on a GPU runner or use --device cpu")
    _check_fit(args.target, args.drafter)

    views, config_class, rewrites = config_views(args.config_view, args.drafter)
    run = {"target": args.target, "drafter": args.drafter, "config_view": "both" if len(views) > 1 else views[0],
           "prompts": args.prompts}
    if args.config_view == "auto":
        run["config_view_chosen"] = (f"both: the light check finds {config_class or 'the config class'} rewrites "
                                     + ", ".join(f"`{r.key}`" for r in rewrites)) if len(views) > 1 else \
            "resolved: the light check finds no key the config class rewrites"
    if len(views) > 1:
        result = run_cells(args, specs, thresholds, run, views, config_class=config_class, rewrites=rewrites)
    elif args.backend == "reference":
        args.config_view = views[0]
        result, _ = _run_reference(args, specs, thresholds, run)
        _note_catastrophic(result, views[0], "reference", thresholds)
    else:
        args.config_view = views[0]
        result = _run_vllm(args, specs, thresholds, run)
        if args.backend == "both":  # one view, two backends: the same paired diagnosis as the 2 x 2
            from draftguard.runner import differential

            cells = differential.cells_of_combined(result, views[0])
            diagnosis = differential.diagnose(cells, thresholds, rewrites=rewrites, config_class=config_class)
            result = differential.with_diagnosis(result, cells, diagnosis)
        else:
            _note_catastrophic(result, views[0], "vllm", thresholds)
    if args.plot:
        from draftguard.runner.render import plot_per_position

        plot_per_position(result, args.plot)
    return result


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
    from draftguard.runner.differential import light_check_rewrites

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
    from draftguard.runner.differential import diagnose
    from draftguard.runner.result import CATASTROPHIC

    if result.verdict.status != FAIL or thresholds.bar is not None:
        return
    d = diagnose({(view, backend): result}, thresholds)
    if d.cause == CATASTROPHIC:
        result.diagnosis = d.to_dict()


def _reference_backend(args: argparse.Namespace, views: Sequence[str] | None = None) -> Any:
    import torch

    from draftguard.runner.reference import ReferenceBackend

    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    return ReferenceBackend(args.target, args.drafter, device=args.device, view=args.config_view, dtype=dtype,
                            views=views)


def _run_reference(args: argparse.Namespace, specs: Sequence[Any], thresholds: Thresholds, run: dict[str, Any],
                   prompts: Sequence[Sequence[int]] | None = None, early_stop: bool | None = None
                   ) -> tuple[AcceptanceResult, list[list[int]]]:
    from draftguard.runner.prompts import encode_all
    from draftguard.runner.reference import text_config

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
            run={**run, "backend": "reference", "device": args.device,
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
    from draftguard.runner.vllm import engine_options

    opts = engine_options(args)
    if args.backend == "both" and opts.dtype == "auto":
        opts.dtype = "float32" if args.device == "cpu" else "bfloat16"
    return opts


def _run_vllm(args: argparse.Namespace, specs: Sequence[Any], thresholds: Thresholds,
              run: dict[str, Any]) -> AcceptanceResult:
    """``--backend vllm``: vLLM alone; ``both``: vLLM and the reference on the same prompts, judged
    against each other (draftguard.runner.differential)."""
    from draftguard.runner import differential
    from draftguard.runner.prompts import encode_all
    from draftguard.runner.vllm import (EngineConsole, VllmBackend, long_context_length,
                                        long_context_prompt)

    opts = _engine_options(args)
    both = args.backend == "both"
    # vLLM prints to stdout, which carries only the result; the console sends it all to stderr.
    with EngineConsole() as console:
        backend = VllmBackend(args.target, args.drafter, opts, block_size=args.block_size, console=console)
        try:
            tokenizer = None
            if backend.tokenizer:
                from transformers import AutoTokenizer

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
    from draftguard.runner.stats import verdict

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
    the config class), a copy that keeps the raw values for raw (``differential.raw_view_folder``).
    ``console`` (an ``EngineConsole``) keeps vLLM's output off stdout and its last error."""
    from draftguard.runner.differential import raw_view_folder
    from draftguard.runner.vllm import VllmBackend

    drafter = args.drafter
    if view == "raw" and rewrites:
        drafter = raw_view_folder(args.drafter, rewrites, str(Path(scratch) / "raw-view"))
    return VllmBackend(args.target, drafter, _engine_options(args), block_size=args.block_size, console=console)


def _engine_console() -> Any:
    from draftguard.runner.vllm import EngineConsole  # vLLM's own module loads only with this backend

    return EngineConsole()


def run_cells(args: argparse.Namespace, specs: Sequence[Any], thresholds: Thresholds, run: dict[str, Any],
              views: Sequence[str], *, config_class: str | None = None, rewrites: Sequence[Any] = (),
              engine: Callable[[str], Any] | None = None) -> AcceptanceResult:
    """Config views x backends on the same prompts, then one diagnosis (draftguard.runner.differential).

    The reference runs every view on one target load (``run_prompts_views``). An engine (vLLM for
    ``--backend vllm|both``; ``engine`` builds one per view instead, as tests do with a simulated
    fault) runs each view in turn over the same prompts, without early stop so the prompts pair up.
    The result's top-level figures are the served cell's: the resolved view, the engine's when one ran.
    """
    import tempfile

    from draftguard.runner import differential
    from draftguard.runner.prompts import encode_all

    cells: dict[tuple[str, str], AcceptanceResult] = {}
    tokens: dict[tuple[str, str], list[list[int]]] = {}
    prompts: list[list[int]] | None = None
    labels: list[str] = []
    use_engine = args.backend in ("vllm", "both") or engine is not None
    use_reference = args.backend in ("reference", "both")
    engine_name = None
    with tempfile.TemporaryDirectory(prefix="draftguard-views-") as scratch:
        for view in views if use_engine else ():
            # vLLM prints to stdout, which carries only the result; its console sends it all to stderr.
            with contextlib.nullcontext() if engine is not None else _engine_console() as console:
                backend = (engine(view) if engine is not None
                           else _engine_backend(args, view, rewrites, scratch, console=console))
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
        backend = _reference_backend(args, views)
        if prompts is None:
            from draftguard.runner.reference import text_config

            prompts = encode_all(specs, backend.tokenizer, int(text_config(backend.target).vocab_size))
            labels = [s.label for s in specs]
        step, finish = _progress(len(prompts), args.quiet)

        def settled(done: dict[str, list[PromptResult]]) -> bool:
            partial = {(v, differential.REFERENCE): AcceptanceResult.from_prompts(ps, wall_seconds=0.0)
                       for v, ps in done.items()}
            return differential.diagnose(partial, thresholds, rewrites=rewrites,
                                         confidence=EARLY_STOP_CONFIDENCE).cause is not None
        try:
            per_view = run_prompts_views(
                backend, prompts, labels, max_new_tokens=args.max_new_tokens, thresholds=thresholds,
                block_size=args.block_size, early_stop=not (args.no_early_stop or use_engine), on_prompt=step,
                run={**run, "backend": "reference", "device": args.device,
                     "block_size": args.block_size or backend.block_size,
                     "dtype": str(next(backend.target.parameters()).dtype).replace("torch.", "")},
                settled=settled)
        finally:
            finish()
        for view, (result, toks) in per_view.items():
            cells[(view, differential.REFERENCE)], tokens[(view, differential.REFERENCE)] = result, toks
    diagnosis = differential.diagnose(cells, thresholds, rewrites=rewrites, config_class=config_class)
    served_view = "resolved" if "resolved" in views else views[0]
    if use_engine and use_reference:
        key_ref, key_eng = (served_view, differential.REFERENCE), (served_view, engine_name or "engine")
        diff = differential.compare(cells[key_ref], cells[key_eng], reference_tokens=tokens[key_ref],
                                    engine_tokens=tokens[key_eng])
        served = differential.combine(cells[key_ref], cells[key_eng], diff)
    else:
        served = cells[(served_view, engine_name if use_engine else differential.REFERENCE)]
    served.run["config_view"] = run.get("config_view", "both" if len(views) > 1 else views[0])
    return differential.with_diagnosis(served, cells, diagnosis)


def _engine_prompts(args: argparse.Namespace, specs: Sequence[Any], backend: Any) -> tuple[list[list[int]], list[str]]:
    """Prompts as an engine gets them: its target's tokenizer, plus vLLM's long-context prompt past the
    drafter's sliding window when the backend has one (``facts``)."""
    from draftguard.runner.prompts import encode_all

    tokenizer = getattr(backend, "tokenizer", None)
    if tokenizer is True:  # vLLM's flag: the target has a tokenizer; load it here to encode
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.target)
    elif tokenizer is False:
        tokenizer = None
    vocab = None
    if hasattr(backend, "target") and not isinstance(backend.target, str):
        from draftguard.runner.reference import text_config

        vocab = int(text_config(backend.target).vocab_size)
    prompts = encode_all(specs, tokenizer, vocab) if vocab is not None else encode_all(specs, tokenizer)
    labels = [s.label for s in specs]
    facts = getattr(backend, "facts", None)
    if facts is not None:
        from draftguard.runner.vllm import engine_options, long_context_length, long_context_prompt

        extra = long_context_length(engine_options(args), facts, args.max_new_tokens)
        if extra:
            prompts.append(long_context_prompt(prompts, extra))
            labels.append("long-context")
    return prompts, labels


__all__ = ["add_accept_parser", "cmd_accept", "run_prompts", "run_prompts_views", "run_cells", "config_views",
           "FATAL_RULES"]
