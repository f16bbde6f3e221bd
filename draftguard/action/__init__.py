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

The package: ``inputs`` (what the runner gives, and ``WorkflowCommands`` to answer it), ``git``
(changed files, base, files at a commit), ``modes`` (``check_mode``, ``acceptance_mode``) and
``comment`` (the sticky comment through ``hosts.github``). This module only wires them
(``run_action``, ``cmd_action``).

In: the runner's environment (``GITHUB_*``, ``INPUT_<NAME>``) and the checkout (``GITHUB_WORKSPACE``).
Out: the exit code, annotations, the step summary, the outputs and the sticky comment.
Exit codes follow the CLI: 0 pass, 1 fail, 2 bad input (``::error::`` names it), 3 a bug.

Example (the pure helpers)::

    >>> glob_regex("models/**/config.json").match("models/a/b/config.json") is not None
    True
    >>> parse_list("a.json, b/*.json\\nc")
    ['a.json', 'b/*.json', 'c']
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping

from draftguard.action.comment import StickyComment, post_fix_suggestions, same_repository
from draftguard.action.git import _cwd, glob_regex, repo_root
from draftguard.action.inputs import (EXIT_BAD_INPUT, EXIT_FAIL, INPUTS, OUTPUTS, ActionInputs, Context,
                                      WorkflowCommands, parse_list)
from draftguard.action.modes import ACTION_BACKEND, acceptance_mode, check_mode
from draftguard.report.comment import section_name, update_sticky
from draftguard.runner.gpu_job import accept_command
from draftguard.errors import ActionError
from draftguard.secrets import scrub
from draftguard.snapshot import BadInput

__all__ = ["ACTION_BACKEND", "INPUTS", "accept_command", "OUTPUTS", "ActionInputs", "Context", "WorkflowCommands", "cmd_action", "glob_regex", "parse_list",
           "run_action", "dry_run", "PreviewComment"]


# --- the entry point ----------------------------------------------------------------------------

def run_action(env: Mapping[str, str] | None = None, cwd: str | Path | None = None, out=None,
               preview: "PreviewComment | None" = None) -> int:
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
    commands = WorkflowCommands(env, out)
    secrets: list[str] = []
    try:
        inputs = ActionInputs.from_env(env)
        secrets = [inputs.token] if inputs.token else []
        ctx = Context.from_env(env)
        root = repo_root(cwd or env.get("GITHUB_WORKSPACE") or os.getcwd())
        want_comment = inputs.comment and ctx.pr_number is not None and bool(ctx.repository)
        if preview is not None:  # --dry-run: the comment is shown, never posted; no token needed
            want_comment = False
        if want_comment and not inputs.token:
            raise ActionError("input `comment` is true but `github-token` is empty: pass "
                              "`github-token: ${{ github.token }}` or set `comment: false`")
        comment = StickyComment(ctx, inputs.token, commands, secrets, inputs.section_key()) if want_comment else None
        if preview is not None:
            preview.key = inputs.section_key()
            comment = preview
        if inputs.mode == "acceptance":
            outcome = acceptance_mode(root, ctx, inputs, commands, comment)
        else:
            outcome = check_mode(root, ctx, inputs, commands)
        if comment is not None and outcome.sections:
            comment(outcome.sections)
        if (comment is not None and not comment.refused and inputs.suggestions and outcome.review is not None
                and outcome.review.files and same_repository(ctx)):
            with _cwd(root):
                post_fix_suggestions(ctx, inputs.token or "", outcome.review, ctx.head_sha or ctx.sha or "",
                                     commands, secrets)
        commands.outputs.update({"errors": str(outcome.errors), "warnings": str(outcome.warnings),
                               "verdict": outcome.verdict, "report-json": outcome.report_json})
        sarif = Path(outcome.report_json).with_suffix(".sarif")
        commands.outputs["sarif"] = str(sarif) if sarif.is_file() else ""
        code = outcome.code
        if comment is not None and comment.refused:
            commands.summary.append(f"> {comment.refused}")
        if comment is not None and comment.failed:
            # The check's own result stands; a comment GitHub would not take for other reasons fails.
            commands.command("error", comment.failed, title="draftguard: could not comment")
            code = code or EXIT_FAIL
        if outcome.failure:
            commands.command("error", outcome.failure, title="draftguard")
        return code
    except (ActionError, BadInput) as exc:

        commands.command("error", scrub(str(exc), secrets), title="draftguard",
                       file=getattr(exc, "file", None), line=getattr(exc, "line", None))
        commands.outputs.setdefault("verdict", "error")
        return EXIT_BAD_INPUT
    finally:
        commands.flush()


class PreviewComment:
    """The sticky comment of a dry run: the sections the Action would merge into it, rendered as the
    comment's body would read on a pull request that has none yet (``StickyComment``'s interface)."""

    def __init__(self) -> None:
        self.key: str | None = None
        self.refused: str | None = None
        self.failed: str | None = None
        self.body: str | None = None

    def __call__(self, sections: dict[str, str | None]) -> None:
        self.body = update_sticky(self.body, **{section_name(kind, self.key): text for kind, text in sections.items()})


def dry_run(base: str | None = None, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
            out=None) -> int:
    """``draftguard action --dry-run``: the Action's logic on a local checkout, with no GitHub variable
    set. HEAD plays the pull request's head and ``base`` (default: HEAD's parent; none in a repository
    of one commit, where every config file is checked) its base; ``.draftguard.yml`` is read from the
    base as on a runner, and the inputs are ``INPUT_<NAME>`` variables where set (``INPUT_PATHS``,
    ``INPUT_FAIL_ON``...), else action.yml's defaults. It prints the annotations, then what it would
    write and post: the step summary, the outputs and the sticky comment's body. Nothing is sent
    anywhere. Returns the exit code the Action's step would have."""
    env = dict(os.environ if env is None else env)
    out = out or sys.stdout
    try:
        root = repo_root(cwd or os.getcwd())
    except (ActionError, BadInput) as exc:
        print(f"draftguard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    def commit(ref: str) -> str | None:
        done = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
                              capture_output=True, text=True)
        return done.stdout.strip() or None

    head = commit("HEAD")
    base_sha = commit(base or "HEAD~1")
    if head is None or (base and base_sha is None):
        print(f"draftguard: {root}: {'no commit yet' if head is None else f'--base {base}: no such commit'}; "
              "the dry run checks HEAD against a base commit", file=sys.stderr)
        return EXIT_BAD_INPUT
    with tempfile.TemporaryDirectory(prefix="draftguard-dry-run-") as tmp:
        event = {"pull_request": {"number": None, "head": {"sha": head}, "base": {"sha": base_sha}}}
        (Path(tmp) / "event.json").write_text(json.dumps(event))
        for name in ("summary.md", "output"):
            (Path(tmp) / name).write_text("")
        keep = {k: v for k, v in env.items() if k.startswith("INPUT_") or not k.startswith(("GITHUB_", "RUNNER_"))}
        run_env = {**keep, "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "pull_request",
                   "GITHUB_EVENT_PATH": str(Path(tmp) / "event.json"), "GITHUB_WORKSPACE": str(root),
                   "GITHUB_STEP_SUMMARY": str(Path(tmp) / "summary.md"), "GITHUB_OUTPUT": str(Path(tmp) / "output"),
                   "GITHUB_SHA": head}  # the JSON and SARIF reports stay in the temp folder, as named
        preview = PreviewComment()
        out.write(f"draftguard action --dry-run: {root}, HEAD {head[:12]} against "
                  f"{'base ' + base_sha[:12] if base_sha else 'no base (every config file is checked)'}\n")
        code = run_action(run_env, cwd=root, out=out, preview=preview)
        summary = (Path(tmp) / "summary.md").read_text()
        outputs = (Path(tmp) / "output").read_text()
    shown = [line for line in outputs.splitlines() if not line.startswith("ghadelimiter_")]
    out.write("\n--- the step summary it would write ---\n" + (summary or "(none)\n"))
    out.write("--- the outputs it would set ---\n" + "\n".join(
        f"{a.split('<<')[0]}={b}" for a, b in zip(shown[::2], shown[1::2])) + "\n")
    out.write("--- the sticky comment it would post (nothing was sent) ---\n" + (preview.body or "(none)\n"))
    out.write(f"\n--- exit {code} ---\n")
    out.flush()
    return code


def cmd_action(args: Any) -> int:
    """``draftguard action``: the CLI hook (the runner's environment carries every input). Outside
    GitHub Actions (no ``GITHUB_ACTIONS=true``, which every runner sets) it says so in one line and
    exits 2, rather than checking every config.json under the working directory. ``--dry-run`` runs
    the same logic on a local checkout (``dry_run``)."""
    if getattr(args, "dry_run", False):
        return dry_run(getattr(args, "base", None))
    if os.environ.get("GITHUB_ACTIONS") != "true":
        print("draftguard: `draftguard action` runs only inside GitHub Actions (GITHUB_ACTIONS is not "
              "'true' here); to try it on this checkout, run `draftguard action --dry-run` (or "
              "`draftguard check PATH`)", file=sys.stderr)
        return EXIT_BAD_INPUT
    return run_action()
