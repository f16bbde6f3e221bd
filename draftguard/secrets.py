"""Secret scrubbing: tokens and keys never reach a log line, a job record or a comment.

In: text (a log record, an error message) and the secrets to hide: those configured, and tokens
minted at run time (``remember_secret``).
Out: the text with each secret replaced by ``***`` (``scrub``, ``scrub_known``), and ``SecretFilter``,
a logging filter that does the same to every record.
Used by the bot's logging, its job records, the Action's messages and the hosts' clients.
"""

from __future__ import annotations

import logging
from typing import Iterable, Mapping

# Environment variables that hold a secret, or lead to one: any token (HF_TOKEN, GITHUB_TOKEN, GH_TOKEN,
# ...), the App's key and its file, the webhook secrets, the queue's URL (it may hold a password), a
# token file's path, and anything named like a secret. No process that parses a stranger's files
# starts with one (runner/gpu_job.child_env, bounded's forkserver and children).
SECRET_ENV = frozenset({"DRAFTGUARD_QUEUE", "DRAFTGUARD_QUEUE_URL", "DRAFTGUARD_GITHUB_APP_ID",
                        "DRAFTGUARD_GITHUB_PRIVATE_KEY_FILE", "HF_TOKEN_PATH", "GIT_ASKPASS", "SSH_AUTH_SOCK",
                        "REDIS_URL"})


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret.

    Example::

        >>> [is_secret_name(n) for n in ("HF_TOKEN", "DRAFTGUARD_HUB_WEBHOOK_SECRET", "TOKENIZERS_PARALLELISM")]
        [True, True, False]
    """
    upper = name.upper()
    return (upper in SECRET_ENV or upper.endswith(("_TOKEN", "_KEY", "PASSWORD", "_PAT")) or upper == "TOKEN"
            or any(w in upper for w in ("SECRET", "PRIVATE_KEY", "CREDENTIAL")))


def without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` less every variable ``is_secret_name`` names."""
    return {k: v for k, v in env.items() if not is_secret_name(k)}


def scrub(text: str, secrets: Iterable[str]) -> str:
    """Replace every secret in text with ``***`` (log records and error messages pass through it).

    Example::

        >>> scrub("token ghp_abc failed", ["ghp_abc"])
        'token *** failed'
    """
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


# Secrets that exist only at run time (GitHub App installation tokens): every SecretFilter scrubs
# them too, since the filter is built at start-up, before any token is minted.
_MINTED: set[str] = set()


def remember_secret(secret: str) -> None:
    """Have every SecretFilter scrub ``secret`` from now on (a token minted at run time)."""
    if secret:
        _MINTED.add(secret)


def scrub_known(text: str) -> str:
    """Scrub every secret this process knows of: those its log filters were given, and tokens
    minted since. For text stored outside the log, such as a failed job's error."""
    return scrub(text, sorted(_MINTED)) if _MINTED else text


class SecretFilter(logging.Filter):
    """A logging filter that scrubs the configured secrets (and tokens minted since) from every
    record's message and traceback.

    Example::

        >>> record = logging.LogRecord("bot", logging.ERROR, __file__, 1, "token %s", ("ghp_abc",), None)
        >>> SecretFilter(["ghp_abc"]).filter(record), record.getMessage()
        (True, 'token ***')
    """

    def __init__(self, secrets: Iterable[str]):
        super().__init__()
        self.secrets = [s for s in secrets if s]
        for secret in self.secrets:  # job records are scrubbed with the same list (scrub_known)
            remember_secret(secret)

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = self.secrets + sorted(_MINTED)
        if not secrets:
            return True
        message = record.getMessage()
        clean = scrub(message, secrets)
        if clean != message:
            record.msg, record.args = clean, ()
        # A traceback is formatted after the filters ran, by the handler; an exception's message can
        # carry a token, so format it now, scrubbed, and leave the handler nothing else to format.
        if record.exc_info:
            if not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = scrub(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info, secrets)
        return True
