"""Contains all of draftguard's own errors, in one tree.

In: nothing (this module imports nothing of draftguard's and no third-party package, so every layer
can import it).
Out: ``DraftguardError`` and its subclasses, grouped below by who raises them.
One error stays outside the tree on purpose: ``check.resolver.ResolveError``, because the resolver
runs standalone in other transformers versions' environments, where draftguard is not installed.

Every error carries an actionable message; ``hint`` (when set) says the fix in one line. An error's
text (``str``) is its message, then its hint: every surface shows an error by its text (the CLI's line,
an InputError in a Report and so every view of it, the Action's annotation, a job's result, an audit
record), so each shows the hint without code of its own. Errors also keep the stdlib base they had
(``ValueError`` for a bad payload or header), so a generic ``except`` still catches them.

Example::

    >>> issubclass(TransientGitHubError, TransientError), issubclass(BadInput, DraftguardError)
    (True, True)
    >>> TransientHubError("Hub read repo: 503", 4.0).delay
    4.0
    >>> str(BadInput("the Hub cannot be reached.", hint="check the network"))
    'the Hub cannot be reached. Hint: check the network'
"""

from __future__ import annotations


class DraftguardError(Exception):
    """The base of every error draftguard raises on purpose.

    Attributes:
        hint (`str` or `None`): One line that says how to fix it, when the message alone does not.
    """

    hint: str | None = None

    def __init__(self, message: str = "", *, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    def __str__(self) -> str:
        """The message, then the hint on the same line (surfaces print errors one line each)."""
        message = super().__str__()
        return f"{message.rstrip('.')}. Hint: {self.hint}" if self.hint else message


# INPUT ERRORS: what the user handed us cannot be checked -------------------------------------------

class BadInput(DraftguardError):
    """Input that cannot be checked. Carries where it is, so the CLI can say so in one line (exit 2).

    Attributes:
        file (`str` or `None`): The file the bad input is in.
        line (`int` or `None`), column (`int` or `None`): Where in that file (1-based).
        key (`str` or `None`): The dotted config key at fault.
    """

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        column: int | None = None,
        key: str | None = None,
        hint: str | None = None,
    ):
        super().__init__(message, hint=hint)
        self.file, self.line, self.column, self.key = file, line, column, key


class DrafterMismatch(BadInput):
    """A drafter that does not fit its target (layer ids, sizes, mask token). Fix the drafter's
    config.json or pass the target it was trained for."""


class MissingWeights(BadInput):
    """A drafter folder without the weights the format requires."""


class VllmMissing(BadInput):
    """vLLM is not importable here. Install the extra on a GPU runner, or use the reference backend
    (the message says both, with the extra's install line: no hint to repeat them)."""


class EngineStartError(BadInput):
    """vLLM is installed but could not start the target with the drafter; the message carries vLLM's
    own reason (an unsupported drafter, an attention backend this GPU lacks, too little memory)."""


class EngineRunError(BadInput):
    """vLLM started, then its engine failed while generating (``EngineDeadError``: an attention kernel
    that does not take this head size, memory that ran out). Not a bug in draftguard: the message says
    what vLLM's engine process logged as the cause."""


class RawViewUnavailable(BadInput):
    """The engine cannot be given the drafter's raw view: the config class rewrites a key that no
    config.json setting is known to keep. Run the raw view with the reference backend only."""


class VllmOptionError(BadInput):
    """An engine option out of range; the message names the option."""


class HeaderError(DraftguardError, ValueError):
    """A safetensors header that is truncated, too large, or not the format's JSON."""


# CHECK ERRORS: a check that could not run to the end --------------------------------------------------

class EditError(DraftguardError, ValueError):
    """An edit to a JSON file's text that cannot be made there (``draftguard fix``): a key's parent is
    missing or not an object. The fixer reports the finding as having no safe fix."""


class CheckOverBudget(BadInput):
    """A config whose check ran past its time budget (``DRAFTGUARD_CHECK_SECONDS``, 20 s by default):
    an error on the file, shown where every input error is, never a pass (check/budget.py)."""


class MatrixError(DraftguardError):
    """A transformers version could not be prepared or run.

    Attributes:
        status (`str`): The matrix column's state ("install failed", "timed out", ...).
    """

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


class HubUnreachable(DraftguardError):
    """An optional file that could not be fetched because the Hub cannot be reached."""

    hint = "run again online"


class MetricsError(DraftguardError):
    """vLLM's metrics cannot give acceptance figures; the message says what to change."""


class AcceptanceJobError(DraftguardError):
    """``draftguard accept`` could not produce a result; the message carries its own one-line reason."""


# CONFIGURATION ERRORS: the bot's, the queue's or the Action's settings -----------------------------

class ConfigError(DraftguardError):
    """A configuration that is missing or inconsistent; the message says which setting to change."""


class BotConfigError(ConfigError):
    """The bot's configuration is missing or inconsistent; the message says which variable to set."""


class QueueConfigError(ConfigError):
    """The queue URL cannot be used; the message says what form it should take."""


class ActionError(ConfigError):
    """Bad input to the Action (an input, the event, the checkout); the message says what to fix.

    Attributes:
        file (`str` or `None`), line (`int` or `None`): Where the bad input is, when it is in a file.
    """

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.file, self.line = file, line


# HOST ERRORS: GitHub and the Hub -------------------------------------------------------------------------

class TransientError(DraftguardError):
    """A failure worth retrying (5xx, rate limit, timeout, a busy lock).

    Attributes:
        delay (`float`): Seconds to wait before the next try (what the host asked for, else backoff).
        cause (`BaseException` or `None`): The host client's own error, kept so a later attempt can
            recompute the delay from it. Never rendered: it may hold a URL or a response body.
    """

    def __init__(self, message: str, delay: float, cause: BaseException | None = None):
        super().__init__(message)
        self.delay = delay
        self.cause = cause


class TransientGitHubError(TransientError):
    """GitHub failed in a way worth retrying (5xx, rate limit, timeout)."""


class TransientHubError(TransientError):
    """The Hub failed in a way worth retrying (5xx, 429, timeout, a lost connection)."""


class Retry(TransientError):
    """Raised by a job handler: run the job again after ``delay`` seconds (counts as an attempt)."""


class Busy(Retry):
    """A lock the job needs is held by another job (the same pull request checked now): the job goes
    back to the queue after ``delay`` seconds instead of waiting in a worker. Not counted as an attempt."""


class JobFailed(DraftguardError):
    """A job that cannot succeed however often it runs. The queue records it as failed, and logs its
    one line without a traceback (a traceback is kept for bugs)."""


class UnknownJobKind(JobFailed):
    """A job record whose kind no handler of this process knows (written by another draftguard version).

    Attributes:
        kind (`str`): The job's kind.
        known (`tuple[str, ...]`): The kinds this handler runs.
    """

    def __init__(self, source: str, kind: str, known: tuple[str, ...]):
        super().__init__(f"no {source} handler for job kind {kind!r} (this worker runs {', '.join(known)}); "
                         "is the worker older than the server that recorded it?")
        self.kind, self.known = kind, known


class HostRefused(JobFailed):
    """The host answered 401, 403 or 404 to a job's call: the bot's token cannot see the repository
    or the pull request (an App not installed there, a token without access, a deleted repo).

    Attributes:
        host (`str`): "GitHub" or "Hub".
        repo (`str`): The repository the job is for.
        status (`int`): The HTTP status the host answered.

    Example::

        >>> HostRefused("Hub", "acme/private", 404).hint
        "give the bot's Hub account (its HF_TOKEN) read access to the repository: a member of its organization, or a fine-grained token that names it"
    """

    # The fix differs per host: a GitHub App is installed on a repository, a Hub token is given access.
    HINTS = {"GitHub": "install the App on the repository, or give the token access",
             "Hub": "give the bot's Hub account (its HF_TOKEN) read access to the repository: a member of its "
                    "organization, or a fine-grained token that names it"}

    def __init__(self, host: str, repo: str, status: int, message: str = ""):
        said = f" ({message})" if message else ""
        super().__init__(f"{host} answered {status}{said} for {repo}: the bot's token cannot see this repository "
                         "or pull request", hint=self.HINTS.get(host, "give the bot's token access to the repository"))
        self.host, self.repo, self.status = host, repo, status


class CommentRefused(DraftguardError):
    """GitHub refused a comment write (403/404): a read-only token, typically a fork's.

    Attributes:
        status (`int`): The HTTP status GitHub answered.
        message (`str`): GitHub's own message.
    """

    hint = "same-repo workflows need `permissions: pull-requests: write`; forks get a read-only token"

    def __init__(self, status: int, message: str):
        super().__init__(f"{status} {message}")
        self.status, self.message = status, message


class LfsError(DraftguardError):
    """A Git LFS file whose real bytes could not be fetched, or did not match the pointer's oid and size."""


class FileTooLarge(DraftguardError):
    """A file the check needs is over the size the bot reads. It becomes an error finding that fails
    the check ("not checked: N MB, over the limit"), never "nothing to check".

    Attributes:
        path (`str`), size (`int`), limit (`int`): The file and its size against the limit, in bytes.
        downloaded (`bool`): Whether it was downloaded first (the host did not give its size before).
    """

    def __init__(self, path: str, size: int, limit: int, downloaded: bool = False):
        super().__init__(f"{path}: not checked: {size / 1e6:.1f} MB, over the limit of {limit / 1e6:.0f} MB")
        self.path, self.size, self.limit, self.downloaded = path, size, limit, downloaded


class UnreadableFile(DraftguardError):
    """A path the check needs is not a regular file (a symlink out of the repo, a submodule).

    Attributes:
        path (`str`): The repository path that was refused.
    """

    def __init__(self, path: str, why: str):
        super().__init__(f"{path}: not checked: {why}")
        self.path = path


# AUDIT ERRORS: one repo of a fleet could not be audited ------------------------------------------------

class RepoFailure(DraftguardError):
    """A repo (or part of its check) could not be audited. ``draftguard audit`` records it as that
    repo's error (audit.record.RepoError) and goes on with the next repo; only the transient kinds
    are retried first.

    Attributes:
        kind (`str`): What went wrong, one of audit.record's REPO_FAULTS, ACCESS or TRANSIENT kinds
            ("no-config", "gated", "rate-limited", "internal", ...).
        message (`str`): What to do about it; the audit's report shows it as is.
        sha (`str` or `None`): The commit, when the repo's info was read before the failure.
    """

    def __init__(self, kind: str, message: str, sha: str | None = None, *, hint: str | None = None):
        super().__init__(message, hint=hint)
        self.kind, self.message, self.sha = kind, message, sha


# WEBHOOK ERRORS: a delivery refused at the door -------------------------------------------------------

class WebhookRefused(DraftguardError):
    """A delivery refused at the door.

    Attributes:
        status (`int`): The HTTP answer (401, 403, 413, 503, ...).
        outcome (`str`): The /metrics label it is counted under.
    """

    def __init__(self, status: int, message: str, outcome: str = "bad_signature"):
        super().__init__(message)
        self.status = status
        self.outcome = outcome


class PayloadError(DraftguardError, ValueError):
    """The body is authentic but not a payload the route understands (answered 400)."""


class HubPayloadError(PayloadError):
    """The webhook body is JSON but not a Hub webhook payload (answered 400)."""


def install_hint(extra: str) -> str:
    """How to install an extra, the way the README installs draftguard: from a clone of the repository
    (it is not on PyPI yet: a package index would find no draftguard).

    Example::

        >>> install_hint("bot")
        "in a draftguard clone: pip install -c constraints.txt -e '.[bot]'"
    """
    return f"in a draftguard clone: pip install -c constraints.txt -e '.[{extra}]'"
