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
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from draftguard.runner.result import FAIL, PASS, AcceptanceResult, PromptResult, Thresholds
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
        'resolved'
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
                   help="weights' dtype for the reference backend (auto: float32 on CPU, bfloat16 on GPU)")
    p.add_argument("--prompts",
                   help="builtin (chat, math, code; the default) or a JSONL file: {\"prompt\"}, {\"messages\"} or "
                   "{\"input_ids\"} lines")
    p.add_argument("--num-prompts", type=int, metavar="N", help="use the first N prompts (default: all)")
    p.add_argument("--max-new-tokens", type=int, metavar="M", help=f"new tokens per prompt (default {DEFAULT_MAX_NEW_TOKENS})")
    p.add_argument("--block-size", type=int, metavar="B", help="anchor + drafted tokens per step (default: the drafter's)")
    p.add_argument("--config-view", choices=["resolved", "raw"], default="resolved",
                   help="build the drafter from config.json as transformers resolves it (what an engine that "
                   "trusts the config class runs; default) or as the file says")
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
    """The drafter-vs-target rules (draftguard.check.dflash) that make a pair impossible to run."""
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
    from draftguard.runner.stats import make_thresholds

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
    thresholds = make_thresholds(args.min_acceptance_length, baseline, args.baseline, args.tolerance)
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

    run = {"target": args.target, "drafter": args.drafter, "config_view": args.config_view,
           "prompts": args.prompts}
    if args.backend == "reference":
        result, _ = _run_reference(args, specs, thresholds, run)
    else:
        result = _run_vllm(args, specs, thresholds, run)
    if args.plot:
        from draftguard.runner.render import plot_per_position

        plot_per_position(result, args.plot)
    return result


def _reference_backend(args: argparse.Namespace) -> Any:
    import torch

    from draftguard.runner.reference import ReferenceBackend

    dtype = None if args.dtype == "auto" else getattr(torch, args.dtype)
    return ReferenceBackend(args.target, args.drafter, device=args.device, view=args.config_view, dtype=dtype)


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


def _run_vllm(args: argparse.Namespace, specs: Sequence[Any], thresholds: Thresholds,
              run: dict[str, Any]) -> AcceptanceResult:
    """``--backend vllm``: vLLM alone; ``both``: vLLM and the reference on the same prompts, judged
    against each other (draftguard.runner.differential)."""
    from draftguard.runner import differential
    from draftguard.runner.prompts import encode_all
    from draftguard.runner.vllm import VllmBackend, engine_options, long_context_length, long_context_prompt

    opts = engine_options(args)
    backend = VllmBackend(args.target, args.drafter, opts, block_size=args.block_size)
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
    both = args.backend == "both"
    try:
        engine, engine_tokens = run_prompts(
            backend, prompts, labels, max_new_tokens=args.max_new_tokens, thresholds=thresholds,
            block_size=None, early_stop=not (args.no_early_stop or both), on_prompt=step,
            run={**run, **backend.run_info(), "block_size": backend.block_size},
        )
    finally:
        finish()
    if not both:
        return engine
    backend.close()  # stops vLLM's engine process: its GPU memory is free for the reference
    reference, ref_tokens = _run_reference(args, specs, thresholds, run, prompts=prompts, early_stop=False)
    diff = differential.compare(reference, engine, reference_tokens=ref_tokens, engine_tokens=engine_tokens)
    return differential.combine(reference, engine, diff)


__all__ = ["add_accept_parser", "cmd_accept", "run_prompts", "FATAL_RULES"]
