"""Git plumbing for the Action: which files a pull request changes, and the model files at a commit.

In: the checkout's root, the ``Context`` (base and head) and the ``paths`` input.
Out: the base commit (``find_base``), the changed and selected config files (``changed_files``,
``select_targets``), and those files written out at another commit (``materialize``), so the base can
be checked the same way as the head; and, for ``draftguard check`` with no TARGET or a folder of
model folders, every model config.json in a folder by the same globs and git's own file list
(``discover``).
"""

from __future__ import annotations

import fnmatch
import json
import os
import posixpath
import re
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from draftguard.action.inputs import ActionInputs, Context
from draftguard.errors import ActionError
from draftguard.snapshot import MAX_CONFIG_BYTES, MODEL_FILES, is_model_file


# --- git ----------------------------------------------------------------------------------------

def git(root: str | Path, *args: str, check: bool = True, timeout: float = 120) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise ActionError(f"git {' '.join(args)} failed: {done.stderr.strip().splitlines()[-1:] or ['?']}")
    return done.stdout


def git_bytes(root: str | Path, *args: str) -> bytes:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, check=True, timeout=120).stdout


def repo_root(cwd: str | Path) -> Path:
    done = subprocess.run(["git", "-C", str(cwd), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if done.returncode != 0:
        raise ActionError(f"{cwd} is not a git checkout: add `- uses: actions/checkout@v4` before draftguard")
    return Path(done.stdout.strip())


def has_commit(root: Path, sha: str) -> bool:
    return subprocess.run(["git", "-C", str(root), "cat-file", "-e", f"{sha}^{{commit}}"],
                          capture_output=True).returncode == 0


def find_base(root: Path, ctx: Context) -> tuple[str | None, str | None]:
    """The commit to diff against, and a note when there is none.

    actions/checkout fetches one commit by default; the base is then fetched by sha (the checkout
    leaves credentials for that), else the merge commit's first parent serves, which GitHub made
    from the base."""
    candidates = [c for c in (ctx.base_sha,) if c]
    if ctx.base_ref and not candidates:
        candidates.append(f"origin/{ctx.base_ref}")
    for sha in candidates:
        if has_commit(root, sha):
            return sha, None
    for sha in candidates:
        if re.fullmatch(r"[0-9a-f]{40}", sha):
            subprocess.run(["git", "-C", str(root), "fetch", "--no-tags", "--quiet", "--depth=1", "origin", sha],
                           capture_output=True, timeout=120)
            if has_commit(root, sha):
                return sha, None
    parents = git(root, "rev-list", "--parents", "-n", "1", "HEAD", check=False).split()
    if len(parents) == 3 and has_commit(root, parents[1]):
        return parents[1], None
    if candidates:
        return None, (f"base commit {candidates[0][:12]} is not in the checkout and could not be fetched: "
                      "every config file was checked and no finding is marked new (use actions/checkout "
                      "with `fetch-depth: 0`)")
    return None, None


def changed_files(root: Path, base: str) -> list[str]:
    """Paths that HEAD changes since it left ``base`` (and that still exist at HEAD).

    The three-dot diff (from the merge base) ignores what the base branch did since; a shallow
    checkout may hold no merge base, and then the plain two-commit diff serves."""
    args = ("diff", "--name-only", "--no-renames", "--diff-filter=d", "-z")
    done = subprocess.run(["git", "-C", str(root), *args, f"{base}...HEAD"], capture_output=True, text=True)
    out = done.stdout if done.returncode == 0 else git(root, *args, base, "HEAD")
    return [p for p in out.split("\0") if p]


def tracked_files(root: Path) -> list[str]:
    return [p for p in git(root, "ls-files", "-z").split("\0") if p]


def glob_regex(pattern: str) -> re.Pattern:
    """A path glob as a regex: ``*`` and ``?`` stay within a folder, ``**`` crosses folders."""
    out, i = [], 0
    pattern = pattern.strip()
    while pattern.startswith("./"):
        pattern = pattern[2:]
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.find("]", i + 1)
            if end == -1:
                out.append(re.escape(pattern[i]))
                i += 1
            else:
                out.append(fnmatch.translate(pattern[i:end + 1])[4:-3])  # fnmatch's class syntax
                i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out).rstrip("/") + r"\Z")


def select_targets(root: Path, inputs: ActionInputs, changed: list[str] | None,
                   notes: list[str]) -> list[str]:
    """Config files to check, relative to the repo root.

    With ``paths``: every tracked JSON file a glob matches (a folder glob means its config.json).
    Without: the config.json of every folder where a model file changed; with no base to diff
    against, every tracked config.json."""
    files = tracked_files(root)
    if inputs.paths:
        chosen: list[str] = []
        for pattern in inputs.paths:
            rx = glob_regex(pattern)
            folder_rx = glob_regex(pattern.rstrip("/") + "/config.json")
            matched = [f for f in files if f.endswith(".json") and (rx.match(f) or folder_rx.match(f))]
            if not matched:
                notes.append(f"`paths` glob {pattern!r} matches no tracked JSON file")
            chosen += [f for f in matched if f not in chosen]
        return chosen
    if changed is None:
        return [f for f in files if posixpath.basename(f) == "config.json"]
    tracked = set(files)
    folders = sorted({posixpath.dirname(p) for p in changed
                      if is_model_file(p)})
    configs = [posixpath.join(d, "config.json") if d else "config.json" for d in folders]
    return [c for c in configs if c in tracked and (root / c).is_file()]


def select_launch_files(root: Path, globs: list[str], changed: list[str] | None, notes: list[str]) -> list[str]:
    """Launch files to check, relative to the repo root: the tracked files the globs match that the pull
    request changed (every match when there is no base to diff against)."""
    return match_launch_files(tracked_files(root), globs, changed, notes)


def match_launch_files(files: list[str], globs: list[str], changed: list[str] | None,
                       notes: list[str] | None = None) -> list[str]:
    """The ``files`` (repo paths) the launch globs match, in glob order, each once, only those in
    ``changed`` (None: all). The Action passes the tracked files; the bot, which has no checkout, the
    pull request's changed files. With ``notes``, a glob that matches none of ``files`` says so."""
    chosen: list[str] = []
    for pattern in globs:
        rx = glob_regex(pattern)
        matched = [f for f in files if rx.match(f)]
        if not matched and notes is not None:
            notes.append(f"launch glob {pattern!r} matches no tracked file")
        chosen += [f for f in matched if f not in chosen and (changed is None or f in changed)]
    return chosen


def blob_at(root: Path, commit: str, path: str, max_bytes: int) -> bytes | None:
    """The bytes of the regular file ``path`` at ``commit`` (at most ``max_bytes``), or None: not there,
    not a regular file (a symlink, a submodule) or larger. For launch files checked at the base commit."""
    listing = subprocess.run(["git", "-C", str(root), "ls-tree", "-l", "-z", commit, "--", path], capture_output=True)
    entry = listing.stdout.split(b"\0")[0].decode("utf-8", "replace") if listing.returncode == 0 else ""
    meta, _, name = entry.partition("\t")
    parts = meta.split()
    if name != path or len(parts) != 4 or parts[0] not in ("100644", "100755") or not parts[3].isdigit():
        return None
    if int(parts[3]) > max_bytes:
        return None
    return git_bytes(root, "cat-file", "blob", parts[2])


@contextmanager
def _cwd(path: str | Path) -> Iterator[None]:
    before = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def materialize(root: Path, commit: str, targets: list[str], into: Path) -> list[str]:
    """Write each target's folder at ``commit`` (files up to the config size limit, not weights'
    bytes) under ``into``, at the same relative paths. Returns the targets that exist there."""
    present = []
    for folder in sorted({posixpath.dirname(t) for t in targets}):
        spec = f"{commit}:{folder}" if folder else f"{commit}:"
        listing = subprocess.run(["git", "-C", str(root), "ls-tree", "-l", "-z", spec], capture_output=True)
        if listing.returncode != 0:
            continue
        for entry in listing.stdout.split(b"\0"):
            if not entry:
                continue
            meta, _, name = entry.decode("utf-8", "replace").partition("\t")
            mode, kind, sha, size = meta.split()
            if kind != "blob" or not size.isdigit() or int(size) > MAX_CONFIG_BYTES:
                continue
            dest = into / folder / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(git_bytes(root, "cat-file", "blob", sha))
    for t in targets:
        if (into / t).is_file():
            present.append(t)
    return present


# --- discovery: `draftguard check` with no TARGET, or a folder of model folders ------------------

# A config.json is a model's (or a drafter's) when it says so: keys that save_pretrained, the
# speculators format or a remote-code repo write. Any other config.json (a tool's) is left alone.
MODEL_KEYS = frozenset({"model_type", "architectures", "speculators_model_type", "auto_map", "transformers_version"})


def repository_files(folder: Path) -> list[str]:
    """The files under ``folder`` (posix paths relative to it) that a check may read: in a git
    checkout, what git lists there, tracked or not, less what .gitignore and the like exclude
    (``git ls-files --cached --others --exclude-standard``); elsewhere every file, less hidden folders."""
    done = subprocess.run(["git", "-C", str(folder), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          capture_output=True, text=True, timeout=120)
    if done.returncode == 0:
        return sorted({p for p in done.stdout.split("\0") if p and (folder / p).is_file()})
    out = []
    for here, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        rel = Path(here).relative_to(folder).as_posix()
        out += [posixpath.join(rel, f) if rel != "." else f for f in files]
    return sorted(out)


def _matches(path: str, patterns: list[str]) -> bool:
    """Whether ``path`` or a folder above it matches one of the globs (``drafters`` covers
    ``drafters/a/config.json``; ``**/old/*`` covers ``x/old/y/config.json``)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return any(glob_regex(p.strip("/")).match(prefix) for p in patterns for prefix in prefixes)


def is_model_config(path: Path) -> bool:
    """Whether ``path`` (a config.json) is a model's: a JSON object holding one of ``MODEL_KEYS``,
    or one that sits beside another model file (a tokenizer, weights' index...). A file that is not
    JSON counts (the check then says what is wrong with it)."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return True
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return True
    if not isinstance(data, dict):
        return False
    return bool(MODEL_KEYS & data.keys()) or any((path.parent / name).is_file() for name in MODEL_FILES - {"config.json"})


def discover(folder: str | Path, *, root: str | Path | None = None, paths: list[str] | None = None,
             exclude: list[str] | None = None) -> list[str]:
    """Every model config.json under ``folder`` (``repository_files``: .gitignore honoured in a
    checkout), as paths from the current folder; only those under ``paths`` (folders or globs,
    relative to ``root``, the settings file's folder) when given, less those ``exclude`` matches."""
    folder = Path(folder)
    base = Path(os.path.abspath(root if root is not None else folder))
    found = []
    for rel in repository_files(folder):
        if posixpath.basename(rel) != "config.json":
            continue
        path = folder / rel
        from_root = Path(os.path.relpath(os.path.abspath(path), base)).as_posix()
        if paths and not _matches(from_root, paths):
            continue
        if exclude and _matches(from_root, exclude):
            continue
        if is_model_config(path):
            found.append(os.path.relpath(path))
    return found
