"""The GitHub client: PyGithub behind the few idempotent operations the bot's jobs and the Action need.

In: a ``GitHubConfig`` (API URL, a token or an App) and a repository's pull request.
Out: a ``PullRequestClient``: file bytes at a ref, changed files, permissions, and idempotent writes
(the sticky comment, replies, reactions, check runs); a transient fault raises
``TransientGitHubError`` with its delay (``retry_delay``).

Every write is safe to repeat after a crash or a lost answer: the sticky comment is found by its
hidden marker before one is created, check runs are found by name and head sha, reactions are
idempotent on GitHub's side, and replies carry a hidden marker naming the comment they answer.

PyGithub's own retry is off: a retry loop that sleeps inside a worker until a rate limit resets
would hold the worker and hide the wait. Transient failures raise ``TransientGitHubError`` with the
delay GitHub asked for, and the queue reschedules the Job durably.

Configuration (environment): ``GITHUB_API_URL`` (default https://api.github.com), ``GITHUB_TOKEN``,
or a GitHub App: ``DRAFTGUARD_GITHUB_APP_ID`` with ``DRAFTGUARD_GITHUB_PRIVATE_KEY`` or
``DRAFTGUARD_GITHUB_PRIVATE_KEY_FILE``; ``DRAFTGUARD_GITHUB_WEBHOOK_SECRET`` for webhooks.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from draftguard.errors import BotConfigError, LfsError, TransientGitHubError
from draftguard.hosts.files import MAX_FILE_BYTES, FileTooLarge, UnreadableFile, max_drafter_bytes, safe_repo_path
from draftguard.hosts.retry import backoff, rate_limit_wait, transient_errors
from draftguard.markers import REPLY as REPLY_MARKER
from draftguard.markers import is_sticky
from draftguard.secrets import remember_secret

if TYPE_CHECKING:  # PyGithub is the bot and action extras, imported where a client is made
    from github import Github
    from github.ContentFile import ContentFile
    from github.IssueComment import IssueComment

log = logging.getLogger("draftguard.bot")

DEFAULT_API_URL = "https://api.github.com"
MAX_ANNOTATIONS_PER_REQUEST = 50  # GitHub's limit per check-run create or update
ACTIONS_LOGIN = "github-actions[bot]"  # who an Actions workflow's GITHUB_TOKEN comments as


@dataclass(repr=False)
class GitHubConfig:
    """Where GitHub is and how to authenticate. ``repr`` never shows a secret."""

    api_url: str = DEFAULT_API_URL
    token: str | None = None
    app_id: str | None = None
    private_key: str | None = None
    webhook_secret: str | None = None
    timeout: float = 15.0
    # GitHub asks integrations to space writes about a second apart to avoid secondary rate limits.
    write_interval: float = 1.0
    retry_base: float = 2.0  # first backoff after a 5xx or a timeout, doubling per attempt
    secrets: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        auth = "app" if self.app_id else ("token" if self.token else "none")
        return f"GitHubConfig(api_url={self.api_url!r}, auth={auth})"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "GitHubConfig":
        """Read the configuration from environment variables.

        Example::

            >>> GitHubConfig.from_env({"GITHUB_TOKEN": "x", "GITHUB_API_URL": "http://127.0.0.1:9/"})
            GitHubConfig(api_url='http://127.0.0.1:9', auth=token)
        """
        env = os.environ if env is None else env
        key = env.get("DRAFTGUARD_GITHUB_PRIVATE_KEY")
        key_file = env.get("DRAFTGUARD_GITHUB_PRIVATE_KEY_FILE")
        if not key and key_file:
            try:
                with open(key_file, encoding="utf-8") as fh:
                    key = fh.read()
            except OSError as exc:
                raise BotConfigError(
                    f"DRAFTGUARD_GITHUB_PRIVATE_KEY_FILE={key_file}: cannot read it ({exc.strerror}); "
                    "point it at the App's .pem private key"
                ) from None
        config = cls(
            api_url=(env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/"),
            token=env.get("GITHUB_TOKEN") or None,
            app_id=env.get("DRAFTGUARD_GITHUB_APP_ID") or None,
            private_key=key or None,
            webhook_secret=env.get("DRAFTGUARD_GITHUB_WEBHOOK_SECRET") or None,
            timeout=float(env.get("DRAFTGUARD_GITHUB_TIMEOUT") or 15.0),
            write_interval=float(env.get("DRAFTGUARD_GITHUB_WRITE_INTERVAL") or 1.0),
            retry_base=float(env.get("DRAFTGUARD_RETRY_BASE") or 2.0),
        )
        if config.app_id and not config.private_key:
            raise BotConfigError(
                "DRAFTGUARD_GITHUB_APP_ID is set but no private key: set DRAFTGUARD_GITHUB_PRIVATE_KEY "
                "or DRAFTGUARD_GITHUB_PRIVATE_KEY_FILE"
            )
        config.secrets = [s for s in (config.token, config.private_key, config.webhook_secret) if s]
        return config

    def require_auth(self) -> None:
        if not (self.token or self.app_id):
            raise BotConfigError(
                "no GitHub credentials: set GITHUB_TOKEN, or DRAFTGUARD_GITHUB_APP_ID with "
                "DRAFTGUARD_GITHUB_PRIVATE_KEY(_FILE) for a GitHub App"
            )


def connect(config: GitHubConfig, installation_id: int | None = None):
    """A PyGithub client: the App's installation token when an App is configured, else the token."""
    from github import Auth, Github, GithubIntegration  # PyGithub: the bot and action extras, not the base install

    config.require_auth()
    common = dict(
        base_url=config.api_url,
        timeout=int(max(1, config.timeout)),
        retry=None,
        seconds_between_requests=None,
        seconds_between_writes=config.write_interval or None,
    )
    if config.app_id:
        if installation_id is None:
            raise BotConfigError("a GitHub App needs the webhook's installation id; is the App installed on the repo?")
        integration = GithubIntegration(auth=Auth.AppAuth(config.app_id, config.private_key), **common)
        with _translated("installation token"):
            # Minted here, not lazily inside PyGithub, so the logs scrub it like the configured secrets.
            token = integration.get_access_token(int(installation_id)).token
            key = (config.api_url, str(config.app_id))
            if key not in _LOGINS:
                # An App comments as "<slug>[bot]"; GET /user is closed to its installation tokens.
                _LOGINS[key] = f"{integration.get_app().slug}[bot]"
        remember_secret(token)
        return Github(auth=Auth.Token(token), **common)
    return Github(auth=Auth.Token(config.token), **common)


# The bot's own login per (API URL, App id or token digest): asked once per process.
_LOGINS: dict[tuple[str, str], str] = {}


def bot_login(config: GitHubConfig, gh: Github) -> str:
    """The login the bot comments as: ``<app slug>[bot]`` for an App (learnt in ``connect``), else
    the token's user (``GET /user``). Its comments are the only ones it ever edits."""
    if config.app_id:
        key = (config.api_url, str(config.app_id))
    else:
        key = (config.api_url, hashlib.sha256((config.token or "").encode()).hexdigest())
    if key not in _LOGINS:
        with _translated("read the bot's user"):
            _LOGINS[key] = gh.get_user().login
    return _LOGINS[key]


def retry_delay(exc: BaseException, attempt: int = 1, *, base: float = 2.0, now: float | None = None,
                cap: float = 900.0) -> float | None:
    """Seconds to wait before retrying after ``exc``, or None when retrying cannot help.

    5xx and timeouts back off exponentially; a rate limit waits what GitHub asked for, from
    ``Retry-After`` or ``x-ratelimit-reset`` (capped at ``cap``).
    """
    import requests  # requests: comes with PyGithub
    from github import GithubException, RateLimitExceededException

    if isinstance(exc, TransientGitHubError):
        return retry_delay(exc.cause, attempt, base=base, now=now, cap=cap) if exc.cause else exc.delay
    if isinstance(exc, (requests.Timeout, requests.ConnectionError)):
        return backoff(attempt, base)
    if isinstance(exc, GithubException):
        status = exc.status or 0
        headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
        message = str(exc.data.get("message", "")) if isinstance(exc.data, dict) else ""
        limited = isinstance(exc, RateLimitExceededException) or status == 429 or (
            status == 403 and ("rate limit" in message.lower() or headers.get("x-ratelimit-remaining") == "0")
        )
        if limited:
            return rate_limit_wait(attempt, cap, headers.get("retry-after"), headers.get("x-ratelimit-reset"), now)
        if status >= 500:
            return backoff(attempt, base)
    return None


def refusal(exc: BaseException) -> tuple[int, str] | None:
    """(status, GitHub's message) when ``exc`` is GitHub refusing the token a repository or pull
    request (401, 403 not for a rate limit, 404), else None.

    Example::

        >>> from github import UnknownObjectException
        >>> refusal(UnknownObjectException(404, {"message": "Not Found"}, {})), refusal(ValueError("x"))
        ((404, 'Not Found'), None)
    """
    from github import GithubException  # PyGithub: the bot and action extras, not the base install

    if isinstance(exc, GithubException) and exc.status in (401, 403, 404) and retry_delay(exc) is None:
        message = exc.data.get("message", "") if isinstance(exc.data, dict) else ""
        return exc.status, str(message)[:200]
    return None


def _translated(what: str) -> transient_errors:
    """Turn retryable PyGithub and requests errors into TransientGitHubError, naming the operation."""
    return transient_errors(what, retry_delay, TransientGitHubError, "GitHub")


class PullRequestClient:
    """The operations on one pull request that the Job uses. Every write is idempotent.

    ``me`` is the login the bot comments as: only comments by it are ever taken for its sticky
    comment or its replies (anyone can paste the hidden marker)."""

    def __init__(self, gh: Github, repo_full_name: str, number: int, me: str | None = None):
        self.gh = gh
        self.me = me
        self.repo_name = repo_full_name
        self.number = number
        # Lazy: no GET of the repo itself; the pull, files and contents are fetched when needed.
        self.repo = gh.withLazy(True).get_repo(repo_full_name)
        self._pull = None

    def pull(self, refresh: bool = False):
        if self._pull is None or refresh:
            with _translated("read pull request"):
                self._pull = self.repo.get_pull(self.number)
        return self._pull

    def changed_files(self) -> list[tuple[str, str]]:
        """(path, status) of every file the pull request changes. The listing, with each file's
        patch, is kept as ``files`` for the fix suggestions (``pr_suggestions``), read once a run."""
        with _translated("list changed files"):
            self.files = list(self.pull().get_files())
            return [(f.filename, f.status) for f in self.files]

    def default_branch(self) -> str:
        with _translated("read repo"):
            return self.gh.get_repo(self.repo_name).default_branch

    def read_file(self, path: str, ref: str, max_bytes: int = MAX_FILE_BYTES) -> bytes | None:
        """A file's bytes at a ref, or None when it is not there (or is a folder).

        The contents API answers a file over 1 MB with ``encoding: "none"`` and no content; such a
        file (up to ``max_bytes``) is read through the git blobs API instead. Over ``max_bytes``
        raises FileTooLarge, before any content is fetched. A symlink whose target is a file in the
        repo arrives as that file (GitHub follows it); one whose target is not, raises UnreadableFile.

        Raises:
            FileTooLarge: The file is over ``max_bytes``.
            UnreadableFile: A symlink out of the repo, a submodule, or a path that could leave the repo.
            TransientGitHubError: A fault worth retrying (5xx, rate limit, timeout).
        """
        from github import UnknownObjectException  # PyGithub: the bot and action extras, not the base install

        safe_repo_path(path)
        with _translated(f"read {path}"):
            try:
                content = self.repo.get_contents(path, ref=ref)
            except UnknownObjectException:
                return None
        if isinstance(content, list):  # a folder
            return None
        kind = content.raw_data.get("type")
        if kind == "symlink":
            raise UnreadableFile(path, f"a symlink to {content.raw_data.get('target')!r}, not a file in the repo")
        if kind != "file":
            raise UnreadableFile(path, f"a {kind}, not a file")
        size = int(content.raw_data.get("size") or 0)
        if size > max_bytes:
            raise FileTooLarge(path, size, max_bytes)
        if content.raw_data.get("encoding") == "base64" and content.raw_data.get("content") is not None:
            data = base64.b64decode(content.raw_data["content"])
        else:
            with _translated(f"read {path} (blob)"):
                blob = self.repo.get_git_blob(content.sha)
            if blob.encoding != "base64":
                raise UnreadableFile(path, f"the blob came as {blob.encoding!r}")
            data = base64.b64decode(blob.content)
        if len(data) > max_bytes:
            raise FileTooLarge(path, len(data), max_bytes)
        return data

    def download_folder(self, folder: str, ref: str, dest: str) -> list[str]:
        """Write the files directly in ``folder`` at ``ref`` into the local folder ``dest``, and return
        their names. A file stored with Git LFS arrives from the API as its pointer; its real bytes
        come from the file's ``download_url`` (GitHub's media endpoint), and are checked against the
        pointer's oid and size: a pointer is never written out as weights.

        Example::

            client.download_folder("drafter", pull.head.sha, "/tmp/drafter")  # ["config.json", "model.safetensors"]
        """
        with _translated(f"list {folder or '/'}"):
            contents = self.repo.get_contents(folder or "", ref=ref)
        names, found, total, limit = [], [], 0, max_drafter_bytes()
        for item in contents if isinstance(contents, list) else [contents]:
            if item.type != "file":
                continue
            if total + (item.size or 0) > limit:
                raise FileTooLarge(folder or "/", total + item.size, limit)
            with _translated(f"read {item.path}"):
                data = base64.b64decode(self.repo.get_git_blob(item.sha).content)
            pointer = parse_lfs_pointer(data)
            total += pointer.size if pointer is not None else len(data)
            if total > limit:  # LFS objects are sized by their pointers: refused before any download
                raise FileTooLarge(folder or "/", total, limit)
            found.append((item, data, pointer))
        for item, data, pointer in found:
            target = os.path.join(dest, item.name)
            if pointer is None:
                with open(target, "wb") as fh:
                    fh.write(data)
            else:
                self._download_lfs(item, pointer, target)
            names.append(item.name)
        return names

    def _download_lfs(self, item: ContentFile, pointer: "LfsPointer", target: str) -> None:
        if not item.download_url:
            raise LfsError(f"{self.repo_name}/{item.path}: a Git LFS pointer, and GitHub gave no download URL for "
                           "its object")
        import requests  # requests: comes with PyGithub

        digest, size = hashlib.sha256(), 0
        # From download_url's own host (media.githubusercontent.com on github.com), not the API's:
        # PyGithub's requester would send it to the API host (B10 of issue 25). No Authorization
        # header goes to that host; a private repo's download_url carries its own short-lived token.
        with _translated(f"download {item.path} (Git LFS)"), open(target, "wb") as fh, \
                requests.get(item.download_url, stream=True, timeout=(15, 120)) as answer:
            if answer.status_code >= 500 or answer.status_code == 429:
                raise requests.ConnectionError(f"the download host answered HTTP {answer.status_code}")
            if answer.status_code != 200:
                fh.close()
                os.unlink(target)
                raise LfsError(f"{self.repo_name}/{item.path}: the Git LFS object's download host answered HTTP "
                               f"{answer.status_code}; not used as weights")
            for chunk in answer.iter_content(chunk_size=1 << 20):
                size += len(chunk)
                if size > pointer.size:
                    break
                digest.update(chunk)
                fh.write(chunk)
        if size != pointer.size or digest.hexdigest() != pointer.oid:
            os.unlink(target)
            got = f"{size} bytes" if size <= pointer.size else f"over {pointer.size} bytes"
            raise LfsError(f"{self.repo_name}/{item.path}: the Git LFS object did not match its pointer (want "
                           f"{pointer.size} bytes with sha256 {pointer.oid[:12]}…, got {got}); not used as weights")

    def permission(self, login: str) -> str | None:
        """The user's permission on the repo (admin, write, read, none), None when not a collaborator."""
        from github import GithubException  # PyGithub: the bot and action extras, not the base install

        with _translated("read permission"):
            try:
                return self.repo.get_collaborator_permission(login)
            except GithubException as exc:
                if exc.status in (403, 404):
                    return None
                raise

    def login(self) -> str:
        """The login this client comments as (``me``, asked of GitHub once where not given)."""
        self.me = self.me if self.me is not None else self._whoami()
        return self.me

    def _mine(self, comment: IssueComment) -> bool:
        return comment.user is not None and comment.user.login == self.login()

    def _whoami(self) -> str:
        """The token's login. GitHub closes ``GET /user`` to installation tokens (403); the only one
        that reaches a client without ``me`` is the Action's ``GITHUB_TOKEN``, which comments as
        github-actions[bot] (the bot passes its App's login)."""
        from github import GithubException  # PyGithub: the bot and action extras, not the base install

        with _translated("read the token's user"):
            try:
                return self.gh.get_user().login
            except GithubException as exc:
                if exc.status == 403:
                    return ACTIONS_LOGIN
                raise

    def find_sticky(self):
        """The bot's own sticky comment, or None. A comment by anyone else that starts with the
        marker is not it: the bot never adopts, edits or keeps sections of someone else's comment."""
        with _translated("list comments"):
            for comment in self.pull().get_issue_comments():
                if is_sticky(comment.body) and self._mine(comment):
                    return comment
        return None

    def upsert_sticky(self, render: Callable[[str | None], str]) -> int:
        """Create or edit the sticky comment; ``render`` gets the current body (None when there is
        none yet) and returns the new one. Returns the comment id."""
        existing = self.find_sticky()
        body = render(existing.body if existing is not None else None)
        if existing is not None:
            if existing.body != body:
                with _translated("edit comment"):
                    existing.edit(body)
            return existing.id
        with _translated("create comment"):
            return self.pull().create_issue_comment(body).id

    def reply_once(self, comment_id: int, body: str) -> None:
        """Reply to a comment unless a reply to it exists (the marker names the comment)."""
        marker = REPLY_MARKER.format(comment_id)
        with _translated("list comments"):
            for comment in self.pull().get_issue_comments():
                if marker in (comment.body or "") and self._mine(comment):
                    return
        with _translated("create comment"):
            self.pull().create_issue_comment(f"{marker}\n{body}")

    def react(self, comment_id: int, content: str) -> None:
        """Add a reaction to an issue comment (GitHub answers 200 for one that exists)."""
        with _translated("react"):
            self.pull().get_issue_comment(comment_id).create_reaction(content)

    def upsert_check_run(
        self,
        name: str,
        head_sha: str,
        *,
        status: str,
        conclusion: str | None = None,
        title: str = "",
        summary: str = "",
        text: str | None = None,
        annotations: Iterable[dict[str, Any]] = (),
        external_id: str | None = None,
    ) -> int:
        """Create the check run ``name`` on ``head_sha``, or update the one there. Annotations go in
        batches of 50 (GitHub appends them across updates); they are sent only when the run completes,
        and only to a run that has none yet, so a retried Job never doubles them."""
        annotations = list(annotations)
        output: dict[str, Any] = {"title": title or name, "summary": summary[:65000] or name}
        if text:
            output["text"] = text[:65000]
        kwargs: dict[str, Any] = {"status": status}
        if external_id:
            kwargs["external_id"] = external_id  # the pull request, for the "Re-run" button of a fork's PR
        if conclusion:
            kwargs["conclusion"] = conclusion
            kwargs["completed_at"] = datetime.now(timezone.utc)
        with _translated("list check runs"):
            existing = [r for r in self.repo.get_commit(head_sha).get_check_runs(check_name=name)
                        if r.name == name]
        run = existing[0] if existing else None
        already = 0
        if run is not None:
            already = int((run.output.annotations_count if run.output else 0) or 0)
        batches = [annotations[i:i + MAX_ANNOTATIONS_PER_REQUEST]
                   for i in range(0, len(annotations), MAX_ANNOTATIONS_PER_REQUEST)] if not already else []
        first = dict(output, annotations=batches[0]) if batches else output
        if run is None:
            with _translated("create check run"):
                run = self.repo.create_check_run(name=name, head_sha=head_sha, output=first, **kwargs)
        else:
            with _translated("update check run"):
                run.edit(output=first, **kwargs)
        for batch in batches[1:]:
            with _translated("update check run"):
                run.edit(output=dict(output, annotations=batch))
        return run.id


@dataclass(frozen=True)
class LfsPointer:
    """A Git LFS pointer file: the sha256 and size of the object it stands for."""

    oid: str
    size: int


# A pointer is small: the spec's version line, the oid, the size, and perhaps a few extension lines.
MAX_LFS_POINTER_BYTES = 1024


def parse_lfs_pointer(data: bytes) -> LfsPointer | None:
    """The oid and size when ``data`` is a Git LFS pointer file (spec v1), else None.

    Example::

        >>> parse_lfs_pointer(b"version https://git-lfs.github.com/spec/v1\\noid sha256:" + b"ab" * 32 + b"\\nsize 12\\n")
        LfsPointer(oid='abababababababababababababababababababababababababababababababab', size=12)
        >>> parse_lfs_pointer(b'{"model_type": "qwen3"}') is None
        True
    """
    if len(data) > MAX_LFS_POINTER_BYTES or not data.startswith(b"version https://git-lfs.github.com/spec/"):
        return None
    fields = dict(line.split(" ", 1) for line in data.decode("ascii", "replace").splitlines() if " " in line)
    oid, size = fields.get("oid", ""), fields.get("size", "")
    if not oid.startswith("sha256:") or len(oid) != 71 or not size.isdigit():
        return None
    return LfsPointer(oid=oid[len("sha256:"):], size=int(size))
