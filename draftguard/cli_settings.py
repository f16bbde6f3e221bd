"""The CLI's settings commands and the one rule by which ``check`` and ``fix`` find their settings:
``draftguard explain``, ``draftguard rules``, ``draftguard settings check|schema``, ``check_settings``
(which .draftguard.yml a local check runs under, or ``--config``'s), ``changed_targets`` (``check
--files``, the pre-commit hook), ``expand_folders`` (a folder of model folders), the settings'
``target:`` for a drafter, and where and how ``check``'s report is written (``output``, ``render``,
``render_statistics``).

In: parsed arguments; target paths.
Out: exit codes and lines on stdout/stderr; ``(Settings, root)``; target lists; the rendered report.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Sequence

from draftguard.check.drafter.target import NamedTarget
from draftguard.check import matrix, policy, rule_docs
from draftguard.action.git import discover
from draftguard.check.findings import RULES, Report
from draftguard.check.engines import parse_engines
from draftguard.report.annotations import render_annotations
from draftguard.report.json import render_json
from draftguard.report.markdown import render_markdown
from draftguard.report.sarif import render_sarif
from draftguard.report.terminal import render_text
from draftguard.settings import (Settings, find_settings, load_settings, repository_root, settings_keys,
                                 settings_schema)
from draftguard.snapshot import CONFIG_NAME, MODEL_FILES, SETTINGS_NAME, BadInput

EXIT_OK, EXIT_BAD_INPUT = 0, 2  # draftguard.cli's


def cmd_explain(args: argparse.Namespace) -> int:
    try:
        sys.stdout.write(rule_docs.explain(args.rule))
    except BadInput as exc:
        print(f"draftguard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


def cmd_rules(args: argparse.Namespace) -> int:
    """``draftguard rules``: every rule, its name, default level and one-line summary, as text
    (aligned columns) or a JSON list; each one's docs/rules.md section is ``explain``'s."""
    rows = [{"id": r.id, "name": r.name, "level": r.severity.value, "summary": r.summary} for r in RULES.values()]
    if args.format == "json":
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return EXIT_OK
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        sys.stdout.write(f"{r['id']}  {r['name']:<{width}}  {r['level']:<7}  {r['summary']}\n")
    return EXIT_OK


def render_statistics(report: Report, fmt: str) -> str:
    """``check --statistics``: how many findings each rule has, most first (then by id), as text
    (``count  id  name  level``) or a JSON list of ``{rule, name, level, count}``."""
    counts = Counter(f.rule for f in report.findings)
    order = sorted(counts, key=lambda rule: (-counts[rule], rule))
    rows = [{"rule": rule, "name": RULES[rule].name if rule in RULES else rule,
             "level": next(f.severity.value for f in report.findings if f.rule == rule), "count": counts[rule]}
            for rule in order]
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    width = max((len(str(r["count"])) for r in rows), default=1)
    return "".join(f"{r['count']:>{width}}  {r['rule']}  {r['name']}  ({r['level']})\n" for r in rows)


def check_settings(targets: Sequence[str], config: str | None = None) -> tuple[Settings, str | None]:
    """The .draftguard.yml a local check runs under, by one rule for every key: ``config``
    (``--config FILE``) where given, its paths relative to its own folder; else the first local
    target's repository file (``settings.find_settings``: the nearest folder upward holding one, never
    above the git root), else the current folder's; defaults when there is none. Returns the settings
    and the folder their paths are relative to.

    Raises:
        BadInput: ``config`` is not a file, or the settings are not valid (file, line and key named).
    """
    if config is not None:
        if not os.path.isfile(config):
            raise BadInput(f"--config {config}: no such file", file=config)
        return load_settings(Path(config)), str(Path(config).resolve().parent)
    local = [t for t in targets if os.path.exists(t)]
    found = find_settings(local[0] if local else ".")
    if found is None:
        return Settings(), None
    shown = os.path.relpath(found)  # messages name it as the user would: from here, where it is below
    return load_settings(found if shown.startswith("..") else shown), str(found.parent)


def changed_targets(paths: Sequence[str]) -> list[str]:
    """The configs a list of changed files asks to check (``check --files``): each model file or
    .draftguard.yml stands for the config.json beside it, where there is one; each folder once."""
    out: list[str] = []
    for path in paths:
        name = os.path.basename(path)
        if name != CONFIG_NAME and (name in MODEL_FILES or name == SETTINGS_NAME):
            path = os.path.join(os.path.dirname(path), CONFIG_NAME)
            if not os.path.isfile(path):
                continue
        if path not in out:
            out.append(path)
    return out


def _settings_target(settings: Settings, root: str | None, targets: Sequence[str]) -> str | None:
    """The settings' ``target:`` where the file is above the drafter's own folder (a file in the
    drafter's folder is read by the drafter rules themselves, which name it in DG100). A relative
    folder is read from the settings file's folder."""
    if not settings.target or root is None:
        return None
    if any(os.path.isdir(t) and os.path.abspath(t) == root for t in targets):
        return None
    candidate = os.path.join(root, settings.target)
    # Named with where it came from: a problem with it names the settings file and line, not --target.
    origin = settings.source or os.path.join(root, SETTINGS_NAME)
    return NamedTarget(candidate if os.path.exists(candidate) else settings.target, origin)


def cmd_settings_check(args: argparse.Namespace) -> int:
    """Check a .draftguard.yml: exit 0 and one line when it is valid, 2 and one line naming the line,
    the key and the key it most likely meant when it is not."""
    path = Path(args.file) if args.file else find_settings(".")
    if path is None:
        print("draftguard: no .draftguard.yml in this folder or above it (up to the git root)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if not path.is_file():
            raise BadInput(f"{path}: no such file", file=str(path))
        settings = load_settings(path)
        policy.validate(settings)
        engines = parse_engines(settings.engines, source=str(path)) if settings.engines else None
        if settings.transformers:
            matrix.parse_versions(settings.transformers, source=str(path))
    except BadInput as exc:
        print(f"draftguard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    keys = [k for k in settings_keys() if k in settings.lines]
    print(f"{path}: valid ({len(keys)} key{'s' if len(keys) != 1 else ''}: {', '.join(keys) or 'none'}"
          f"{'; ' + str(len(engines)) + ' engine(s)' if engines else ''})")
    return EXIT_OK


def cmd_settings_schema(args: argparse.Namespace) -> int:
    sys.stdout.write(json.dumps(settings_schema(), indent=2) + "\n")
    return EXIT_OK


# --- check's targets and output -------------------------------------------------------------------

def expand_folders(targets: list[str], settings: Settings, root: str | None) -> list[str]:
    """Each local folder TARGET that holds no config.json of its own stands for the model configs
    below it (a folder of model folders), less the settings' ``exclude:``; one with none stays, for
    the check to say so."""
    out: list[str] = []
    for target in targets:
        found = []
        if os.path.isdir(target) and not os.path.isfile(os.path.join(target, "config.json")):
            found = discover(target, root=root or target, exclude=settings.exclude)
        out += [f for f in found or [target] if f not in out]
    return out


def output(path: str | None):
    """Where the report goes: stdout (left open), or ``--output-file``, made before the check runs."""
    if path is None:
        return contextlib.nullcontext(sys.stdout)
    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"--output-file {path}: {exc.strerror}", file=path) from None


def render(args: argparse.Namespace, report: Report, root: str | None, fail_on: str, out) -> None:
    """``check``'s report in the format asked (``--statistics``: the counts per rule) on ``out``."""
    if args.statistics:
        out.write(render_statistics(report, args.format))
    elif args.format == "json":
        out.write(render_json(report))
    elif args.format == "markdown":
        out.write(render_markdown(report, fail_on=fail_on))
    elif args.format == "github":
        out.write(render_annotations(report))
    elif args.format == "sarif":
        local = [t for t in args.targets if os.path.exists(t)]
        top = repository_root(local[0] if local else ".")  # code scanning reads paths from the repository root
        out.write(render_sarif(report, root=str(top) if top else root or os.getcwd(), level=args.sarif_level))
    else:
        render_text(report, out)
