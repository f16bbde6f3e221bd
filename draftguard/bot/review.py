"""The shared review of a pull request, on GitHub or the Hub: its head checked, its sections built.

In: a pull-request client (``repo_name``, ``read_file(path, ref)``, ``default_branch()``: the GitHub one
or the Hub one from ``draftguard.hosts``), the head and base revisions and the changed model files.
Out: a ``PullRequestReview`` (the report, the findings new against the base, the settings read from
the default branch, notes, drafters), the sticky comment's sections and the check's title; and
``run_job``, the one place where both handlers' faults become a retry or a failure.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from draftguard.bot.jobs import Job, Queue, Retry
from draftguard.check import resolver
from draftguard.check.drafter import check_drafter, detect_drafter, find_target, load_target
from draftguard.check.findings import InputError, Report
from draftguard.check.light import check_snapshot
from draftguard.check.matrix import check_matrix
from draftguard.errors import FileTooLarge, UnreadableFile
from draftguard.report.comment import esc, matrix_note, new_findings, render_light_section, render_matrix_section
from draftguard.secrets import scrub
from draftguard.settings import MAX_SETTINGS_BYTES, Settings, parse_settings
from draftguard.snapshot import SETTINGS_NAME, BadInput, Snapshot

log = logging.getLogger("draftguard.bot")

SETTINGS_FILE = SETTINGS_NAME


def run_job(
    job: Job,
    queue: Queue,
    kinds: Mapping[str, Callable[[Job, Queue, Any], str | None]],
    config: Any,
    retry_delay: Callable[..., float | None],
    *,
    client: Callable[[Job], Any],
) -> str | None:
    """Run ``job`` with the handler ``kinds`` names for its kind, on ``client(job)``: the dispatch
    and retry shared by the GitHub and Hub handlers. A fault that ``retry_delay(exc, attempts,
    base=config.retry_base)`` gives a delay for becomes a ``Retry`` (its message scrubbed of
    ``config.secrets``); any other is raised.

    Example::

        >>> from draftguard.hosts.github import GitHubConfig, retry_delay
        >>> job, config = Job(id="d1", source="demo", kind="ping", repo="acme/m", number=1), GitHubConfig()
        >>> run_job(job, None, {"ping": lambda job, queue, client: f"done: {client}"}, config, retry_delay,
        ...         client=lambda job: "c")
        'done: c'
        >>> run_job(job, None, {}, config, retry_delay, client=lambda job: "c")
        'skipped: unknown job kind ping'
    """
    try:
        connected = client(job)
        handler = kinds.get(job.kind)
        if handler is None:
            return f"skipped: unknown job kind {job.kind}"
        return handler(job, queue, connected)
    except Retry:
        raise
    except Exception as exc:
        delay = retry_delay(exc, job.attempts, base=config.retry_base)
        if delay is not None:
            raise Retry(scrub(str(exc), config.secrets), delay) from None
        raise


def check_title(outcome: "PullRequestReview") -> str:
    """The check run's title: findings, and files that could not be checked."""
    report = outcome.report
    if not (report.targets or report.errors):
        return "no config.json to check"
    n_new = sum(1 for f in report.findings if outcome.new is not None and (f.file, f.rule, f.key) in outcome.new)
    title = f"{len(report.findings)} finding(s), {n_new} new"
    return title + (f", {len(report.errors)} file(s) not checked" if report.errors else "")


@dataclass
class PullRequestReview:
    """What the review of one pull request head found; the handlers turn it into comments and checks."""

    report: Any
    new: set | None
    settings: Any
    notes: list[str]
    drafters: list[str]
    files: dict[str, bytes] = field(default_factory=dict)  # each checked config.json at the head


def check_pull_request(client: Any, head: str, base: str, relevant: list[tuple[str, str]],
                       forced: bool = False) -> PullRequestReview:
    """The light check of a pull request's changed configs at ``head``, with findings new against
    ``base``. ``client`` is any pull-request client with ``repo_name``, ``read_file(path, ref)`` and
    ``default_branch()``: the GitHub one or the Hub one (``draftguard.hosts.hub``), so both bots
    judge and render alike.

    Example::

        outcome = check_pull_request(client, head_sha, base_sha, [("drafter/config.json", "modified")])
        outcome.report.findings, outcome.new, outcome.drafters
    """

    resolver.hide_torch()

    notes: list[str] = []
    settings = read_settings(client, notes)
    folders = sorted({posixpath.dirname(p) for p, _ in relevant})
    if forced:
        folders = sorted(set(folders) | {""} | {p.strip("/") for p in settings.paths})
    configs = [posixpath.join(f, "config.json") if f else "config.json" for f in folders]
    report = Report(transformers_version=resolver.transformers_version())
    base_findings: list = []
    have_base = False
    drafters: list[str] = []
    fetched: dict = {}  # target models, fetched once per job
    files: dict[str, bytes] = {}
    for path in configs:
        try:
            head_bytes = client.read_file(path, head)
        except (FileTooLarge, UnreadableFile) as exc:
            # Never "nothing to check": a file the bot cannot read fails the check and says why.
            report.errors.append(InputError(source=path, message=str(exc), file=path))
            continue
        if head_bytes is None:
            continue
        snap = Snapshot(source=f"{client.repo_name}@{head[:12]}", revision=head,
                        files={"config.json": head_bytes}, display={"config.json": path})
        files[path] = head_bytes
        try:
            result = check_snapshot(snap, trust_remote_code=False, version=report.transformers_version)
            report.targets.append(result)
            raw = json.loads(head_bytes)
            if "DFlashDraftModel" in (raw.get("architectures") or []) or raw.get("speculators_model_type") == "dflash":
                drafters.append(path)
            result.findings.extend(_drafter_findings(snap, result, raw, settings, fetched, notes))
        except BadInput as exc:
            report.errors.append(InputError(source=path, message=str(exc), file=exc.file or path, line=exc.line,
                                            column=exc.column, key=exc.key))
            continue
        try:
            base_bytes = client.read_file(path, base)
        except (FileTooLarge, UnreadableFile):
            have_base = True  # the base could not be read: everything found now is new
            continue
        if base_bytes is None:
            have_base = True  # a new file: everything in it is new
            continue
        try:
            base_snap = Snapshot(source=f"{client.repo_name}@{base[:12]}", revision=base,
                                 files={"config.json": base_bytes}, display={"config.json": path})
            base_result = check_snapshot(base_snap, version=report.transformers_version)
            base_findings += base_result.findings
            base_findings += _drafter_findings(base_snap, base_result, json.loads(base_bytes), settings, fetched, [])
            have_base = True
        except BadInput:
            have_base = True  # the base could not be checked: everything found now is new
    new = new_findings(report.findings, base_findings) if have_base else None
    return PullRequestReview(report, new, settings, notes, drafters, files)


def check_sections(outcome: Any, head: str, base: str) -> tuple[str, str | None, bool]:
    """The light-check and matrix sections for a checked PR head (GitHub or Hub), and whether the
    repo's settings ask for a GPU acceptance test of its drafters."""
    settings = outcome.settings
    light = render_light_section(outcome.report, outcome.new, head=head, base=base, fail_on=settings.fail_on,
                                 notes=outcome.notes)
    matrix = matrix_section(outcome.files, settings.transformers) if settings.transformers else None
    wants_gpu = bool(outcome.drafters) and bool(settings.target and (settings.min_acceptance_length or settings.baseline))
    return light, matrix, wants_gpu


def matrix_section(files: Mapping[str, bytes], versions: list[str]) -> str | None:
    """The transformers-matrix section (issue 3) for the head's configs, or None without configs.

    Each version other than the one installed runs in its own cached environment; the first use of a
    version installs it (``draftguard check --transformers`` shares the cache), and a version that
    cannot be installed says so in its column instead of failing the job."""

    if not files:
        return None
    with tempfile.TemporaryDirectory(prefix="draftguard-matrix-") as tmp:
        folders: dict[str, str] = {}
        for i, (path, data) in enumerate(sorted(files.items())):
            folder = os.path.join(tmp, str(i))
            os.makedirs(folder)
            with open(os.path.join(folder, "config.json"), "wb") as fh:
                fh.write(data)
            folders[folder] = path
        try:
            report = check_matrix(list(folders), versions, trust_remote_code=False)
        except BadInput as exc:
            return render_matrix_section([], [], note=f"not run: {exc}")
    matrix = report.matrix
    header, body = matrix.table()
    if header and header[0] == "file":
        shown = {os.path.join(folder, "config.json"): path for folder, path in folders.items()}
        shown.update({folder: path for folder, path in folders.items()})
        body = [[shown.get(row[0], row[0])] + row[1:] for row in body]
    return render_matrix_section(header, body, note=matrix_note(matrix, bool(body)))


def _drafter_findings(snap: Any, result: Any, raw: Any, settings: Any, fetched: dict, notes: list[str]) -> list:
    """The drafter rules (issue 4) against the target that the default branch's settings name. The
    files come from the API, so only config rules apply (no weights or tokenizer on disk). A target
    that cannot be fetched is a note in the comment, not a failed check."""

    fmt = detect_drafter(raw) if isinstance(raw, dict) else None
    if fmt is None:
        return []
    try:
        # The target's name comes from the repository (a PR head's verifier, even): fetch it from the
        # Hub only, never from this host's disk, into the cache that check_drafter then reads it from.
        where = find_target(snap, fmt, settings.target or None, allow_local=False)
        if where is not None and where[0] not in fetched:
            fetched[where[0]] = load_target(where[0], where[1], trust_remote_code=False, allow_local=False)
        return check_drafter(snap, result, target=settings.target or None, trust_remote_code=False, cache=fetched)
    except BadInput as exc:
        notes.append(f":warning: drafter rules for `{snap.path_of('config.json')}` skipped: {exc}")
        return []


def read_settings(client: Any, notes: list[str] | None = None) -> Any:
    """``.draftguard.yml`` from the client's default branch: never from a pull request's head, which
    a fork controls. Missing: defaults. Invalid or over the size limit: defaults, and (with
    ``notes``) a line for the comment that says so."""

    try:
        data = client.read_file(SETTINGS_FILE, client.default_branch(), max_bytes=MAX_SETTINGS_BYTES)
        return parse_settings(data.decode("utf-8", "replace"), SETTINGS_FILE) if data else Settings()
    except (BadInput, FileTooLarge, UnreadableFile) as exc:
        if notes is not None:
            notes.append(f":no_entry: {SETTINGS_FILE} on the default branch: {esc(str(exc))} (defaults used)")
        return Settings()
