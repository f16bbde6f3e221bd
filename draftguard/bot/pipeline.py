"""What a GitHub Job does: a Job in (``github_events.job_from_github`` made it from a webhook), a
light check of head against base, one sticky comment, check runs, and (for trusted pull requests)
an acceptance test on the GPU queue out. ``GitHubHandler`` is the Job handler the queue calls; the
light check and its sections (``check_pull_request``, ``check_sections``) are shared with the Hub.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from draftguard.bot.commands import OK_TO_TEST, may_command
from draftguard.bot.files import FileTooLarge, UnreadableFile
from draftguard.bot.github import GitHubConfig, PullRequestClient, bot_login, connect, retry_delay, scrub
from draftguard.bot.jobs import Job, Queue, Retry, command_saw_head, gpu_job_id
from draftguard.report.comment import (
    esc,
    new_findings,
    render_acceptance_section,
    render_light_section,
    update_sticky,
)

from draftguard.snapshot import SETTINGS_NAME, is_model_file

log = logging.getLogger("draftguard.bot")

CONFIG_CHECK = "draftguard/config"
ACCEPTANCE_CHECK = "draftguard/acceptance"
SETTINGS_FILE = SETTINGS_NAME
# GitHub has no check-mark reaction; "+1" is the closest it offers.
REACT_START, REACT_DONE = "eyes", "+1"
_LEVEL = {"error": "failure", "warning": "warning", "info": "notice"}

AcceptanceRunner = Callable[[Job, PullRequestClient, Any], "dict[str, Any]"]


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


def check_title(outcome: "Outcome") -> str:
    """The check run's title: findings, and files that could not be checked."""
    report = outcome.report
    if not (report.targets or report.errors):
        return "no config.json to check"
    n_new = sum(1 for f in report.findings if outcome.new is not None and (f.file, f.rule, f.key) in outcome.new)
    title = f"{len(report.findings)} finding(s), {n_new} new"
    return title + (f", {len(report.errors)} file(s) not checked" if report.errors else "")


@dataclass
class Outcome:
    report: Any
    new: set | None
    settings: Any
    notes: list[str]
    drafters: list[str]
    files: dict[str, bytes] = field(default_factory=dict)  # each checked config.json at the head


class GitHubHandler:
    """The queue's handler for GitHub jobs. ``acceptance_runner(job, client, settings)`` returns the
    AcceptanceResult JSON dict; the default runs ``draftguard accept`` on the drafter's files."""

    def __init__(self, config: GitHubConfig, acceptance_runner: AcceptanceRunner | None = None):
        self.config = config
        self.acceptance_runner = acceptance_runner or run_acceptance_subprocess

    def __call__(self, job: Job, queue: Queue) -> str | None:
        kinds = {"comment": self._comment, "pull_request": self._pull_request, "acceptance": self._acceptance}
        return run_job(job, queue, kinds, self.config, retry_delay, client=self.client)

    def client(self, job: Job) -> PullRequestClient:
        gh = connect(self.config, job.installation_id)
        return PullRequestClient(gh, job.repo, job.number, me=bot_login(self.config, gh))

    # --- comments ------------------------------------------------------------------------------
    def _comment(self, job: Job, queue: Queue, client: PullRequestClient) -> str:
        user, comment_id = job.data.get("user"), job.data.get("comment_id")
        permission = client.permission(user) if user else None
        if not may_command(permission, job.data.get("user_type")):
            if comment_id is not None:
                client.reply_once(
                    comment_id,
                    f"Thanks, @{user}! Only people with write access to this repository can run "
                    "`/recheck` or `/ok-to-test`. A maintainer can run it for you.",
                )
            return f"skipped: {user} ({permission or 'no access'}) may not run commands"
        if comment_id is not None:
            client.react(comment_id, REACT_START)
        head = client.pull(refresh=True).head.sha
        # The command approves the head its author saw: the one the bot knew of when it was written.
        # A head pushed after it (a fork racing the job) is checked, but not trusted on its word.
        saw = command_saw_head(queue, job, head)
        if saw and OK_TO_TEST in job.data.get("commands", []):
            queue.store.put_data(f"trust:{job.repo}#{job.number}", head.encode())
        result = self._pull_request(job, queue, client, forced_by=user, command_saw_head=saw)
        if not saw and comment_id is not None:
            client.reply_once(
                comment_id,
                f"@{user}, the pull request's head moved to `{head[:12]}` after your command, so it was checked "
                "but not approved for a GPU test. Comment again to approve that commit.",
            )
        if comment_id is not None:
            client.react(comment_id, REACT_DONE)
        return result

    # --- the light check -----------------------------------------------------------------------
    def _pull_request(self, job: Job, queue: Queue, client: PullRequestClient, forced_by: str | None = None,
                      command_saw_head: bool = True) -> str:
        if job.kind == "pull_request" and job.head_sha:
            queue.mark_head_seen(job.source, job.repo, job.number, job.head_sha, job.created)
        pull = client.pull(refresh=True)
        head, base = pull.head.sha, pull.base.sha
        if forced_by is None and job.head_sha and head != job.head_sha:
            return f"skipped: superseded by {head[:12]}"
        changed = client.changed_files()
        relevant = [(p, s) for p, s in changed if is_model_file(p)]
        if not relevant and forced_by is None:
            # A later push can take the model files out of the PR: then the old findings must go.
            if client.find_sticky() is not None:
                note = (f"### Light check at `{head[:12]}`\n\nThis pull request no longer changes a model "
                        "file (config.json, safetensors index, tokenizer, .draftguard.yml); nothing to check.")
                with queue.lock(f"pr:{job.repo}#{job.number}"):
                    client.upsert_sticky(lambda old: update_sticky(old, light=note, matrix=None, acceptance=None))
                return "done: no model files changed any more"
            return "skipped: no model files changed"
        outcome = check_pull_request(client, head, base, relevant, forced=forced_by is not None)
        report, settings = outcome.report, outcome.settings
        light, matrix, wants_gpu = check_sections(outcome, head, base)
        acceptance_state, acceptance_detail, gpu_job = None, None, None
        if wants_gpu:
            trusted, why = self._trusted(job, queue, client, head, forced_by if command_saw_head else None)
            if trusted:
                gpu_job = Job(id=gpu_job_id("github", job, head, forced_by), source="github", kind="acceptance",
                              queue="gpu", repo=job.repo, number=job.number, head_sha=head, base_sha=base,
                              installation_id=job.installation_id, data={"drafters": outcome.drafters})
                acceptance_state, acceptance_detail = "queued", f"waiting for a GPU worker ({why})"
            else:
                acceptance_state = "skipped"
                acceptance_detail = (f"{why}; GPU tests run only for trusted pull requests. A maintainer can "
                                     "comment /ok-to-test to run it.")
        failed = report.fails(settings.fail_on) or bool(report.errors)
        title = check_title(outcome)
        sections = {"light": light, "matrix": matrix, "acceptance": render_acceptance_section(acceptance_state, detail=acceptance_detail)
                    if acceptance_state else None}
        if gpu_job is not None and (queue.get(gpu_job.id) or gpu_job).state != "queued":
            # This head's GPU job ran already (a retry, a reopened PR, a replayed delivery): one GPU
            # run per head, and that run's section stays as it is.
            del sections["acceptance"]
            gpu_job = None
        with queue.lock(f"pr:{job.repo}#{job.number}"):
            client.upsert_sticky(lambda old: update_sticky(old, **sections))
        # Check runs belong to the commit, which several pull requests can share.
        pr_id = f"{job.repo}#{job.number}"
        with queue.lock(f"sha:{job.repo}@{head}"):
            publish_check_run(
                client, CONFIG_CHECK, head, status="completed", conclusion="failure" if failed else "success",
                title=title, summary=light, annotations=annotations(report), external_id=pr_id)
            if gpu_job is not None:
                publish_check_run(client, ACCEPTANCE_CHECK, head, status="queued", title="queued",
                                  summary="Waiting for a GPU worker.", external_id=pr_id)
        if gpu_job is not None:
            queue.submit(gpu_job)  # after the comment says "queued", so "done" can never be overwritten
        return f"done: {title}" + (", acceptance queued" if gpu_job else "")

    def _trusted(self, job: Job, queue: Queue, client: PullRequestClient, head: str,
                 forced_by: str | None) -> tuple[bool, str]:
        if forced_by:
            return True, f"requested by @{forced_by}"
        from huey.constants import EmptyData

        trust = queue.store.peek_data(f"trust:{job.repo}#{job.number}")
        if trust is not EmptyData and bytes(trust).decode() == head:
            return True, "marked /ok-to-test"
        author = job.data.get("author")
        if author and may_command(client.permission(author), "User"):
            return True, f"@{author} has write access"
        return False, "the author has no write access"

    # --- the acceptance test -------------------------------------------------------------------
    def _acceptance(self, job: Job, queue: Queue, client: PullRequestClient) -> str:
        pull = client.pull(refresh=True)
        if pull.head.sha != job.head_sha:
            return f"skipped: superseded by {pull.head.sha[:12]}"
        settings = read_settings(client)
        with queue.lock(f"pr:{job.repo}#{job.number}"):
            client.upsert_sticky(lambda old: update_sticky(old, acceptance=render_acceptance_section("running")))
        with queue.lock(f"sha:{job.repo}@{job.head_sha}"):
            publish_check_run(client, ACCEPTANCE_CHECK, job.head_sha, status="in_progress", title="running")
        try:
            result = self.acceptance_runner(job, client, settings)
            section = render_acceptance_section("done", result)
            status = (result.get("verdict") or {}).get("status", "inconclusive")
            conclusion = {"pass": "success", "fail": "failure"}.get(status, "neutral")
            title = f"τ = {result.get('mean_acceptance_length')}: {status}"
        except Retry:
            raise
        except Exception as exc:
            if retry_delay(exc, job.attempts) is not None:
                raise
            message = scrub(f"{type(exc).__name__}: {exc}", self.config.secrets)
            section, conclusion, title, status = render_acceptance_section("error", detail=message), "neutral", "error", "error"
        with queue.lock(f"pr:{job.repo}#{job.number}"):
            client.upsert_sticky(lambda old: update_sticky(old, acceptance=section))
        with queue.lock(f"sha:{job.repo}@{job.head_sha}"):
            publish_check_run(client, ACCEPTANCE_CHECK, job.head_sha, status="completed", conclusion=conclusion,
                                    title=title, summary=section)
        return f"done: acceptance {status}"


def publish_check_run(client: PullRequestClient, name: str, head_sha: str, **kwargs: Any) -> int | None:
    """Create or update a check run. Without the right to write checks (a personal token; GitHub only
    lets Apps and Actions' token write them) this logs one warning and the sticky comment carries the
    result alone, instead of failing the job."""
    from github import GithubException

    try:
        return client.upsert_check_run(name, head_sha, **kwargs)
    except GithubException as exc:
        if exc.status in (403, 404) and retry_delay(exc) is None:
            log.warning("%s: cannot write check run %s (HTTP %s); check runs need a GitHub App "
                        "with checks: write", client.repo_name, name, exc.status)
            return None
        raise


def annotations(report: Any) -> list[dict[str, Any]]:
    """Check-run annotations, one per finding, on the key's line of the repo's config.json."""
    out = []
    for f in report.findings:
        line = f.line or 1
        out.append({
            "path": f.file, "start_line": line, "end_line": line, "annotation_level": _LEVEL[f.severity.value],
            "title": f"{f.rule}: {f.key}"[:255], "message": f.message[:64000],
            "raw_details": f"config.json: {f.raw!r}\nmodel code reads: {f.resolved!r}"[:64000],
        })
    for e in report.errors:
        line = e.line or 1
        out.append({"path": e.file or e.source, "start_line": line, "end_line": line, "annotation_level": "failure",
                    "title": "draftguard could not check this", "message": e.message[:64000]})
    return out


def run_acceptance_subprocess(job: Job, client: PullRequestClient, settings: Any) -> dict[str, Any]:
    """The default acceptance runner: fetch the drafter folder at the head commit through the API
    (Git LFS files as their real bytes, checked against their pointers) and the prompt file the
    settings name, then run ``draftguard accept --format json`` on them (needs the ``runner`` extra
    on the GPU worker)."""
    from draftguard.runner.gpu_job import fetch_prompts, run_acceptance_job  # backend, device, runner options

    drafter = job.data["drafters"][0]
    folder = posixpath.dirname(drafter)
    with tempfile.TemporaryDirectory(prefix="draftguard-accept-") as tmp:
        local = os.path.join(tmp, "drafter")
        os.mkdir(local)
        client.download_folder(folder, job.head_sha, local)
        prompts = fetch_prompts(client, settings, tmp)
        return run_acceptance_job(settings.target, local, settings, prompts=prompts)


def check_pull_request(client: Any, head: str, base: str, relevant: list[tuple[str, str]],
                       forced: bool = False) -> Outcome:
    """The light check of a pull request's changed configs at ``head``, with findings new against
    ``base``. ``client`` is any pull-request client with ``repo_name``, ``read_file(path, ref)`` and
    ``default_branch()``: the GitHub one or the Hub one (``draftguard.bot.hub``), so both bots
    judge and render alike.

    Example::

        outcome = check_pull_request(client, head_sha, base_sha, [("drafter/config.json", "modified")])
        outcome.report.findings, outcome.new, outcome.drafters
    """
    from draftguard.check import resolver

    resolver.hide_torch()
    from draftguard.check.findings import InputError, Report
    from draftguard.check.light import check_snapshot
    from draftguard.snapshot import BadInput, Snapshot

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
    return Outcome(report, new, settings, notes, drafters, files)


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
    from draftguard.check.matrix import check_matrix
    from draftguard.report.comment import matrix_note, render_matrix_section
    from draftguard.snapshot import BadInput

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
    from draftguard.check.drafter import check_drafter, detect_drafter, find_target, load_target
    from draftguard.snapshot import BadInput

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
    from draftguard.settings import MAX_SETTINGS_BYTES, Settings, parse_settings
    from draftguard.snapshot import BadInput

    try:
        data = client.read_file(SETTINGS_FILE, client.default_branch(), max_bytes=MAX_SETTINGS_BYTES)
        return parse_settings(data.decode("utf-8", "replace"), SETTINGS_FILE) if data else Settings()
    except (BadInput, FileTooLarge, UnreadableFile) as exc:
        if notes is not None:
            notes.append(f":no_entry: {SETTINGS_FILE} on the default branch: {esc(str(exc))} (defaults used)")
        return Settings()
