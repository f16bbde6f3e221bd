"""A fake Hugging Face Hub on loopback, for tests that drive the real huggingface_hub client over HTTP.

It serves an in-memory ``{repo_id: {revision: {path: bytes}}}`` with the protocol huggingface_hub
2.4 speaks for file resolution (read from its ``file_download.py`` and ``hf_api.py``):

- ``HEAD|GET /{repo_id}/resolve/{revision}/{path}``: the revision is URL-quoted (``refs%2Fpr%2F1``)
  and may be a branch, a tag or the commit sha. A hit answers ``X-Repo-Commit`` (required, or the
  client refuses the endpoint), ``ETag`` (required; the cache is keyed on it), ``Content-Length``
  and ``Accept-Ranges``. GET honours ``Range: bytes=a-b`` with 206 and ``Content-Range``: that is how
  ``get_safetensors_metadata`` reads only a header.
- Misses answer 404 with ``X-Error-Code``, which ``hf_raise_for_status`` maps to the client's error
  classes: ``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound`` (with ``X-Repo-Commit``, as the
  Hub does, so the client caches the miss). ``FakeHub.status`` forces another status for a path.

``get_safetensors_metadata`` needs nothing else: a HEAD per candidate file, the index through
``hf_hub_download``, and one ranged GET per safetensors file.

Every request is recorded in ``FakeHub.requests`` (method, repo, revision, path, range, bytes sent),
so a test can count requests and prove that no weight bytes were fetched.

Use the ``fake_hub`` fixture (tests/conftest.py style, from ``tests.fakes``) in-process, or
``FakeHub.env()`` for a subprocess::

    with FakeHub({"acme/tiny": {"main": {"config.json": b"{}"}}}) as hub:
        subprocess.run([...], env={**os.environ, **hub.env(cache_dir)})
"""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator
from urllib.parse import unquote, urlsplit

Files = dict[str, bytes]


@dataclass(frozen=True)
class Request:
    """One request the fake Hub answered."""

    method: str
    repo: str | None
    revision: str | None
    path: str | None
    range: str | None
    status: int
    sent: int  # body bytes sent


class FakeHub:
    """An HTTP server on 127.0.0.1 that serves repos from memory. Start with ``start()`` or ``with``.

    ``repos`` maps a repo id to its revisions, each a ``{path: bytes}``. A revision named by its
    commit sha resolves too: ``commit_of(repo, revision)`` gives the sha the fake reports.
    """

    def __init__(self, repos: dict[str, dict[str, Files]] | None = None):
        self.repos: dict[str, dict[str, Files]] = {}
        self.requests: list[Request] = []
        self.status: dict[tuple[str, str], int] = {}  # (repo, path) -> forced HTTP status
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        for repo, revisions in (repos or {}).items():
            for revision, files in revisions.items():
                self.add(repo, files, revision)

    # --- content ---------------------------------------------------------------------------------

    def add(self, repo: str, files: Files, revision: str = "main") -> str:
        """Add (or replace) a revision of a repo; returns its commit sha."""
        self.repos.setdefault(repo, {})[revision] = dict(files)
        return self.commit_of(repo, revision)

    @staticmethod
    def commit_of(repo: str, revision: str) -> str:
        return hashlib.sha1(f"{repo}@{revision}".encode()).hexdigest()

    def _files_at(self, repo: str, revision: str) -> tuple[str, Files] | None:
        revisions = self.repos.get(repo, {})
        if revision in revisions:
            return self.commit_of(repo, revision), revisions[revision]
        for name, files in revisions.items():
            if self.commit_of(repo, name) == revision:
                return revision, files
        return None

    # --- server ----------------------------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("FakeHub is not started; call start() or use it as a context manager")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def env(self, cache_dir: str) -> dict[str, str]:
        """Environment for a subprocess that should talk to this fake Hub, with its own cache."""
        return {
            "HF_ENDPOINT": self.endpoint,
            "HF_HUB_CACHE": str(cache_dir),
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
            "HF_HUB_OFFLINE": "0",
            "HF_TOKEN": "",
        }

    def start(self) -> "FakeHub":
        hub = self

        class Handler(_Handler):
            fake = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeHub":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def requests_for(self, repo: str | None = None, suffix: str = "") -> list[Request]:
        """Recorded requests, for a repo and paths ending in ``suffix``."""
        return [r for r in self.requests if (repo is None or r.repo == repo) and (r.path or "").endswith(suffix)]


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def do_HEAD(self) -> None:
        self._resolve(send_body=False)

    def do_GET(self) -> None:
        self._resolve(send_body=True)

    def _resolve(self, send_body: bool) -> None:
        path = urlsplit(self.path).path
        repo, revision, file, rng = None, None, None, self.headers.get("Range")
        head, sep, tail = path.lstrip("/").partition("/resolve/")
        if not sep or "/" not in tail:
            return self._error(404, None, "not a resolve URL", repo, revision, file, rng)
        repo = unquote(head)
        rev_quoted, _, file_quoted = tail.partition("/")
        revision, file = unquote(rev_quoted), unquote(file_quoted)
        forced = self.fake.status.get((repo, file))
        if forced is not None:
            return self._error(forced, None, f"forced {forced}", repo, revision, file, rng)
        if repo not in self.fake.repos:
            return self._error(404, "RepoNotFound", "Repository not found", repo, revision, file, rng)
        found = self.fake._files_at(repo, revision)
        if found is None:
            return self._error(404, "RevisionNotFound", "Invalid rev id", repo, revision, file, rng)
        commit, files = found
        if file not in files:
            return self._error(404, "EntryNotFound", "Entry not found", repo, revision, file, rng,
                               extra={"X-Repo-Commit": commit})
        data = files[file]
        status, body, headers = 200, data, {}
        if rng:
            start, end = _parse_range(rng, len(data))
            if start is None:
                return self._error(416, None, "Range not satisfiable", repo, revision, file, rng,
                                   extra={"Content-Range": f"bytes */{len(data)}"})
            status, body = 206, data[start : end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        self.send_response(status)
        self.send_header("X-Repo-Commit", commit)
        self.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if send_body:
            self.wfile.write(body)
        self.fake.record(Request(self.command, repo, revision, file, rng, status, len(body) if send_body else 0))

    def _error(self, status: int, code: str | None, message: str, repo: str | None, revision: str | None,
               file: str | None, rng: str | None, extra: dict[str, str] | None = None) -> None:
        body = ('{"error": "%s"}' % message).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.fake.record(Request(self.command, repo, revision, file, rng, status, 0))


def _parse_range(header: str, size: int) -> tuple[int | None, int]:
    """``bytes=a-b`` (or ``bytes=a-``) clipped to the file, as an HTTP server would."""
    unit, _, spec = header.partition("=")
    first, _, last = spec.partition("-")
    try:
        start = int(first)
        end = int(last) if last else size - 1
    except ValueError:
        return None, 0
    if unit.strip() != "bytes" or start >= size or end < start:
        return None, 0
    return start, min(end, size - 1)


def use_fake_hub(monkeypatch, hub: FakeHub, cache_dir: str) -> None:
    """Point this process's huggingface_hub at ``hub``, with a fresh cache.

    huggingface_hub reads HF_ENDPOINT and HF_HUB_CACHE once, at import, into ``constants``; the
    client then reads those constants at each call. So the test sets the same constants the
    environment variables would have set. The client itself runs unmodified, over real HTTP.
    """
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "ENDPOINT", hub.endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", hub.endpoint + "/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache_dir))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setenv("HF_TOKEN", "")  # never send a real token to the fake
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)


def fake_hub_fixture(monkeypatch, tmp_path) -> Iterator[FakeHub]:
    """Body of the ``fake_hub`` pytest fixture: a started FakeHub that this process's
    huggingface_hub talks to, with a per-test cache. Add repos with ``fake_hub.add(...)``."""
    with FakeHub() as hub:
        use_fake_hub(monkeypatch, hub, str(tmp_path / "hf-cache"))
        yield hub
