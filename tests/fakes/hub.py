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
import socket
import threading
import time
from dataclasses import dataclass, field
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
    authorized: bool = False  # it carried the fake's token
    at: float = field(default_factory=time.monotonic, compare=False)  # when it was answered


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
        self._connections: set = set()  # open keep-alive sockets, closed by stop() like a Hub gone away
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        # The discussion API (the Hub bot): see "discussions, refs and users" below.
        self.refs: dict[tuple[str, str], str] = {}  # (repo, ref) -> the revision name holding its files
        self.discussions: dict[tuple[str, int], dict] = {}
        self.orgs: dict[str, list[str]] = {}
        self.faults: list[Fault] = []
        self.token: str | None = None  # when set, API calls must carry it (whoami, comments, edits)
        self.user = "draftguard-bot"  # whom the token belongs to
        self.latency = 0.0  # seconds each API request takes, to keep jobs in flight
        # A random share of API requests fails with 500/502/503/429 (writes: half of them after
        # storing the write); for the fault benchmark. Seeded, so a run can be repeated.
        self.fault_rate = 0.0
        self.random = __import__("random").Random(0)
        self._pushes = 0
        # The audit's fleet (tests/fakes/fleet.py): more API routes, tried before the ones here;
        # per-request latency and programmed faults on file downloads too; gated repos.
        self.routes: list = []
        self.file_latency = 0.0
        self.file_faults: list[Fault] = []
        self.gated: set[str] = set()
        # Private repos: as the Hub, 401 RepoNotFound to a request without the token (files and API).
        self.private: set[str] = set()
        # False: a range request gets the whole file (200), as from a server that does not serve ranges.
        self.ranges = True
        # Set by ``refuse()``: from then on every request is dropped unanswered (the Hub gone away).
        self.refusing = False
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
        revision = self.refs.get((repo, revision), revision)
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
        """Stop serving and drop open connections: the client's next request is refused, as when
        the Hub cannot be reached (keep-alive connections would otherwise go on being served)."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
                connection.close()
            except OSError:
                pass

    def refuse(self) -> None:
        """From now on drop every request unanswered, on open keep-alive connections and new ones
        alike: the client sees the server disconnect, as when the Hub goes away. Unlike ``stop()``
        from another thread, nothing is answered after this returns, however the threads run (the
        server's shutdown waits up to half a second for its loop, and a connection accepted just
        before it is not yet among those it closes)."""
        self.refusing = True

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

    # --- discussions, refs and users (the Hub bot) -----------------------------------------------
    # The routes huggingface_hub 2.4's HfApi calls (read from hf_api.py): GET
    # /api/models/{repo}/discussions/{num} (get_discussion_details), POST .../comment {"comment"}
    # answering {"newMessage": event} (comment_discussion), POST .../comment/{id}/edit {"content"}
    # answering {"updatedComment": event} (edit_discussion_comment), GET
    # /api/models/{repo}/revision/{rev} (model_info), GET /api/models/{repo}/tree/{rev} (list_repo_tree),
    # GET /api/organizations/{org}/members (list_organization_members), GET /api/whoami-v2.

    def push(self, repo: str, files: Files, ref: str = "main") -> str:
        """A new commit on ``ref`` (a branch or ``refs/pr/N``) holding ``files``; returns its sha."""
        with self._lock:
            self._pushes += 1
            name = f"{ref}@{self._pushes}"
        self.repos.setdefault(repo, {})[name] = dict(files)
        self.refs[(repo, ref)] = name
        sha = self.commit_of(repo, name)
        for (r, num), d in self.discussions.items():
            if r == repo and f"refs/pr/{num}" == ref:
                d["events"].append(self._event("commit", d["author"], {"subject": "update", "oid": sha}))
        return sha

    def head_of(self, repo: str, ref: str) -> str:
        """The commit sha a branch or ``refs/pr/N`` points at now."""
        found = self._files_at(repo, ref)
        if found is None:
            raise KeyError(f"{repo} has no {ref}")
        return found[0]

    def open_pr(self, repo: str, num: int, files: Files, *, author: str = "alice", base: str = "main",
                title: str = "Update config", status: str = "open") -> str:
        """Open pull request ``num`` whose ``refs/pr/num`` holds ``files``; returns its head sha."""
        self.discussions[(repo, num)] = {
            "num": num, "title": title, "author": author, "status": status, "base": base, "pr": True,
            "created": "2026-11-30T05:00:00.000Z",
            "events": [self._event("comment", author, {"edited": False, "hidden": False,
                                                       "latest": {"raw": "Please review", "html": ""}})],
        }
        return self.push(repo, files, f"refs/pr/{num}")

    def add_comment(self, repo: str, num: int, content: str, *, author: str = "alice") -> dict:
        """A comment by ``author`` on a discussion, as a person would post it; returns the event."""
        event = self._event("comment", author, {"edited": False, "hidden": False,
                                                "latest": {"raw": content, "html": ""}, "numEdits": 0})
        self.discussions[(repo, num)]["events"].append(event)
        return event

    def comments_on(self, repo: str, num: int, author: str | None = None) -> list[dict]:
        return [e for e in self.discussions[(repo, num)]["events"]
                if e["type"] == "comment" and (author is None or e["author"]["name"] == author)]

    def add_org(self, name: str, members: list[str]) -> None:
        self.orgs[name] = list(members)

    def fail(self, method: str, pattern: str, status: int, *, times: int = 1, retry_after: int | None = None,
             apply: bool = False) -> "Fault":
        """Answer the next ``times`` API requests matching ``method`` and the regex ``pattern`` (on the
        URL path) with ``status``. ``apply=True`` performs a write first and then fails the answer,
        as when a response is lost after the Hub stored the comment."""
        fault = Fault(method, pattern, status, times, retry_after, apply)
        self.faults.append(fault)
        return fault

    def api_count(self, method: str, pattern: str, status: int | None = None) -> int:
        """How many API requests matched (answered with ``status`` when given)."""
        import re

        return sum(1 for r in self.requests if r.method == method and r.repo == "api"
                   and re.search(pattern, r.path or "") and (status is None or r.status == status))

    def _event(self, kind: str, author: str, data: dict) -> dict:
        with self._lock:
            self._pushes += 1
            n = self._pushes
        import datetime

        # The Hub stamps each event with its own clock when it happens.
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return {"id": f"{n:024x}", "type": kind, "createdAt": now,
                "author": {"name": author, "type": "user"}, "data": data}

    def _take_fault(self, method: str, path: str) -> "Fault | None":
        import re

        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fault.method == method and re.search(fault.pattern, path):
                    fault.times -= 1
                    return fault
        return None


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub
    protocol_version = "HTTP/1.1"  # keep-alive, as the client expects

    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def setup(self) -> None:
        super().setup()
        with self.fake._lock:
            self.fake._connections.add(self.connection)

    def finish(self) -> None:
        with self.fake._lock:
            self.fake._connections.discard(self.connection)
        try:
            super().finish()
        except OSError:  # the socket was closed by stop()
            pass

    def _refused(self) -> bool:
        """Whether the fake refuses requests (``FakeHub.refuse``): then the connection is closed
        without an answer."""
        if not self.fake.refusing:
            return False
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        return True

    def do_HEAD(self) -> None:
        if not self._refused():
            self._resolve(send_body=False)

    def do_GET(self) -> None:
        if self._refused():
            return
        if urlsplit(self.path).path.startswith("/api/"):
            return _api(self, "GET")
        self._resolve(send_body=True)

    def do_POST(self) -> None:
        if not self._refused():
            _api(self, "POST")

    def _resolve(self, send_body: bool) -> None:
        path = urlsplit(self.path).path
        repo, revision, file, rng = None, None, None, self.headers.get("Range")
        head, sep, tail = path.lstrip("/").partition("/resolve/")
        if not sep or "/" not in tail:
            return self._error(404, None, "not a resolve URL", repo, revision, file, rng)
        repo = unquote(head)
        rev_quoted, _, file_quoted = tail.partition("/")
        revision, file = unquote(rev_quoted), unquote(file_quoted)
        if self.fake.file_latency:
            import time

            time.sleep(self.fake.file_latency)
        fault = _take_file_fault(self.fake, self.command, path)
        if fault is not None:
            if fault.hang:
                import time

                time.sleep(fault.hang)  # longer than the client's timeout: it gives up first
            extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
            return self._error(fault.status, None, f"forced {fault.status}", repo, revision, file, rng, extra=extra)
        if repo in self.fake.private and not self._authorized():
            return self._error(401, "RepoNotFound", "Repository not found", repo, revision, file, rng)
        if repo in self.fake.gated:
            return self._error(403, "GatedRepo", "Access to this model is restricted", repo, revision, file, rng)
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
        if rng and self.fake.ranges:
            start, end = _parse_range(rng, len(data))
            if start is None:
                return self._error(416, None, "Range not satisfiable", repo, revision, file, rng,
                                   extra={"Content-Range": f"bytes */{len(data)}"})
            status, body = 206, data[start : end + 1]
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
        # Recorded before the answer is sent: a test that reads the record right after its client got
        # the answer must find it there (recording after the write raced with the test).
        self.fake.record(Request(self.command, repo, revision, file, rng, status, len(body) if send_body else 0,
                                 self._authorized()))
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

    def _authorized(self) -> bool:
        return self.fake.token is not None and self.headers.get("authorization") == f"Bearer {self.fake.token}"

    def _error(self, status: int, code: str | None, message: str, repo: str | None, revision: str | None,
               file: str | None, rng: str | None, extra: dict[str, str] | None = None) -> None:
        body = ('{"error": "%s"}' % message).encode()
        self.fake.record(Request(self.command, repo, revision, file, rng, status, 0, self._authorized()))
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


@dataclass
class Fault:
    """A programmed failure of the fake Hub's API (see ``FakeHub.fail``)."""

    method: str
    pattern: str
    status: int
    times: int
    retry_after: int | None = None
    apply: bool = False
    hang: float = 0.0  # seconds to stall before answering (a timeout, when longer than the client waits)


def _take_file_fault(fake: FakeHub, method: str, path: str) -> Fault | None:
    import re

    with fake._lock:
        for fault in fake.file_faults:
            if fault.times > 0 and fault.method in (method, "*") and re.search(fault.pattern, path):
                fault.times -= 1
                return fault
    return None


def _api(h: _Handler, method: str) -> None:
    """Serve the JSON API routes listed in ``FakeHub`` (discussions, refs, users)."""
    import json
    from urllib.parse import parse_qs

    fake = h.fake
    parts = urlsplit(h.path)
    path = parts.path
    length = int(h.headers.get("Content-Length") or 0)
    raw = h.rfile.read(length) if length else b""
    if len(raw) < length:  # the client went away mid-body: a request the Hub never got whole, so nothing is
        h.close_connection = True  # stored, answered or recorded (a killed bot's POST was counted as a post)
        return

    def send(status: int, body: object, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        # Recorded before the answer is written: a client killed mid-answer was still served.
        fake.record(Request(method, "api", None, path, None, status, len(data)))
        try:
            h.end_headers()
            h.wfile.write(data)
        except OSError:  # BrokenPipe / ConnectionReset: the client went away
            h.close_connection = True

    def error(status: int, message: str, code: str | None = None, headers: dict[str, str] | None = None) -> None:
        extra = {"X-Error-Message": message, **(headers or {})}
        if code:
            extra["X-Error-Code"] = code
        send(status, {"error": message}, extra)

    if fake.latency:
        import time

        time.sleep(fake.latency)
    fault = fake._take_fault(method, path)
    if fault is None and fake.fault_rate and fake.random.random() < fake.fault_rate:
        status = fake.random.choice((500, 502, 503, 429))
        fault = Fault(method, path, status, 0, 1 if status == 429 else None,
                      apply=method == "POST" and fake.random.random() < 0.5)
    if fault is not None and not fault.apply:
        extra = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
        return error(fault.status, f"forced {fault.status}", headers=extra)
    authorized = fake.token is None or h.headers.get("authorization") == f"Bearer {fake.token}"
    segs = [unquote(s) for s in path.split("/")[2:]]  # after /api/

    def answer(status: int, body: object) -> None:
        if fault is not None:  # apply: the write happened, but the client sees a failure
            return error(fault.status, f"forced {fault.status} after applying")
        send(status, body)

    for route in fake.routes:  # added routes (tests/fakes/fleet.py) answer first
        if route(h, method, segs, parse_qs(parts.query), raw, answer, error, authorized):
            return

    if segs == ["whoami-v2"]:
        if fake.token is None or not authorized:
            return error(401, "Invalid credentials in Authorization header")
        return answer(200, {"type": "user", "id": "bot-id", "name": fake.user, "orgs": []})
    if len(segs) == 3 and segs[0] == "organizations" and segs[2] == "members":
        if segs[1] not in fake.orgs:
            return error(404, "Organization not found")
        return answer(200, [{"user": m, "fullname": m, "type": "user", "avatarUrl": "", "isPro": False}
                            for m in fake.orgs[segs[1]]])
    if len(segs) < 4 or segs[0] != "models":
        return error(404, "no such route")
    if segs[1] in fake.repos:  # a legacy repo id without a namespace (gpt2)
        repo, rest = segs[1], segs[2:]
    else:
        repo, rest = f"{segs[1]}/{segs[2]}", segs[3:]
    if repo not in fake.repos or (repo in fake.private and not (authorized and fake.token is not None)):
        return error(404 if repo not in fake.repos else 401, "Repository not found", "RepoNotFound")
    if rest[0] == "revision" and method == "GET":
        revision = "/".join(rest[1:])
        found = fake._files_at(repo, revision)
        if found is None:
            return error(404, "Invalid rev id", "RevisionNotFound")
        return answer(200, model_info_body(fake, repo, found, parse_qs(parts.query)))
    if rest[0] == "tree" and method == "GET":
        found = fake._files_at(repo, rest[1])
        if found is None:
            return error(404, "Invalid rev id", "RevisionNotFound")
        prefix = "/".join(rest[2:])
        return answer(200, [{"type": "file", "path": p, "size": len(b),
                             "oid": hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()}
                            for p, b in sorted(found[1].items()) if p.startswith(prefix)])
    if rest[0] != "discussions" or len(rest) < 2 or not rest[1].isdigit():
        return error(404, "no such route")
    d = fake.discussions.get((repo, int(rest[1])))
    if d is None:
        return error(404, "Discussion not found")
    if len(rest) == 2 and method == "GET":
        if "diff" not in parse_qs(parts.query):
            return error(400, "the client asks with diff=1")
        return answer(200, {
            "num": d["num"], "title": d["title"], "author": {"name": d["author"], "type": "user"},
            "createdAt": d["created"], "status": d["status"], "repo": {"name": repo, "type": "model"},
            "isPullRequest": d["pr"], "events": d["events"], "filesWithConflicts": [], "diff": "",
            "changes": {"base": f"refs/heads/{d['base']}"} if d["pr"] else None,
        })
    if method != "POST":
        return error(405, "method not allowed")
    if not authorized or fake.token is None:
        return error(401, "Invalid credentials in Authorization header")
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return error(400, "invalid JSON")
    if rest[2:] == ["comment"]:
        if not isinstance(body.get("comment"), str) or not body["comment"]:
            return error(400, "comment is required")
        event = fake._event("comment", fake.user, {"edited": False, "hidden": False, "numEdits": 0,
                                                   "latest": {"raw": body["comment"], "html": ""}})
        d["events"].append(event)
        return answer(200, {"newMessage": event})
    if len(rest) == 5 and rest[2] == "comment" and rest[4] == "edit":
        event = next((e for e in d["events"] if e["id"] == rest[3] and e["type"] == "comment"), None)
        if event is None:
            return error(404, "Comment not found")
        if event["author"]["name"] != fake.user:
            return error(403, "You can only edit your own comments")
        if not isinstance(body.get("content"), str):
            return error(400, "content is required")
        data = event["data"]
        data["latest"] = {"raw": body["content"], "html": ""}
        data["edited"], data["numEdits"] = True, data.get("numEdits", 0) + 1
        return answer(200, {"updatedComment": event})
    return error(404, "no such route")


def model_info_body(fake: FakeHub, repo: str, found: tuple[str, Files], query: dict) -> dict:
    """``model_info``'s answer: everything, or with ``expand=`` only the properties asked for and
    the id, as the Hub answers (huggingface_hub 2.4 sends ``expand`` as repeated parameters)."""
    info = {"id": repo, "sha": found[0], "private": False, "gated": repo in fake.gated and "manual",
            "siblings": [{"rfilename": p, "size": len(b)} for p, b in sorted(found[1].items())],
            **({"cardData": _card_data(found[1])} if "README.md" in found[1] else {})}
    expand = query.get("expand") or query.get("expand[]")
    if expand:
        return {"_id": repo, "id": repo, **{k: info[k] for k in expand if k in info}}
    return info


def _card_data(files: Files) -> dict:
    """The model card's YAML front matter, as the Hub parses README.md into ``cardData``."""
    import yaml

    text = files["README.md"].decode("utf-8", "replace")
    if not text.startswith("---"):
        return {}
    head = text[3:].split("\n---", 1)[0]
    try:
        data = yaml.safe_load(head)
    except yaml.YAMLError:
        return {}
    return data if isinstance(data, dict) else {}
