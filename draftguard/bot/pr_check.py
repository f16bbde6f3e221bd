"""The shared review of a pull request, on GitHub or the Hub: its head checked, its sections built.

In: a pull-request client (``repo_name``, ``read_file(path, ref)``, ``default_branch()``: the GitHub one
or the Hub one from ``draftguard.hosts``), the head and base revisions and the changed model files.
Out: a ``PullRequestReview`` (the report, the findings new against the base, the settings read from
the default branch, notes, drafters), the sticky comment's sections (light check; matrix, then what
the settings' ``engines:`` serve) and the check's title, each config checked by ``check.run.check``; and
``run_job``, the one place where both handlers' faults become a retry or a failure.
"""

from __future__ import annotations

import contextlib
import logging
import posixpath
import tempfile
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Mapping

from draftguard.action.git import match_launch_files
from draftguard.jobs import Job, Queue, Retry
from draftguard.check import policy, resolver
from draftguard.check.drafter import DrafterFormat, TargetModel, detect_drafter, find_target, load_target
from draftguard.check.engines import EngineSpec, parse_engines
from draftguard.check.findings import Finding, InputError, Report
from draftguard.check.launch import launch_report
from draftguard.check.launch.fetched import materialize_launch
from draftguard.check.repo.fetched import REPO_BYTES, RepoRead, fetch_repo_files
from draftguard.check.run import TargetLookup, check
from draftguard.errors import FileTooLarge, HostRefused, UnknownJobKind, UnreadableFile
from draftguard.hosts.files import MAX_FILE_BYTES
from draftguard.hosts.github import GitHubConfig
from draftguard.hosts.hub import HubConfig
from draftguard.hosts.retry import DelayOf
from draftguard.report.comment import render_matrix_section, render_untested_section
from draftguard.report.engines import render_engines_section
from draftguard.pr_verdict import PullRequestReview, PullRequestSource, matrix_markdown, settings_problem
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


def check_pull_request(client: PullRequestSource, head: str, base: str, relevant: list[tuple[str, str]],
                       forced: bool = False, changed: list[str] | None = None) -> PullRequestReview:
    """The light check of a pull request's changed configs at ``head``, with findings new against
    ``base``. ``client`` is any pull-request client with ``repo_name``, ``read_file(path, ref)`` and
    ``default_branch()``: the GitHub one or the Hub one (``draftguard.hosts.hub``), so both bots
    judge and render alike. Each config is checked by ``check.run.check``, as every surface checks,
    with the engines the default branch's settings name.

    ``changed`` (every path the pull request changes): those the settings' ``launch:`` globs match
    are checked as launch files, as the Action checks them (``check_launch_files``).

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
    if any(p == SETTINGS_FILE for p, _ in relevant):  # the pull request edits the settings: checked
        try:
            problem = settings_problem(client.read_file(SETTINGS_FILE, head, max_bytes=MAX_SETTINGS_BYTES), SETTINGS_FILE)
        except (FileTooLarge, UnreadableFile) as exc:
            problem = InputError(source=SETTINGS_FILE, message=str(exc), file=SETTINGS_FILE)
        if problem is not None:
            report.errors.append(problem)
    fetched: dict[str, Any] = {}  # target models, fetched once per job
    engines = _engines(settings, notes)
    run = partial(check, target_lookup=_target_lookup(settings, fetched), cache=fetched,
                  engines=engines, version=report.transformers_version, settings=settings)
    base_findings: list[Finding] = []
    have_base = False
    drafters: list[str] = []
    untested: dict[str, str] = {}  # drafters draftguard accept does not run, and why
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
        files[path] = head_bytes
        extra = repo_files(client, head, path, head_bytes, MAX_BYTES_PER_PR - spent)
        spent += extra.spent
        notes.extend(f":information_source: {note}" for note in extra.notes)
        snap = _snapshot(client, head, path, head_bytes, extra.files)
        checked = run([snap], drafter_failed=lambda s, exc: notes.append(
            f":warning: drafter rules for `{s.path_of('config.json')}` skipped: {exc}"))
        report.errors.extend(replace(e, source=path, file=e.file or path) for e in checked.errors)
        if checked.errors:
            continue
        report.targets.extend(checked.targets)
        fmt = detect_drafter(snap.load_json())
        if fmt is not None and fmt.acceptance_testable:  # the Action asks the same
            drafters.append(path)
        elif fmt is not None:
            untested[path] = fmt.acceptance_refusal or "not run by draftguard accept"
        try:
            base_bytes = client.read_file(path, base, max_bytes=max(0, min(MAX_FILE_BYTES, MAX_BYTES_PER_PR - spent)))
            spent += len(base_bytes or b"")
        except (FileTooLarge, UnreadableFile):
            have_base = True  # the base could not be read: everything found now is new
            continue
        have_base = True  # a new file, or a base that cannot be checked: everything found now is new
        if base_bytes is not None:
            extra = repo_files(client, base, path, base_bytes, MAX_BYTES_PER_PR - spent)
            spent += extra.spent
            base_findings += run([_snapshot(client, base, path, base_bytes, extra.files)],
                                 drafter_failed=lambda s, exc: None).findings
    launches = launch_paths(settings, changed)
    if launches:
        budget = [MAX_BYTES_PER_PR - spent]
        base_findings += check_launch_files(client, launches, head, base, engines, settings, report, budget)
        have_base = True
    return PullRequestReview.against_base(report, base_findings if have_base else None, settings, notes,
                                          drafters, files, untested)


def launch_paths(settings: Settings, changed: list[str] | None) -> list[str]:
    """The changed files the default branch's ``launch:`` globs match, matched as the Action matches
    them (``action.git.match_launch_files``)."""
    if not settings.launch or not changed:
        return []
    return match_launch_files(changed, settings.launch, None)


def check_launch_files(client: PullRequestSource, launches: list[str], head: str, base: str,
                       engines: list[EngineSpec] | None, settings: Settings, report: Report,
                       budget: list[int]) -> list[Finding]:
    """Check ``launches`` at ``head`` into ``report`` (light tier) and return their findings at ``base``,
    to compare with. There is no checkout: each launch file and what it needs (its ``.env``, the
    config.json of each local model folder it names) is read over the API at that revision, within what
    is left of the pull request's byte budget (``budget[0]``), into a private folder, and
    ``launch_report`` runs there confined to it, as the Action's does on its checkout: findings name
    the repo path and the launch file's line, and a Hub model a launch names is read anonymously."""
    base_findings: list[Finding] = []
    with tempfile.TemporaryDirectory(prefix="draftguard-launch-") as tmp:
        for ref, into, out in ((head, Path(tmp, "head"), report), (base, Path(tmp, "base"), None)):
            into.mkdir()
            present = []
            for path in launches:
                try:
                    if materialize_launch(path, _budgeted(client, ref, budget), into):
                        present.append(path)
                except (FileTooLarge, UnreadableFile) as exc:
                    if out is not None:  # the head's file cannot be checked: it fails the check, saying why
                        out.errors.append(InputError(source=path, message=str(exc), file=path))
            if not present:
                continue
            checked = out if out is not None else Report(transformers_version="")
            with contextlib.chdir(into):
                launch_report(present, [], engines, None, checked, confine=into)
            policy.apply(checked, settings)
            if out is None:
                base_findings = checked.findings
    return base_findings


def _budgeted(client: PullRequestSource, ref: str, budget: list[int]) -> Callable[[str], bytes | None]:
    """``client.read_file`` at ``ref``, each read asking for at most what is left of ``budget[0]``."""
    def read(path: str) -> bytes | None:
        left = budget[0]
        try:
            data = client.read_file(path, ref, max_bytes=max(0, min(MAX_FILE_BYTES, left)))
        except FileTooLarge as exc:
            if left < exc.size <= MAX_FILE_BYTES:
                raise UnreadableFile(path, f"this pull request's files pass {MAX_BYTES_PER_PR // 2**20} MB in all "
                                     "(head and base); split it") from None
            raise
        budget[0] -= len(data or b"")
        return data
    return read


def check_sections(outcome: PullRequestReview, head: str, base: str) -> tuple[dict[str, str | None], bool]:
    """The sticky comment's sections for a checked PR head (GitHub or Hub): the light check, the
    transformers matrix and what the engines serve (settings ``transformers:`` and ``engines:``; None
    removes a section the settings no longer ask for), and whether the repo's settings ask for a GPU
    acceptance test of its drafters. A drafter that ``draftguard accept`` does not run gets no GPU
    job; where the settings ask for one, the acceptance section says why (``render_untested_section``)."""
    settings = outcome.settings
    sections = {
        "light": outcome.light_section(head, base),
        "matrix": matrix_section(outcome.files, settings.transformers) if settings.transformers else None,
        "engines": render_engines_section(outcome.report),
    }
    asks = bool(settings.target and (settings.min_acceptance_length or settings.baseline))
    wants_gpu = bool(outcome.drafters) and asks
    if asks and not outcome.drafters and outcome.untested:
        sections["acceptance"] = render_untested_section(outcome.untested)
    return sections, wants_gpu


def matrix_section(files: Mapping[str, bytes], versions: list[str]) -> str | None:
    """The transformers-matrix section (issue 3) for the head's configs, or None without configs.

    Each version other than the one installed runs in its own cached environment; the first use of a
    version installs it (``draftguard check --transformers`` shares the cache), and a version that
    cannot be installed says so in its column instead of failing the job. The table shows the
    configs' repo paths: the snapshots carry them, so nothing is written to disk."""

    if not files:
        return None
    snapshots = [Snapshot(source=path, revision=None, files={"config.json": data}, display={"config.json": path})
                 for path, data in sorted(files.items())]
    try:
        # The table alone is shown: the drafter rules (and the targets they would read) are the light check's.
        report = check(snapshots, versions=versions, drafter_rules=False)
    except BadInput as exc:
        return render_matrix_section([], [], note=f"not run: {exc}")
    return matrix_markdown(report.matrix)


def _snapshot(client: PullRequestSource, ref: str, path: str, data: bytes,
              extra: dict[str, bytes] | None = None) -> Snapshot:
    """One config.json of the pull request at ``ref``, read over the API, shown by its repo path, with
    the files beside it that the repo rules read (``repo_files``)."""
    folder = posixpath.dirname(path)
    names = {"config.json": data, **(extra or {})}
    return Snapshot(source=f"{client.repo_name}@{ref[:12]}", revision=ref, files=names,
                    display={name: posixpath.join(folder, name) if folder else name for name in names})


def repo_files(client: PullRequestSource, ref: str, path: str, config: bytes, left: int) -> RepoRead:
    """The files beside ``path`` that the repo rules read (generation and tokenizer configs, the
    safetensors index, a header by range reads where the host has them: ``check.repo.fetched``), read
    at ``ref`` within one config's budget and what is left of the pull request's (``left``)."""
    def read(name: str, max_bytes: int) -> bytes | None:
        try:
            return client.read_file(name, ref, max_bytes=max(0, max_bytes))
        except UnreadableFile:
            return None

    ranged = getattr(client, "read_range", None)
    read_range = (lambda name, start, end: ranged(name, ref, start, end)) if ranged is not None else None
    return fetch_repo_files(config, posixpath.dirname(path), read, read_range,
                            budget=max(0, min(REPO_BYTES, left)))


def _target_lookup(settings: Settings, fetched: dict[str, Any]) -> TargetLookup:
    """The bots' way to read a drafter's target (``check.run.TargetLookup``): the one the default
    branch's settings name, else the drafter's verifier, from the Hub only (never this host's disk).
    The bot's token reads only the target the settings name; a verifier the pull request names is
    read anonymously (B1 of issue 25: a private repo's facts in public). The files come from the
    API, so only config rules apply (no weights or tokenizer on disk)."""

    def lookup(snap: Snapshot, fmt: DrafterFormat) -> TargetModel | None:
        where = find_target(snap, fmt, settings.target or None, allow_local=False)
        if where is None:
            return None
        if where[0] not in fetched:
            fetched[where[0]] = load_target(where[0], where[1], trust_remote_code=False, allow_local=False,
                                            anonymous=not settings.target)
        return fetched[where[0]]

    return lookup


def _engines(settings: Settings, notes: list[str]) -> list[EngineSpec] | None:
    """The engines the default branch's settings name (``engines:``), light tier: the bot never runs
    an engine. Ones it cannot read are a note in the comment, as invalid settings are."""
    try:
        return parse_engines(settings.engines, source=SETTINGS_FILE) if settings.engines else None
    except BadInput as exc:
        notes.append(f":no_entry: {SETTINGS_FILE} on the default branch: {exc} (no engine views)")
        return None


def read_settings(client: PullRequestSource, notes: list[str] | None = None) -> Settings:
    """``.draftguard.yml`` from the client's default branch: never from a pull request's head, which
    a fork controls. Missing: defaults. Invalid or over the size limit: defaults, and (with
    ``notes``) a line for the comment that says so."""

    try:
        data = client.read_file(SETTINGS_FILE, client.default_branch(), max_bytes=MAX_SETTINGS_BYTES)
        settings = parse_settings(data.decode("utf-8", "replace"), SETTINGS_FILE) if data else Settings()
        policy.validate(settings)  # a rule that does not exist: defaults, and the note says which
        return settings
    except (BadInput, FileTooLarge, UnreadableFile) as exc:
        if notes is not None:
            notes.append(f":no_entry: {SETTINGS_FILE} on the default branch: {exc} (defaults used)")  # escaped where shown
        return Settings()
