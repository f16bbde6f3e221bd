"""The Hugging Face Hub adapter: huggingface_hub's HfApi behind the few idempotent operations a Hub
Job (and the audit) needs.

In: a ``HubConfig`` (endpoint, token) and a repo's pull request (a discussion with ``refs/pr/N``).
Out: file bytes at a revision, the head sha, and idempotent discussion writes; a transient fault
raises ``TransientHubError`` with its delay.

Every write is safe to repeat after a crash or a lost answer: the sticky comment is found by its
hidden marker (and the bot's own name) in the discussion before one is posted, and replies carry a
hidden marker naming the comment they answer. A sticky comment is posted with ``comment_discussion``
once and then only edited with ``edit_discussion_comment``.

HfApi's discussion calls do not retry. Transient failures (5xx, 429, timeouts, lost connections)
raise ``TransientHubError`` with a delay (``Retry-After`` when the Hub sends one), and the queue
reschedules the Job durably, as the GitHub bot does; a worker never sleeps through a rate limit.

Configuration (environment): ``HF_ENDPOINT`` (default https://huggingface.co), ``HF_TOKEN`` (a token
of the bot's Hub account, with write access to discussions), ``DRAFTGUARD_HUB_WEBHOOK_SECRET``.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping

from draftguard.errors import TransientHubError
from draftguard.hosts.files import MAX_FILE_BYTES, FileTooLarge, max_drafter_bytes, safe_repo_path
from draftguard.hosts.github import REPLY_MARKER, BotConfigError
from draftguard.hosts.retry import backoff, rate_limit_wait, transient_errors
from draftguard.hub_access import hub_api, hub_problem
from draftguard.markers import is_sticky

if TYPE_CHECKING:  # huggingface_hub is imported where a client is made
    from huggingface_hub import DiscussionComment

log = logging.getLogger("draftguard.bot")

DEFAULT_ENDPOINT = "https://huggingface.co"
# A Hub pull request in these states is checked; closed and merged ones are not.
OPEN_STATES = ("open", "draft")


@dataclass(repr=False)
class HubConfig:
    """Where the Hub is and how the bot authenticates. ``repr`` never shows a secret."""

    endpoint: str = DEFAULT_ENDPOINT
    token: str | None = None
    webhook_secret: str | None = None
    retry_base: float = 2.0  # first backoff after a 5xx or a timeout, doubling per attempt
    secrets: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"HubConfig(endpoint={self.endpoint!r}, auth={'token' if self.token else 'none'})"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "HubConfig":
        """Read the configuration from environment variables.

        Example::

            >>> HubConfig.from_env({"HF_TOKEN": "hf_x", "HF_ENDPOINT": "http://127.0.0.1:9/"})
            HubConfig(endpoint='http://127.0.0.1:9', auth=token)
        """
        env = os.environ if env is None else env
        config = cls(
            endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            token=env.get("HF_TOKEN") or None,
            webhook_secret=env.get("DRAFTGUARD_HUB_WEBHOOK_SECRET") or None,
            retry_base=float(env.get("DRAFTGUARD_RETRY_BASE") or 2.0),
        )
        config.secrets = [s for s in (config.token, config.webhook_secret) if s]
        return config

    def require_auth(self) -> None:
        if not self.token:
            raise BotConfigError(
                "DRAFTGUARD_HUB_WEBHOOK_SECRET is set but HF_TOKEN is not: set HF_TOKEN to a token of the "
                "bot's Hub account (fine-grained, with 'write to discussions' on the watched repos)"
            )


def hub_retry_delay(exc: BaseException | None, attempt: int = 1, *, base: float = 2.0,
                    cap: float = 900.0) -> float | None:
    """Seconds to wait before retrying after ``exc``, or None when retrying cannot help.

    5xx, timeouts and lost connections back off exponentially; a 429 waits what the Hub asked for in
    ``Retry-After``, else a minute per attempt (capped at ``cap``). The cause chain is followed,
    because ``hf_hub_download`` wraps a failed request in ``LocalEntryNotFoundError``.

    Example::

        >>> hub_retry_delay(TransientHubError("busy", 7.0)), hub_retry_delay(ValueError("bad"))
        (7.0, None)
    """
    seen, current = 0, exc
    while current is not None and seen < 5:
        if isinstance(current, TransientHubError):
            return current.delay
        current = current.__cause__ or current.__context__
        seen += 1
    problem = hub_problem(exc)  # the one reading of the Hub's errors (draftguard/hub_access.py)
    if problem is None or not problem.transient:
        return None
    if problem.kind == "rate-limited":
        return rate_limit_wait(attempt, cap, None if problem.wait is None else str(int(problem.wait)))
    return backoff(attempt, base)


def hub_refusal(exc: BaseException) -> tuple[int, str] | None:
    """(status, the Hub's reason) when ``exc`` is the Hub refusing the token a repository or
    discussion (401, 403, 404), else None.

    Example::

        >>> hub_refusal(ValueError("x")) is None
        True
    """
    problem = hub_problem(exc, follow=False)  # the Hub's own answer to this call, not an earlier one
    if problem is None or not problem.refused or problem.status is None:
        return None
    return problem.status, problem.reason


_WHOAMI: dict[tuple[str, str], str] = {}
_WHOAMI_LOCK = threading.Lock()


def _hf():
    """huggingface_hub, for the few names this client uses beside its HfApi (``hub_access.hub_api``)."""
    import huggingface_hub  # huggingface_hub: ~0.18 s to import; only a Hub read pays it

    return huggingface_hub


def _is_file(entry) -> bool:
    """A file of a tree listing (``RepoFile``), not a folder."""
    return isinstance(entry, _hf().hf_api.RepoFile)


class HubPullRequestClient:
    """The operations on one Hub pull request (a discussion with ``refs/pr/N``) that a Job uses.

    It offers the same reading interface as the GitHub ``PullRequestClient`` (``repo_name``,
    ``read_file``, ``default_branch``, ``upsert_sticky``, ``reply_once``), so the light check and the
    sticky comment are shared.

    Example::

        client = HubPullRequestClient(HubConfig.from_env(), "acme/drafter", 3)
        head = client.head()                       # the sha refs/pr/3 points at
        client.upsert_sticky(lambda old: "<!-- draftguard:sticky -->\\nhello")
    """

    def __init__(self, config: HubConfig, repo_id: str, number: int):
        self.config = config
        self.repo_name = repo_id
        self.number = number
        self.ref = f"refs/pr/{number}" if number > 0 else "main"
        self.api = hub_api(token=config.token or False, endpoint=config.endpoint)  # the one client factory
        self._details = None

    def _t(self, what: str) -> transient_errors:
        """Turn retryable Hub errors into TransientHubError, naming the operation (never a URL with
        a token, never the error body)."""
        return transient_errors(what, hub_retry_delay, TransientHubError, "Hub", self.config.retry_base)

    # --- reading ---------------------------------------------------------------------------------
    def me(self) -> str:
        """The bot's own Hub user name (from the token; asked once per process)."""
        key = (self.config.endpoint, self.config.token or "")
        with _WHOAMI_LOCK:
            if key in _WHOAMI:
                return _WHOAMI[key]
        with self._t("whoami"):
            name = self.api.whoami()["name"]
        with _WHOAMI_LOCK:
            _WHOAMI[key] = name
        return name

    def details(self, refresh: bool = False):
        """The discussion with its events (comments, commits) and target branch."""
        if self._details is None or refresh:
            with self._t("read discussion"):
                self._details = self.api.get_discussion_details(self.repo_name, self.number)
        return self._details

    def default_branch(self) -> str:
        """The repo's default branch, where settings and prompt files are read: ``main`` (the Hub has no
        other default). Never the branch a pull request targets: anyone may open one against any
        branch, and an old branch's .draftguard.yml (``fail_on: never``) would judge it (issue 32)."""
        return "main"

    def target_branch(self) -> str:
        """The branch the pull request targets (its base: findings are new against it); main for a
        client of no pull request (number 0, a push to main)."""
        if self.number <= 0:
            return "main"
        target = self.details().target_branch or "main"
        return target[len("refs/heads/"):] if target.startswith("refs/heads/") else target

    def revision_sha(self, revision: str) -> str:
        """The commit sha a branch, tag or ``refs/pr/N`` points at now."""
        with self._t(f"resolve {revision}"):
            return self.api.model_info(self.repo_name, revision=revision).sha

    def head(self) -> str:
        return self.revision_sha(self.ref)

    def tree(self, revision: str) -> dict[str, str]:
        """``{path: blob id}`` of every file at a revision (no file content is fetched)."""
        with self._t(f"list files at {revision[:12]}"):
            return {f.path: (f.lfs.sha256 if f.lfs else f.blob_id)
                    for f in self.api.list_repo_tree(self.repo_name, revision=revision, recursive=True)
                    if _is_file(f)}

    def changed_files(self, base: str, head: str) -> list[tuple[str, str]]:
        """(path, status) of every file that differs between two revisions."""
        old, new = self.tree(base), self.tree(head)
        out = [(p, "added" if p not in old else "modified") for p, oid in sorted(new.items()) if old.get(p) != oid]
        return out + [(p, "removed") for p in sorted(old) if p not in new]

    def read_file(self, path: str, ref: str, max_bytes: int = MAX_FILE_BYTES) -> bytes | None:
        """A file's bytes at a revision, through huggingface_hub's cache; None when it is not there.

        Only config-sized files are read, and the size is asked first (a HEAD): a file over
        ``max_bytes`` raises FileTooLarge without a byte of it downloaded.

        Raises:
            FileTooLarge: The file is over ``max_bytes``.
            UnreadableFile: The path could reach outside the repository.
            TransientHubError: A fault worth retrying (5xx, 429, timeout).
        """
        safe_repo_path(path)
        try:
            with self._t(f"read {path}"):
                meta = self.api.get_hf_file_metadata(
                    url=_hf().hf_hub_url(self.repo_name, path, revision=ref, endpoint=self.config.endpoint))
                if meta.size is not None and meta.size > max_bytes:
                    raise FileTooLarge(path, meta.size, max_bytes)
                local = self.api.hf_hub_download(self.repo_name, path, revision=ref)
        except Exception as exc:
            problem = hub_problem(exc, follow=False)
            if problem is not None and problem.kind in ("entry-not-found", "revision-not-found"):
                return None
            raise
        size = os.path.getsize(local)
        if size > max_bytes:
            raise FileTooLarge(path, size, max_bytes)
        with open(local, "rb") as fh:
            return fh.read()

    def read_range(self, path: str, ref: str, start: int, end: int) -> bytes | None:
        """Bytes ``start..end`` of a file at a revision by one HTTP range request (a safetensors header,
        never weights: ``read_range``); None when the file is not there.

        Raises:
            UnreadableFile: The path could reach outside the repository.
            TransientHubError: A fault worth retrying (5xx, 429, timeout).
        """
        safe_repo_path(path)
        with self._t(f"read {path}"):
            return read_range(self.repo_name, path, ref, start, end, token=self.config.token or False,
                              endpoint=self.config.endpoint)

    def download_folder(self, folder: str, revision: str) -> str:
        """Snapshot one folder of the repo at a revision (for the GPU test), through the cache. Its
        files are sized first (the tree listing): over ``max_drafter_bytes`` is FileTooLarge, with
        nothing downloaded (R8 of issue 25)."""
        with self._t(f"list {folder or 'the repo'}"):
            total = sum(f.size or 0 for f in self.api.list_repo_tree(
                self.repo_name, path_in_repo=folder or None, revision=revision, recursive=True)
                if _is_file(f))
        if total > max_drafter_bytes():
            raise FileTooLarge(folder or "/", total, max_drafter_bytes())
        with self._t(f"download {folder or 'the repo'}"):
            return self.api.snapshot_download(self.repo_name, revision=revision,
                                              allow_patterns=[f"{folder}/*"] if folder else None)

    def is_owner_or_member(self, user: str) -> tuple[bool, str]:
        """Whether ``user`` owns the repo or is a member of the organization that owns it, and why.

        A namespace that is not an organization (a user's own repo) has only its owner."""
        if "/" not in self.repo_name:
            # A legacy repo id without a namespace (gpt2): there is no owner or org to ask.
            return False, f"{self.repo_name} has no namespace, so no owner or organization to trust"
        owner = self.repo_name.split("/", 1)[0]
        if user == owner:
            return True, f"@{user} owns the repo"
        try:
            with self._t(f"list members of {owner}"):
                members = {u.username for u in self.api.list_organization_members(owner)}
        except Exception as exc:
            problem = hub_problem(exc, follow=False)
            status = problem.status if problem is not None else None
            if status not in (401, 403, 404):
                raise
            if status == 404:
                return False, f"@{user} is not {owner}, who owns the repo"
            if status in (401, 403):
                return False, f"the members of {owner} cannot be listed with the bot's token"
            raise
        if user in members:
            return True, f"@{user} is a member of {owner}"
        return False, f"@{user} is neither the owner nor a member of the {owner} organization"

    # --- writing ---------------------------------------------------------------------------------
    def find_sticky(self, refresh: bool = True):
        """The bot's own sticky comment in this discussion, or None. Only the bot's comments count:
        anyone can paste the marker, and nobody else's comment could be edited anyway."""
        me = self.me()
        for event in self.details(refresh=refresh).events:
            if event.type == "comment" and event.author == me and not event.hidden and is_sticky(event.content):
                return event
        return None

    def upsert_sticky(self, render: Callable[[str | None], str]) -> str:
        """Post or edit the sticky comment; ``render`` gets the current body (None when there is none
        yet) and returns the new one. Returns the comment id. Nothing is written when nothing changed."""
        existing = self.find_sticky()
        body = render(existing.content if existing is not None else None)
        if existing is not None:
            if existing.content != body:
                with self._t("edit comment"):
                    self.api.edit_discussion_comment(self.repo_name, self.number, existing.id, body)
            return existing.id
        with self._t("post comment"):
            return self.api.comment_discussion(self.repo_name, self.number, body).id

    def reply_once(self, comment_id: str, body: str) -> None:
        """Reply to a comment unless a reply to it exists (the marker names the comment)."""
        marker = REPLY_MARKER.format(comment_id)
        me = self.me()
        for event in self.details(refresh=True).events:
            if event.type == "comment" and event.author == me and marker in (event.content or ""):
                return
        with self._t("post comment"):
            self.api.comment_discussion(self.repo_name, self.number, f"{marker}\n{body}")

    def my_pull_requests(self) -> list:
        """The bot's own pull requests on the repo, whatever their status (the listing: num, title,
        status; no events)."""
        me = self.me()
        with self._t("list pull requests"):
            return [d for d in self.api.get_repo_discussions(self.repo_name, author=me, discussion_type="pull_request")
                    if d.is_pull_request and d.author == me]

    def discussion(self, num: int):
        """Another discussion of the repo, with its events (the bot's fix pull requests)."""
        with self._t("read discussion"):
            return self.api.get_discussion_details(self.repo_name, num)

    def close(self, num: int, comment: str) -> None:
        """Close discussion ``num`` with a comment (a fix pull request the bot opened)."""
        with self._t("close pull request"):
            self.api.change_discussion_status(self.repo_name, num, "closed", comment=comment)

    def comment(self, comment_id: str) -> DiscussionComment | None:
        """A comment event of this discussion by id (author name, content), or None."""
        for event in self.details().events:
            if event.type == "comment" and event.id == comment_id:
                return event
        return None


def read_range(repo_id: str, name: str, revision: str | None, start: int, end: int, *,
               token: str | bool | None = None, endpoint: str | None = None) -> bytes | None:
    """Bytes ``start..end`` (inclusive) of a Hub file by one HTTP range request (206, ``Content-Range``); None
    when there is no such file. Never more is kept, even from a server that ignores the range."""
    from huggingface_hub import hf_hub_url, utils  # the resolve URL, the client's own session and headers

    with utils.get_session().stream("GET", hf_hub_url(repo_id, name, revision=revision, endpoint=endpoint), headers={
            **utils.build_hf_headers(token=token), "range": f"bytes={start}-{end}"}) as response:
        status = response.status_code
        if status == 416 or status == 404 and response.headers.get("x-error-code") == "EntryNotFound":
            return b"" if status == 416 else None  # the file is shorter than ``start``; there is no file
        if status >= 400:
            response.read()  # the error's body, for huggingface_hub's reading of it
            utils.hf_raise_for_status(response)
        skip = start if status == 200 else 0  # a server that sent the file from its start
        data = bytearray()
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) > skip + end - start:
                break
    return bytes(data[skip : skip + end - start + 1])
