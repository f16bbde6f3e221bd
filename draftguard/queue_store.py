"""The queue's store: which backend a queue URL names and huey's storage arguments for it (SQLite with
an explicit ``synchronous`` level, or Redis), and the Redis compare-and-swap the queue's atomic swaps run.

In: a queue URL (``sqlite:///FILE[?synchronous=normal|full]``, ``redis://HOST:PORT/DB``).
Out: ``parse_queue_url`` -> (backend, huey storage kwargs), or QueueConfigError (one line); ``SWAP_LUA``.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from draftguard.errors import QueueConfigError

# Compare-and-swap of one field of huey's Redis result hash: KEYS[1] the hash, ARGV key, old, new, set?
SWAP_LUA = """
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if ARGV[4] == '1' then redis.call('HSET', KEYS[1], ARGV[1], ARGV[3]) else redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1
"""


def _sqlite_storage(synchronous: int):
    # huey: the bot extra; the base install loads this module too (audit)
    from huey.storage import SqliteStorage

    class Storage(SqliteStorage):
        """huey's SQLite storage (WAL) with an explicit ``synchronous`` level. NORMAL, the default
        here, keeps every commit through a kill -9 of the process and costs ~0.3 ms a write instead
        of ~10 ms; only an OS crash or power loss can drop the last commits (``?synchronous=full``
        guards against that too)."""

        def _create_connection(self):
            conn = super()._create_connection()
            conn.execute(f"pragma synchronous={synchronous}")
            return conn

    return Storage


def parse_queue_url(url: str) -> tuple[str, dict[str, Any]]:
    """The backend a queue URL names ("sqlite" or "redis") and huey's storage arguments for it.
    Raises QueueConfigError for a URL no backend takes (a surface says it in one line, exit 2).

    Example::

        >>> parse_queue_url("redis://127.0.0.1:6379/0")
        ('redis', {'url': 'redis://127.0.0.1:6379/0'})
        >>> parse_queue_url("mysql://db/q")
        Traceback (most recent call last):
        ...
        draftguard.errors.QueueConfigError: queue URL 'mysql://db/q': use sqlite:///FILE (one machine) or redis://HOST:PORT/DB (several machines)
    """
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # sqlite:///relative.db and sqlite:////absolute.db, as SQLAlchemy spells them.
        path = parts.path[1:] if url.startswith("sqlite:///") else ""
        if not path:
            raise QueueConfigError(f"queue URL {url!r}: give a file, as sqlite:///draftguard-queue.db")
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            raise QueueConfigError(f"queue URL {url!r}: folder {folder} does not exist; create it first")
        query = dict(p.split("=", 1) for p in parts.query.split("&") if "=" in p)
        level = {"normal": 1, "full": 2}.get(query.get("synchronous", "normal").lower())
        if level is None:
            raise QueueConfigError(f"queue URL {url!r}: synchronous must be normal or full")
        return "sqlite", {"filename": path, "storage_class": _sqlite_storage(level)}
    if parts.scheme in ("redis", "rediss", "unix"):
        return "redis", {"url": url}
    raise QueueConfigError(
        f"queue URL {url!r}: use sqlite:///FILE (one machine) or redis://HOST:PORT/DB (several machines)"
    )
