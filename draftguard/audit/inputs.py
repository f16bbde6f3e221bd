"""Which repos an audit checks: a file of repo ids, or a Hub listing (--org, --search, --filter).

A list file holds one repo id per line, ``owner/name`` or ``owner/name@revision``; blank lines and
``#`` comments are skipped. A malformed line is bad input naming the file and line (exit 2), never
a half-run audit.

In: a list file's path, or an org, search text or tag for ``HfApi.list_models``.
Out: ``select_repos`` -> a list of ``RepoRef`` (repo, revision, and the listing's commit sha), or
``BadInput`` (a bad line, nothing named, an empty listing, the Hub unreachable).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from draftguard.hub_access import hub_api, hub_problem, repo_id_problem
from draftguard.snapshot import BadInput

# What the Hub accepts as a model repo id (owner/name), and a revision: a branch, tag, sha or refs/pr/N.
_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
_REVISION = re.compile(r"^[\w][\w./-]*$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class RepoRef:
    """One repo to audit, at a revision (None: the default branch). ``sha`` is the commit the Hub's
    listing gave for it, when it came from one: a rerun skips the repo without asking the Hub again
    when its record was made at that commit."""

    repo: str
    revision: str | None = None
    sha: str | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        """The repo as the audit's records name it: ``owner/name`` or ``owner/name@revision``."""
        return f"{self.repo}@{self.revision}" if self.revision else self.repo

    @property
    def known_sha(self) -> str | None:
        """The commit this repo is at, known without asking the Hub: the listing's sha, or a revision
        that is a commit sha (a commit never changes).

        Example::

            >>> RepoRef("a/b", "0123456789abcdef0123456789abcdef01234567").known_sha[:7], RepoRef("a/b", "main").known_sha
            ('0123456', None)
        """
        if self.revision and _COMMIT.match(self.revision):
            return self.revision
        return self.sha if not self.revision else None

    @classmethod
    def parse(cls, text: str) -> "RepoRef":
        """Parse ``owner/name[@revision]``; raise ValueError saying what is wrong.

        Example::

            >>> RepoRef.parse("z-lab/Qwen3-8B-DFlash@v1.0")
            RepoRef(repo='z-lab/Qwen3-8B-DFlash', revision='v1.0')
        """
        repo, sep, revision = text.strip().partition("@")
        if not _REPO.match(repo):
            raise ValueError(f"{repo!r} is not a Hub repo id (owner/name)")
        problem = repo_id_problem(repo)  # the Hub's own rules: no "--" or "..", no "-" or "." at the ends
        if problem is not None:
            raise ValueError(f"{repo!r} is not a Hub repo id ({problem})")
        if sep and (not revision or not _REVISION.match(revision) or ".." in revision):
            raise ValueError(f"{revision!r} is not a revision (a branch, tag or commit sha)")
        return cls(repo, revision or None)


def read_repo_list(path: str) -> list[RepoRef]:
    """Repos from a list file, in order, each once. Raises BadInput naming the file and line.

    Example::

        >>> import tempfile
        >>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        ...     _ = f.write("# drafters\\nacme/a\\nacme/b@main  # pinned\\n\\nacme/a\\n")
        >>> [r.key for r in read_repo_list(f.name)]
        ['acme/a', 'acme/b@main']
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file (give a file of repo ids, one per line)", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"{path}: cannot be read ({exc.__class__.__name__})", file=path) from None
    refs: dict[str, RepoRef] = {}
    for number, line in enumerate(text.splitlines(), 1):
        entry = line.split("#", 1)[0].strip()
        if not entry:
            continue
        try:
            ref = RepoRef.parse(entry)
        except ValueError as exc:
            raise BadInput(f"{path}:{number}: {exc}", file=path, line=number) from None
        refs.setdefault(ref.key, ref)
    if not refs:
        raise BadInput(f"{path}: no repo ids in this file (one owner/name per line)", file=path)
    return list(refs.values())


def list_hub_repos(*, org: str | None = None, search: str | None = None, tag: str | None = None,
                   limit: int | None = None) -> list[RepoRef]:
    """Model repos of the Hub listing (``HfApi.list_models``): by author (a user or an org), search
    text and tag, combined as the Hub combines them. Returns them sorted by id.

    Raises BadInput when the Hub refuses the listing or cannot be reached (nothing to audit then).
    """
    what = ", ".join(f"{k} {v!r}" for k, v in (("author", org), ("search", search), ("filter", tag)) if v)
    try:
        # expand=["sha"]: the listing carries each repo's commit, so a rerun needs nothing more for a
        # repo whose commit is unchanged (the Hub's listing has no sha unless asked).
        models = hub_api().list_models(author=org, search=search, filter=tag, limit=limit, expand=["sha"])
        listed = {m.id: m.sha for m in models}
    except Exception as exc:
        problem = hub_problem(exc)
        if problem is None:
            raise
        raise BadInput(f"listing models ({what}): {problem.message}") from None
    return [RepoRef(i, sha=listed[i]) for i in sorted(listed)]


def select_repos(*, repo_file: str | None, org: str | None, search: str | None, tag: str | None,
                 limit: int | None = None) -> list[RepoRef]:
    """The repos an audit asked for: the list file, else the Hub listing. Raises BadInput when none
    was asked for, or when the selection is empty."""
    if repo_file:
        refs = read_repo_list(repo_file)
        return refs[:limit] if limit else refs
    if not (org or search or tag):
        raise BadInput("name what to audit: a file of repo ids, or --org, --search or --filter")
    refs = list_hub_repos(org=org, search=search, tag=tag, limit=limit)
    if not refs:
        raise BadInput("the Hub listed no model repos for " + ", ".join(
            f"{k} {v!r}" for k, v in (("--org", org), ("--search", search), ("--filter", tag)) if v))
    return refs
