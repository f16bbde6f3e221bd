"""``draftguard fix --launch-file``: a launch's one-flag fixes, proven by checking the edited launch again.

Today one: the speculative method that is not the drafter's format (DG304), rewritten on its line
(vLLM's ``"method": "eagle"`` in ``--speculative-config`` or ``--speculative-config.method eagle``;
SGLang's ``--speculative-algorithm EAGLE``) to the method the finding names. The edited text is
checked again beside the original (so relative model paths still resolve), and the edit is kept only
when that finding is gone and no new error appears.

In: a launch file's path; the engine specs and real engines the check uses.
Out: ``fix_launch`` -> (the edited text or None, what was done per finding); the unified diff via
``launch_diff``. Every other byte of the file is kept.
"""

from __future__ import annotations

import difflib
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from draftguard.check import policy
from draftguard.check.findings import Severity
from draftguard.check.launch import launch_report
from draftguard.errors import BadInput


def _method_edit(line: str, asked: str, want: str) -> str | None:
    """The line with the method value ``asked`` made ``want``, or None when it is not written there.

    Example::

        >>> _method_edit('SPEC={"method": "eagle", "model": "x"}', "eagle", "eagle3")
        'SPEC={"method": "eagle3", "model": "x"}'
        >>> _method_edit("--speculative-algorithm EAGLE --speculative-num-steps 3", "EAGLE", "EAGLE3")
        '--speculative-algorithm EAGLE3 --speculative-num-steps 3'
    """
    patterns = (rf'(\\?"method\\?"\s*:\s*\\?"){re.escape(asked)}(\\?")',
                rf'(--speculative[-_]config\.method[ =]["\']?){re.escape(asked)}(\b)',
                rf'(--speculative[-_]algorithm[ =]["\']?){re.escape(asked)}(\b)')
    for pattern in patterns:
        edited, n = re.subn(pattern, lambda m: m.group(1) + want + m.group(2), line, count=1)
        if n:
            return edited
    return None


def fix_launch(path: str, specs: list | None = None, real: Any = None, settings: Any = None,
               root: str | None = None) -> tuple[str | None, list[str]]:
    """The launch file's text with its proven fixes (None when nothing was fixed), and one line per
    DG304 finding saying what was done, then one per other error or warning, which has no known fix
    (``: not fixed:`` in each line left). ``settings`` (.draftguard.yml, its paths relative to ``root``)
    set rules off and silence findings, as they do for ``check``.

    Raises:
        BadInput: The launch cannot be read, or a model it serves cannot be found.
    """
    before = Path(path).read_text(encoding="utf-8")
    report = policy.apply(launch_report([path], [], specs, real), settings, root)
    if report.errors:
        error = report.errors[0]
        raise BadInput(error.message, file=error.file, line=error.line, key=error.key)
    said: list[str] = []
    lines = before.splitlines(keepends=True)
    for finding in [f for f in report.findings if f.rule == "DG304"]:
        index = (finding.line or 0) - 1
        edited = _method_edit(lines[index], str(finding.raw), str(finding.resolved)) if 0 <= index < len(lines) else None
        if edited is None:  # written elsewhere (a variable the flag expands): the one line that writes it
            found = [(i, e) for i, text in enumerate(lines) if not text.lstrip().startswith("#")
                     and (e := _method_edit(text, str(finding.raw), str(finding.resolved))) is not None]
            index, edited = found[0] if len(found) == 1 else (index, None)
        if edited is None:
            said.append(f"{path}:{finding.line}: not fixed: DG304: the method {finding.raw!r} is not written on this line")
            continue
        trial = lines[:index] + [edited] + lines[index + 1:]
        if _proven(path, "".join(trial), report, specs, real):
            lines = trial
            said.append(f"{path}:{index + 1}: fixed DG304: method {finding.raw!r} -> {finding.resolved!r}")
        else:
            said.append(f"{path}:{finding.line}: not fixed: DG304: the edited launch still fails or fails otherwise")
    for finding in report.findings:
        if finding.rule != "DG304" and finding.severity in (Severity.ERROR, Severity.WARNING):
            said.append(f"{finding.file}:{finding.line or 1}: not fixed: {finding.rule} on `{finding.key}` "
                        f"({finding.severity.value}): no known fix for a launch ({finding.message})")
    after = "".join(lines)
    return (after if after != before else None), said


def _proven(path: str, text: str, report: Any, specs: list | None, real: Any) -> bool:
    folder = Path(path).resolve().parent
    fd, trial = tempfile.mkstemp(prefix=".draftguard-fix-", suffix=Path(path).suffix, dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        again = launch_report([trial], [], specs, real)
    finally:
        os.unlink(trial)
    errors = lambda r: {(f.rule, f.line) for f in r.findings if f.severity == Severity.ERROR}  # noqa: E731
    return not again.errors and "DG304" not in {f.rule for f in again.findings} and errors(again) <= errors(report)


def launch_diff(path: str, before: str, after: str) -> str:
    name = path.lstrip("/")
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        f"a/{name}", f"b/{name}"))
