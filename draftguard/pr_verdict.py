"""The tail every review of a pull request shares, whoever read its files: the bot over an API, the
Action over a git checkout.

In: the head's Report, the base's findings (None when there is no base to compare with), the settings
read from the default branch and notes for the reader.
Out: ``settings_problem`` (a pull request's broken .draftguard.yml as an error) and a
``PullRequestReview`` that says which
findings are new, renders the light-check and matrix sections of the sticky comment, names the check
(``title``) and gives the verdict (``fails``). ``PullRequestSource`` is what a review reads files
through: the GitHub and Hub clients in ``draftguard.hosts`` both are one.

Example::

    >>> from draftguard.check.findings import Report
    >>> review = PullRequestReview.against_base(Report(transformers_version="5.24.0"), [], Settings(), [])
    >>> review.new, review.fails(), review.title()
    (set(), False, 'no config.json to check')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Protocol, runtime_checkable

from draftguard.check import policy
from draftguard.check.findings import Finding, InputError, Report
from draftguard.check.matrix import VersionMatrix
from draftguard.report.comment import finding_id, matrix_note, new_findings, render_light_section, render_matrix_section
from draftguard.settings import Settings, parse_settings
from draftguard.snapshot import BadInput

FindingId = tuple[str, str, str]  # report.comment.finding_id: file, rule, key


@runtime_checkable
class PullRequestSource(Protocol):
    """Where a review reads a pull request's files: ``hosts.github.PullRequestClient`` and
    ``hosts.hub.HubPullRequestClient`` both fit. ``read_file`` answers None for a file that is not
    there, and raises ``FileTooLarge`` or ``UnreadableFile`` for one it will not read."""

    repo_name: str

    def read_file(self, path: str, ref: str, max_bytes: int = ...) -> bytes | None: ...

    def default_branch(self) -> str: ...


@dataclass
class PullRequestReview:
    """What the review of one pull request head found; the surfaces turn it into comments and checks.

    ``new`` holds the ids (``finding_id``) of the findings the pull request introduced, None when
    there was no base to compare with; ``files`` the head's config.json bytes by path (the bot's
    matrix re-checks them); ``drafters`` the configs that are drafters ``draftguard accept`` runs,
    ``untested`` the other drafters with why they are not run (``DrafterFormat.acceptance_refusal``)."""

    report: Report
    new: set[FindingId] | None
    settings: Settings
    notes: list[str]
    drafters: list[str] = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    untested: dict[str, str] = field(default_factory=dict)

    @classmethod
    def against_base(cls, report: Report, base_findings: Iterable[Finding] | None, settings: Settings,
                     notes: list[str], drafters: list[str] | None = None,
                     files: dict[str, bytes] | None = None,
                     untested: dict[str, str] | None = None) -> "PullRequestReview":
        """The review of ``report`` (the head), its findings compared with ``base_findings`` (None:
        no base, so nothing is marked new)."""
        new = new_findings(report.findings, base_findings) if base_findings is not None else None
        return cls(report, new, settings, notes, list(drafters or []), dict(files or {}), dict(untested or {}))

    def fail_on(self, fail_on: str | None = None) -> str:
        """The severity that fails the check: the one asked for, else the settings', else error."""
        return fail_on or self.settings.fail_on or "error"

    def new_count(self) -> int | None:
        """How many of the head's findings are new, None without a base."""
        if self.new is None:
            return None
        return sum(1 for f in self.report.findings if finding_id(f) in self.new)

    def fails(self, fail_on: str | None = None) -> bool:
        """The verdict: a finding at or over ``fail_on``, or a file that could not be checked."""
        return self.report.fails(self.fail_on(fail_on)) or bool(self.report.errors)

    def title(self) -> str:
        """The check's title: findings, new ones, and files that could not be checked."""
        report = self.report
        if not (report.targets or report.errors):
            return "no config.json to check"
        title = f"{len(report.findings)} finding(s), {self.new_count() or 0} new"
        return title + (f", {len(report.errors)} file(s) not checked" if report.errors else "")

    def light_section(self, head: str | None, base: str | None, fail_on: str | None = None,
                      label: str | None = None) -> str:
        """The sticky comment's light-check section, new findings first; ``label`` names what it
        covers when the comment holds more than one."""
        return render_light_section(self.report, self.new, head=head, base=base, fail_on=self.fail_on(fail_on),
                                    notes=self.notes, label=label)


def settings_problem(data: bytes | None, name: str) -> InputError | None:
    """A pull request's own .draftguard.yml (``data``, None: absent) checked as ``draftguard settings
    check`` checks it: the same one-line message (file, line, key, the key it most likely meant), as
    an error the check fails on; None when it is valid. The settings a review runs under still come
    from the default branch: a head's file is only checked, never obeyed."""
    if data is None:
        return None
    try:
        policy.validate(parse_settings(data.decode("utf-8", "replace"), name))
    except BadInput as exc:
        return InputError.of(name, exc, file=name)
    return None


def matrix_markdown(matrix: VersionMatrix, shown: Mapping[str, str] | None = None) -> str:
    """The transformers-matrix section of a version matrix: its table (file names mapped through
    ``shown``, where the check ran on copies) and the note on versions that did not run."""
    header, body = matrix.table()
    if shown and header and header[0] == "file":
        body = [[shown.get(row[0], row[0])] + row[1:] for row in body]
    return render_matrix_section(header, body, note=matrix_note(matrix, bool(body)))
