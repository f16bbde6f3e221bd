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

import os
import sys
from pathlib import Path
from typing import Any, Mapping

from draftguard.action.comment import StickyComment, post_fix_suggestions, same_repository
from draftguard.action.git import _cwd, glob_regex, repo_root
from draftguard.action.inputs import (EXIT_BAD_INPUT, EXIT_FAIL, INPUTS, OUTPUTS, ActionInputs, Context,
                                      WorkflowCommands, parse_list)
from draftguard.action.modes import ACTION_BACKEND, acceptance_mode, check_mode
from draftguard.runner.gpu_job import accept_command
from draftguard.errors import ActionError
from draftguard.secrets import scrub
from draftguard.snapshot import BadInput

__all__ = ["ACTION_BACKEND", "INPUTS", "accept_command", "OUTPUTS", "ActionInputs", "Context", "WorkflowCommands", "cmd_action", "glob_regex", "parse_list",
           "run_action"]


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
    commands = WorkflowCommands(env, out)
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
        comment = StickyComment(ctx, inputs.token, commands, secrets, inputs.section_key()) if want_comment else None
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


def cmd_action(args: Any) -> int:
    """``draftguard action``: the CLI hook (the runner's environment carries every input). Outside
    GitHub Actions (no ``GITHUB_ACTIONS=true``, which every runner sets) it says so in one line and
    exits 2, rather than checking every config.json under the working directory."""
    if os.environ.get("GITHUB_ACTIONS") != "true":
        print("draftguard: `draftguard action` runs only inside GitHub Actions (GITHUB_ACTIONS is not "
              "'true' here); to check files on this machine, run `draftguard check PATH`", file=sys.stderr)
        return EXIT_BAD_INPUT
    return run_action()
