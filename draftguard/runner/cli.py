"""``draftguard accept``: the acceptance test of a speculative-decoding drafter against its target.

Registered by ``draftguard/cli.py`` through ``add_accept_parser``. This module imports no torch at
import time: the parser is built for every command, and ``draftguard check`` must never load torch.
torch (and vLLM for ``--backend vllm|both``) is imported inside ``cmd_accept`` only; the runs
themselves are ``runner/runs.py``.

In: the parsed ``accept`` arguments (--target, --drafter, --prompts, --backend, --config-view, the
thresholds and engine flags), with defaults from the ``.draftguard.yml`` in --settings.
Out: the ``AcceptanceResult`` on stdout (--format text, json or markdown), optionally as JSON in
--output and a chart in --plot; bad input on stderr; the exit code.

Exit codes: 0 pass (or no threshold set: a report only); 1 fail, or inconclusive against a threshold;
2 bad input (one line on stderr); 3 a bug.

Example::

    draftguard accept --target tests/fixtures/models/target --drafter tests/fixtures/models/drafter \\
        --prompts tests/fixtures/models/prompts.jsonl --max-new-tokens 32 --min-acceptance-length 3
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from draftguard.check.drafter import check_drafter
from draftguard.check.drafter.detect import detect_drafter, is_mtp_assistant
from draftguard.check.findings import RULES, Severity, TargetResult
from draftguard.hub_access import hub_repos, require_hub
from draftguard.runner.diagnosis import diagnose, with_diagnosis
from draftguard.runner.differential import cells_of_combined
from draftguard.runner.engine_options import add_engine_arguments, check_model_runner, drafting_method
from draftguard.runner.mtp_assistant import assistant_faults
from draftguard.runner.mtp_weights import (mtp_diagnosis, mtp_faults, mtp_rewrite, read_config,
                                           refuse_rewritten_to_none)
from draftguard.runner.model_runners import NESTED_KEY, RUNNERS, int_list, runner_readings, target_layers
from draftguard.runner.prompts import select_prompts
from draftguard.runner.render import plot_per_position, render_markdown, render_text
from draftguard.runner.result import CONFIG_REWRITE, FAIL, MTP_WEIGHTS, PASS, AcceptanceResult
from draftguard.runner.runs import config_views, run_cells, _note_catastrophic, _run_reference, _run_vllm
from draftguard.runner.stats import MIN_FIRST_POSITION, make_thresholds
from draftguard.settings import load_settings
from draftguard.errors import EngineStartError, install_hint
from draftguard.snapshot import BadInput, load_snapshot

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
DEFAULT_MAX_NEW_TOKENS = 128
# Drafter-vs-target findings that make a pair impossible to run (bad input). The others (window
# unused, mask token that is a regular word, differing tokenizers...) still run: measuring what they
# do to acceptance is this test's job.
FATAL_RULES = frozenset(r.id for r in RULES.values() if r.blocks_acceptance)


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
        "a --baseline result. Needs torch (the `runner` extra); --backend vllm needs vLLM.",
    )
    p.add_argument("--target", help="the target model: a folder or a Hub repo id (default: .draftguard.yml target)")
    p.add_argument("--drafter", help="the drafter: a folder or a Hub repo id (z-lab DFlash format, an EAGLE-3 head); "
                   "omitted for --method mtp, whose drafter is the target's own MTP layer")
    p.add_argument("--backend", choices=["reference", "vllm", "both"],
                   help="reference: draftguard's own DFlash implementation (CPU or GPU); vllm: vLLM's; both: "
                   "the two on the same prompts, judged against each other (default: reference)")
    p.add_argument("--method", choices=["auto", "dflash", "eagle3", "mtp"], default="auto",
                   help="the drafting method: dflash (block drafting), eagle3 (chain drafting from the target's "
                   "aux hidden states) or mtp (the target's own MTP layer, chain drafting); auto (default): what the "
                   "drafter's config.json is, or mtp when no --drafter is given and the target declares MTP layers")
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
    add_engine_arguments(p)
    p.set_defaults(func=cmd_accept)
    return p


def _check_fit(target: str, drafter: str) -> list[str]:
    """The drafter-vs-target rules (draftguard.check.drafter) that make a pair impossible to run.
    Returns the other errors they find, as notes for the result: the run measures the drafter as the
    engine runs it, and the light check's finding stands beside its τ."""
    if not Path(drafter).is_dir():
        return []  # Hub drafters: checked after download, by the loader's own shape checks
    snapshot = load_snapshot(drafter)
    result = TargetResult(source=drafter, file=snapshot.path_of("config.json"), revision=None, model_type=None,
                          config_class=None, findings=[], attention=[])
    notes = []
    for f in check_drafter(snapshot, result, target=target):
        where = f"{f.file}:{f.line}" if f.line else (f.file or drafter)
        if f.rule in FATAL_RULES and not _runs_in_vllm(f, snapshot, target):
            raise BadInput(f"{where}: {f.message} [{f.rule}] (`{f.key}`); this drafter does not fit {target}",
                           file=f.file, line=f.line, key=f.key)
        if f.severity is Severity.ERROR:
            notes.append(f"the light check finds {f.rule} ({RULES[f.rule].name}) at {where}: {f.message}")
    return notes


def _runs_in_vllm(finding: Any, snapshot: Any, target: str) -> bool:
    """DG102 on ``eagle_config``'s aux ids judges them as SGLang reads them (0-based layers); vLLM's V1
    runner reads them as aux ids, and where each is one (1..N) vLLM runs the pair, so ``accept`` does
    (the finding stays in ``draftguard check``). A head like vllm-project/vllm#49559's is refused no more.
    DG103 (aux id 0, the embedding output) on an EAGLE-3 head: vLLM captures the embeddings as aux
    state 0 (``_maybe_add_hidden_state`` at the first layer) and runs the head, so ``accept`` measures
    it, the finding beside the τ."""
    if finding.rule == "DG103":
        fmt = detect_drafter(snapshot.load_json())
        return fmt is not None and fmt.family == "eagle3"
    if finding.rule != "DG102" or finding.key != NESTED_KEY:
        return False
    nested = snapshot.load_json().get("eagle_config")
    ids = int_list(nested.get("eagle_aux_hidden_state_layer_ids")) if isinstance(nested, dict) else None
    try:
        n = target_layers(target)
    except BadInput:
        return False
    return ids is not None and all(1 <= i <= n for i in ids)


def _mtp_cause(args: argparse.Namespace) -> str:
    """For an engine that refused an MTP target: the MTP tensors' faults, when its folder shows any
    (an FP8 layer's ``weight_scale_inv`` that vLLM has no parameter for), as the cause."""
    if getattr(args, "method", None) != "mtp" or not Path(str(args.target)).is_dir():
        return ""
    if _assistant(getattr(args, "drafter", None)):
        try:
            faults = assistant_faults(args.drafter)
        except BadInput:
            return ""
        return f"; cause: {MTP_WEIGHTS} — " + "; ".join(faults) if faults else ""
    try:
        faults = mtp_faults(args.target)
        rewrite = mtp_rewrite(read_config(Path(args.target)), str(Path(args.target) / "config.json"))
    except BadInput:
        return ""
    if rewrite is not None:
        return f"; cause: {CONFIG_REWRITE} — {rewrite.sentence()} ({rewrite.where()})"
    return f"; cause: {MTP_WEIGHTS} — " + "; ".join(faults) if faults else ""


def _mtp_rewrite_notes(target: str) -> list[str]:
    """Before the run (and before torch): bad input naming the cause ``config-rewrite`` where the target's
    config class resolves its declared MTP layers to none; else a note where the class builds another
    number of them than config.json states, for the result beside the τ."""
    if not Path(target).is_dir():
        return []
    where = str(Path(target) / "config.json")
    rewrite = refuse_rewritten_to_none(read_config(Path(target)), where)
    return [f"the MTP layer count is rewritten ({rewrite.where()}): {rewrite.sentence()}; the run measures "
            f"what the engine builds"] if rewrite else []


def _assistant(drafter: str | None) -> bool:
    """Whether ``--drafter`` is a folder holding an MTP assistant (Gemma 4's), drafting beside ``--target``."""
    folder = Path(str(drafter))
    if drafter is None or not (folder / "config.json").is_file():
        return False
    try:
        return is_mtp_assistant(read_config(folder))
    except BadInput:
        return False


def _gemma4(target: str) -> bool:
    """Whether ``--target`` is a Gemma 4 folder (whose MTP drafter is an assistant of its own)."""
    try:
        raw = read_config(Path(target)) if Path(target, "config.json").is_file() else {}
    except BadInput:
        return False
    return str(raw.get("model_type", "")).startswith("gemma4") and not is_mtp_assistant(raw)


def _mtp_drafter(args: argparse.Namespace) -> None:
    """``--method mtp``, or no ``--drafter``: the drafter is the target's own MTP layer, so the target
    folder is the drafter's too; without --drafter the target must declare MTP layers. A --drafter that
    is itself a model with MTP layers is that model's target: naming another --target is refused."""
    if args.drafter is None:
        if args.method not in ("auto", "mtp"):
            raise BadInput(f"--method {args.method} needs --drafter", key="drafter")
        if _gemma4(args.target):
            raise BadInput(f"{args.target}/config.json: Gemma 4 declares no MTP layers of its own; its MTP drafter is a "
                           "separate assistant checkpoint (model_type gemma4_assistant, e.g. "
                           "google/gemma-4-e2b-it-assistant): pass it as --drafter", key="drafter")
        if args.method == "auto" and drafting_method(args.target) != "mtp":
            raise BadInput(f"accept needs --drafter: {args.target} declares no MTP layers to draft with", key="drafter")
        args.drafter, args.method = args.target, "mtp"
    elif args.method == "mtp" or (args.method == "auto" and drafting_method(args.drafter) == "mtp"):
        if _assistant(args.drafter):  # Gemma 4's MTP drafter is its own checkpoint (runner/mtp_gemma4.py)
            args.method = "mtp"
            return
        if args.drafter != args.target:
            raise BadInput(f"--method mtp drafts with the target's own MTP layer; drop --drafter {args.drafter} (a model "
                           "with MTP layers runs as --target, without --drafter)", key="drafter")
        args.method = "mtp"


def _runner_views(args: argparse.Namespace) -> tuple[tuple[str, ...], None, list[Any], dict[str, Any]]:
    """``--model-runner both``: the two runners as the cells' views, and what each reads
    (runner/model_runners.py). The reference reads an EAGLE-3 head per runner; a DFlash drafter's
    runners differ in the engine only, so the reference alone cannot compare them."""
    if args.method != "eagle3" and args.backend == "reference":
        raise BadInput("--model-runner both with --backend reference compares how each vLLM runner feeds an EAGLE-3 "
                       "head; for a DFlash drafter use --backend vllm or both", key="model_runner")
    if args.config_view not in ("auto", "resolved"):
        raise BadInput(f"--model-runner both runs the resolved config view; drop --config-view {args.config_view}",
                       key="config_view")
    return RUNNERS, None, [], runner_readings(args.drafter, args.target, args.method)


def _settings(args: argparse.Namespace) -> None:
    """Fill options the command line left out from .draftguard.yml (the command line wins)."""
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
    check_model_runner(getattr(args, "model_runner", None) or "auto")
    if args.max_new_tokens < 1:
        raise BadInput(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}", key="max_new_tokens")
    if args.block_size is not None and args.block_size < 2:
        raise BadInput(f"--block-size must be at least 2 (an anchor and one drafted token), got {args.block_size}",
                       key="block_size")


def cmd_accept(args: argparse.Namespace) -> int:
    """The ``accept`` command: returns the exit code; bad input is one line on stderr and exit 2."""
    try:
        result = _accept(args)
    except EngineStartError as exc:
        print(f"draftguard: {exc}{_mtp_cause(args)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BadInput as exc:
        print(f"draftguard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = sys.stdout
    if args.format == "json":
        out.write(result.to_json())
    elif args.format == "markdown":
        out.write(render_markdown(result))
    else:
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
    # Before torch (seconds to import) and before the method is read from a config: a drafter or
    # target that is no folder must be a Hub repo id, and the Hub must answer (one line at once when
    # it cannot, not 23 s of huggingface_hub's retries).
    require_hub(hub_repos([args.target], what="target", strict=True)
                + (hub_repos([args.drafter], what="drafter", strict=True) if args.drafter else []))
    _mtp_drafter(args)
    floor = MIN_FIRST_POSITION if args.min_first_position is None else args.min_first_position
    thresholds = make_thresholds(args.min_acceptance_length, baseline, args.baseline, args.tolerance, floor)
    specs = select_prompts(args.prompts, args.num_prompts)
    if args.plot:
        try:  # fail before the run, not after it
            import matplotlib  # noqa: F401 (matplotlib: the plot extra only)
        except ImportError:
            raise BadInput(f"--plot needs matplotlib: {install_hint('plot')}") from None
    try:
        import torch  # torch: the runner extra only
    except ImportError:
        raise BadInput(f"draftguard accept needs torch: {install_hint('runner')}") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BadInput(f"--device {device}: no CUDA GPU is visible to torch here; run on a GPU runner or use --device cpu")
    args.method = drafting_method(args.drafter, args.method)
    assistant = args.method == "mtp" and _assistant(args.drafter)
    light = (_check_fit(args.target, args.drafter) if args.method != "mtp"
             else [] if assistant else _mtp_rewrite_notes(args.target))
    runners = None
    if args.model_runner == "both":
        views, config_class, rewrites, runners = _runner_views(args)
    elif args.method in ("eagle3", "mtp"):
        # One view: the LLaMA config class rewrites none of the keys an EAGLE-3 head is built from.
        views, config_class, rewrites = ("resolved",), None, []
    else:
        views, config_class, rewrites = config_views(args.config_view, args.drafter)
    run = {"target": args.target, "drafter": args.drafter, "config_view": "both" if len(views) > 1 else views[0],
           "prompts": args.prompts, "method": args.method}
    if runners is not None:
        run.update(config_view="resolved", model_runner="both",
                   model_runners={v: r.to_dict() for v, r in runners.items()})
    elif args.model_runner in RUNNERS and args.method == "eagle3":
        run["model_runner"] = args.model_runner  # the reference reads the head as this runner does
    elif args.config_view == "auto" and args.method not in ("eagle3", "mtp"):
        run["config_view_chosen"] = (f"both: the light check finds {config_class or 'the config class'} rewrites "
                                     + ", ".join(f"`{r.key}`" for r in rewrites)) if len(views) > 1 else \
            "resolved: the light check finds no key the config class rewrites"
    if len(views) > 1:
        result = run_cells(args, specs, thresholds, run, views, config_class=config_class, rewrites=rewrites,
                           runners=runners)
    elif args.backend == "reference":
        args.config_view = views[0]
        result, _ = _run_reference(args, specs, thresholds, run)
        _note_catastrophic(result, views[0], "reference", thresholds)
    else:
        args.config_view = views[0]
        result = _run_vllm(args, specs, thresholds, run)
        if args.backend == "both":  # one view, two backends: the same paired diagnosis as the 2 x 2
            cells = cells_of_combined(result, views[0])
            diagnosis = diagnose(cells, thresholds, rewrites=rewrites, config_class=config_class)
            result = with_diagnosis(result, cells, diagnosis)
        else:
            _note_catastrophic(result, views[0], "vllm", thresholds)
    if args.method == "eagle3":
        from draftguard.runner.eagle3_model import engine_default_notes  # torch: imported above already

        light += engine_default_notes(args.drafter)
    if light:  # beside the τ: what the light check finds, and what the engine ran at its defaults
        result.run["notes"] = [*result.run.get("notes", []), *light]
    if assistant:  # the assistant's tensors dropped or left quantized: the cause, whichever backends measured it
        diagnosis = mtp_diagnosis(assistant_faults(args.drafter), result.verdict.status)
        if diagnosis:
            result.diagnosis = diagnosis
    elif args.method == "mtp" and Path(args.target).is_dir():
        # The MTP layer's tensors dropped or left quantized, or its count rewritten by the config class:
        # the cause, whichever backends measured it.
        faults = mtp_faults(args.target)
        where = str(Path(args.target) / "config.json")
        diagnosis = mtp_diagnosis(faults, result.verdict.status, mtp_rewrite(read_config(Path(args.target)), where))
        if diagnosis:
            result.diagnosis = diagnosis
    if args.plot:
        plot_per_position(result, args.plot)
    return result

__all__ = ["add_accept_parser", "cmd_accept", "run_cells", "config_views", "FATAL_RULES"]
