"""What a host of pull requests (GitHub, the Hub, a new one) gives the one pull-request flow
(``bot/flow.py``): the contract a new host fills in, as renovate's ``Platform`` interface does.

A host reads a pull request and its repository, writes one sticky comment and replies, and says
who may command it and whose pull requests it trusts. Everything else (which head a command
approves, settings from the default branch, size and count limits, one GPU job per head, the locks)
is the flow's, written once for every host.

Optional capabilities are methods a host may leave out; the flow asks ``hasattr`` first:
``react(comment_id, content)`` (GitHub's reactions: without them the comment itself says that a
command ran), ``publish_status(name, head, **fields)`` (GitHub's check runs) and
``post_suggestions(outcome, head)`` (GitHub's suggested changes on the diff).

In: nothing; this module only declares.
Out: ``PullRequestHost`` (the protocol), ``CommandCall`` (a command as the host read it) and
``Trust`` (a yes or no with the reason the comment shows).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple, Protocol, runtime_checkable


class Trust(NamedTuple):
    """A host's answer to "may this person (or this pull request) have a GPU test?", with the reason
    that the sticky comment shows either way."""

    ok: bool
    why: str


@dataclass(frozen=True)
class CommandCall:
    """A command on a pull request, as its host read it: who wrote it, which commands it holds, the
    comment it came in (None for GitHub's Re-run button), the head it names (``pinned``: a Re-run
    button names its check run's commit), when it was written (``created_at``, ISO 8601, the host's
    clock), and what a forced GPU rerun answers (``asked``: the comment, or the re-run request)."""

    by: str
    commands: list[str] = field(default_factory=list)
    comment_id: int | str | None = None
    pinned: str | None = None
    created_at: str | None = None
    asked: int | str | None = None

    @property
    def label(self) -> str:
        """How the comment names the command: ``/recheck``, ``/ok-to-test``, or "command"."""
        return " ".join(f"/{c}" for c in self.commands) or "command"


@runtime_checkable
class PullRequestHost(Protocol):
    """One pull request on one host, as the flow sees it. Every write is idempotent (a retried job
    finds what it wrote before); every read of the head is a fresh read."""

    source: str  # the Job source this host's webhooks make ("github", "hub")
    label: str  # how messages name it ("GitHub", "the Hub")
    repo_name: str
    number: int
    # A host whose strangers may still re-run the light check with a command (the Hub: anyone may
    # comment); on the others a command from someone who may not command is answered and dropped.
    strangers_may_recheck: bool
    # A host that announces one push in two webhooks (the Hub: "discussion" and "repo.content"): a head
    # checked once is not checked again unless a command asks.
    announces_heads_twice: bool
    # The sentence after "why not" when a pull request gets no GPU test: who can change that.
    trust_hint: str

    def closed(self) -> str | None:
        """None while the pull request is open; else its state ("closed", "merged")."""

    def head(self) -> str:
        """The pull request's head commit now (read afresh)."""

    def base(self) -> str:
        """The commit the head is compared against: the target branch's."""

    def changed_files(self, base: str, head: str) -> list[tuple[str, str]]:
        """``(path, status)`` of every file the pull request changes."""

    def read_file(self, path: str, ref: str, max_bytes: int = ...) -> bytes | None:
        """A file's bytes at a ref (None when absent), its size asked before any byte is read."""

    def default_branch(self) -> str:
        """The repo's default branch: settings are read there, never from the pull request's head nor
        from the branch it targets (which its author chooses)."""

    def download_folder(self, folder: str, ref: str, dest: str) -> str:
        """The folder's files at ``ref``, sized first, on disk; returns the local folder holding them
        (``dest``, or a cache's)."""

    def find_sticky(self) -> object | None:
        """The bot's own sticky comment, or None (a comment anyone else wrote never counts)."""

    def upsert_sticky(self, render: Callable[[str | None], str]) -> object:
        """Create or edit the sticky comment; ``render`` maps the current body (or None) to the new."""

    def reply_once(self, comment_id: int | str, body: str) -> None:
        """Answer a comment once (a retried job does not answer twice)."""

    def command(self) -> CommandCall | str:
        """The command the job's comment carries, or why there is none ("skipped: ...")."""

    def may_command(self, call: CommandCall) -> Trust:
        """Whether the command's author may approve a GPU test (and, unless
        ``strangers_may_recheck``, run a command at all)."""

    def author_trust(self) -> Trust:
        """Whether the pull request earns a GPU test by who opened it and where its head lives."""
