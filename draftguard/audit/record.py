"""One repo's audit record (a line of audit.jsonl), and the errors a repo can end in.

A record is plain JSON so that any tool can read audit.jsonl: the repo, the commit it was checked
at, the transformers versions and draftguard version it was checked with, its findings (the json
view's shape), regressions between versions, and errors. Errors are the repo's own: one gated or
deleted repo never stops the audit of the others.

In: what ``repo.audit_chunk`` found for one repo, or a line of audit.jsonl (``RepoRecord.from_json``).
Out: ``RepoRecord`` (status, worst severity, ``fails(fail_on)``, ``to_json``), ``RepoError``,
``Regression``, the report order (``severity_rank``, ``sort_key``), and ``AuditResult`` (a run's
records and counts, which run, report and html share). Imports nothing of draftguard's.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from draftguard import __version__

# Error kinds. The first group are faults of the repo itself (its owner can fix them; they count
# towards --fail-on error and are told in discussions); the second are about reaching the repo.
# A repo without config.json (GGUF files, adapters, datasets of weights) is not broken, just not
# checkable: it is never told to its owner.
REPO_FAULTS = ("invalid-config", "oversized", "lfs-pointer", "config-rejected", "target")
ACCESS = ("no-config", "unsupported", "gated", "not-found", "revision-not-found", "http-error", "internal")
TRANSIENT = ("rate-limited", "server-error", "timeout", "unreachable")
SEVERITY_RANK = {"error": 2, "warning": 1, "info": 0}

CLEAN, FAILING, ERROR, SKIPPED = "clean", "failing", "error", "skipped"


@dataclass
class RepoError:
    """Why a repo (or part of its check) could not be audited. ``kind`` is one of REPO_FAULTS,
    ACCESS or TRANSIENT; ``message`` says what to do."""

    kind: str
    message: str

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT

    @property
    def repo_fault(self) -> bool:
        return self.kind in REPO_FAULTS


@dataclass
class Regression:
    """A finding (or an error) present under some transformers versions and absent under others."""

    rule: str
    key: str
    severity: str
    present: list[str]
    absent: list[str]
    message: str


@dataclass
class RepoRecord:
    """The outcome of auditing one repo at one revision."""

    repo: str  # owner/name[@revision], as the audit was asked
    repo_id: str
    revision: str | None
    sha: str | None = None
    versions: list[str] = field(default_factory=list)
    engines: list[str] = field(default_factory=list)  # --engine specs ("vllm==0.32.0") it was judged by
    draftguard: str = __version__
    findings: list[dict[str, Any]] = field(default_factory=list)
    errors: list[RepoError] = field(default_factory=list)
    regressions: list[Regression] = field(default_factory=list)
    target: dict[str, str] | None = None  # {"name", "origin"} for a drafter checked against a target
    drafter: str | None = None  # the drafter format, when the repo is one
    checked: float = field(default_factory=time.time)
    seconds: float = 0.0
    attempts: int = 1
    fix: str | None = None  # the proven fix of config.json's errors, as a unified diff (draftguard fix)
    silenced: list[str] = field(default_factory=list)  # what the repo's .draftguard.yml rules/ignore changed
    notes: list[str] = field(default_factory=list)  # files the byte budget left unread (their rules did not run)

    # --- judging ---------------------------------------------------------------------------------
    @property
    def worst(self) -> str | None:
        """The highest severity among findings, regressions and the repo's own faults."""
        ranks = [SEVERITY_RANK.get(f.get("severity"), 0) for f in self.findings]
        ranks += [SEVERITY_RANK.get(r.severity, 0) for r in self.regressions]
        ranks += [2 for e in self.errors if e.repo_fault]
        if not ranks:
            return None
        return {2: "error", 1: "warning", 0: "info"}[max(ranks)]

    @property
    def status(self) -> str:
        """clean, failing (an error-level finding, regression or repo fault) or error (the repo
        could not be checked: access or transient)."""
        if any(not e.repo_fault for e in self.errors) and not self.findings:
            return ERROR
        return FAILING if self.worst == "error" else CLEAN

    def fails(self, fail_on: str) -> bool:
        """Whether this repo trips ``--fail-on`` (error, warning or never)."""
        if fail_on == "never" or self.worst is None:
            return False
        return SEVERITY_RANK[self.worst] >= SEVERITY_RANK[fail_on]

    @property
    def transient(self) -> bool:
        return any(e.transient for e in self.errors)

    def rules(self, at_least: str = "warning") -> list[str]:
        """Rule ids of findings and regressions at or above a severity, sorted, each once."""
        bar = SEVERITY_RANK[at_least]
        found = {f["rule"] for f in self.findings if SEVERITY_RANK.get(f.get("severity"), 0) >= bar}
        found |= {r.rule for r in self.regressions if SEVERITY_RANK.get(r.severity, 0) >= bar}
        return sorted(found)

    def same_inputs(self, sha: str | None, versions: list[str], engines: list[str] | None = None) -> bool:
        """Whether a rerun would check exactly this again (incremental audits skip it then). A repo
        refused for access (gated, 401/403) is asked again: its access may have been granted since."""
        return (sha is not None and self.sha == sha and self.versions == versions
                and self.engines == list(engines or [])
                and self.draftguard == __version__ and not self.transient
                and not any(e.kind == "gated" for e in self.errors))

    # --- json ------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"], out["worst"] = self.status, self.worst
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RepoRecord":
        """Read a record back; raises KeyError or TypeError on a line that is not one."""
        record = cls(repo=data["repo"], repo_id=data["repo_id"], revision=data.get("revision"))
        for name in ("sha", "versions", "engines", "draftguard", "findings", "target", "drafter", "checked", "seconds",
                     "attempts", "fix", "silenced", "notes"):
            if name in data:
                setattr(record, name, data[name])
        record.errors = [RepoError(e["kind"], e["message"]) for e in data.get("errors", [])]
        record.regressions = [Regression(**r) for r in data.get("regressions", [])]
        return record


def severity_rank(record: RepoRecord) -> float:
    """Errors 2, repos that could not be checked 1.5, warnings 1, info 0, nothing found -1."""
    if record.status == ERROR:
        return 1.5
    return float(SEVERITY_RANK.get(record.worst or "", -1))


def sort_key(record: RepoRecord) -> tuple[float, str]:
    """Worst first: errors, repos that could not be checked, warnings, then the rest; then by repo."""
    return (-severity_rank(record), record.repo)


@dataclass
class AuditResult:
    """The records of this run's repos (latest per repo), and how the run went."""

    records: list[RepoRecord]
    checked: int = 0
    skipped: int = 0
    seconds: float = 0.0
    version_problems: dict[str, str] = field(default_factory=dict)
    previous: dict[str, RepoRecord] = field(default_factory=dict)

    def counts(self) -> dict[str, int]:
        counts = {CLEAN: 0, FAILING: 0, ERROR: 0}
        for record in self.records:
            counts[record.status] += 1
        return counts

    def fails(self, fail_on: str) -> bool:
        return any(r.fails(fail_on) for r in self.records)
