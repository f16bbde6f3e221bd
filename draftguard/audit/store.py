"""audit.jsonl: one line per audited repo, appended and flushed as each repo finishes.

Nothing is lost when the audit is killed (even with kill -9): every finished repo is a complete line
on disk, a line cut off mid-write is ignored when read back, and the next run starts from what is
there. The latest line for a repo wins; ``compact`` rewrites the file to one line per repo
(atomically, by rename) when a run ends.

In: an output folder (``RecordStore``) and ``RepoRecord`` objects to ``append``.
Out: lines of ``<folder>/audit.jsonl``; ``load`` -> the latest ``RepoRecord`` per repo key.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from draftguard.audit.record import RepoRecord

JSONL_NAME = "audit.jsonl"


class RecordStore:
    """The audit.jsonl of an output folder. Thread-safe appends."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.path = self.folder / JSONL_NAME
        self._lock = threading.Lock()

    def load(self) -> dict[str, RepoRecord]:
        """The latest record per repo key. Unreadable lines (a write cut off by a kill) are skipped.

        Example::

            >>> import tempfile
            >>> store = RecordStore(tempfile.mkdtemp())
            >>> store.append(RepoRecord(repo="a/b", repo_id="a/b", revision=None, sha="1"))
            >>> with open(store.path, "a") as f: _ = f.write('{"repo": "a/c", "repo_i')  # killed mid-line
            >>> store.append(RepoRecord(repo="a/b", repo_id="a/b", revision=None, sha="2"))
            >>> {k: r.sha for k, r in store.load().items()}
            {'a/b': '2'}
        """
        records: dict[str, RepoRecord] = {}
        if not self.path.is_file():
            return records
        with open(self.path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    record = RepoRecord.from_json(json.loads(line))
                except (ValueError, KeyError, TypeError):
                    continue
                records[record.repo] = record
        return records

    def append(self, record: RepoRecord) -> None:
        """Append one record and flush it to disk before returning."""
        line = json.dumps(record.to_json(), separators=(",", ":"), default=str) + "\n"
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as fh:
                if fh.tell() > 0 and not _ends_with_newline(self.path):
                    fh.write(b"\n")  # the previous writer was killed mid-line: start a fresh one
                fh.write(line.encode("utf-8"))
                fh.flush()
                os.fsync(fh.fileno())

    def compact(self, keep: list[str] | None = None) -> None:
        """Rewrite the file with the latest record per repo (only ``keep``'s, in that order, when
        given), by writing a new file and renaming it over the old one."""
        with self._lock:
            records = self.load()
            keys = [k for k in keep if k in records] if keep is not None else list(records)
            tmp = self.path.with_suffix(".jsonl.tmp")
            with open(tmp, "w", encoding="utf-8") as fh:
                for key in keys:
                    fh.write(json.dumps(records[key].to_json(), separators=(",", ":"), default=str) + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"
