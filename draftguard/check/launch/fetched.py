"""A launch file checked where there is no checkout of its revision: the bot (files over the host's API)
and the Action's base commit (files out of git). What the launch needs is written into a private folder
at the same repo paths, and ``launch_report`` runs there with that folder as its confinement root, so
findings name the repo path and the launch file's lines, as on a checkout.

Written: the launch file; the ``.env`` beside it when the repo has one; for each local model or drafter
folder a launch names (``vllm serve MODEL``, the model options, the drafter of ``--speculative-config``
or ``--speculative-draft-model-path``, through a compose volume's host path), that folder's
config.json. A Hub id is not written (it is read anonymously from the Hub, as on the Action's checkout);
a path outside the repo is not asked for.

Not written: other files a launch can name (the Dockerfile a compose ``build:`` names, a Kubernetes
image's Dockerfile), so the release such a file pins is not known here.

In: a repo path, ``read(path) -> bytes | None`` (None: not in the repo at that revision; it may raise
``FileTooLarge`` / ``UnreadableFile``), the folder to write into.
Out: ``materialize_launch`` -> whether the launch file exists at that revision.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from pathlib import Path
from typing import Callable

from draftguard.check.launch import reading
from draftguard.check.launch.check import _draft_ref
from draftguard.check.launch.flags import read_flags
from draftguard.check.launch.sources import Launch, read_launches

Reader = Callable[[str], "bytes | None"]


def materialize_launch(path: str, read: Reader, into: Path) -> bool:
    """Write ``path`` and what its launches name (module docstring) under ``into``; False when the
    launch file is not there. A launch that cannot be read writes nothing more: ``launch_report``
    says why, on the file."""
    into = Path(os.path.realpath(into))
    data = read(path)
    if data is None:
        return False
    _write(into, path, data)
    folder = posixpath.dirname(path)
    env = read(posixpath.join(folder, ".env"))
    if env is not None:
        _write(into, posixpath.join(folder, ".env"), env)
    with reading.confined(into), contextlib.chdir(into):
        try:
            launches = read_launches(path)
        except Exception:  # noqa: BLE001 (launch_report reads it again and reports it on the file)
            return True
        wanted: list[str] = []
        for launch in launches:
            for ref in _model_refs(launch):
                rel = _local_folder(ref, launch, into)
                if rel is not None and rel not in wanted:
                    wanted.append(rel)
    for rel in wanted:
        config = posixpath.join(rel, "config.json") if rel else "config.json"
        found = read(config)
        if found is not None:
            _write(into, config, found)
    return True


def _model_refs(launch: Launch) -> list[str]:
    """The model and the drafter a launch names, as written."""
    try:
        flags = read_flags(launch)
        refs = [flags.model.text] if flags.model is not None and flags.model.text else []
        draft = _draft_ref(flags)
    except Exception:  # noqa: BLE001 (the check says what is wrong with the flags)
        return []
    return refs + ([draft[0]] if draft is not None and draft[0] else [])


def _local_folder(ref: str, launch: Launch, into: Path) -> str | None:
    """The repo folder (posix, "" for the root) a model reference would be read from, as
    ``check._resolve`` finds it; None for a path outside the repo."""
    if ref.startswith("~"):
        return None
    if ref.startswith("/"):
        mounted = max((c for c in launch.volumes if ref == c or ref.startswith(c.rstrip("/") + "/")), key=len,
                      default=None)
        if mounted is None:
            return None
        host = Path(launch.volumes[mounted]) / ref[len(mounted):].lstrip("/")
    else:
        host = launch.folder / ref
    rel = os.path.relpath(os.path.normpath(host), into)
    if rel == os.curdir:
        return ""
    if rel.startswith(os.pardir) or os.path.isabs(rel):
        return None
    return Path(rel).as_posix()


def _write(into: Path, path: str, data: bytes) -> None:
    dest = Path(os.path.normpath(into / path))
    if not dest.is_relative_to(into) or dest == into:
        return  # a repo path never leaves the repo; nothing is written outside the folder
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
