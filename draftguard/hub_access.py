"""Reaching the Hugging Face Hub: the one reading of huggingface_hub's errors, repo ids refused before
any request, and one quick question to the Hub before a command starts reading it.

huggingface_hub retries a failed connection five times with backoff (about 23 s) before it gives up,
and logs two lines per retry. So a command that names Hub repos asks the Hub once first, without
retries (``require_hub``): a Hub out of reach is one line and exit 2 within seconds, or, when the
command can work from the local cache (or has local work too), huggingface_hub's offline mode for the
rest of the process, where a missing file fails at once.

In: an exception raised by huggingface_hub (or its HTTP stack, httpx2), names a user gave as Hub repo
ids, and huggingface_hub's endpoint (``HF_ENDPOINT``).
Out: ``hub_problem(exc)`` -> a ``HubProblem`` (kind, one-line message, HTTP status, the wait a 429
asked for) or None; ``check_repo_id(name)`` -> None or BadInput; ``require_hub(repos)`` -> None,
offline mode, or BadInput (one line: the Hub is out of reach).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable

from draftguard.errors import BadInput

# How long the first question to the Hub may take. A refused connection or an unknown host answers
# at once; this bounds a network that drops packets.
PROBE_TIMEOUT = 5.0

# Kinds of HubProblem. The transient ones are worth retrying later.
TRANSIENT = ("unreachable", "timeout", "rate-limited", "server-error")
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

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT


def hub_problem(exc: BaseException | None) -> HubProblem | None:
    """The HubProblem an exception means, following its cause chain (``hf_hub_download`` wraps the
    failed request in ``LocalEntryNotFoundError``); None when it is not a Hub failure.

    Example::

        >>> from huggingface_hub.errors import OfflineModeIsEnabled
        >>> hub_problem(OfflineModeIsEnabled("HF_HUB_OFFLINE=1")).kind, hub_problem(ValueError("x"))
        ('offline', None)
    """
    import httpx2  # httpx2: huggingface_hub's HTTP stack; only a Hub failure reads it
    from huggingface_hub import errors as hf

    seen, current = 0, exc
    while current is not None and seen < 8:
        if isinstance(current, hf.GatedRepoError):
            return HubProblem("gated", "gated repo: accept its terms on the Hub and set HF_TOKEN", _status(current))
        if isinstance(current, hf.RepositoryNotFoundError):
            return HubProblem("not-found", "repo not found on the Hub (deleted, renamed, or private without "
                                           "HF_TOKEN)", _status(current))
        if isinstance(current, hf.RevisionNotFoundError):
            return HubProblem("revision-not-found", "revision not found on the Hub", _status(current))
        if isinstance(current, hf.RemoteEntryNotFoundError):
            return HubProblem("entry-not-found", "no such file in the repo at this revision", _status(current))
        if isinstance(current, hf.HfHubHTTPError) and current.response is not None:
            return _http_problem(current.response)
        if isinstance(current, hf.HFValidationError):
            return HubProblem("invalid-id", f"not a Hub repo id ({ID_RULE})")
        if isinstance(current, hf.OfflineModeIsEnabled):
            return HubProblem("offline", "huggingface_hub is in offline mode (HF_HUB_OFFLINE=1), and what is asked "
                                         "is not in the local cache")
        if isinstance(current, httpx2.TimeoutException):
            return HubProblem("timeout", "the Hub did not answer in time")
        if isinstance(current, (httpx2.NetworkError, httpx2.RemoteProtocolError, httpx2.ProxyError)):
            return HubProblem("unreachable", f"the Hub cannot be reached ({_reason(current)})")
        current = current.__cause__ or current.__context__
        seen += 1
    return None


def _status(exc: BaseException) -> int | None:
    return getattr(getattr(exc, "response", None), "status_code", None)


def _http_problem(response) -> HubProblem:
    status = response.status_code
    if status == 429:
        wait = _asked_wait(response.headers)
        said = f"; it asks to wait {wait:.0f} s" if wait is not None else ""
        return HubProblem("rate-limited", f"the Hub answered 429 (rate limited){said}: rerun later, or set HF_TOKEN "
                                          "for a higher limit", status, wait)
    if status >= 500 or status == 408:
        return HubProblem("server-error", f"the Hub answered HTTP {status}: rerun later", status)
    if status in (401, 403):
        return HubProblem("denied", f"the Hub answered HTTP {status}: set HF_TOKEN to a token that can read this "
                                    "repo", status)
    if status == 404:
        return HubProblem("not-found", "the Hub answered HTTP 404 (not found, or private without HF_TOKEN)", status)
    return HubProblem("http-error", f"the Hub answered HTTP {status}", status)


def _asked_wait(headers) -> float | None:
    """Seconds a 429 asks to wait: ``Retry-After`` (seconds), else the ``RateLimit`` header's reset."""
    after = (headers.get("retry-after") or "").strip()
    if after.isascii() and after.isdigit():
        return float(after)
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
    # huggingface_hub: ~0.18 s to import; only a Hub name pays it
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    ok = name.count("/") == 1 and not name.startswith((".", "/", "~"))
    if ok:
        try:
            validate_repo_id(name)
        except HFValidationError:
            ok = False
    if not ok:
        raise BadInput(f"{name}: not a folder, and not a Hub repo id for the {what} ({ID_RULE})", file=name)


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


def endpoint() -> str:
    from huggingface_hub import constants  # huggingface_hub: ~0.18 s to import; only a Hub read pays it

    return constants.ENDPOINT.rstrip("/")


def probe_hub(timeout: float = PROBE_TIMEOUT) -> HubProblem | None:
    """Ask the Hub once, without retries: None when it answers (with any HTTP status) or when
    huggingface_hub is in offline mode (the user's choice), else why it cannot be reached."""
    from huggingface_hub import constants  # huggingface_hub: ~0.18 s to import; only a Hub read pays it
    from huggingface_hub.utils import get_session

    if constants.is_offline_mode():
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
    from huggingface_hub import constants  # huggingface_hub: ~0.18 s to import; only a Hub read pays it

    os.environ["HF_HUB_OFFLINE"] = "1"
    constants.HF_HUB_OFFLINE = True


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
    problem = probe_hub()
    if problem is None:
        return
    from huggingface_hub import try_to_load_from_cache  # huggingface_hub: only an unreachable Hub reads it

    cached = [isinstance(try_to_load_from_cache(repo, "config.json", revision=rev), str) for repo, rev in repos]
    if local_work or (all(cached) if need_all else any(cached)):
        go_offline()
        return
    raise unreachable_error(problem)
