"""The one Hub reader beneath the check: how huggingface_hub's client is made, the reads the checks and
the audit make (a file with its size asked first, safetensors headers, a repo's info, the listing), the
one reading of huggingface_hub's errors, repo ids refused before any request, and one quick question
to the Hub before a command starts reading it. huggingface_hub is imported here, lazily, and nowhere
else on the check path (``hosts/hub.py``'s discussions and the runner's weights download aside).

huggingface_hub retries a failed connection five times with backoff (about 23 s) before it gives up,
and logs two lines per retry. So a command that names Hub repos asks the Hub once first, without
retries (``require_hub``): a Hub out of reach is one line and exit 2 within seconds, or, when the
command can work from the local cache (or has local work too), huggingface_hub's offline mode for the
rest of the process, where a missing file fails at once.

A read names its token: None is the environment's (HF_TOKEN), False is none at all. A repo named by
someone else's file (a pull request's verifier) is read with False, from a cache of its own, so the
bot's token reads only the repos it is meant for.

In: an exception raised by huggingface_hub (or its HTTP stack, httpx2), names a user gave as Hub repo
ids, huggingface_hub's endpoint (``HF_ENDPOINT``), and (repo, file, revision, token, byte limit) to read.
Out: ``hub_problem(exc)`` -> a ``HubProblem`` (kind, one-line message, HTTP status, the wait a 429
asked for) or None; ``hub_api(token)`` -> an ``HfApi``; ``fetch_file`` -> a file's bytes and cached path,
or ``FileTooLarge`` before a byte of it is downloaded; ``file_size``, ``safetensors_metadata``;
``check_repo_id(name)`` -> None or BadInput; ``require_hub(repos)`` -> None, offline mode, or BadInput
(one line: the Hub is out of reach); ``honour_retry_after(cap)``: every later Hub request of the process
waits what an earlier answer's ``Retry-After`` asked; ``retry_after.retry_after_seconds`` reads that header.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from draftguard.errors import BadInput, FileTooLarge, HeaderError
from draftguard.retry_after import Gate, retry_after_seconds

if TYPE_CHECKING:  # huggingface_hub is imported where the Hub is read, not where this module is
    from huggingface_hub import HfApi

# How long the first question to the Hub may take. A refused connection or an unknown host answers
# at once; this bounds a network that drops packets.
PROBE_TIMEOUT = 5.0

# Kinds of HubProblem. The transient ones are worth retrying later; the unread ones got no answer.
TRANSIENT = ("unreachable", "timeout", "rate-limited", "server-error")
UNREAD = ("unreachable", "timeout", "offline")
KINDS = TRANSIENT + ("offline", "gated", "denied", "not-found", "revision-not-found", "entry-not-found",
                     "invalid-id", "http-error")

ID_RULE = "owner/name: letters, digits, '-', '_' and '.', no '--' or '..', at most 96 characters"


@dataclass(frozen=True)
class HubProblem:
    """What a failed Hub read means. ``message`` is one line that says what to do; it never holds a
    URL (it may carry a token) nor the Hub's response body."""

    kind: str
    message: str
    status: int | None = None
    wait: float | None = None  # seconds a 429 asked to wait (Retry-After or RateLimit), when it said
    reason: str = ""  # the HTTP reason phrase ("Forbidden"), never the body

    @property
    def transient(self) -> bool:
        """Worth retrying later: a 429, a 5xx, a timeout or a lost connection."""
        return self.kind in TRANSIENT

    @property
    def unread(self) -> bool:
        """No answer came (offline mode, no network, a timeout): the check goes on without the file."""
        return self.kind in UNREAD

    @property
    def refused(self) -> bool:
        """The Hub answered 401, 403 or 404: the token cannot see the repo (or it is not there)."""
        return self.status in (401, 403, 404)

    @property
    def why_unread(self) -> str:
        """Why a file was not read, short, for a finding that names the file."""
        return "offline mode is on (HF_HUB_OFFLINE)" if self.kind == "offline" else self.message


def hub_problem(exc: BaseException | None, follow: bool = True) -> HubProblem | None:
    """The HubProblem an exception means, following its cause chain (``hf_hub_download`` wraps the
    failed request in ``LocalEntryNotFoundError``; ``follow=False`` reads ``exc`` alone); None when it
    is not a Hub failure.

    Example::

        >>> from huggingface_hub.errors import OfflineModeIsEnabled
        >>> hub_problem(OfflineModeIsEnabled("HF_HUB_OFFLINE=1")).kind, hub_problem(ValueError("x"))
        ('offline', None)
    """
    import httpx2  # httpx2: huggingface_hub's HTTP stack; only a Hub failure reads it
    from huggingface_hub import errors as hf

    seen, current, local_miss = 0, exc, False
    while current is not None and seen < 8:
        local_miss = local_miss or isinstance(current, hf.LocalEntryNotFoundError)
        if isinstance(current, hf.GatedRepoError):
            return _answer(current, "gated", "gated repo: accept its terms on the Hub and set HF_TOKEN")
        if isinstance(current, hf.RepositoryNotFoundError):
            return _answer(current, "not-found", "repo not found on the Hub (deleted, renamed, or private without "
                                                 "HF_TOKEN)")
        if isinstance(current, hf.RevisionNotFoundError):
            return _answer(current, "revision-not-found", "revision not found on the Hub")
        if isinstance(current, hf.RemoteEntryNotFoundError):
            return _answer(current, "entry-not-found", "no such file in the repo at this revision")
        if isinstance(current, hf.HfHubHTTPError) and current.response is not None:
            return _http_problem(current.response)
        if isinstance(current, hf.HFValidationError):
            return HubProblem("invalid-id", f"not a Hub repo id ({ID_RULE})")
        if isinstance(current, hf.OfflineModeIsEnabled):
            return HubProblem("offline", OFFLINE_MESSAGE)
        if isinstance(current, httpx2.TimeoutException):
            return HubProblem("timeout", "the Hub did not answer in time")
        if isinstance(current, (httpx2.NetworkError, httpx2.RemoteProtocolError, httpx2.ProxyError)):
            return HubProblem("unreachable", f"the Hub cannot be reached ({_reason(current)})")
        current = (current.__cause__ or current.__context__) if follow else None
        seen += 1
    if local_miss:  # not in the cache, and no answer read above: offline mode, or no network
        if is_offline():
            return HubProblem("offline", OFFLINE_MESSAGE)
        return HubProblem("unreachable", "the Hub cannot be reached, and the file is not in the local cache")
    return None


OFFLINE_MESSAGE = ("huggingface_hub is in offline mode (HF_HUB_OFFLINE=1), and what is asked is not in the "
                   "local cache")


def _answer(exc: BaseException, kind: str, message: str) -> HubProblem:
    """A HubProblem with the HTTP status and reason phrase of the answer behind ``exc``, if any."""
    response = getattr(exc, "response", None)
    return HubProblem(kind, message, getattr(response, "status_code", None),
                      reason=str(getattr(response, "reason_phrase", "") or "")[:200])


def _http_problem(response) -> HubProblem:
    status, reason = response.status_code, str(getattr(response, "reason_phrase", "") or "")[:200]
    if status == 429:
        wait = _asked_wait(response.headers)
        said = f"; it asks to wait {wait:.0f} s" if wait is not None else ""
        return HubProblem("rate-limited", f"the Hub answered HTTP 429 (rate limited){said}: rerun later, or set HF_TOKEN "
                                          "for a higher limit", status, wait, reason)
    if status >= 500 or status == 408:
        return HubProblem("server-error", f"the Hub answered HTTP {status}: rerun later", status, reason=reason)
    if status in (401, 403):
        return HubProblem("denied", f"the Hub answered HTTP {status}: set HF_TOKEN to a token that can read this "
                                    "repo", status, reason=reason)
    if status == 404:
        return HubProblem("not-found", "the Hub answered HTTP 404 (not found, or private without HF_TOKEN)", status,
                          reason=reason)
    return HubProblem("http-error", f"the Hub answered HTTP {status}", status, reason=reason)


def _asked_wait(headers) -> float | None:
    """Seconds a 429 asks to wait: ``Retry-After`` (seconds or a date), else the ``RateLimit`` header's reset."""
    after = retry_after_seconds(headers.get("retry-after"))
    if after is not None:
        return after
    from huggingface_hub.utils import parse_ratelimit_headers  # huggingface_hub: only a 429 reads it

    info = parse_ratelimit_headers(headers)
    return float(info.reset_in_seconds) if info is not None else None


def _reason(exc: BaseException) -> str:
    """A short reason for a failed connection: the OS's words (connection refused, name not known)
    without the URL, else the error's class."""
    text = str(exc)
    if "] " in text and text.startswith("["):  # "[Errno 111] Connection refused"
        text = text.split("] ", 1)[1]
    text = text.splitlines()[0].strip() if text.strip() else ""
    if not text or "://" in text or len(text) > 80:
        return type(exc).__name__
    return text[0].lower() + text[1:]


# --- names -----------------------------------------------------------------------------------------


def check_repo_id(name: str, what: str = "repo") -> None:
    """Refuse, before any request, a name that cannot be a Hub model repo id (``owner/name``, by
    huggingface_hub's own ``validate_repo_id``). Raises BadInput in one line.

    Example::

        >>> check_repo_id("Qwen/Qwen3-8B")
        >>> check_repo_id("acme/a--b", "drafter")
        Traceback (most recent call last):
        ...
        draftguard.errors.BadInput: acme/a--b: not a folder, and not a Hub repo id for the drafter (owner/name: letters, digits, '-', '_' and '.', no '--' or '..', at most 96 characters)
    """
    if name.count("/") != 1 or name.startswith((".", "/", "~")) or repo_id_problem(name) is not None:
        raise BadInput(f"{name}: not a folder, and not a Hub repo id for the {what} ({ID_RULE})", file=name)


def repo_id_problem(name: str, whole: bool = False) -> str | None:
    """What huggingface_hub's own ``validate_repo_id`` finds wrong with a repo id (its first clause, or
    with ``whole`` its whole message), or None when the Hub would accept it.

    Example::

        >>> repo_id_problem("Qwen/Qwen3-8B"), repo_id_problem("acme/a--b")
        (None, 'Cannot have -- or .. in repo_id')
    """
    # huggingface_hub: ~0.18 s to import; only a Hub name pays it
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError as exc:
        return str(exc) if whole else str(exc).split(":")[0]
    return None


def hub_repos(names: Iterable[str | None], revision: str | None = None, what: str = "target", *,
              strict: bool = False) -> list[tuple[str, str | None]]:
    """The (repo id, revision) pairs among names a user gave, each ``owner/name[@revision]`` that is
    not a local path; a name shaped like one that the Hub would refuse raises BadInput before any
    request. ``strict``: every name that is not a local path must be a Hub repo id (else BadInput).

    Example::

        >>> hub_repos(["examples/qwen3-swa-drafter", "Qwen/Qwen3-8B@v1", "acme/x"], "main")
        [('Qwen/Qwen3-8B', 'v1'), ('acme/x', 'main')]
    """
    out: list[tuple[str, str | None]] = []
    for name in names:
        if not name or os.path.exists(name):
            continue
        repo, _, rev = name.partition("@")
        looks_local = repo.startswith((".", "/", "~")) or repo.endswith(".json") or repo.count("/") != 1
        if looks_local and not strict:
            continue  # the snapshot says "no such file or folder" itself, without a request
        check_repo_id(repo, what)
        out.append((repo, rev or revision))
    return out


# --- the first question ------------------------------------------------------------------------------


def _hf() -> Any:
    """huggingface_hub's constants, read when a command reaches for the Hub (HF_ENDPOINT, HF_HUB_OFFLINE)."""
    from huggingface_hub import constants  # huggingface_hub: ~0.18 s to import; only a Hub read pays it

    return constants


def endpoint() -> str:
    return _hf().ENDPOINT.rstrip("/")


_CARRIED = ("ENDPOINT", "HUGGINGFACE_CO_URL_TEMPLATE", "HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY")


def hub_constants() -> dict[str, Any]:
    """This process's view of the Hub (huggingface_hub's constants, which it reads from the
    environment once, at import), for a bounded child to take over (``use_hub_constants``): the
    child's huggingface_hub was imported by a forkserver, maybe under another environment. {} when
    this process has not imported huggingface_hub (the child's import then read the same environment)."""
    import sys  # stdlib: a question about what this process imported

    constants = sys.modules.get("huggingface_hub.constants")
    return {name: getattr(constants, name) for name in _CARRIED} if constants is not None else {}


def use_hub_constants(values: dict[str, Any]) -> None:
    """Take over a caller's view of the Hub (``hub_constants``)."""
    if values:
        constants = _hf()
        for name, value in values.items():
            setattr(constants, name, value)


def is_offline() -> bool:
    """Whether huggingface_hub is in offline mode (HF_HUB_OFFLINE=1 or TRANSFORMERS_OFFLINE=1)."""
    return _hf().is_offline_mode()


def probe_hub(timeout: float = PROBE_TIMEOUT) -> HubProblem | None:
    """Ask the Hub once, without retries: None when it answers (with any HTTP status) or when
    huggingface_hub is in offline mode (the user's choice), else why it cannot be reached."""
    from huggingface_hub.utils import get_session  # the client's own session (proxies, headers)

    if is_offline():
        return None
    try:
        get_session().head(endpoint() + "/", timeout=timeout, follow_redirects=False)
    except Exception as exc:  # any answer is an answer; only a failure to get one matters here
        problem = hub_problem(exc)
        if problem is not None and problem.kind in ("unreachable", "timeout"):
            return problem
    return None


def go_offline() -> None:
    """huggingface_hub's offline mode for the rest of this process and its children: files come from
    the local cache, and a missing one fails at once instead of after retries."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    _hf().HF_HUB_OFFLINE = True


def unreachable_error(problem: HubProblem, cache: bool = True) -> BadInput:
    """What a command raises when the Hub is out of reach: what happened, and the fix as its hint
    (``cache``: whether the command can work from the local cache instead)."""
    waited = "did not answer within %.0f s" % PROBE_TIMEOUT if problem.kind == "timeout" else \
        problem.message.replace("the Hub cannot be reached ", "cannot be reached ")
    what = f"the Hub at {endpoint()} {waited}" + ("" if cache else "; nothing was checked")
    fix = "check the network or HF_ENDPOINT" + (", or set HF_HUB_OFFLINE=1 to work from the local cache"
                                                 if cache else "")
    return BadInput(what, hint=fix)


def unreachable_line(problem: HubProblem, cache: bool = True) -> str:
    """The one line a command prints when the Hub is out of reach: ``unreachable_error``'s text."""
    return str(unreachable_error(problem, cache))


def require_hub(repos: Iterable[tuple[str, str | None]], *, need_all: bool = True,
                local_work: bool = False) -> None:
    """Before a command's first Hub read of ``repos`` ((repo id, revision) pairs): ask the Hub once.
    When it is out of reach, go offline and let the command work from the local cache if it can:
    every repo's config.json is cached (``need_all``; else any one of them), or the command has
    local work to do (``local_work``), whose Hub parts then fail at once, each in its own line.
    Otherwise raise BadInput in one line. Nothing is asked when ``repos`` is empty."""
    repos = list(repos)
    if not repos:
        return
    honour_retry_after()
    problem = probe_hub()
    if problem is None:
        return
    from huggingface_hub import try_to_load_from_cache  # huggingface_hub: only an unreachable Hub reads it

    cached = [isinstance(try_to_load_from_cache(repo, "config.json", revision=rev), str) for repo, rev in repos]
    if local_work or (all(cached) if need_all else any(cached)):
        go_offline()
        return
    raise unreachable_error(problem)


# --- the client and the reads ---------------------------------------------------------------------------


def hub_api(token: str | bool | None = None, endpoint: str | None = None) -> "HfApi":
    """The one way a huggingface_hub client is made. ``token``: None reads with the environment's
    (HF_TOKEN), False with none, a string with that one. Made when asked, never at import: the
    endpoint (HF_ENDPOINT) is read then."""
    from huggingface_hub import HfApi  # huggingface_hub: ~0.18 s to import; the one client factory

    return HfApi(endpoint=endpoint, token=token)


def read_options(token: bool | None) -> dict[str, Any]:
    """huggingface_hub keyword arguments for a read with ``token`` (Snapshot.token). An anonymous
    read also has its own cache: a file once fetched with the token is never served from the cache
    to a read without it (a revision named by its sha is served from the cache without a request).

    Example::

        >>> read_options(None)
        {}
        >>> sorted(read_options(False))
        ['cache_dir', 'token']
    """
    if token is not False:
        return {}
    return {"token": False, "cache_dir": str(Path(_hf().HF_HUB_CACHE) / "draftguard-anonymous")}


def file_size(repo_id: str, name: str, revision: str | None, token: bool | None = None) -> int | None:
    """The size of a Hub file, asked before downloading it (a HEAD), or None when it cannot be asked
    (offline, or an error the download itself will then report, or use the cache for)."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url  # the HEAD of one file

    if is_offline():
        return None
    try:
        meta = get_hf_file_metadata(hf_hub_url(repo_id, name, revision=revision), token=token)
    except Exception:  # sorted out by the download that follows
        return None
    return meta.size


def fetch_file(repo_id: str, name: str, revision: str | None, *, limit: int, token: bool | None = None,
               size: int | None = None, shown: str | None = None) -> tuple[bytes, Path]:
    """A Hub file's bytes (and its path in huggingface_hub's cache), its size asked first: a HEAD,
    unless the caller knows it from a listing (``size``). Over ``limit`` raises FileTooLarge with
    nothing downloaded; a file the HEAD did not size is measured once downloaded, and only ``limit``
    bytes of it are read. huggingface_hub's errors are raised as they come (``hub_problem`` reads them).

    Raises:
        FileTooLarge: The file is over ``limit`` bytes (``shown`` names it).
    """
    from huggingface_hub import hf_hub_download  # the download itself, after the size is known

    shown = shown or f"{repo_id}@{revision or 'main'}/{name}"
    size = size if size is not None else file_size(repo_id, name, revision, token)
    if size is not None and size > limit:
        raise FileTooLarge(shown, size, limit)
    path = Path(hf_hub_download(repo_id, name, revision=revision, **read_options(token)))
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(shown, path.stat().st_size, limit, downloaded=True)
    return data, path


def safetensors_metadata(repo_id: str, revision: str | None, token: bool | None = None) -> Any:
    """huggingface_hub's ``get_safetensors_metadata`` (HTTP range requests: headers, never weights),
    without its progress bars; None when the repo has no safetensors checkpoint. Raises HeaderError
    for a header huggingface_hub cannot parse, and huggingface_hub's errors as they come."""
    from huggingface_hub import errors as hf  # its parse errors are told apart here
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    quiet = are_progress_bars_disabled()
    disable_progress_bars()  # get_safetensors_metadata draws a bar per shard on stderr
    try:
        return hub_api(token).get_safetensors_metadata(repo_id, revision=revision)
    except hf.NotASafetensorsRepoError:
        return None
    except hf.SafetensorsParsingError as exc:
        raise HeaderError(str(exc)) from None
    finally:
        if not quiet:
            enable_progress_bars()


def quiet_logs() -> None:
    """huggingface_hub's warnings off (its retries print a line per 429 through a progress bar)."""
    from huggingface_hub.utils import logging as hf_logging  # the client's own logger

    hf_logging.set_verbosity_error()


def fetched_files(items: Iterable[Any], ignore_patterns: list[str], key: Any) -> list[Any]:
    """The items a ``snapshot_download(ignore_patterns=...)`` would fetch, by huggingface_hub's own
    pattern rules (``filter_repo_objects``); ``key`` gives an item's path."""
    from huggingface_hub.utils import filter_repo_objects  # huggingface_hub: the reader's import

    return list(filter_repo_objects(items, ignore_patterns=ignore_patterns, key=key))


def file_operation(path: str, data: bytes) -> Any:
    """One file to add in a Hub commit (``HfApi.create_commit``'s ``CommitOperationAdd``)."""
    from huggingface_hub import CommitOperationAdd  # with the client that commits it

    return CommitOperationAdd(path, data)


# --- Retry-After, on every request ----------------------------------------------------------------
# huggingface_hub honours Retry-After only inside its own retry loops, and its file HEADs do not
# retry: a HEAD answered 429 went straight to the download's own HEAD, six requests in a second on
# one file (issue 32). A hook on its shared client remembers the wait and holds every later request.


_GATE: list[Gate] = []


def share_budget(budget: Any | None) -> None:
    """From now on in this process, every Hub request also draws from ``budget`` (a
    ``retry_after.SharedBudget``: the audit's workers on one Redis share the Hub's rate and its
    waits); None: this process's own gate alone."""
    honour_retry_after(_GATE[0].cap if _GATE else 120.0)
    _GATE[0].shared = budget


def honour_retry_after(cap: float = 120.0) -> None:
    """From now on in this process, every request of huggingface_hub's shared client (API calls, file
    HEADs, downloads, range reads) to a host that answered 429 or 503 with ``Retry-After`` waits until
    that time (at most ``cap`` seconds), in every thread. For the CLI and the audit, which wait in
    place; the bot's workers do not wait: a Hub fault reschedules the job with the asked delay."""
    if _GATE:
        _GATE[0].cap = cap
        return
    from huggingface_hub import set_client_factory  # huggingface_hub: its one client, made by a factory
    from huggingface_hub.utils._http import default_client_factory  # its defaults (offline mode, ids)

    gate = Gate(cap)
    _GATE.append(gate)
    def factory() -> Any:
        client = default_client_factory()
        hooks = client.event_hooks
        client.event_hooks = {"request": [*hooks.get("request", []), gate.hold],
                              "response": [*hooks.get("response", []), gate.note]}
        return client

    set_client_factory(factory)
