"""Auditing repos: fetch only what the checks read, run the light check and the drafter rules.

Per repo the audit asks the Hub for the repo's info (one API call: the commit sha, the file list
with sizes, the model card's ``base_model``), then ``config.json`` at that commit through
huggingface_hub's cache, and the files beside it that the repo rules read (generation and tokenizer
configs, the safetensors index, a header by range reads where there is no index), each only when the
listing names it, all within a per-repo byte budget (``beside``; what the budget leaves unread is
a note on the record). Drafters also read their ``.draftguard.yml``, their target's config and
tokenizer files, and safetensors headers (HTTP range requests, never weights), through the drafter
rules' own readers. Reading at the commit sha keeps every file of one check at one commit, and lets
a rerun take unchanged files from the cache without asking the Hub again. On a rerun a repo with a
previous record is first asked its commit alone (``expand=["sha"]``), and skipped when unchanged;
a repo whose commit the Hub's listing already gave was compared before it got here (``run.py``).
A gated repo's record keeps the commit its info gave, though its files are refused.

Every failure becomes the repo's own ``RepoError``; transient ones (429, 5xx, timeouts) are retried
first, waiting what the Hub's ``Retry-After`` asks.

In: ``audit_chunk(refs, options)``: a chunk of ``RepoRef`` and the ``AuditOptions`` (versions,
retries, the previous records).
Out: one (``RepoRecord``, skipped) per repo, in order; an unchanged repo's previous record comes back
with skipped True. Versions that could not run are added to ``options.version_problems``. When the
Hub as a whole goes out of reach, ``options.hub_gone`` says so and the repos not yet asked get no
record.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from draftguard.audit.beside import read_beside
from draftguard.audit.inputs import RepoRef
from draftguard.audit.record import TRANSIENT, Regression, RepoError, RepoRecord
from draftguard.audit.versions import engine_regressions
from draftguard.check import matrix
from draftguard.check.drafter import check_drafter, detect_drafter, find_target, load_target
from draftguard.check.engines import check_engines
from draftguard.check.findings import Finding, TargetResult
from draftguard.check.policy import apply_findings
from draftguard.check.run import check
from draftguard.errors import FileTooLarge, RepoFailure
from draftguard.fix import config_checker, fix_text
from draftguard.hosts.hub import hub_retry_delay
from draftguard.hub_access import fetch_file, honour_retry_after, hub_api, hub_problem, probe_hub, unreachable_line
from draftguard.settings import MAX_SETTINGS_BYTES, Settings, parse_settings
from draftguard.snapshot import CONFIG_NAME, MAX_CONFIG_BYTES, SETTINGS_NAME, BadInput, Snapshot

T = TypeVar("T")
LFS_POINTER = b"version https://git-lfs.github.com/spec/"
BASE_MODEL_ORIGIN = "the model card's base_model"


@dataclass
class AuditOptions:
    """How each repo is audited. ``versions`` are the transformers versions, oldest first."""

    versions: list[str]
    host_version: str
    full: bool = False
    retries: int = 4
    max_wait: float = 120.0  # the longest a single Retry-After or backoff is honoured
    previous: dict[str, RepoRecord] = field(default_factory=dict)
    # --engine: ``check.engines.EngineSpec``s whose light tier judges each repo (DG200-DG205).
    engines: list[Any] = field(default_factory=list)
    fetch_workers: int = 1  # repos of one chunk fetched at once
    # Versions whose resolver could not run (install failed, no network), with why; filled as chunks run.
    version_problems: dict[str, str] = field(default_factory=dict)
    sleep: Callable[[float], None] = time.sleep
    # Set when the Hub as a whole went out of reach during the run (``hub_gone``): the line to say.
    hub_gone: str | None = None

    @property
    def host_only(self) -> bool:
        return self.versions == [self.host_version]

    @property
    def engine_keys(self) -> list[str]:
        """The engines as records keep them ("vllm==0.32.0", sorted), so a rerun with others checks again."""
        return sorted(f"{e.name}=={e.version}" for e in self.engines)


@dataclass
class Fetched:
    """A repo's info and its config.json snapshot at one commit."""

    ref: RepoRef
    sha: str
    snapshot: Snapshot
    base_model: str | None
    settings: Settings | Exception | None = None  # the repo's .draftguard.yml (or why it cannot be read)
    notes: list[str] = field(default_factory=list)  # what the byte budget left unread of the repo's files


# --- errors ----------------------------------------------------------------------------------------


def classify(exc: BaseException) -> RepoFailure | None:
    """The RepoFailure an exception raised by huggingface_hub (or the checks) means, following the cause
    chain (the Hub's errors are read by ``hub_access.hub_problem``, as every surface reads them); None
    when it is not one we know (a bug, re-raised by the caller).

    Example::

        >>> classify(BadInput("acme/x@main/config.json:3:1: invalid JSON: Expecting value")).kind
        'invalid-config'
    """
    seen, current = 0, exc
    while current is not None and seen < 6:
        if isinstance(current, RepoFailure):
            return current
        current = current.__cause__ or current.__context__
        seen += 1
    problem = hub_problem(exc)
    if problem is not None:
        kind = _AUDIT_KIND.get(problem.kind, problem.kind)
        message = problem.message + (" (after retries)" if problem.transient else "")
        return RepoFailure(kind, message)
    if isinstance(exc, BadInput):
        return RepoFailure("invalid-config", str(exc))
    return None


# hub_access's kinds that the audit's records name otherwise (record.py's ACCESS and TRANSIENT).
_AUDIT_KIND = {"denied": "gated", "offline": "unreachable", "entry-not-found": "http-error",
               "invalid-id": "http-error"}


def with_retries(step: Callable[[], T], options: AuditOptions, attempts: list[int]) -> T:
    """Run ``step``, retrying transient Hub failures (honouring Retry-After up to ``max_wait``).
    Raises RepoFailure when it still fails, or for a permanent failure; ``attempts[0]`` counts tries."""
    honour_retry_after(options.max_wait)  # every request of the process, HEADs included, waits what a 429 asked
    attempt = 0
    while True:
        attempt += 1
        attempts[0] += 1
        try:
            return step()
        except Exception as exc:
            failure = classify(exc)
            if failure is None:
                raise
            if failure.kind not in TRANSIENT or attempt > options.retries:
                raise failure from None
            if failure.kind in ("unreachable", "timeout") and hub_gone(options):
                raise failure from None  # the Hub itself is gone: retrying this repo cannot help
            delay = hub_retry_delay(exc, attempt, base=0.5, cap=options.max_wait) or 1.0
            options.sleep(min(delay, options.max_wait))


def hub_gone(options: AuditOptions) -> bool:
    """Whether the Hub as a whole is out of reach (asked once, without retries, after a repo could not
    reach it). Then ``options.hub_gone`` holds the one line to say, and the audit stops: the repos
    not yet asked are left for the next run, not recorded as errors one by one."""
    if options.hub_gone is None:
        problem = probe_hub()
        if problem is not None:
            options.hub_gone = unreachable_line(problem, cache=False).replace("; nothing was checked", "")
    return options.hub_gone is not None


# --- fetching --------------------------------------------------------------------------------------


def fetch_repo(ref: RepoRef) -> Fetched:
    """The repo's info and config.json at its current commit. Raises RepoFailure (no config,
    oversized, LFS pointer) or huggingface_hub's errors (classified by the caller)."""
    info = hub_api().model_info(ref.repo, revision=ref.revision, files_metadata=True)
    sha = info.sha or ref.revision or "main"
    sizes = {s.rfilename: s.size for s in (info.siblings or [])}
    if CONFIG_NAME not in sizes:
        raise RepoFailure("no-config", "the repo has no config.json at this revision", sha)
    try:  # the listing sized it: no HEAD, and nothing downloaded when it is over the limit
        data, _ = fetch_file(ref.repo, CONFIG_NAME, sha, limit=MAX_CONFIG_BYTES, size=sizes[CONFIG_NAME])
    except FileTooLarge as exc:
        said = "" if exc.downloaded else f" {exc.size / 1e6:.1f} MB,"
        raise RepoFailure("oversized", f"config.json is{said} over the {MAX_CONFIG_BYTES // 2**20} MB a config can be"
                                       + ("" if exc.downloaded else "; not downloaded"), sha) from None
    except Exception as exc:  # a gated repo lists its commit but refuses its files: keep the commit
        failure = classify(exc)
        if failure is None:
            raise
        raise RepoFailure(failure.kind, failure.message, sha) from exc
    if data.startswith(LFS_POINTER):
        raise RepoFailure("lfs-pointer", "config.json is a Git LFS pointer, not the file: the file was committed "
                                         "without `git lfs` set up. Fix: push the real config.json", sha)
    at = f"{ref.repo}@{ref.revision or 'main'}"
    # The files beside config.json the repo rules read: only what the listing names, sized by it.
    extra = read_beside(ref.repo, sha, data, sizes)
    files = {CONFIG_NAME: data, **extra.files}
    snapshot = Snapshot(source=ref.repo, revision=sha, files=files, display={name: f"{at}/{name}" for name in files},
                        local_dir=None, is_hub=True)
    settings = None  # the repo's own rules and exceptions, applied as every surface applies them
    if SETTINGS_NAME in sizes:
        try:
            text, _ = fetch_file(ref.repo, SETTINGS_NAME, sha, limit=MAX_SETTINGS_BYTES, size=sizes[SETTINGS_NAME])
            settings = parse_settings(text.decode("utf-8", "replace"), f"{ref.repo}@{ref.revision or 'main'}/{SETTINGS_NAME}")
        except (BadInput, FileTooLarge) as exc:  # the config is still checked; the record says why these were not
            settings = exc
    return Fetched(ref, sha, snapshot, _base_model(info), settings, extra.notes)


def current_sha(ref: RepoRef) -> str | None:
    """The commit the repo's revision points at now: one small request (``expand=["sha"]``)."""
    return hub_api().model_info(ref.repo, revision=ref.revision, expand=["sha"]).sha


def _base_model(info: Any) -> str | None:
    card = getattr(info, "card_data", None)
    value = card.get("base_model") if card is not None else None
    if isinstance(value, list):
        value = value[0] if len(value) == 1 else None  # a merge of several bases names no one target
    if not isinstance(value, str):
        return None
    try:
        return RepoRef.parse(value).key
    except ValueError:
        return None  # not a Hub repo id; a card must never make the audit read the host's files


# --- checking --------------------------------------------------------------------------------------


def drafter_findings(fetched: Fetched, result: TargetResult, record: RepoRecord,
                     cache: dict[str, Any]) -> list[Finding]:
    """The drafter rules for a fetched repo, against its target: the drafter's own config (the
    speculators verifier) or its .draftguard.yml, else the model card's ``base_model``. Only Hub
    targets are read. Raises BadInput (or huggingface_hub errors) when the target cannot be read."""
    snapshot = fetched.snapshot
    raw = snapshot.load_json()
    fmt = detect_drafter(raw)
    if fmt is None:
        return []
    record.drafter = fmt.kind
    where = find_target(snapshot, fmt, None)
    name, origin = (where[0], where[1]) if where else (fetched.base_model, BASE_MODEL_ORIGIN)
    target = None
    if name:
        record.target = {"name": name, "origin": origin}
        target = cache.get(name)
        if target is None:
            # Named by the audited repo's own files or card, not by the auditor: read without the token,
            # so a private repo's facts never reach audit.md or a discussion (B1 of issue 25).
            target = load_target(name, origin, allow_local=False, anonymous=True)
            cache[name] = target
    # A result from the version matrix has no values: check_drafter resolves the layers here.
    return check_drafter(snapshot, result, target_model=target)


def engine_findings(fetched: Fetched, result: TargetResult, record: RepoRecord, cache: dict[str, Any],
                    options: AuditOptions) -> list[Finding]:
    """The engine findings (light tier) of a fetched repo; a drafter is judged against the target
    ``drafter_findings`` read (anonymously), never one read again with the auditor's token."""
    if not options.engines:
        return []
    target = cache.get(record.target["name"]) if record.drafter and record.target else None
    found, _ = check_engines(fetched.snapshot, result, options.engines, target_model=target)
    if len({spec.name for spec in options.engines}) < len(options.engines):  # two releases of one engine: compared
        record.regressions.extend(engine_regressions(
            {spec: check_engines(fetched.snapshot, result, [spec], target_model=target)[0] for spec in options.engines}))
    return found


def audit_chunk(refs: list[RepoRef], options: AuditOptions) -> list[tuple[RepoRecord, bool]]:
    """Audit repos (no repo id twice); returns (record, skipped) per repo, in order. A repo whose
    commit, versions and draftguard version match its previous record is skipped (unless
    ``options.full``), and its previous record is returned. Once the Hub is gone
    (``options.hub_gone``), the repos not yet asked are left out."""
    out: dict[int, tuple[RepoRecord, bool]] = {}
    todo: list[tuple[int, RepoRecord, Fetched, list[int], float]] = []

    def fetch(index: int, ref: RepoRef) -> None:
        def unchanged(sha: str | None) -> bool:
            previous = options.previous.get(ref.key)
            if previous is None or options.full or not previous.same_inputs(sha, options.versions,
                                                                             options.engine_keys):
                return False
            out[index] = (previous, True)
            return True

        if options.hub_gone:
            return  # not asked, not recorded: the next run checks it
        started = time.monotonic()
        record = RepoRecord(repo=ref.key, repo_id=ref.repo, revision=ref.revision, versions=list(options.versions),
                            engines=options.engine_keys)
        attempts = [0]
        if ref.known_sha is None and options.previous.get(ref.key) is not None and not options.full:
            # A rerun asks the commit alone first (a few bytes, not the file list), and stops there
            # when it is the one checked before.
            attempts[0] += 1
            try:
                if unchanged(current_sha(ref)):
                    return
            except Exception:  # not retried here: the full read below retries, and records what went wrong
                pass
        try:
            fetched = with_retries(lambda: fetch_repo(ref), options, attempts)
        except Exception as exc:  # one repo's failure, or a bug on one repo, never stops the audit
            failure = _failure_of(exc)
            if options.hub_gone and failure.kind in TRANSIENT:
                return  # the Hub is gone, not this repo: left for the next run
            if unchanged(failure.sha):  # e.g. still no config.json at the same commit
                return
            record.errors.append(_recorded(failure))
            record.sha = failure.sha
            record.attempts, record.seconds = attempts[0], time.monotonic() - started
            out[index] = (record, False)
            return
        if unchanged(fetched.sha):
            return
        record.sha = fetched.sha
        record.notes = list(fetched.notes)
        todo.append((index, record, fetched, attempts, started))

    if options.fetch_workers > 1 and len(refs) > 1:
        with ThreadPoolExecutor(max_workers=options.fetch_workers, thread_name_prefix="audit-fetch") as pool:
            list(pool.map(fetch, range(len(refs)), refs))
    else:
        for index, ref in enumerate(refs):
            fetch(index, ref)
    todo.sort(key=lambda item: item[0])

    try:
        results = _judge([f.snapshot for _, _, f, _, _ in todo], options)
    except Exception as exc:  # a bug on one config must not lose the chunk's other records
        results = [(None, [_recorded(_failure_of(exc))], [])] * len(todo)
    targets: dict[str, Any] = {}
    for (index, record, fetched, attempts, started), (result, errors, regressions) in zip(todo, results):
        record.errors.extend(errors)
        record.regressions.extend(regressions)
        if result is not None:
            findings = list(result.findings)
            try:
                findings += with_retries(lambda: drafter_findings(fetched, result, record, targets), options, attempts)
            except Exception as exc:
                failure = _failure_of(exc)
                kind = failure.kind if failure.kind in ("internal", *TRANSIENT) else "target"
                record.errors.append(RepoError(kind, f"drafter rules not run: {failure.message}"))
            try:
                findings += engine_findings(fetched, result, record, targets, options)
            except Exception as exc:  # a bug on one config: recorded, and the audit goes on
                record.errors.append(RepoError("internal", f"engine rules not run: {_failure_of(exc).message}"))
            try:
                if isinstance(fetched.settings, Exception):
                    raise fetched.settings
                findings, record.silenced = apply_findings(findings, fetched.settings)
            except (BadInput, FileTooLarge) as exc:
                record.errors.append(RepoError("invalid-config", f"{SETTINGS_NAME} not applied: {exc}"))
            record.findings = [f.to_json() for f in _sorted(findings)]
            record.fix = proven_fix(fetched.snapshot, findings, options.host_version)
        record.attempts, record.seconds = attempts[0], time.monotonic() - started
        out[index] = (record, False)
    return [out[i] for i in range(len(refs)) if i in out]


def proven_fix(snapshot: Snapshot, findings: list[Finding], version: str | None) -> str | None:
    """The diff that ends the config rules' errors of a failing repo, each edit checked again under the
    installed transformers (``draftguard fix``); None when there is none. Only failing repos pay it."""
    errors = {(f.rule, f.key) for f in findings if f.severity.value == "error" and not f.rule.startswith("DG1")}
    if not errors:
        return None
    try:
        text = snapshot.files[CONFIG_NAME].decode("utf-8")
        shown = snapshot.path_of(CONFIG_NAME)
        check = config_checker(shown, source=snapshot.source, revision=snapshot.revision, version=version)
        outcome = fix_text(text, check, file=shown, only=errors)
    except (BadInput, UnicodeDecodeError):
        return None
    return outcome.diff() if outcome.changed else None


def _failure_of(exc: BaseException) -> RepoFailure:
    failure = classify(exc)
    if failure is None:
        failure = RepoFailure("internal", f"{type(exc).__name__}: {exc} (a bug in draftguard: rerun this repo with "
                                          "`draftguard check` and DRAFTGUARD_DEBUG=1, and report it)")
    return failure


def _recorded(failure: RepoFailure) -> RepoError:
    """The repo's error as its record keeps it (its text: the message, then any hint)."""
    return RepoError(failure.kind, str(failure))


def _sorted(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=lambda f: (-f.severity.rank, f.rule, f.key))


Judged = tuple[TargetResult | None, list[RepoError], list[Regression]]


def _judge(snapshots: list[Snapshot], options: AuditOptions) -> list[Judged]:
    """The light check of each snapshot: in this process for the installed transformers alone, else
    under every version through the version matrix (one resolver process per version per chunk)."""
    if not snapshots:
        return []
    if options.host_only:
        out: list[Judged] = []
        for snapshot in snapshots:
            try:
                # The drafter and engine rules come after, per repo, retried as Hub reads are, on its values.
                report = check([snapshot], version=options.host_version, drafter_rules=False, values=True)
            except Exception as exc:  # a bug on this config: recorded, and the audit goes on
                out.append((None, [_recorded(_failure_of(exc))], []))
                continue
            out.append((report.targets[0] if report.targets else None,
                        [_config_error(e.message) for e in report.errors], []))
        return out
    return _judge_versions(snapshots, options)


# A config no built-in transformers class reads (no model_type: sentence-transformers modules,
# diffusers; remote code, which the audit never runs; a model_type newer than this transformers) is
# not checkable here, and not its owner's fault.
_UNSUPPORTED = ("has no `model_type`", "ships its own config class", "is unknown to transformers")
# The resolver's advice for a repo's own config class names draftguard check's flag; the audit has none.
_CHECK_ADVICE = re.compile(r"Pass --trust-remote-code\b[^.]*\.")
AUDIT_REMOTE_CODE = ("The audit never runs a repo's own code; if you trust this repo, "
                     "`draftguard check --trust-remote-code` on it runs its config class.")


def _config_error(text: str) -> RepoError:
    if "invalid JSON" in text or "not UTF-8" in text or "top level must be" in text:
        return RepoError("invalid-config", text)
    if any(sign in text for sign in _UNSUPPORTED):
        return RepoError("unsupported", _CHECK_ADVICE.sub(AUDIT_REMOTE_CODE, text))
    return RepoError("config-rejected", text)


def _judge_versions(snapshots: list[Snapshot], options: AuditOptions) -> list[Judged]:
    report = check(snapshots, versions=options.versions, drafter_rules=False, host_in_process=True)
    ok = [c.version for c in report.matrix.columns if c.status == matrix.OK]
    for column in report.matrix.columns:
        if column.status != matrix.OK:
            options.version_problems[column.version] = column.detail or column.status
    by_source = {t.source: t for t in report.targets}
    errors: dict[str, list[str]] = {}
    for error in report.errors:
        errors.setdefault(error.source, []).append(error.message)
    out: list[Judged] = []
    for snapshot in snapshots:
        result = by_source.get(snapshot.source)
        repo_errors = [_config_error(m) for m in errors.get(snapshot.source, [])]
        regressions = []
        if result is not None:
            for finding in result.findings:
                if finding.severity.value == "info":
                    continue  # renames and intended changes differ between releases by design
                present = finding.versions or ok
                absent = [v for v in ok if v not in present]
                if absent:
                    regressions.append(Regression(
                        finding.rule, finding.key, finding.severity.value, list(present), absent,
                        f"{finding.rule} on {finding.key} under transformers {', '.join(present)}, not under "
                        f"{', '.join(absent)}"))
        kept = []
        for error in repo_errors:
            failed = versions_named(error.message, options.versions)
            others = [v for v in ok if v not in failed]
            if not failed or not others or result is None:
                kept.append(error)
                continue
            if error.kind == "unsupported":
                # An older transformers that does not know a newer model: worth saying, but the repo
                # was checked under the others and its config is not at fault.
                regressions.append(Regression(
                    "unsupported", "model_type", "warning", failed, others,
                    f"transformers {', '.join(failed)} cannot read this config; {', '.join(others)} can"))
                continue
            kept.append(error)
            regressions.append(Regression(
                error.kind, "config.json", "error", failed, others,
                f"config.json is rejected under transformers {', '.join(failed)}, and resolves under "
                f"{', '.join(others)}"))
        out.append((result, kept, regressions))
    return out


def versions_named(message: str, versions: list[str]) -> list[str]:
    """The versions a matrix message's "under transformers A to C: ..." names, oldest first.

    Example::

        >>> versions_named("x: under transformers 4.52.4 to 5.24.0: bad", ["4.52.4", "4.57.1", "5.24.0"])
        ['4.52.4', '4.57.1', '5.24.0']
        >>> versions_named("x: under transformers 5.24.0: bad", ["4.52.4", "5.24.0"])
        ['5.24.0']
    """
    match = re.search(r"under transformers (.+?): ", message)
    if not match:
        return []
    text, named = match.group(1), set()
    for start, end in re.findall(r"(\S+) to (\S+?)(?:,|$| and)", text):
        if start in versions and end in versions:
            named.update(versions[versions.index(start): versions.index(end) + 1])
    named.update(v for v in versions if re.search(rf"(^|[ ,]){re.escape(v)}($|[ ,])", text))
    return [v for v in versions if v in named]
