"""Running an audit: repos in, audit.jsonl + audit.md + audit.html out, and an exit code.

A repo whose commit is known without asking (the listing's sha, or a revision that is a sha) and
matches its previous record is skipped before any chunk is made: nothing is asked of the Hub for it.
The other repos are audited in chunks. With the installed transformers alone a chunk is one repo, and a
bounded pool of threads runs them, sharing huggingface_hub's HTTP connections and cache. With
several transformers versions a chunk holds many repos, so that each version's resolver process
(one per version per chunk, see check/matrix.py) serves them all. With ``--queue redis://...`` the
chunks become jobs on the queue that ``draftguard worker`` serves (see audit/queue.py).

In: an ``AuditRun`` (the ``RepoRef`` list, ``AuditOptions``, output folder, concurrency, queue URL).
Out: ``run_audit`` -> an ``AuditResult`` (the latest record per repo, counts, versions that could not
run), with audit.jsonl appended as each repo finishes and audit.md and audit.html written at the end;
progress on stderr. ``cli.py`` turns the result into the exit code.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from draftguard.audit.inputs import RepoRef
from draftguard.audit.queue import run_on_queue
from draftguard.audit.record import CLEAN, ERROR, FAILING, AuditResult, RepoRecord
from draftguard.audit.repo import AuditOptions, audit_chunk
from draftguard.audit.report import write_reports
from draftguard.audit.store import RecordStore
from draftguard.hub_access import quiet_logs

DEFAULT_OUT = "draftguard-audit"
MULTI_VERSION_CHUNK = 64
QUEUE_CHUNK = 8  # a job of a few repos: the queue's round trip is paid per job, not per repo


@dataclass
class AuditRun:
    """What one ``draftguard audit`` asks for."""

    refs: list[RepoRef]
    options: AuditOptions
    out: Path = Path(DEFAULT_OUT)
    concurrency: int = 8
    queue_url: str | None = None
    chunk_size: int | None = None
    hub_rate: float = 0.0  # with a queue: Hub requests a second shared by every worker (0: the Hub's policy)
    progress: bool = True
    # With a queue: the Jobs' ids. None: a digest of the chunks and options, so that a run started again
    # after its gatherer was killed finds its Jobs on the queue instead of queueing them twice.
    run_id: str | None = None


def chunks(refs: list[RepoRef], size: int) -> Iterator[list[RepoRef]]:
    """Consecutive chunks of at most ``size`` repos, never holding one repo id twice (results of a
    chunk are told apart by repo id).

    Example::

        >>> [[r.key for r in c] for c in chunks([RepoRef("a/x"), RepoRef("a/x", "v1"), RepoRef("a/y")], 5)]
        [['a/x'], ['a/x@v1', 'a/y']]
    """
    current: list[RepoRef] = []
    for ref in refs:
        if len(current) >= size or any(r.repo == ref.repo for r in current):
            yield current
            current = []
        current.append(ref)
    if current:
        yield current


def run_audit(run: AuditRun, *, on_record: Callable[[RepoRecord, bool], None] | None = None) -> AuditResult:
    """Audit every repo of ``run``, appending each record to ``out/audit.jsonl`` as it finishes,
    then write audit.md and audit.html. Raises BadInput (bad queue URL); repo failures are records."""
    quiet_logs()  # huggingface_hub's retries would print a line per 429; the records say it
    started = time.monotonic()
    store = RecordStore(run.out)
    previous = store.load()
    run.options.previous = previous
    size = run.chunk_size or (MULTI_VERSION_CHUNK if not run.options.host_only else
                              QUEUE_CHUNK if run.queue_url else 1)
    unchanged = [] if run.options.full else [
        ref for ref in run.refs if ref.known_sha and ref.key in previous
        and previous[ref.key].same_inputs(ref.known_sha, run.options.versions, run.options.engine_keys)]
    skip = {ref.key for ref in unchanged}
    parts = list(chunks([ref for ref in run.refs if ref.key not in skip], size))
    result = AuditResult(records=[], previous=previous)
    progress = _Progress(len(run.refs), enabled=run.progress)

    def take(record: RepoRecord, skipped: bool) -> None:
        if skipped:
            result.skipped += 1
        else:
            result.checked += 1
            store.append(record)
        progress.advance(record, skipped)
        if on_record is not None:
            on_record(record, skipped)

    with progress:
        for ref in unchanged:  # the listing's sha says so: nothing is asked of the Hub for these
            take(previous[ref.key], True)
        if run.queue_url and parts:
            run.options.fetch_workers = max(1, min(run.concurrency, size))
            resumed = run_on_queue(run.queue_url, parts, run.options, take, run_id=run.run_id, hub_rate=run.hub_rate)
            if resumed:
                say(f"resumed: {resumed} of {len(parts)} chunks were on the queue already (a run of the same "
                    "audit was stopped); none was queued twice")
        elif parts:
            _run_local(parts, run, take)
    store.compact()
    latest = store.load()
    result.records = [latest[ref.key] for ref in run.refs if ref.key in latest]
    result.version_problems = dict(run.options.version_problems)
    result.seconds = time.monotonic() - started
    write_reports(run.out, result, run.options.versions)
    return result


def _run_local(parts: list[list[RepoRef]], run: AuditRun, take: Callable[[RepoRecord, bool], None]) -> None:
    options = run.options
    if options.host_only:
        workers = max(1, run.concurrency)
    else:  # each chunk starts one resolver process per version: keep few in flight, fetch widely
        workers = max(1, min(2, run.concurrency))
        options.fetch_workers = max(1, run.concurrency)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="audit") as pool:
        futures = [pool.submit(audit_chunk, part, options) for part in parts]
        for future in as_completed(futures):
            for record, skipped in future.result():
                take(record, skipped)


class _Progress:
    """A rich progress bar on stderr: repos done, failing, skipped and with errors, and the ETA."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled
        self.counts = {"failing": 0, "skipped": 0, "errors": 0}
        self._bar = None
        self._task = None

    def __enter__(self) -> "_Progress":
        if not self.enabled:
            return self
        from rich.console import Console  # rich: ~20 ms to import; only drawn output pays it
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._bar = Progress(
            TextColumn("auditing"), BarColumn(), MofNCompleteColumn(),
            TextColumn("[red]{task.fields[failing]} failing[/] · {task.fields[skipped]} skipped · "
                       "[yellow]{task.fields[errors]} errors[/]"),
            TextColumn("ETA"), TimeRemainingColumn(),
            console=Console(stderr=True), transient=False,
        )
        self._bar.__enter__()
        self._task = self._bar.add_task("audit", total=self.total, **self.counts)
        return self

    def advance(self, record: RepoRecord, skipped: bool) -> None:
        if skipped:
            self.counts["skipped"] += 1
        if record.status == FAILING:
            self.counts["failing"] += 1
        elif record.status == ERROR:
            self.counts["errors"] += 1
        if self._bar is not None:
            self._bar.update(self._task, advance=1, **self.counts)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)


def summary_line(result: AuditResult) -> str:
    """One line for the end of a run: counts and timing."""
    counts = result.counts()
    rate = result.checked / result.seconds * 60 if result.seconds > 0 else 0.0
    return (f"{len(result.records)} repos: {counts[FAILING]} failing, {counts[ERROR]} could not be checked, "
            f"{counts[CLEAN]} clean ({result.checked} checked, {result.skipped} unchanged and skipped; "
            f"{result.seconds:.1f} s, {rate:.0f} repos/min)")


def say(text: str) -> None:
    sys.stderr.write(f"draftguard: {text}\n")
    sys.stderr.flush()
