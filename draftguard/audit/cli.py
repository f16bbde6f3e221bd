"""``draftguard audit``: its arguments and its exit code.

In: the parsed command line (``add_audit_parser`` registers it; ``cmd_audit`` runs it): a repo list
file or --org/--search/--filter, --transformers, --engine, --out, --queue, --open-discussions and the
limits.
Out: the reports written by ``run.run_audit``, its summary line and any version that could not run
on stderr, the discussions' dry run or actions on stdout, and the exit code.

Exit codes, as for ``check``: 0 no repo at or above --fail-on; 1 some repo is; 2 bad input (a bad
list file, flag or queue URL, or a requested transformers version that could not run), the Hub out of
reach (asked once, before anything else: one line within seconds), or an audit that could check no
repo at all (so a nightly run never goes green through a Hub outage).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

from draftguard.audit.discussions import sync_discussions
from draftguard.audit.inputs import select_repos
from draftguard.audit.record import TRANSIENT
from draftguard.audit.repo import AuditOptions
from draftguard.audit.run import AuditRun, run_audit, say, summary_line
from draftguard.audit.versions import audit_versions
from draftguard.check import resolver
from draftguard.check.engines.specs import parse_engines
from draftguard.hub_access import is_offline, probe_hub, repo_id_problem, unreachable_error
from draftguard.snapshot import BadInput

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


def add_audit_parser(sub: "argparse._SubParsersAction") -> None:
    """Register the ``audit`` subcommand (imports nothing heavy)."""
    audit = sub.add_parser(
        "audit", help="check a fleet of Hub model repos against pinned and latest transformers and their targets",
        description="Audit many Hub model repos at once: the light check and the drafter rules (against each "
        "drafter's target), under one or more transformers versions. Writes OUT/audit.jsonl (one record per "
        "repo, appended as each finishes; a rerun resumes and skips unchanged repos), OUT/audit.md and "
        "OUT/audit.html. See docs/audit.md.",
    )
    audit.add_argument("repo_file", nargs="?", metavar="FILE",
                       help="a file of repo ids, one per line, owner/name[@revision]; # starts a comment")
    audit.add_argument("--org", metavar="NAME", help="every model repo of this Hub user or organization")
    audit.add_argument("--search", metavar="TEXT", help="model repos whose id contains TEXT")
    audit.add_argument("--filter", dest="tag", metavar="TAG", help="model repos with this tag (dflash, eagle3, ...)")
    audit.add_argument("--limit", type=int, metavar="N", help="audit at most N repos")
    audit.add_argument("--transformers", metavar="V1,V2",
                       help="resolve under each of these transformers versions; `latest` is the newest release on "
                       "the package index (default: the installed version only)")
    audit.add_argument("--engine", metavar="SPECS",
                       help="also judge what these engines serve, e.g. vllm==0.32.0,sglang==0.5.23 (light tier: "
                       "findings DG200-DG205; with the installed transformers only, not through --queue)")
    audit.add_argument("--out", metavar="DIR", default="draftguard-audit",
                       help="folder for audit.jsonl, audit.md and audit.html (default: ./draftguard-audit)")
    audit.add_argument("--full", action="store_true",
                       help="check every repo again, even those whose commit, versions and draftguard are unchanged")
    audit.add_argument("--fail-on", choices=["error", "warning", "never"], default="error",
                       help="exit 1 when a repo has a finding, regression or fault of its own at or above this "
                       "severity (default: error)")
    audit.add_argument("--concurrency", type=int, default=8, metavar="N",
                       help="repos fetched and checked at once in this process (default: 8)")
    audit.add_argument("--queue", metavar="URL",
                       help="redis://HOST:PORT/DB: run the repos as jobs on the queue `draftguard worker` serves, "
                       "and gather their results here")
    audit.add_argument("--hub-rate", type=float, default=0.0, metavar="N",
                       help="with --queue: Hub requests a second for the whole audit, shared by every worker "
                       "(default: the rate the Hub's RateLimit-Policy header states; its Retry-After and "
                       "RateLimit waits are shared by every worker either way)")
    audit.add_argument("--open-discussions", nargs="?", const="dry-run", choices=["dry-run", "post"],
                       metavar="post",
                       help="tell owners: one marked Hub discussion per failing repo, edited on later runs and closed "
                       "when clean. Alone it is a dry run printing what it would post; `--open-discussions post` "
                       "writes (needs HF_TOKEN)")
    audit.add_argument("--retries", type=int, default=4, metavar="N",
                       help="retries of a repo after 429, 5xx or a timeout (default: 4)")
    audit.add_argument("--max-wait", type=float, default=120.0, metavar="SECONDS",
                       help="the longest one Retry-After (or backoff) is waited (default: 120)")
    audit.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    audit.set_defaults(func=cmd_audit)


def cmd_audit(args: argparse.Namespace) -> int:
    for name in ("concurrency", "retries"):
        if getattr(args, name) < (1 if name == "concurrency" else 0):
            return _bad(f"--{name} must be at least {1 if name == 'concurrency' else 0}")
    if args.hub_rate < 0 or args.hub_rate != args.hub_rate:
        return _bad("--hub-rate must be a number of requests a second, 0 or more")
    if args.hub_rate and not args.queue:
        return _bad("--hub-rate shares a budget between the workers of --queue; without --queue use --concurrency")
    if args.queue and not args.queue.startswith(("redis://", "rediss://", "unix://")):
        return _bad(f"--queue {args.queue!r}: give redis://HOST:PORT/DB (the queue `draftguard worker` serves)")
    if args.open_discussions == "post" and not os.environ.get("HF_TOKEN"):
        return _bad("--open-discussions post needs HF_TOKEN (a token that can write discussions)")
    try:
        host = resolver.transformers_version()
        versions = audit_versions(args.transformers, host)
        if args.org is not None:
            _check_org(args.org)
        if not args.repo_file:
            _reach_hub()  # before the listing, which huggingface_hub would retry for 23 s
        refs = select_repos(repo_file=args.repo_file, org=args.org, search=args.search, tag=args.tag,
                            limit=args.limit)
        if args.repo_file:
            _reach_hub()  # after the list file's own bad lines, which need no network
        engines = parse_engines(args.engine) if args.engine else []
        if engines and (args.queue or versions != [host]):
            raise BadInput("--engine runs in this process under the installed transformers alone: not with "
                           "--queue or --transformers yet")
        options = AuditOptions(versions=versions, host_version=host, full=args.full, retries=args.retries,
                               max_wait=args.max_wait, engines=engines)
        run = AuditRun(refs=refs, options=options, out=Path(args.out), concurrency=args.concurrency,
                       queue_url=args.queue, progress=not args.no_progress, hub_rate=args.hub_rate)
        result = run_audit(run)
    except BadInput as exc:
        return _bad(str(exc))
    say(summary_line(result))
    say(f"report: {Path(args.out) / 'audit.html'} (and audit.md, audit.jsonl)")
    if args.open_discussions:
        sync_discussions(result.records, args.open_discussions, say=lambda text: print(text))
    for version, why in sorted(result.version_problems.items()):
        print(f"draftguard: transformers {version} did not run: {why}", file=sys.stderr)
    if result.version_problems:
        return EXIT_BAD_INPUT
    if options.hub_gone:
        left = len(refs) - result.checked - result.skipped
        return _bad(f"{options.hub_gone}; the audit stopped with {left} of {len(refs)} repos not asked (a rerun "
                    "goes on from audit.jsonl)")
    if nothing := nothing_checked(result.records):
        return _bad(nothing)
    return EXIT_FAIL if result.fails(args.fail_on) else EXIT_OK


def nothing_checked(records: list) -> str | None:
    """The one line for an audit that could read no repo (every record an access or transient error:
    a Hub outage, a token that sees nothing), else None. A repo that was read and is not checkable
    (no config.json, a config no transformers class reads) was audited: it does not count here.

    Example::

        >>> from draftguard.audit.record import RepoError, RepoRecord
        >>> r = RepoRecord("a/b", "a/b", None, errors=[RepoError("unreachable", "the Hub cannot be reached")])
        >>> nothing_checked([r])
        'nothing could be checked: 1 of 1 repos could not be read (unreachable 1); the first: a/b: the Hub cannot be reached'
        >>> nothing_checked([RepoRecord("a/c", "a/c", None, errors=[RepoError("no-config", "no config.json")])]) is None
        True
    """
    if not records or any(not r.errors or any(e.kind not in UNREAD for e in r.errors) or r.findings
                          for r in records):
        return None
    kinds = Counter(r.errors[0].kind for r in records)
    first = records[0]
    return (f"nothing could be checked: {len(records)} of {len(records)} repos could not be read ("
            + ", ".join(f"{kind} {n}" for kind, n in kinds.most_common())
            + f"); the first: {first.repo}: {first.errors[0].message}")


# Errors that mean a repo was never read: the Hub, the token or the network, not the repo's content.
UNREAD = TRANSIENT + ("gated", "not-found", "revision-not-found", "http-error", "internal")


def _reach_hub() -> None:
    """Ask the Hub once, without retries: out of reach is bad input in one line (exit 2). The audit
    reads every repo's current commit, which no cache holds: offline mode is refused too."""
    if is_offline():
        raise BadInput("the audit reads the Hub, and huggingface_hub is in offline mode (HF_HUB_OFFLINE=1 or "
                       "TRANSFORMERS_OFFLINE=1): unset it; nothing was checked")
    problem = probe_hub()
    if problem is not None:
        raise unreachable_error(problem, cache=False)


def _check_org(org: str) -> None:
    """An --org that cannot be a Hub user or organization name is refused before any request."""
    if "/" in org or repo_id_problem(f"{org}/x") is not None:
        raise BadInput(f"--org {org!r}: not a Hub user or organization name (letters, digits, '-', '_' and '.')",
                       key="org")


def _bad(message: str) -> int:
    print(f"draftguard: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
