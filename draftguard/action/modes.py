"""The Action's two modes: the light check of a pull request (head against base) and the acceptance test.

In: the checkout, the ``Context``, the ``ActionInputs`` and ``WorkflowCommands``.
Out: an ``Outcome`` (exit code, verdict, counts, the sticky comment's sections, the JSON report's
path); annotations and the step summary go out through ``WorkflowCommands``. The acceptance test runs
``draftguard accept`` in a subprocess, so this process never imports torch.
"""

from __future__ import annotations

import json
import os
import posixpath
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from draftguard.action.git import (_cwd, blob_at, changed_files, find_base, git, materialize,
                                   select_launch_files, select_targets)
from draftguard.action.inputs import (ACCEPT_TIMEOUT_ENV, EXIT_BAD_INPUT, EXIT_FAIL, EXIT_OK, SETTINGS_FILE,
                                      ActionInputs, Context, WorkflowCommands)
from draftguard.check.drafter.target import NamedTarget
from draftguard.check import matrix, policy
from draftguard.check.drafter import detect_drafter
from draftguard.check.engines import parse_engines
from draftguard.check.findings import Finding, Report
from draftguard.check.launch import launch_report
from draftguard.check.launch.fetched import materialize_launch
from draftguard.check.launch.reading import MAX_LAUNCH_BYTES
from draftguard.check.run import check
from draftguard.errors import ActionError
from draftguard.fix import fix_targets
from draftguard.report.annotations import render_annotations
from draftguard.report.comment import esc, matrix_note, render_acceptance_section, render_untested_section
from draftguard.report.engines import render_engines_section
from draftguard.report.fixes import fixes_markdown
from draftguard.report.json import render_json
from draftguard.pr_verdict import PullRequestReview, settings_problem
from draftguard.report.sarif import render_sarif
from draftguard.pr_verdict import matrix_markdown as review_matrix_markdown
from draftguard.runner.gpu_job import accept_command
from draftguard.runner.result import AcceptanceResult
from draftguard.secrets import scrub
from draftguard.settings import MAX_SETTINGS_BYTES, Settings, parse_settings
from draftguard.snapshot import BadInput, parse_json_object


# --- settings -----------------------------------------------------------------------------------

# Said in the summary when the base named by the event cannot be read (B8 of issue 25).
UNTRUSTED_SETTINGS_NOTE = (f"{SETTINGS_FILE}: the base commit could not be read, so the defaults are used; the "
                           "pull request's own copy is never applied")


def settings_text(root: Path, base: str | None, base_missing: bool = False) -> str | None:
    """The text of ``.draftguard.yml`` at the base commit when there is one (as the bot reads it from
    the default branch: a pull request cannot relax its own gate), else in the checkout. With
    ``base_missing`` (the event named a base that is not in the checkout and could not be fetched)
    the checkout is the pull request's head, so None: the defaults, never the head's settings."""
    if base_missing and not base:
        return None
    if base:
        done = subprocess.run(["git", "-C", str(root), "show", f"{base}:{SETTINGS_FILE}"], capture_output=True)
        return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None
    path = root / SETTINGS_FILE
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def load_action_settings(root: Path, base: str | None, base_missing: bool = False) -> Settings:
    """The settings a check runs under: ``.draftguard.yml`` from ``settings_text``, else the defaults.

    Raises:
        BadInput: The file is not valid settings (it names the file, line and key)."""
    text = settings_text(root, base, base_missing)
    return parse_settings(text, SETTINGS_FILE) if text is not None else Settings()


# --- the light check ----------------------------------------------------------------------------

def run_check(targets: list[str], versions: list[str] | None, drafter_target: str | None,
              engines: list | None = None, settings: Settings | None = None) -> Report:
    """One Report for targets relative to the current folder (so findings name repo paths); ``engines``
    (``check.engines.EngineSpec``) adds the engine views' findings, light tier (not with a matrix)."""
    # Run from the checkout's root: nothing the checked files name is read outside it (R5 of issue 25).
    return check(targets, versions=versions, drafter_target=drafter_target, confine=Path.cwd(),
                 engines=None if versions else engines or None, progress=matrix.stderr_progress,
                 settings=settings)


def matrix_markdown(report: Report) -> str | None:
    """The version-matrix section of a Report, as the bot renders it (table, and the versions that did
    not run); None when every version ran and no value differs.

    The bot's ``pr_check.matrix_section`` would re-run the matrix from file bytes, and this Report
    already holds it, so only the shared rendering (``draftguard.pr_verdict.matrix_markdown``) is reused."""

    if report.matrix is None:
        return None
    header, body = report.matrix.table()
    note = matrix_note(report.matrix, bool(body))
    if not body and (note is None or "Not run" not in note):
        return None  # every version ran and agrees: nothing to show
    return review_matrix_markdown(report.matrix)


@dataclass
class Outcome:
    code: int
    verdict: str
    errors: int
    warnings: int
    sections: dict[str, str | None]
    report_json: str
    failure: str | None = None
    # The check's review of the head, its config files' bytes by path (for the fix suggestions).
    review: PullRequestReview | None = None


def check_mode(root: Path, ctx: Context, inputs: ActionInputs, commands: WorkflowCommands) -> Outcome:
    base, note = find_base(root, ctx)
    notes = [note, UNTRUSTED_SETTINGS_NOTE] if note else []
    settings = load_action_settings(root, base, base_missing=note is not None)
    fail_on = inputs.fail_on or settings.fail_on or "error"
    versions = inputs.transformers_versions or (
        matrix.parse_versions(settings.transformers, source=SETTINGS_FILE) if settings.transformers else None)
    drafter_target = _absolute_target(root, inputs.target or settings.target)
    if drafter_target:  # a problem with the target names where it was named: the input, or the settings file
        drafter_target = NamedTarget(drafter_target, TARGET_INPUT if inputs.target else SETTINGS_FILE)
    engines = (parse_engines(inputs.engines, source="input `engines`") if inputs.engines
               else parse_engines(settings.engines, source=SETTINGS_FILE) if settings.engines else None)
    changed = changed_files(root, base) if base else None
    targets = select_targets(root, inputs, changed, notes)
    launches = select_launch_files(root, inputs.launch_files or settings.launch, changed, notes)
    head = ctx.head_sha or git(root, "rev-parse", "HEAD").strip()
    report_path = _report_path(commands.env)
    head_settings = root / SETTINGS_FILE  # the head's own file: checked, never obeyed (settings_problem)
    readable = head_settings.is_file() and not head_settings.is_symlink()  # never a runner's file
    problem = settings_problem(head_settings.read_bytes()[:MAX_SETTINGS_BYTES + 1] if readable else None, SETTINGS_FILE)
    if not targets and not launches and problem is None:
        what = "config or launch file" if inputs.launch_files or settings.launch else "config file"
        why = f"no {what} changed in this pull request" if changed is not None else "no config file to check"
        commands.summary.append(f"### draftguard light check\n\nSkipped: {why}." +
                              "".join(f"\n- {n}" for n in notes))
        Path(report_path).write_text(json.dumps({"skipped": why, "targets": []}, indent=2) + "\n", encoding="utf-8")
        return Outcome(EXIT_OK, "skipped", 0, 0, {}, report_path)

    with _cwd(root):
        report = run_check(targets, versions, drafter_target, engines, settings)
        if launches:  # the light tier (a runner has no vLLM); model folders must be inside the checkout
            # under the same rules and exceptions as the files' findings (applying them again changes nothing)
            report = policy.apply(launch_report(launches, [], engines, None, report, confine=root), settings)
    if problem is not None:
        report.errors.append(problem)
    base_findings: list[Finding] | None = None
    if base:
        with tempfile.TemporaryDirectory(prefix="draftguard-base-") as tmp:
            present = materialize(root, base, targets, Path(tmp)) if targets else []
            base_findings = []
            if present:
                with _cwd(tmp):
                    base_findings = run_check(present, versions, drafter_target, engines, settings).findings
            if launches:  # the same launch files at the base, so a finding already there is not new
                base_findings += base_launch_findings(root, base, launches, engines, settings, Path(tmp, "launch"))
    # From here on the bot's tail: new findings against the base, the sections, the verdict.
    # The head's config files by the path the findings name (the checkout's), for the suggestions.
    files = {f.file: (root / f.file).read_bytes() for f in report.findings
             if not Path(f.file).is_absolute() and (root / f.file).is_file() and not (root / f.file).is_symlink()
             and (root / f.file).resolve().is_relative_to(root.resolve())}
    review = PullRequestReview.against_base(report, base_findings, settings, notes, files=files)
    sections = {"light": review.light_section(head, base, fail_on, label=inputs.section_label()),
                "matrix": matrix_markdown(report), "engines": render_engines_section(report)}
    commands.write(render_annotations(report))
    commands.summary.append("\n\n".join(s for s in sections.values() if s))
    if review.fails(fail_on):  # the proven fixes of what fails, as a diff to apply
        with _cwd(root):
            fixes = fixes_markdown(fix_targets(targets, versions=versions, drafter_target=drafter_target,
                                               settings=settings))
        commands.summary.extend([fixes] if fixes else [])
    Path(report_path).write_text(render_json(report), encoding="utf-8")
    # For code scanning (the `upload-sarif` input uploads it): paths from the checkout's root.
    Path(report_path).with_suffix(".sarif").write_text(render_sarif(report, root=str(root)), encoding="utf-8")
    counts = report.summary()
    errors, warnings = counts.get("error", 0) + len(report.errors), counts.get("warning", 0)
    if report.errors:  # bad input: verdict `error` (docs/action.md), each file's own annotation the one ::error::
        return Outcome(EXIT_BAD_INPUT, "error", errors, warnings, sections, report_path, review=review)
    if review.fails(fail_on):
        n_new = review.new_count()
        return Outcome(EXIT_FAIL, "fail", errors, warnings, sections, report_path,
                       failure=f"draftguard: {errors} error(s), {warnings} warning(s) (fail-on: {fail_on})"
                       + (f", {n_new} new in this pull request" if n_new is not None else ""), review=review)
    return Outcome(EXIT_OK, "pass", errors, warnings, sections, report_path, review=review)


def base_launch_findings(root: Path, base: str, launches: list[str], engines: list | None, settings: Settings,
                         into: Path) -> list[Finding]:
    """The findings of ``launches`` at the base commit, under the same rules, from what each launch needs
    written out of git into ``into`` (``check.launch.fetched``: the launch file, its ``.env``, the model
    folders' config.json). A launch file the base lacks has none."""
    def read(path: str) -> bytes | None:
        return blob_at(root, base, path, MAX_LAUNCH_BYTES)

    present = [p for p in launches if materialize_launch(p, read, into)]
    if not present:
        return []
    with _cwd(into):
        report = launch_report(present, [], engines, None, Report(transformers_version=""), confine=into)
    return policy.apply(report, settings).findings


TARGET_INPUT = "input `target`"  # the origin a target from the Action's own input is named by


def _absolute_target(root: Path, target: str | None) -> str | None:
    """A target folder in the repo, as an absolute path, so base and head checks find the same one."""
    if target and (root / target).exists():
        return str((root / target).resolve())
    return target


def _report_path(env: Mapping[str, str]) -> str:
    folder = env.get("RUNNER_TEMP") or tempfile.gettempdir()
    return str(Path(folder) / f"draftguard-report-{os.getpid()}.json")


# --- the acceptance test -----------------------------------------------------------------------

# A GitHub Action's acceptance job runs on a GPU runner with vLLM (docs/action.md); the bot's worker
# defaults to the reference backend. The repo's `backend:` setting wins over both.
ACTION_BACKEND = "vllm"


def find_drafters(root: Path, targets: list[str], untested: dict[str, str] | None = None) -> list[str]:
    """The targets that are drafters the acceptance backends run (``acceptance_testable``, as the
    bot asks); each other drafter goes into ``untested`` with the reason it is not run (an EAGLE 1/2
    or MTP head, a DFlash2), the words the bot's comment shows too."""
    out = []
    for t in targets:
        try:
            raw = parse_json_object((root / t).read_bytes(), t)
        except (OSError, BadInput):
            continue
        fmt = detect_drafter(raw)
        if fmt is not None and fmt.acceptance_testable:
            out.append(t)
        elif fmt is not None and untested is not None:
            untested[t] = fmt.acceptance_refusal or "not run by draftguard accept"
    return out


def acceptance_mode(root: Path, ctx: Context, inputs: ActionInputs, commands: WorkflowCommands,
                    comment: Callable[[dict[str, str | None]], None] | None) -> Outcome:
    base, note = find_base(root, ctx)
    settings = load_action_settings(root, base, base_missing=note is not None)
    target = _absolute_target(root, inputs.target or settings.target)
    if not target:
        raise ActionError("mode `acceptance` needs the target model: set the `target` input, or `target:` in "
                          f"{SETTINGS_FILE} on the default branch")
    notes = [note, UNTRUSTED_SETTINGS_NOTE] if note else []
    changed = changed_files(root, base) if base else None
    untested: dict[str, str] = {}
    drafters = find_drafters(root, select_targets(root, inputs, changed, notes), untested)
    report_path = _report_path(commands.env)
    if not drafters:
        section = render_untested_section(untested) if untested else render_acceptance_section(
            "skipped", detail="no drafter config that draftguard accept runs (DFlash, EAGLE-3) to test")
        commands.summary.append(section)
        Path(report_path).write_text(json.dumps({"skipped": "no drafter", "untested": untested, "results": []})
                                     + "\n", encoding="utf-8")
        return Outcome(EXIT_OK, "skipped", 0, 0, {"acceptance": section} if untested else {}, report_path)
    if comment is not None:
        comment({"acceptance": render_acceptance_section(
            "running", detail=f"{', '.join(drafters)} against {inputs.target or settings.target}")})
    timeout = float(os.environ.get(ACCEPT_TIMEOUT_ENV) or 3600)
    parts, results, statuses, problems = [], [], [], []
    secrets = [inputs.token] if inputs.token else []
    settings_dir = tempfile.mkdtemp(prefix="draftguard-settings-")
    text = settings_text(root, base, base_missing=note is not None)
    if text is not None:
        Path(settings_dir, SETTINGS_FILE).write_text(text, encoding="utf-8")
    # The token stays out of the test's environment: it runs the pull request's model code.
    child_env = {k: v for k, v in os.environ.items() if k not in ("INPUT_GITHUB_TOKEN", "GITHUB_TOKEN")}
    for drafter in drafters:
        folder = str(root / posixpath.dirname(drafter))
        prompts = settings.prompts if settings.prompts and settings.prompts != "builtin" else None
        cmd = accept_command(target, folder, settings, backend_default=ACTION_BACKEND, env=os.environ,
                             prompts=str(root / prompts) if prompts else None, settings_dir=settings_dir, quiet=True)
        commands.log(f"draftguard: {shlex.join(cmd[3:])}")
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root, env=child_env)
        except subprocess.TimeoutExpired:
            problem = f"{drafter}: draftguard accept ran past {timeout:.0f} s ({ACCEPT_TIMEOUT_ENV})"
            problems.append(problem)
            parts.append(render_acceptance_section("error", detail=problem))
            statuses.append("error")
            continue
        commands.echo_untrusted(scrub(done.stderr, secrets), sys.stderr)
        result = None
        if done.returncode in (0, 1):
            try:
                result = AcceptanceResult.from_json(done.stdout, "draftguard accept").to_dict()
            except BadInput as exc:
                problem = f"{drafter}: {exc}"
        else:
            tail = scrub(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "", secrets)
            problem = f"{drafter}: draftguard accept exited {done.returncode}: {tail}"
        if result is None:
            problems.append(problem)
            parts.append(render_acceptance_section("error", detail=problem))
            statuses.append("error")
            continue
        results.append({"drafter": drafter, "result": result})
        status = str((result.get("verdict") or {}).get("status", "inconclusive"))
        statuses.append(status)
        parts.append(render_acceptance_section("done", result, detail=f"drafter {drafter}"))
    if untested:  # beside the drafters that ran: the others, and why they did not
        parts.append(esc("Not run: " + "; ".join(f"{p}: {why}" for p, why in sorted(untested.items())) + "."))
    section = "\n\n".join(parts)
    commands.summary.append(section)
    Path(report_path).write_text(json.dumps({"results": results, "errors": problems}, indent=2) + "\n",
                                 encoding="utf-8")
    errors, warnings = statuses.count("fail") + statuses.count("error"), statuses.count("inconclusive")
    if problems:
        return Outcome(EXIT_BAD_INPUT, "error", errors, warnings, {"acceptance": section}, report_path,
                       failure="; ".join(problems))
    if "fail" in statuses:
        return Outcome(EXIT_FAIL, "fail", errors, warnings, {"acceptance": section}, report_path,
                       failure=f"draftguard: {statuses.count('fail')} drafter(s) failed the acceptance test")
    verdict = "inconclusive" if "inconclusive" in statuses else "pass"
    return Outcome(EXIT_OK, verdict, errors, warnings, {"acceptance": section}, report_path)
