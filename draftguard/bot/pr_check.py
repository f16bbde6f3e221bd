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
from typing import Any, Callable, Mapping

from draftguard.jobs import Job, Queue, Retry
from draftguard.check import resolver
from draftguard.check.drafter import check_drafter, detect_drafter, find_target, load_target
from draftguard.check.findings import Finding, InputError, Report, TargetResult
from draftguard.check.light import check_snapshot
from draftguard.check.matrix import check_matrix
from draftguard.errors import FileTooLarge, HostRefused, UnknownJobKind, UnreadableFile
from draftguard.hosts.files import MAX_FILE_BYTES
from draftguard.hosts.github import GitHubConfig
from draftguard.hosts.hub import HubConfig
from draftguard.hosts.retry import DelayOf
from draftguard.report.comment import render_matrix_section
from draftguard.pr_verdict import PullRequestReview, PullRequestSource, matrix_markdown
from draftguard.secrets import scrub
from draftguard.settings import MAX_SETTINGS_BYTES, Settings, parse_settings
from draftguard.snapshot import SETTINGS_NAME, BadInput, Snapshot

log = logging.getLogger("draftguard.bot")

SETTINGS_FILE = SETTINGS_NAME
MAX_CONFIGS_PER_PR = 50
# All config bytes one pull request's check reads, head and base together (B2 of issue 25: per file
# and per pull request). Each read asks for at most what is left, so the size is known first.
MAX_BYTES_PER_PR = 64 * 1024 * 1024


JobHandler = Callable[[Job, Queue, Any], "str | None"]
# A host's answer to "is this fault the host refusing the bot's token?": (status, the host's message) or None.
RefusalOf = Callable[[BaseException], "tuple[int, str] | None"]


def run_job(
    job: Job,
    queue: Queue,
    handlers: Mapping[str, JobHandler],
    config: GitHubConfig | HubConfig,
    retry_delay: DelayOf,
    *,
    client: Callable[[Job], Any],
    refusal: RefusalOf | None = None,
    host: str = "the host",
) -> str | None:
    """Run ``job`` with the handler ``handlers`` names for its kind, on ``client(job)``: the dispatch
    and retry shared by the GitHub and Hub handlers. A fault that ``retry_delay(exc, attempts,
    base=config.retry_base)`` gives a delay for becomes a ``Retry`` (its message scrubbed of
    ``config.secrets``); one that ``refusal`` reads as the host refusing the token becomes a
    ``HostRefused``; any other is raised.

    Raises:
        UnknownJobKind: No handler runs the job's kind (the queue records a failed job, no traceback).
        HostRefused: The host answered 401, 403 or 404: the token cannot see the repo (the same).
        Retry: The fault is transient; the queue runs the job again after its delay.

    Example::

        >>> from draftguard.hosts.github import GitHubConfig, retry_delay
        >>> job, config = Job(id="d1", source="demo", kind="ping", repo="acme/m", number=1), GitHubConfig()
        >>> run_job(job, None, {"ping": lambda job, queue, client: f"done: {client}"}, config, retry_delay,
        ...         client=lambda job: "c")
        'done: c'
        >>> run_job(job, None, {"pong": lambda job, queue, client: "done"}, config, retry_delay, client=lambda job: "c")
        Traceback (most recent call last):
        ...
        draftguard.errors.UnknownJobKind: no demo handler for job kind 'ping' (this worker runs pong); is the worker older than the server that recorded it?
    """
    handler = handlers.get(job.kind)
    if handler is None:
        raise UnknownJobKind(job.source, job.kind, tuple(handlers))
    try:
        return handler(job, queue, client(job))
    except Retry:
        raise
    except Exception as exc:
        delay = retry_delay(exc, job.attempts, base=config.retry_base)
        if delay is not None:
            raise Retry(scrub(str(exc), config.secrets), delay) from None
        refused = refusal(exc) if refusal is not None else None
        if refused is not None:
            raise HostRefused(host, job.repo, *refused) from None
        raise


def check_title(outcome: PullRequestReview) -> str:
    """The check run's title: findings, and files that could not be checked."""
    return outcome.title()




def check_pull_request(client: PullRequestSource, head: str, base: str, relevant: list[tuple[str, str]],
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
    if len(configs) > MAX_CONFIGS_PER_PR:
        # Every config costs API requests, a check and annotations on each push: the first ones are
        # checked, and the rest fail the check by name, never silently (R3 of issue 25).
        skipped, configs = configs[MAX_CONFIGS_PER_PR:], configs[:MAX_CONFIGS_PER_PR]
        report.errors.append(InputError(source=skipped[0], file=skipped[0], message=(
            f"{len(skipped)} more config.json not checked ({skipped[0]} and after): a pull request is checked "
            f"for at most {MAX_CONFIGS_PER_PR} configs; split it")))
    base_findings: list[Finding] = []
    have_base = False
    drafters: list[str] = []
    fetched: dict[str, Any] = {}  # target models, fetched once per job
    files: dict[str, bytes] = {}
    spent = 0
    for path in configs:
        left = MAX_BYTES_PER_PR - spent
        try:
            head_bytes = client.read_file(path, head, max_bytes=min(MAX_FILE_BYTES, left))
        except (FileTooLarge, UnreadableFile) as exc:
            # Never "nothing to check": a file the bot cannot read fails the check and says why.
            message = str(exc)
            if isinstance(exc, FileTooLarge) and left < exc.size <= MAX_FILE_BYTES:
                message = (f"{path}: not checked: this pull request's configs pass {MAX_BYTES_PER_PR // 2**20} MB "
                           "in all (head and base); split it")
            report.errors.append(InputError(source=path, message=message, file=path))
            continue
        if head_bytes is None:
            continue
        spent += len(head_bytes)
        snap = Snapshot(source=f"{client.repo_name}@{head[:12]}", revision=head,
                        files={"config.json": head_bytes}, display={"config.json": path})
        files[path] = head_bytes
        try:
            result = check_snapshot(snap, trust_remote_code=False, version=report.transformers_version)
            report.targets.append(result)
            raw = json.loads(head_bytes)
            fmt = detect_drafter(raw)
            if fmt is not None and fmt.acceptance_testable:  # the Action asks the same
                drafters.append(path)
            result.findings.extend(_drafter_findings(snap, result, raw, settings, fetched, notes))
        except BadInput as exc:
            report.errors.append(InputError(source=path, message=str(exc), file=exc.file or path, line=exc.line,
                                            column=exc.column, key=exc.key))
            continue
        except (RecursionError, MemoryError) as exc:
            # A check that cannot finish within bounds is an error finding, never a failed job that
            # leaves an earlier "passes" standing (B4 of issue 25).
            report.errors.append(InputError(source=path, file=path, message=(
                f"{path}: not checked: the check ran out of {'depth' if isinstance(exc, RecursionError) else 'memory'}"
                " (is this a real model config?)")))
            continue
        try:
            base_bytes = client.read_file(path, base, max_bytes=max(0, min(MAX_FILE_BYTES, MAX_BYTES_PER_PR - spent)))
            spent += len(base_bytes or b"")
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
    return PullRequestReview.against_base(report, base_findings if have_base else None, settings, notes,
                                          drafters, files)


def check_sections(outcome: PullRequestReview, head: str, base: str) -> tuple[str, str | None, bool]:
    """The light-check and matrix sections for a checked PR head (GitHub or Hub), and whether the
    repo's settings ask for a GPU acceptance test of its drafters."""
    settings = outcome.settings
    light = outcome.light_section(head, base)
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
    shown = {os.path.join(folder, "config.json"): path for folder, path in folders.items()}
    shown.update(folders)
    return matrix_markdown(report.matrix, shown)


def _drafter_findings(snap: Snapshot, result: TargetResult, raw: Any, settings: Settings,
                      fetched: dict[str, Any], notes: list[str]) -> list[Finding]:
    """The drafter rules (issue 4) against the target that the default branch's settings name. The
    files come from the API, so only config rules apply (no weights or tokenizer on disk). A target
    that cannot be fetched is a note in the comment, not a failed check."""

    fmt = detect_drafter(raw) if isinstance(raw, dict) else None
    if fmt is None:
        return []
    try:
        # The target's name comes from the repository (a PR head's verifier, even): fetch it from the
        # Hub only, never from this host's disk, into the cache that check_drafter then reads it from.
        # The bot's token reads only the target the default branch's settings name; a verifier the
        # pull request names is read anonymously (B1 of issue 25: a private repo's facts in public).
        where = find_target(snap, fmt, settings.target or None, allow_local=False)
        if where is not None and where[0] not in fetched:
            fetched[where[0]] = load_target(where[0], where[1], trust_remote_code=False, allow_local=False,
                                            anonymous=not settings.target)
        return check_drafter(snap, result, target=settings.target or None, trust_remote_code=False, cache=fetched)
    except BadInput as exc:
        notes.append(f":warning: drafter rules for `{snap.path_of('config.json')}` skipped: {exc}")
        return []


def read_settings(client: PullRequestSource, notes: list[str] | None = None) -> Settings:
    """``.draftguard.yml`` from the client's default branch: never from a pull request's head, which
    a fork controls. Missing: defaults. Invalid or over the size limit: defaults, and (with
    ``notes``) a line for the comment that says so."""

    try:
        data = client.read_file(SETTINGS_FILE, client.default_branch(), max_bytes=MAX_SETTINGS_BYTES)
        return parse_settings(data.decode("utf-8", "replace"), SETTINGS_FILE) if data else Settings()
    except (BadInput, FileTooLarge, UnreadableFile) as exc:
        if notes is not None:
            notes.append(f":no_entry: {SETTINGS_FILE} on the default branch: {exc} (defaults used)")  # escaped where shown
        return Settings()
