"""Proven fixes: each candidate edit is kept only if the whole check, run again on the edited file
under every transformers version asked, no longer reports its finding and reports nothing new.

In: a config.json's text and a ``Checker`` (text -> findings, raising ``BadInput``), made by
``snapshot_checker`` from a ``Snapshot`` (in process, or through the version matrix), and ``prefer``.
Out: ``fix_text(...)`` (``fix_targets`` for local folders) -> a ``FixOutcome``: the edited text, the
fixes kept (edits, the findings they end, the reading chosen and why), the findings left with the
reason, and ``diff()`` / ``hunks()`` for the views (a unified diff; line ranges with their new lines,
for review suggestions).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable

from draftguard.check import policy
from draftguard.check.findings import Finding, Report, Severity
from draftguard.check.run import check as check_sources
from draftguard.check.run import target_masks
from draftguard.fix.proposals import propose
from draftguard.fix.text import Edit, EditError, apply_edits, lines
from draftguard.settings import Settings
from draftguard.snapshot import BadInput, Snapshot, load_snapshot

Checker = Callable[[str], "list[Finding]"]
LOUD = (Severity.ERROR, Severity.WARNING)


@dataclass
class AppliedFix:
    """Edits kept, the findings they end (rule ids and keys), and what they mean."""

    edits: list[Edit]
    ends: list[Finding]
    why: str

    def to_json(self) -> dict:
        return {"edits": [{"key": e.key, **({"remove": True} if e.remove else {"value": e.value})} for e in self.edits],
                "ends": [{"rule": f.rule, "key": f.key} for f in self.ends], "why": self.why}


@dataclass
class Unfixed:
    """A finding with no safe fix, and why."""

    finding: Finding
    reason: str


@dataclass
class Hunk:
    """Lines ``start``..``end`` (1-based, inclusive) of the original file, to be replaced by ``lines``."""

    start: int
    end: int
    lines: list[str]


@dataclass
class FixOutcome:
    file: str
    before: str
    after: str
    fixes: list[AppliedFix] = field(default_factory=list)
    unfixed: list[Unfixed] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.before != self.after

    @property
    def clean(self) -> bool:
        return not self.unfixed

    def diff(self) -> str:
        """The unified diff of the file, as ``git diff`` shows it (``a/`` and ``b/`` paths)."""
        name = self.file.lstrip("/")
        out = difflib.unified_diff(lines(self.before, keepends=True), lines(self.after, keepends=True),
                                   f"a/{name}", f"b/{name}")
        # A last line without a newline is marked as diff and patch expect, so the diff applies.
        return "".join(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in out)

    def hunks(self) -> list[Hunk]:
        """The changed line ranges of the original file with their new lines (no line endings). An
        insertion is attached to the line above it, so every hunk replaces at least one line: the
        form a review suggestion takes."""
        old, new = lines(self.before), lines(self.after)  # GitHub's lines: only \n ends one
        out = []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
            if tag == "equal":
                continue
            if i1 == i2:  # a pure insertion: suggest on the line above (or below, at the top)
                if i1 > 0:
                    i1, j1 = i1 - 1, j1 - 1
                else:
                    i2, j2 = 1, j2 + 1
            out.append(Hunk(i1 + 1, i2, new[j1:j2]))
        return out


def _ident(finding: Finding) -> tuple[str, str]:
    return finding.rule, finding.key


def _loud(findings: Iterable[Finding]) -> list[Finding]:
    return sorted((f for f in findings if f.severity in LOUD), key=lambda f: (-f.severity.rank, f.line or 0, f.key))


def fix_text(text: str, check: Checker, *, prefer: str | None = None, file: str = "config.json",
             only: set[tuple[str, str]] | None = None) -> FixOutcome:
    """Fix what can be fixed in ``text``, one finding at a time, each edit proven by ``check``.
    ``only`` limits the fixes to these (rule, key) findings (a bot fixes only what it reported);
    the others are neither edited for nor listed.

    Raises BadInput when the file itself cannot be checked.

    Example::

        >>> from draftguard.snapshot import load_snapshot
        >>> snap = load_snapshot("examples/qwen3-swa-drafter")
        >>> outcome = fix_text(snap.files["config.json"].decode(), snapshot_checker(snap))
        >>> [line for line in outcome.diff().splitlines() if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        ['+  "use_sliding_window": true,']
        >>> outcome.clean
        True
    """
    outcome = FixOutcome(file=file, before=text, after=text)
    current = check(text)
    reasons: dict[tuple[str, str], str] = {}
    wanted = (lambda f: only is None or _ident(f) in only)
    for finding in [f for f in _loud(current) if wanted(f)]:
        if _ident(finding) not in {_ident(f) for f in current}:
            continue  # an earlier fix ended it too
        try:
            raw = json.loads(outcome.after.lstrip("\ufeff"))
        except ValueError:
            raise BadInput(f"{file}: invalid JSON", file=file) from None
        candidates, reason = propose(finding, raw, prefer, masks=getattr(check, "masks", lambda: {})())
        for candidate in candidates:
            try:
                edited = apply_edits(outcome.after, candidate.edits)
            except EditError as exc:
                reason = f"the edit cannot be made: {exc}"
                continue
            if edited == outcome.after:
                continue
            try:
                after = check(edited)
            except BadInput as exc:
                reason = f"{', '.join(e.describe() for e in candidate.edits)} makes the file unreadable: {exc}"
                continue
            before_ids, after_ids = {_ident(f) for f in current}, {_ident(f) for f in after}
            new = [f for f in after if _ident(f) not in before_ids]
            if _ident(finding) in after_ids:
                reason = f"{', '.join(e.describe() for e in candidate.edits)} does not end it"
                continue
            if new:
                reason = (f"{', '.join(e.describe() for e in candidate.edits)} ends it but brings "
                          + ", ".join(f"{f.rule} on `{f.key}`" for f in new[:3]))
                continue
            ended = [f for f in current if _ident(f) not in after_ids]
            outcome.fixes.append(AppliedFix(candidate.edits, ended, candidate.why))
            outcome.after, current = edited, after
            break
        else:
            reasons[_ident(finding)] = reason or "no candidate edit"
    outcome.unfixed = [Unfixed(f, reasons.get(_ident(f), "no known fix")) for f in _loud(current) if wanted(f)]
    return outcome


def snapshot_checker(snapshot: Snapshot, *, versions: list[str] | None = None, target: str | None = None,
                     trust_remote_code: bool = False, settings: Settings | None = None,
                     settings_root: str | None = None) -> Checker:
    """A ``Checker`` that runs the whole check (config and drafter rules) on an edited config.json in
    place of the snapshot's own, beside the snapshot's other files (weights, tokenizer, settings):
    in this process, or under each of ``versions`` through the version matrix. ``settings``' rules and
    exceptions (paths relative to ``settings_root``) apply as they do for ``check``: a finding they
    silence is neither fixed nor left."""
    fetched: dict = {}  # the drafter's target, fetched once for every recheck
    reserved: list[dict[int, str]] = []  # the target's mask tokens, read once

    def check(text: str) -> list[Finding]:
        snap = replace(snapshot, files={**snapshot.files, "config.json": text.encode("utf-8")}, _lines={})
        found = _findings(check_sources([snap], versions=versions, drafter_target=target,
                                        trust_remote_code=trust_remote_code, cache=fetched))
        return policy.apply_findings(found, settings, settings_root)[0]

    def masks() -> dict[int, str]:
        """Mask tokens the drafter's target reserves: special added tokens named like a mask (read in
        a bounded child, as the checks are; none where the target cannot be read)."""
        if not reserved:
            try:
                reserved.append(target_masks(snapshot, target=target, trust_remote_code=trust_remote_code))
            except BadInput:
                reserved.append({})
        return reserved[0]

    check.masks = masks  # type: ignore[attr-defined]  (read by fix_text for the mask-token rules)
    return check


def config_checker(path: str, *, source: str | None = None, revision: str | None = None,
                   version: str | None = None) -> Checker:
    """A ``Checker`` of the config rules alone, for a config.json read as bytes with no folder beside
    it (the bots and the audit: no weights, no tokenizer, no target), under the installed transformers."""

    def check(text: str) -> list[Finding]:
        snap = Snapshot(source=source or path, revision=revision, files={"config.json": text.encode("utf-8")},
                        display={"config.json": path})
        return _findings(check_sources([snap], version=version, drafter_rules=False))

    return check


def _findings(report: Report) -> list[Finding]:
    """A recheck's findings (the matrix's sorted, one version's in the order the rules found them); its
    first InputError raised as the BadInput it was (the edit broke the file)."""
    if report.errors:
        error = report.errors[0]
        raise BadInput(error.message, file=error.file, line=error.line, key=error.key)
    return report.findings if report.matrix is not None else [f for t in report.targets for f in t.findings]


def fix_targets(targets: list[str], *, versions: list[str] | None = None, drafter_target: str | None = None,
                settings: Settings | None = None) -> list[FixOutcome]:
    """The proven fixes of each local target, as ``draftguard fix`` finds them (nothing written),
    under ``settings``' rules and exceptions (paths from the current folder, the checkout's root)."""
    outcomes = []
    for target in targets:
        try:
            snapshot = load_snapshot(target)
            text = snapshot.files["config.json"].decode("utf-8")
            checker = snapshot_checker(snapshot, versions=versions, target=drafter_target, settings=settings)
            outcomes.append(fix_text(text, checker, file=snapshot.path_of("config.json")))
        except (BadInput, UnicodeDecodeError):
            continue  # the check's own report names the file and why
    return outcomes
