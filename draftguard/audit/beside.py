"""The files beside a repo's config.json that the audit reads for the repo rules (issue 41), within a
per-repo byte budget: ``check.repo.fetched`` (the bots' reader too) over huggingface_hub's cache and
range reads, each file only when the repo's listing names it, sized by the listing.

In: the repo id, the audited commit, config.json's bytes and the listing's ``{path: size}``.
Out: ``read_beside`` -> ``RepoRead`` (files, bytes spent, notes on what the budget left unread).
"""

from __future__ import annotations

import os
from typing import Mapping

from draftguard.check.repo.fetched import RepoRead, fetch_repo_files
from draftguard.hosts.hub import read_range
from draftguard.hub_access import fetch_file

# What one repo's files beside config.json may cost the audit: the tokenizer files and the index of a
# dense model or a mid-size MoE (a 1 MB index is ~10,000 tensor names); a larger index is a note on the
# record, so a fleet of giant MoE repos cannot make the audit a bulk download.
AUDIT_REPO_BYTES = 1024 * 1024


def audit_repo_bytes(env: Mapping[str, str] | None = None) -> int:
    """The per-repo budget: ``DRAFTGUARD_AUDIT_REPO_BYTES``, else ``AUDIT_REPO_BYTES`` (0 reads
    config.json alone, as the audit did before issue 41).

    Example::

        >>> audit_repo_bytes({}), audit_repo_bytes({"DRAFTGUARD_AUDIT_REPO_BYTES": "0"})
        (1048576, 0)
    """
    value = (os.environ if env is None else env).get("DRAFTGUARD_AUDIT_REPO_BYTES")
    try:
        return max(0, int(value)) if value else AUDIT_REPO_BYTES
    except ValueError:
        return AUDIT_REPO_BYTES


def read_beside(repo: str, sha: str, config: bytes, sizes: dict[str, int]) -> RepoRead:
    """What the repo rules read beside ``repo``'s config.json at ``sha`` (nothing with a budget of 0).
    huggingface_hub's errors are raised as they come (the audit retries and classifies them)."""
    budget = audit_repo_bytes()
    if not budget:
        return RepoRead()

    def read(name: str, limit: int) -> bytes | None:
        data, _ = fetch_file(repo, name, sha, limit=limit, size=sizes.get(name))
        return data

    return fetch_repo_files(config, "", read, lambda name, start, end: read_range(repo, name, sha, start, end),
                            budget=budget, sizes=sizes)
