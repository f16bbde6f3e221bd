"""The GitHub Action's entry point: ``draftguard action``, run by ``action.yml`` on a runner.

It reads what a runner provides (``GITHUB_EVENT_PATH``, ``GITHUB_EVENT_NAME``, ``GITHUB_REPOSITORY``,
``GITHUB_API_URL``, ``GITHUB_STEP_SUMMARY``, ``GITHUB_OUTPUT``, ``GITHUB_SHA``, ``GITHUB_BASE_REF``)
and the action's inputs (``INPUT_<NAME>``, see ``INPUTS``), then:

- ``mode: check``: finds the config files the pull request changes (git, base against head), runs the
  light check on head and on base (so the comment can say which findings are new), prints
  ``::error file=,line=::`` annotations, writes the step summary and the outputs, and creates or edits
  the one sticky comment the bot also writes (same marker, same sections, same rendering);
- ``mode: acceptance``: runs ``draftguard accept`` (vLLM backend by default) in a subprocess on each
  drafter, so this process never imports torch, and updates the acceptance section of that comment.

A refused comment (a fork's read-only token: 403) is reported once and does not fail the job.
Exit codes follow the CLI: 0 pass, 1 fail, 2 bad input (``::error::`` names it), 3 a bug.

Example (the pure helpers)::

    >>> glob_regex("models/**/config.json").match("models/a/b/config.json") is not None
    True
    >>> parse_list("a.json, b/*.json\\nc")
    ['a.json', 'b/*.json', 'c']
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from draftguard.snapshot import MAX_CONFIG_BYTES, SETTINGS_NAME, BadInput, is_model_file

# Every input the entry point reads. action.yml declares each (tests/test_action.py checks it), and
# its run step passes each as INPUT_<NAME> with dashes turned into underscores.
INPUTS = ("mode", "paths", "transformers-versions", "target", "fail-on", "comment", "github-token")
OUTPUTS = ("errors", "warnings", "verdict", "report-json")
MODES = ("check", "acceptance")
FAIL_ON = ("error", "warning", "never")
SETTINGS_FILE = SETTINGS_NAME
PR_EVENTS = ("pull_request", "pull_request_target")
EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
ACCEPT_TIMEOUT_ENV = "DRAFTGUARD_ACCEPT_TIMEOUT"
NO_COMMENT = (
    "draftguard posted no pull request comment: GitHub refused this token write access "
    "({status} {message}). Pull requests from forks get a read-only token, and same-repo workflows "
    "need `permissions: pull-requests: write`. The results are in this job's summary and annotations."
)


class ActionError(Exception):
    """Bad input to the Action (an input, the event, the checkout); the message says what to fix."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.file, self.line = file, line


# --- the runner's environment --------------------------------------------------------------------

def read_input(env: Mapping[str, str], name: str) -> str:
    """An input's value as the runner passes it (``INPUT_FAIL_ON`` for ``fail-on``), stripped.

    Example::

        >>> read_input({"INPUT_FAIL_ON": " warning "}, "fail-on")
        'warning'
    """
    if name not in INPUTS:
        raise KeyError(f"input {name!r} is not declared in INPUTS (and so not in action.yml)")
    upper = name.upper()
    # JavaScript actions keep dashes (INPUT_FAIL-ON); our composite run step maps them to underscores.
    value = env.get("INPUT_" + upper.replace("-", "_"))
    if value is None:
        value = env.get("INPUT_" + upper, "")
    return value.strip()


def parse_list(text: str) -> list[str]:
    """Split a multi-line or comma-separated input into its items."""
    return [item.strip() for item in re.split(r"[\n,]", text) if item.strip()]


def parse_bool(name: str, text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "yes", "1", "on"):
        return True
    if lowered in ("false", "no", "0", "off", ""):
        return False
    raise ActionError(f"input `{name}` must be true or false, got {text!r}")


@dataclass
class ActionInputs:
    mode: str = "check"
    paths: list[str] = field(default_factory=list)
    transformers_versions: list[str] = field(default_factory=list)
    target: str | None = None
    fail_on: str | None = None  # None: .draftguard.yml `fail_on`, else error
    comment: bool = True
    token: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "ActionInputs":
        """Validate the inputs; an ActionError names the one that is wrong.

        Example::

            >>> ActionInputs.from_env({"INPUT_MODE": "check", "INPUT_PATHS": "a/config.json"}).paths
            ['a/config.json']
        """
        mode = read_input(env, "mode") or "check"
        if mode not in MODES:
            raise ActionError(f"input `mode` must be one of {', '.join(MODES)}, got {mode!r}")
        fail_on = read_input(env, "fail-on") or None
        if fail_on is not None and fail_on not in FAIL_ON:
            raise ActionError(f"input `fail-on` must be one of {', '.join(FAIL_ON)}, got {fail_on!r}")
        versions = parse_list(read_input(env, "transformers-versions"))
        if versions:
            from draftguard.check.matrix import parse_versions

            versions = parse_versions(versions, source="input `transformers-versions`")
        return cls(
            mode=mode,
            paths=parse_list(read_input(env, "paths")),
            transformers_versions=versions,
            target=read_input(env, "target") or None,
            fail_on=fail_on,
            comment=parse_bool("comment", read_input(env, "comment") or "true"),
            token=read_input(env, "github-token") or None,
        )


@dataclass
class Context:
    """What the workflow run is about: the event, the pull request, base and head."""

    event_name: str
    event: dict[str, Any]
    repository: str | None
    api_url: str
    sha: str | None
    base_ref: str | None
    pr_number: int | None = None
    head_sha: str | None = None  # the pull request's head, for display; HEAD may be a merge commit
    base_sha: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Context":
        path = env.get("GITHUB_EVENT_PATH")
        event: dict[str, Any] = {}
        if path:
            try:
                event = json.loads(Path(path).read_text(encoding="utf-8"))
            except OSError as exc:
                raise ActionError(f"GITHUB_EVENT_PATH={path}: cannot read it ({exc.strerror})", file=path) from None
            except json.JSONDecodeError as exc:
                raise ActionError(f"{path}:{exc.lineno}: the event file is not JSON ({exc.msg})",
                                  file=path, line=exc.lineno) from None
            if not isinstance(event, dict):
                raise ActionError(f"{path}: the event file must hold a JSON object", file=path)
        name = env.get("GITHUB_EVENT_NAME", "")
        ctx = cls(event_name=name, event=event, repository=env.get("GITHUB_REPOSITORY") or None,
                  api_url=(env.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/"),
                  sha=env.get("GITHUB_SHA") or None, base_ref=env.get("GITHUB_BASE_REF") or None)
        pr = event.get("pull_request") if isinstance(event.get("pull_request"), dict) else None
        if name in PR_EVENTS and pr:
            ctx.pr_number = _int(pr.get("number"))
            ctx.head_sha = (pr.get("head") or {}).get("sha")
            ctx.base_sha = (pr.get("base") or {}).get("sha")
        elif name == "issue_comment":
            issue = event.get("issue") or {}
            if issue.get("pull_request"):
                ctx.pr_number = _int(issue.get("number"))
            # A comment event names no base; the default branch is what the pull request merges into.
            ctx.base_ref = ctx.base_ref or (event.get("repository") or {}).get("default_branch")
        elif name == "push":
            before = event.get("before")
            if isinstance(before, str) and before.strip("0"):
                ctx.base_sha = before
        if ctx.repository is None:
            ctx.repository = (event.get("repository") or {}).get("full_name")
        return ctx


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class Runner:
    """The runner's side channels: annotations on stdout, the step summary, the outputs file."""

    def __init__(self, env: Mapping[str, str], out=None):
        self.env = env
        self.out = out or sys.stdout
        self.summary: list[str] = []
        self.outputs: dict[str, str] = {}

    def command(self, level: str, message: str, **props: Any) -> None:
        """One workflow command, ``::level props::message``, escaped as GitHub reads it."""
        data = message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        shown = ",".join(
            f"{k}={str(v).replace('%', '%25').replace(chr(13), '%0D').replace(chr(10), '%0A').replace(':', '%3A').replace(',', '%2C')}"
            for k, v in props.items() if v is not None
        )
        self.write(f"::{level}{' ' + shown if shown else ''}::{data}\n")

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def flush(self) -> None:
        """Append the step summary and set the outputs (heredoc syntax, safe for any value)."""
        summary_path = self.env.get("GITHUB_STEP_SUMMARY")
        if summary_path and self.summary:
            with open(summary_path, "a", encoding="utf-8") as fh:
                fh.write("\n\n".join(part.strip("\n") for part in self.summary) + "\n")
        output_path = self.env.get("GITHUB_OUTPUT")
        if output_path and self.outputs:
            with open(output_path, "a", encoding="utf-8") as fh:
                for name, value in self.outputs.items():
                    delimiter = f"ghadelimiter_{uuid.uuid4()}"
                    fh.write(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")


# --- git ----------------------------------------------------------------------------------------

def git(root: str | Path, *args: str, check: bool = True, timeout: float = 120) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise ActionError(f"git {' '.join(args)} failed: {done.stderr.strip().splitlines()[-1:] or ['?']}")
    return done.stdout


def git_bytes(root: str | Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=True, timeout=120).stdout


def repo_root(cwd: str | Path) -> Path:
    done = subprocess.run(["git", "-C", str(cwd), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if done.returncode != 0:
        raise ActionError(f"{cwd} is not a git checkout: add `- uses: actions/checkout@v4` before draftguard")
    return Path(done.stdout.strip())


def has_commit(root: Path, sha: str) -> bool:
    return subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode == 0


def find_base(root: Path, ctx: Context) -> tuple[str | None, str | None]:
    """The commit to diff against, and a note when there is none.

    actions/checkout fetches one commit by default; the base is then fetched by sha (the checkout
    leaves credentials for that), else the merge commit's first parent serves, which GitHub made
    from the base."""
    candidates = [c for c in (ctx.base_sha,) if c]
    if ctx.base_ref and not candidates:
        candidates.append(f"origin/{ctx.base_ref}")
    for sha in candidates:
        if has_commit(root, sha):
            return sha, None
    for sha in candidates:
        if re.fullmatch(r"[0-9a-f]{40}", sha):
            subprocess.run(["git", "-C", str(root), "fetch", "--no-tags", "--quiet", "--depth=1", "origin", sha],
                           capture_output=True, timeout=120)
            if has_commit(root, sha):
                return sha, None
    parents = git(root, "rev-list", "--parents", "-n", "1", "HEAD", check=False).split()
    if len(parents) == 3 and has_commit(root, parents[1]):
        return parents[1], None
    if candidates:
        return None, (f"base commit {candidates[0][:12]} is not in the checkout and could not be fetched: "
                      "every config file was checked and no finding is marked new (use actions/checkout "
                      "with `fetch-depth: 0`)")
    return None, None


def changed_files(root: Path, base: str) -> list[str]:
    """Paths that HEAD changes since it left ``base`` (and that still exist at HEAD).

    The three-dot diff (from the merge base) ignores what the base branch did since; a shallow
    checkout may hold no merge base, and then the plain two-commit diff serves."""
    args = ("diff", "--name-only", "--no-renames", "--diff-filter=d", "-z")
    done = subprocess.run(["git", "-C", str(root), *args, f"{base}...HEAD"], capture_output=True, text=True)
    out = done.stdout if done.returncode == 0 else git(root, *args, base, "HEAD")
    return [p for p in out.split("\0") if p]


def tracked_files(root: Path) -> list[str]:
    return [p for p in git(root, "ls-files", "-z").split("\0") if p]


def glob_regex(pattern: str) -> re.Pattern:
    """A path glob as a regex: ``*`` and ``?`` stay within a folder, ``**`` crosses folders."""
    out, i = [], 0
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i:end + 1])[4:-3])  # fnmatch's class syntax
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out).rstrip("/") + r"\Z")


def select_targets(root: Path, inputs: ActionInputs, changed: list[str] | None,
                   notes: list[str]) -> list[str]:
    """Config files to check, relative to the repo root.

    With ``paths``: every tracked JSON file a glob matches (a folder glob means its config.json).
    Without: the config.json of every folder where a model file changed; with no base to diff
    against, every tracked config.json."""
    files = tracked_files(root)
    if inputs.paths:
        chosen: list[str] = []
        for pattern in inputs.paths:
            rx = glob_regex(pattern)
            folder_rx = glob_regex(pattern.rstrip("/") + "/config.json")
            matched = [f for f in files if f.endswith(".json") and (rx.match(f) or folder_rx.match(f))]
            if not matched:
                notes.append(f"`paths` glob {pattern!r} matches no tracked JSON file")
            chosen += [f for f in matched if f not in chosen]
        return chosen
    if changed is None:
        return [f for f in files if posixpath.basename(f) == "config.json"]
    tracked = set(files)
    folders = sorted({posixpath.dirname(p) for p in changed
                      if is_model_file(p)})
    configs = [posixpath.join(d, "config.json") if d else "config.json" for d in folders]
    return [c for c in configs if c in tracked and (root / c).is_file()]


@contextmanager
def _cwd(path: str | Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def materialize(root: Path, commit: str, targets: list[str], into: Path) -> list[str]:
    """Write each target's folder at ``commit`` (files up to the config size limit, not weights'
    bytes) under ``into``, at the same relative paths. Returns the targets that exist there."""
    present = []
    for folder in sorted({posixpath.dirname(t) for t in targets}):
        spec = f"{commit}:{folder}" if folder else f"{commit}:"
        listing = subprocess.run(["git", "-C", str(root), "ls-tree", "-l", "-z", spec], capture_output=True)
        if listing.returncode != 0:
            continue
        for entry in listing.stdout.split(b"\0"):
            if not entry:
                continue
            meta, _, name = entry.decode("utf-8", "replace").partition("\t")
            mode, kind, sha, size = meta.split()
            if kind != "blob" or not size.isdigit() or int(size) > MAX_CONFIG_BYTES:
                continue
            dest = into / folder / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(git_bytes(root, "cat-file", "blob", sha))
    for t in targets:
        if (into / t).is_file():
            present.append(t)
    return present


# --- settings -----------------------------------------------------------------------------------

def settings_text(root: Path, base: str | None) -> str | None:
    """The text of ``.draftguard.yml`` at the base commit when there is one (as the bot reads it from
    the default branch: a pull request cannot relax its own gate), else in the checkout."""
    if base:
        done = subprocess.run(["git", "-C", str(root), "show", f"{base}:{SETTINGS_FILE}"], capture_output=True)
        return done.stdout.decode("utf-8", "replace") if done.returncode == 0 else None
    path = root / SETTINGS_FILE
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def load_action_settings(root: Path, base: str | None):
    from draftguard.settings import Settings, parse_settings

    text = settings_text(root, base)
    return parse_settings(text, SETTINGS_FILE) if text is not None else Settings()


# --- the light check ----------------------------------------------------------------------------

def run_check(targets: list[str], versions: list[str] | None, drafter_target: str | None):
    """One Report for targets relative to the current folder (so findings name repo paths)."""
    if versions:
        from draftguard.check import matrix

        return matrix.check_matrix(targets, versions, progress=matrix.stderr_progress, drafter_target=drafter_target)
    from draftguard.check.light import check_targets

    return check_targets(targets, drafter_target=drafter_target)


def matrix_markdown(report: Any) -> str | None:
    """The version-matrix section of a Report, as the bot renders it (table, and the versions that did
    not run); None when every version ran and no value differs.

    The bot's ``pipeline.matrix_section`` would re-run the matrix from file bytes, and this Report
    already holds it, so only the shared table and renderer are reused."""
    from draftguard.report.comment import matrix_note, render_matrix_section

    if report.matrix is None:
        return None
    header, body = report.matrix.table()
    note = matrix_note(report.matrix, bool(body))
    if not body and (note is None or "Not run" not in note):
        return None  # every version ran and agrees: nothing to show
    return render_matrix_section(header, body, note=note)


@dataclass
class Outcome:
    code: int
    verdict: str
    errors: int
    warnings: int
    sections: dict[str, str | None]
    report_json: str
    failure: str | None = None


def check_mode(root: Path, ctx: Context, inputs: ActionInputs, runner: Runner) -> Outcome:
    from draftguard.check import matrix
    from draftguard.report.annotations import render_annotations
    from draftguard.report.comment import new_findings, render_light_section
    from draftguard.report.json import render_json

    base, note = find_base(root, ctx)
    notes = [note] if note else []
    settings = load_action_settings(root, base)
    fail_on = inputs.fail_on or settings.fail_on or "error"
    versions = inputs.transformers_versions or (
        matrix.parse_versions(settings.transformers, source=SETTINGS_FILE) if settings.transformers else None)
    drafter_target = _absolute_target(root, inputs.target or settings.target)
    changed = changed_files(root, base) if base else None
    targets = select_targets(root, inputs, changed, notes)
    head = ctx.head_sha or git(root, "rev-parse", "HEAD").strip()
    report_path = _report_path(runner.env)
    if not targets:
        why = "no config file changed in this pull request" if changed is not None else "no config file to check"
        runner.summary.append(f"### draftguard light check\n\nSkipped: {why}." +
                              "".join(f"\n- {n}" for n in notes))
        Path(report_path).write_text(json.dumps({"skipped": why, "targets": []}, indent=2) + "\n", encoding="utf-8")
        return Outcome(EXIT_OK, "skipped", 0, 0, {}, report_path)

    with _cwd(root):
        report = run_check(targets, versions, drafter_target)
    new = None
    if base:
        with tempfile.TemporaryDirectory(prefix="draftguard-base-") as tmp:
            present = materialize(root, base, targets, Path(tmp))
            base_findings = []
            if present:
                with _cwd(tmp):
                    base_findings = run_check(present, versions, drafter_target).findings
        new = new_findings(report.findings, base_findings)

    light = render_light_section(report, new, head=head, base=base if new is not None else None,
                                 fail_on=fail_on, notes=notes)
    sections = {"light": light, "matrix": matrix_markdown(report)}
    runner.write(render_annotations(report))
    runner.summary.append("\n\n".join(s for s in sections.values() if s))
    Path(report_path).write_text(render_json(report), encoding="utf-8")
    counts = report.summary()
    errors, warnings = counts.get("error", 0) + len(report.errors), counts.get("warning", 0)
    if report.errors:
        return Outcome(EXIT_BAD_INPUT, "fail", errors, warnings, sections, report_path,
                       failure=f"draftguard could not check {len(report.errors)} file(s); see the annotations")
    if report.fails(fail_on):
        n_new = len(new) if new is not None else None
        return Outcome(EXIT_FAIL, "fail", errors, warnings, sections, report_path,
                       failure=f"draftguard: {errors} error(s), {warnings} warning(s) (fail-on: {fail_on})"
                       + (f", {n_new} new in this pull request" if n_new is not None else ""))
    return Outcome(EXIT_OK, "pass", errors, warnings, sections, report_path)


def _absolute_target(root: Path, target: str | None) -> str | None:
    """A target folder in the repo, as an absolute path, so base and head checks find the same one."""
    if target and (root / target).exists():
        return str((root / target).resolve())
    return target


def _report_path(env: Mapping[str, str]) -> str:
    folder = env.get("RUNNER_TEMP") or tempfile.gettempdir()
    return str(Path(folder) / f"draftguard-report-{os.getpid()}.json")


# --- the acceptance test -----------------------------------------------------------------------

def accept_command(drafter: str, target: str, settings: Any, settings_dir: str, root: str | Path = ".") -> list[str]:
    """The ``draftguard accept`` command line for a drafter folder. Thresholds and prompt counts come
    from ``settings_dir``'s .draftguard.yml (the base's copy), the backend defaults to vLLM.

    Example::

        >>> from draftguard.settings import Settings
        >>> cmd = accept_command("d", "t", Settings(prompts="p.jsonl"), "/s", "/repo")
        >>> cmd[3:]  # doctest: +ELLIPSIS
        ['accept', '--target', 't', '--drafter', 'd', '--backend', 'vllm', '--device', ..., '--settings', '/s', '--format', 'json', '--quiet', '--prompts', '/repo/p.jsonl']
        >>> cmd[cmd.index("--device") + 1] in ("cpu", "cuda")
        True
    """
    from draftguard.runner.gpu_job import default_device

    # --device matters for the reference backend (`backend: reference|both`): on a GPU runner it
    # must not fall back to the CPU.
    cmd = [sys.executable, "-m", "draftguard", "accept", "--target", target, "--drafter", drafter,
           "--backend", settings.backend or "vllm", "--device", default_device(), "--settings", settings_dir,
           "--format", "json", "--quiet"]
    if settings.prompts and settings.prompts != "builtin":
        cmd += ["--prompts", str(Path(root) / settings.prompts)]
    return cmd


def find_drafters(root: Path, targets: list[str]) -> list[str]:
    from draftguard.check.drafter import detect_drafter
    from draftguard.snapshot import parse_json_object

    out = []
    for t in targets:
        try:
            raw = parse_json_object((root / t).read_bytes(), t)
        except (OSError, BadInput):
            continue
        if detect_drafter(raw) is not None:
            out.append(t)
    return out


def acceptance_mode(root: Path, ctx: Context, inputs: ActionInputs, runner: Runner,
                    comment: Callable[[dict[str, str | None]], None] | None) -> Outcome:
    from draftguard.bot.github import scrub
    from draftguard.report.comment import render_acceptance_section
    from draftguard.runner.result import AcceptanceResult

    base, note = find_base(root, ctx)
    settings = load_action_settings(root, base)
    target = _absolute_target(root, inputs.target or settings.target)
    if not target:
        raise ActionError("mode `acceptance` needs the target model: set the `target` input, or `target:` in "
                          f"{SETTINGS_FILE} on the default branch")
    notes = [note] if note else []
    changed = changed_files(root, base) if base else None
    drafters = find_drafters(root, select_targets(root, inputs, changed, notes))
    report_path = _report_path(runner.env)
    if not drafters:
        section = render_acceptance_section("skipped", detail="no speculative-decoding drafter config to test")
        runner.summary.append(section)
        Path(report_path).write_text(json.dumps({"skipped": "no drafter", "results": []}) + "\n", encoding="utf-8")
        return Outcome(EXIT_OK, "skipped", 0, 0, {}, report_path)
    if comment is not None:
        comment({"acceptance": render_acceptance_section(
            "running", detail=f"{', '.join(drafters)} against {inputs.target or settings.target}")})
    timeout = float(os.environ.get(ACCEPT_TIMEOUT_ENV) or 3600)
    parts, results, statuses, problems = [], [], [], []
    secrets = [inputs.token] if inputs.token else []
    settings_dir = tempfile.mkdtemp(prefix="draftguard-settings-")
    text = settings_text(root, base)
    if text is not None:
        Path(settings_dir, SETTINGS_FILE).write_text(text, encoding="utf-8")
    # The token stays out of the test's environment: it runs the pull request's model code.
    child_env = {k: v for k, v in os.environ.items() if k not in ("INPUT_GITHUB_TOKEN", "GITHUB_TOKEN")}
    for drafter in drafters:
        folder = str(root / posixpath.dirname(drafter))
        cmd = accept_command(folder, target, settings, settings_dir, root)
        runner.write(f"draftguard: {' '.join(cmd[3:])}\n")
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=root, env=child_env)
        except subprocess.TimeoutExpired:
            problem = f"{drafter}: draftguard accept ran past {timeout:.0f} s ({ACCEPT_TIMEOUT_ENV})"
            problems.append(problem)
            parts.append(render_acceptance_section("error", detail=problem))
            statuses.append("error")
            continue
        sys.stderr.write(scrub(done.stderr, secrets))
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
    section = "\n\n".join(parts)
    runner.summary.append(section)
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


# --- the sticky comment -------------------------------------------------------------------------

class CommentRefused(Exception):
    """GitHub refused the write (403/404): a read-only token, typically a fork's."""

    def __init__(self, status: int, message: str):
        super().__init__(f"{status} {message}")
        self.status, self.message = status, message


def sticky_writer(ctx: Context, token: str, *, attempts: int = 3, max_wait: float = 30.0
                  ) -> Callable[[dict[str, str | None]], None]:
    """A function that merges sections into the pull request's one sticky comment (the bot's).

    Transient faults (5xx, rate limits, timeouts) are retried a few times within ``max_wait``
    seconds; a refusal raises CommentRefused."""
    from github import GithubException

    from draftguard.bot.github import GitHubConfig, PullRequestClient, TransientGitHubError, connect, retry_delay
    from draftguard.report.comment import update_sticky

    # One or two writes per job: no pacing between writes is needed. DRAFTGUARD_RETRY_BASE is the
    # bot's knob for the first backoff, honoured here too.
    config = GitHubConfig(api_url=ctx.api_url, token=token, write_interval=0.0, secrets=[token],
                          retry_base=float(os.environ.get("DRAFTGUARD_RETRY_BASE") or 2.0))
    client = PullRequestClient(connect(config), ctx.repository, ctx.pr_number)

    def write(sections: dict[str, str | None]) -> None:
        waited = 0.0
        for attempt in range(1, attempts + 1):
            try:
                client.upsert_sticky(lambda old: update_sticky(old, **sections))
                return
            except TransientGitHubError as exc:
                delay = retry_delay(exc.cause, attempt, base=config.retry_base) if exc.cause else exc.delay
                delay = exc.delay if delay is None else delay
                if attempt == attempts or waited + delay > max_wait:
                    raise
                time.sleep(delay)
                waited += delay
            except GithubException as exc:
                if exc.status in (403, 404):
                    message = exc.data.get("message", "") if isinstance(exc.data, dict) else ""
                    raise CommentRefused(exc.status, message or "Forbidden") from None
                raise
    return write


# --- the entry point ----------------------------------------------------------------------------

def run_action(env: Mapping[str, str] | None = None, cwd: str | Path | None = None, out=None) -> int:
    """Run the Action in a runner's environment; returns the exit code.

    Example (outside a checkout, the Action says what is missing)::

        >>> import io, tempfile
        >>> buf = io.StringIO()
        >>> run_action({"INPUT_COMMENT": "false"}, cwd=tempfile.gettempdir(), out=buf)
        2
        >>> buf.getvalue().startswith("::error title=draftguard::")
        True
    """
    env = os.environ if env is None else env
    runner = Runner(env, out)
    secrets: list[str] = []
    try:
        inputs = ActionInputs.from_env(env)
        secrets = [inputs.token] if inputs.token else []
        ctx = Context.from_env(env)
        root = repo_root(cwd or env.get("GITHUB_WORKSPACE") or os.getcwd())
        want_comment = inputs.comment and ctx.pr_number is not None and bool(ctx.repository)
        if want_comment and not inputs.token:
            raise ActionError("input `comment` is true but `github-token` is empty: pass "
                              "`github-token: ${{ github.token }}` or set `comment: false`")
        comment = StickyComment(ctx, inputs.token, runner, secrets) if want_comment else None
        if inputs.mode == "acceptance":
            outcome = acceptance_mode(root, ctx, inputs, runner, comment)
        else:
            outcome = check_mode(root, ctx, inputs, runner)
        if comment is not None and outcome.sections:
            comment(outcome.sections)
        runner.outputs.update({"errors": str(outcome.errors), "warnings": str(outcome.warnings),
                               "verdict": outcome.verdict, "report-json": outcome.report_json})
        code = outcome.code
        if comment is not None and comment.refused:
            runner.summary.append(f"> {comment.refused}")
        if comment is not None and comment.failed:
            # The check's own result stands; a comment GitHub would not take for other reasons fails.
            runner.command("error", comment.failed, title="draftguard: could not comment")
            code = code or EXIT_FAIL
        if outcome.failure:
            runner.command("error", outcome.failure, title="draftguard")
        return code
    except (ActionError, BadInput) as exc:
        from draftguard.bot.github import scrub

        runner.command("error", scrub(str(exc), secrets), title="draftguard",
                       file=getattr(exc, "file", None), line=getattr(exc, "line", None))
        runner.outputs.setdefault("verdict", "error")
        return EXIT_BAD_INPUT
    finally:
        runner.flush()


class StickyComment:
    """Merges sections into the pull request's sticky comment; remembers a refusal or a failure
    instead of raising, so the check's result, summary and annotations always come out."""

    def __init__(self, ctx: Context, token: str, runner: Runner, secrets: list[str]):
        try:
            self.write = sticky_writer(ctx, token)
        except ImportError as exc:
            raise ActionError(f"the pull request comment needs PyGithub ({exc.name} is missing): install "
                              "draftguard[action], or set `comment: false`") from None
        self.runner = runner
        self.secrets = secrets
        self.refused: str | None = None
        self.failed: str | None = None

    def __call__(self, sections: dict[str, str | None]) -> None:
        import requests
        from github import GithubException

        from draftguard.bot.github import TransientGitHubError, scrub

        if self.refused or self.failed:
            return
        try:
            self.write(sections)
        except CommentRefused as exc:
            self.refused = NO_COMMENT.format(status=exc.status, message=exc.message)
            self.runner.command("notice", self.refused, title="draftguard: no comment")
        except (GithubException, TransientGitHubError, requests.RequestException) as exc:
            status = getattr(exc, "status", None)
            self.failed = scrub(f"GitHub API: {status or type(exc).__name__}: {exc}", self.secrets)[:500]


def cmd_action(args: Any) -> int:
    """``draftguard action``: the CLI hook (the runner's environment carries every input)."""
    return run_action()
