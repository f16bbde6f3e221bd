"""What the Action is given: its inputs, the workflow run's context, and the runner's side channels.

In: the runner's environment (``INPUT_<NAME>`` for each input in ``INPUTS``, ``GITHUB_EVENT_PATH``,
``GITHUB_EVENT_NAME``, ``GITHUB_REPOSITORY``, ...).
Out: ``ActionInputs`` (validated; an ``ActionError`` names a wrong input), ``Context`` (the event, the
pull request, base and head), and ``WorkflowCommands``, which writes ``::error::`` annotations, the
step summary and the outputs.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from draftguard.check.engines import parse_engines
from draftguard.check.findings import int_or_none
from draftguard.check.matrix import parse_versions
from draftguard.errors import ActionError
from draftguard.snapshot import SETTINGS_NAME, BadInput


# Every input the entry point reads. action.yml declares each (tests/test_action.py checks it), and
# its run step passes each as INPUT_<NAME> with dashes turned into underscores.
INPUTS = ("mode", "paths", "transformers-versions", "target", "fail-on", "comment", "suggestions", "github-token",
          "section", "engines", "launch-files", "upload-sarif")
OUTPUTS = ("errors", "warnings", "verdict", "report-json", "sarif")
MODES = ("check", "acceptance")
FAIL_ON = ("error", "warning", "never")
SETTINGS_FILE = SETTINGS_NAME
PR_EVENTS = ("pull_request", "pull_request_target")
EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2
ACCEPT_TIMEOUT_ENV = "DRAFTGUARD_ACCEPT_TIMEOUT"


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
    suggestions: bool = True  # the proven fixes as one-click suggested changes (same-repository pull requests)
    token: str | None = None
    section: str | None = None  # this use's own sections in the sticky comment (see section_key)
    engines: list[str] = field(default_factory=list)  # "vllm==0.32.0": check.engines specs, validated
    launch_files: list[str] = field(default_factory=list)  # globs of engine launch files (check.launch)

    def section_key(self) -> str | None:
        """The key of this use's sections in the sticky comment (``report.comment.section_name``):
        the ``section`` input, else one made from ``paths`` (two uses that check different folders
        keep a section each), else None, the plain sections the bot writes too.

        Example::

            >>> ActionInputs(paths=["models/a/**"]).section_key()
            'models-a-a2a5d3'
            >>> ActionInputs(paths=["models/a/**"], section="drafter").section_key(), ActionInputs().section_key()
            ('drafter', None)
        """
        if self.section:
            return self.section
        if not self.paths:
            return None
        joined = ",".join(self.paths)
        slug = re.sub(r"[^a-z0-9]+", "-", joined.lower()).strip("-")[:32].strip("-")
        digest = hashlib.sha1(joined.encode()).hexdigest()[:6]  # "a/b" and "a-b" slug alike
        return f"{slug}-{digest}" if slug else digest

    def section_label(self) -> str | None:
        """What this use's light-check section says it covers, when it has its own sections."""
        if self.section:
            return self.section
        return ", ".join(self.paths) if self.paths else None

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
            versions = parse_versions(versions, source="input `transformers-versions`")
        engines = parse_list(read_input(env, "engines"))
        if engines:
            try:
                parse_engines(engines, source="input `engines`")
            except BadInput as exc:
                raise ActionError(str(exc)) from None
        return cls(
            mode=mode,
            paths=parse_list(read_input(env, "paths")),
            transformers_versions=versions,
            target=read_input(env, "target") or None,
            fail_on=fail_on,
            comment=parse_bool("comment", read_input(env, "comment") or "true"),
            suggestions=parse_bool("suggestions", read_input(env, "suggestions") or "true"),
            token=read_input(env, "github-token") or None,
            section=_section(read_input(env, "section")),
            engines=engines,
            launch_files=parse_list(read_input(env, "launch-files")),
        )


def _section(text: str) -> str | None:
    if not text:
        return None
    if not re.fullmatch(r"[a-z0-9]+(?:-[a-z0-9]+)*", text) or len(text) > 40:
        raise ActionError(f"input `section` must be lowercase letters, digits and single dashes (at most 40), "
                          f"got {text!r}")
    return text


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
            ctx.pr_number = int_or_none(pr.get("number"))
            ctx.head_sha = (pr.get("head") or {}).get("sha")
            ctx.base_sha = (pr.get("base") or {}).get("sha")
        elif name == "issue_comment":
            issue = event.get("issue") or {}
            if issue.get("pull_request"):
                ctx.pr_number = int_or_none(issue.get("number"))
            # A comment event names no base; the default branch is what the pull request merges into.
            ctx.base_ref = ctx.base_ref or (event.get("repository") or {}).get("default_branch")
        elif name == "push":
            before = event.get("before")
            if isinstance(before, str) and before.strip("0"):
                ctx.base_sha = before
        if ctx.repository is None:
            ctx.repository = (event.get("repository") or {}).get("full_name")
        return ctx


class WorkflowCommands:
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

    def log(self, text: str) -> None:
        """One plain log line of text that may hold a stranger's words (a folder name): its control
        characters are written escaped, so it can never start a line of its own, and so never a
        workflow command (``::add-mask::``, ``::stop-commands::``).

        Example::

            >>> import io; out = io.StringIO(); WorkflowCommands({}, out).log("a\\n::error::x"); out.getvalue()
            'a\\\\n::error::x\\n'
        """
        self.write("".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text) + "\n")

    def echo_untrusted(self, text: str, stream=None) -> None:
        """Pass on what a child process printed, with the runner's workflow commands stopped around it
        (``::stop-commands::<token>``, a token nobody can guess), so that the child's output, which
        the pull request's code shapes, cannot mask, annotate or stop anything."""
        if not text:
            return
        stream = stream or self.out
        token = f"draftguard-{uuid.uuid4().hex}"
        stream.write(f"::stop-commands::{token}\n{text.rstrip(chr(10))}\n::{token}::\n")
        stream.flush()

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
