"""A fake GitHub REST API on loopback, for PyGithub pointed at it through ``base_url``.

It holds repos (files per commit sha), pull requests, issue comments, reactions, collaborator
permissions and check runs in memory, checks the token on every request, and logs each request.
Faults are injected per route: ``fail("POST", r"/issues/\\d+/comments$", "502", times=2)``.

Fault kinds:
- ``"502"``: answer 502 without doing anything;
- ``"rate_limit"``: 403 with ``x-ratelimit-remaining: 0`` and ``x-ratelimit-reset`` one second ahead;
- ``"retry_after"``: 429 with ``Retry-After: 1``;
- ``"forbidden"``: 403 without rate-limit headers (a token that may not do this);
- ``"forbidden"``: 403 "Resource not accessible by integration", as GitHub answers a write made
  with a read-only token (a fork pull request's ``GITHUB_TOKEN``);
- ``"timeout"``: hold the request past the client's timeout, then drop it, without doing anything;
- ``"apply_then_timeout"``: do the write, then hold the answer past the client's timeout (the
  client cannot know it happened: the nastiest case for duplicate comments).

Git LFS files are served as GitHub serves them: ``add_lfs(data)`` stores the object and returns its
pointer, which goes into ``set_files`` like any file. The contents API and the blob API then answer
the pointer; the file's ``download_url`` gives the real bytes from another host, as GitHub's
(raw.githubusercontent.com, media.githubusercontent.com) is not the API's: here a second loopback
server, ``media_url``, that answers ``/_media/...`` and nothing else; the API host does not serve it.
Its requests are recorded in ``media_requests``.

Example::

    >>> api = FakeGitHub(token="t0k").start()
    >>> repo = api.add_repo("acme/model")
    >>> api.url.startswith("http://127.0.0.1:")
    True
    >>> api.stop()
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


@dataclass(frozen=True)
class Symlink:
    """A symlink in a fake repo (``set_files(..., {"config.json": Symlink("../x/config.json")})``)."""

    target: str


# GitHub's contents API inlines a file's content only up to 1 MB; bigger files come with
# ``encoding: "none"`` and an empty ``content``, to be read through the git blobs API.
CONTENTS_INLINE_LIMIT = 1024 * 1024
# GitHub refuses a comment body over 65536 characters (422, "body is too long").
MAX_COMMENT_CHARS = 65536


@dataclass
class Fault:
    method: str
    pattern: re.Pattern
    kind: str
    times: int


@dataclass
class Repo:
    full_name: str
    default_branch: str = "main"
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha or branch -> path -> bytes
    pulls: dict[int, dict[str, Any]] = field(default_factory=dict)
    permissions: dict[str, str] = field(default_factory=dict)


class FakeGitHub:
    """The fake API server. ``token`` is the only accepted token (or installation tokens it issued)."""

    def __init__(self, token: str = "ghp_fake", *, hold_seconds: float = 3.0, app_public_key: str | None = None):
        self.token = token
        self.bot_login = "draftguard[bot]"  # who the token (or the App) comments as
        self.app_slug = "draftguard"
        self.hold_seconds = hold_seconds
        self.latency = 0.0  # seconds added to every answer, to keep jobs in flight
        self.random_faults: tuple[float, list[str]] | None = None  # (rate, kinds) on any request
        self.app_public_key = app_public_key
        self.repos: dict[str, Repo] = {}
        self.comments: dict[int, dict[str, Any]] = {}
        self.reactions: list[dict[str, Any]] = []
        self.check_runs: dict[int, dict[str, Any]] = {}
        self.reviews: list[dict[str, Any]] = []  # pull request reviews, with their review comments
        self.requests: list[tuple[str, str]] = []
        self.faults: list[Fault] = []
        # Called with (method, path) before each request is answered: a test lands a push between
        # two reads of a pull request this way, as a fork racing the bot would.
        self.before_answer: list[Any] = []
        self.installation_tokens: set[str] = set()
        self.lfs_objects: dict[str, bytes] = {}  # sha256 hex -> bytes
        self._ids = iter(range(1000, 10**9))
        self.lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._media: ThreadingHTTPServer | None = None
        self.media_requests: list[tuple[str, str, str | None]] = []  # (method, path, Authorization)

    # --- set-up ------------------------------------------------------------------------------
    def start(self) -> "FakeGitHub":
        fake = self

        class Handler(_Handler):
            api = fake

        class Media(_MediaHandler):
            api = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._media = ThreadingHTTPServer(("127.0.0.1", 0), Media)
        for server in (self._server, self._media):
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        for server in (self._server, self._media):
            if server:
                server.shutdown()
                server.server_close()

    @property
    def media_url(self) -> str:
        """The host that serves files' ``download_url`` (not the API's, as on github.com)."""
        assert self._media is not None
        return f"http://127.0.0.1:{self._media.server_address[1]}"

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add_repo(self, full_name: str, default_branch: str = "main") -> Repo:
        with self.lock:
            repo = self.repos[full_name] = Repo(full_name, default_branch)
            return repo

    def set_files(self, full_name: str, ref: str, files: dict[str, bytes | str]) -> None:
        """Files of the repo at a commit sha or branch (the whole tree at that ref)."""
        with self.lock:
            self.repos[full_name].commits[ref] = {
                p: (v.encode() if isinstance(v, str) else v) for p, v in files.items()
            }

    def blob_sha(self, data: bytes) -> str:
        import hashlib

        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    def add_lfs(self, data: bytes) -> bytes:
        """Store a Git LFS object and return its pointer file, to put in ``set_files``."""
        oid = hashlib.sha256(data).hexdigest()
        with self.lock:
            self.lfs_objects[oid] = data
        return lfs_pointer(data)

    def add_pull(self, full_name: str, number: int, *, head: str, base: str, author: str = "alice",
                 head_repo: str | None = None, changed: list[str] | None = None) -> dict[str, Any]:
        """A pull request from ``head`` to ``base`` (commit shas whose files were set). ``changed``
        defaults to every path that differs between the two."""
        with self.lock:
            repo = self.repos[full_name]
            if changed is None:
                a, b = repo.commits.get(base, {}), repo.commits.get(head, {})
                changed = sorted(p for p in set(a) | set(b) if a.get(p) != b.get(p))
            pr = repo.pulls[number] = {
                "number": number, "head": head, "base": base, "author": author,
                "head_repo": head_repo or full_name, "changed": changed,
            }
            return pr

    def set_permission(self, full_name: str, login: str, permission: str) -> None:
        with self.lock:
            self.repos[full_name].permissions[login] = permission

    def fail(self, method: str, pattern: str, kind: str, times: int = 1) -> None:
        """Answer the next ``times`` requests matching method and path regex with a fault."""
        with self.lock:
            self.faults.append(Fault(method.upper(), re.compile(pattern), kind, times))

    # --- inspection -------------------------------------------------------------------------------
    def comments_on(self, full_name: str, number: int) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.comments.values() if c["repo"] == full_name and c["issue"] == number]

    def review_comments_on(self, full_name: str, number: int) -> list[dict[str, Any]]:
        """Every review comment on a pull request (each with its review's commit_id), oldest first."""
        with self.lock:
            return [c for r in self.reviews if r["repo"] == full_name and r["number"] == number
                    for c in r["comments"]]

    def runs_for(self, full_name: str, sha: str, name: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.check_runs.values()
                    if r["repo"] == full_name and r["head_sha"] == sha and (name is None or r["name"] == name)]

    def state(self) -> dict[str, Any]:
        """A JSON summary: comments and check runs (without bodies' bulk) and request counts."""
        with self.lock:
            return {
                "comments": [{"id": c["id"], "issue": c["issue"], "user": c["user"], "edits": c.get("edits", 0),
                              "sticky": c["body"].startswith("<!-- draftguard:sticky -->"), "body": c["body"]}
                             for c in self.comments.values()],
                "check_runs": [{"id": r["id"], "name": r["name"], "head_sha": r["head_sha"],
                                "annotations": len(r["annotations"]), "conclusion": r["conclusion"]}
                               for r in self.check_runs.values()],
                "requests": [list(r) for r in self.requests],
            }

    def count(self, method: str, pattern: str) -> int:
        rx = re.compile(pattern)
        with self.lock:
            return sum(1 for m, p in self.requests if m == method and rx.search(p))

    # --- internals --------------------------------------------------------------------------------
    def _take_fault(self, method: str, path: str) -> str | None:
        with self.lock:
            for fault in self.faults:
                if fault.times > 0 and fault.method == method and fault.pattern.search(path):
                    fault.times -= 1
                    return fault.kind
        return None

    def _next_id(self) -> int:
        return next(self._ids)

    def _user(self, login: str, type_: str = "User") -> dict[str, Any]:
        return {"login": login, "id": abs(hash(login)) % 10**6, "type": type_,
                "url": f"{self.url}/users/{login}"}

    def _comment_json(self, c: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": c["id"], "body": c["body"], "user": self._user(c["user"], c.get("user_type", "User")),
            "url": f"{self.url}/repos/{c['repo']}/issues/comments/{c['id']}",
            "html_url": f"https://github.example/{c['repo']}/pull/{c['issue']}#issuecomment-{c['id']}",
            "issue_url": f"{self.url}/repos/{c['repo']}/issues/{c['issue']}",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
        }

    def _run_json(self, r: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in r.items() if k not in ("repo", "annotations")}
        out["url"] = f"{self.url}/repos/{r['repo']}/check-runs/{r['id']}"
        out["output"] = dict(r.get("output") or {}, annotations_count=len(r["annotations"]))
        return out

    def add_comment(self, full_name: str, number: int, body: str, user: str = "alice",
                    user_type: str = "User") -> dict[str, Any]:
        """A comment as a person (or bot) would post it; returns the stored comment."""
        with self.lock:
            cid = self._next_id()
            c = self.comments[cid] = {"id": cid, "repo": full_name, "issue": number, "body": body,
                                      "user": user, "user_type": user_type}
            return c


_PULL = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/pulls/(?P<n>\d+)$")
_PULL_FILES = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/pulls/(?P<n>\d+)/files$")
_PULL_REVIEWS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/pulls/(?P<n>\d+)/reviews$")
_PULL_COMMENTS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/pulls/(?P<n>\d+)/comments$")
_COMMIT = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/commits/(?P<sha>[0-9a-f]{40})$")
_REPO = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)$")
_CONTENTS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/contents/(?P<path>.+)$")
_ISSUE_COMMENTS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/issues/(?P<n>\d+)/comments$")
_COMMENT = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/issues/comments/(?P<id>\d+)$")
_REACTIONS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/issues/comments/(?P<id>\d+)/reactions$")
_PERMISSION = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/collaborators/(?P<login>[^/]+)/permission$")
_RUNS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/check-runs$")
_RUN = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/check-runs/(?P<id>\d+)$")
_COMMIT_RUNS = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/commits/(?P<sha>[^/]+)/check-runs$")
_ACCESS_TOKENS = re.compile(r"^/app/installations/(?P<id>\d+)/access_tokens$")
_BLOB = re.compile(r"^/repos/(?P<repo>[^/]+/[^/]+)/git/blobs/(?P<sha>[0-9a-f]{40})$")
_MEDIA = re.compile(r"^/_media/(?P<repo>[^/]+/[^/]+)/(?P<ref>[^/]+)/(?P<path>.+)$")
_POINTER = re.compile(rb"^version https://git-lfs.github.com/spec/v1\noid sha256:(?P<oid>[0-9a-f]{64})\nsize (?P<size>\d+)\n$")


def file_patch(old: Any, new: Any) -> str:
    """A file's ``patch`` as the pull request files API gives it: unified hunks with three lines of
    context, without the ---/+++ header."""
    import difflib

    def text(data: Any) -> list[str]:
        if isinstance(data, Symlink):
            return [data.target]  # git diffs a symlink as the path it holds
        text = data if isinstance(data, str) else (data or b"").decode("utf-8", "replace")
        return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n") if text else []  # git: only \n ends a line

    a, b = text(old), text(new)
    return "\n".join(list(difflib.unified_diff(a, b, lineterm="", n=3))[2:])


def hunk_lines(patch: str) -> list[range]:
    """The RIGHT-side line numbers each hunk of a patch covers (what a review comment may be on)."""
    return [range(int(m[1]), int(m[1]) + int(m[2] or 1))
            for m in re.finditer(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", patch, re.M)]


def lfs_pointer(data: bytes) -> bytes:
    """The Git LFS pointer file of ``data``, byte for byte as ``git lfs`` writes it."""
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{hashlib.sha256(data).hexdigest()}\n"
            f"size {len(data)}\n").encode()


def git_blob_sha(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class _MediaHandler(BaseHTTPRequestHandler):
    """The download host: an LFS file's object, any other file's own bytes; nothing else."""

    api: FakeGitHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = unquote(urlsplit(self.path).path)
        with self.api.lock:
            self.api.media_requests.append(("GET", path, self.headers.get("Authorization")))
        m = _MEDIA.match(path)
        data = None
        if m and m["repo"] in self.api.repos:
            data = self.api.repos[m["repo"]].commits.get(m["ref"], {}).get(m["path"])
        if not isinstance(data, bytes):
            body = b'{"message": "Not Found"}'
            self.send_response(404)
        else:
            pointer = _POINTER.match(data)
            body = self.api.lfs_objects[pointer["oid"].decode()] if pointer else data
            self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Handler(BaseHTTPRequestHandler):
    api: FakeGitHub
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def _send(self, status: int, body: Any = None, headers: dict[str, str] | None = None) -> None:
        raw = isinstance(body, bytes)  # a file's bytes (the media endpoint), not JSON
        data = body if raw else (b"" if body is None else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw else "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self, path: str) -> bool:
        auth = self.headers.get("Authorization", "")
        scheme, _, cred = auth.partition(" ")
        if _ACCESS_TOKENS.match(path) or path == "/app":
            if scheme.lower() != "bearer" or not self.api.app_public_key:
                return False
            import jwt

            try:
                jwt.decode(cred, self.api.app_public_key, algorithms=["RS256"])
            except jwt.PyJWTError:
                return False
            return True
        return scheme.lower() in ("token", "bearer") and (
            cred == self.api.token or cred in self.api.installation_tokens
        )

    def _dispatch(self, method: str) -> None:
        api = self.api
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        if path.startswith("/api/v3"):
            path = path[len("/api/v3"):]
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if len(raw) < length:  # the client went away mid-body: GitHub never got it whole, so nothing is
            self.close_connection = True  # stored, answered or counted (a killed bot's POST counted as a post)
            return
        with api.lock:
            api.requests.append((method, path))
        if path == "/_fake/state" and method == "GET":  # for tests that run the fake in another process
            return self._send(200, api.state())
        for hook in list(api.before_answer):
            hook(method, path)
        if api.latency:
            time.sleep(api.latency)
        fault = api._take_fault(method, path)
        if fault is None and api.random_faults and method in ("GET", "POST", "PATCH"):
            import random

            if random.random() < api.random_faults[0]:
                fault = random.choice(api.random_faults[1])
        if fault == "502":
            return self._send(502, {"message": "Bad Gateway"})
        if fault == "rate_limit":
            reset = int(time.time()) + 1
            return self._send(403, {"message": "API rate limit exceeded for installation."},
                              {"x-ratelimit-remaining": "0", "x-ratelimit-limit": "5000",
                               "x-ratelimit-reset": str(reset)})
        if fault == "forbidden":
            return self._send(403, {"message": "Resource not accessible by integration",
                                    "documentation_url": "https://docs.github.com/rest"})
        if fault == "forbidden":
            return self._send(403, {"message": "Resource not accessible by integration"})
        if fault == "retry_after":
            return self._send(429, {"message": "You have exceeded a secondary rate limit."}, {"Retry-After": "1"})
        if fault == "timeout":
            time.sleep(api.hold_seconds)
            self.close_connection = True
            return
        if not self._authorized(path):
            return self._send(401, {"message": "Bad credentials"})
        body = json.loads(raw) if raw else {}
        try:
            status, out, headers = self._route(method, path, query, body)
        except KeyError:
            status, out, headers = 404, {"message": "Not Found"}, {}
        if fault == "apply_then_timeout":
            time.sleep(api.hold_seconds)
            self.close_connection = True
            return
        self._send(status, out, headers)

    def _route(self, method: str, path: str, query: dict[str, str], body: dict[str, Any]):
        api = self.api
        url = api.url
        with api.lock:
            if (m := _ACCESS_TOKENS.match(path)) and method == "POST":
                token = f"ghs_installation_{m['id']}_{api._next_id()}"
                api.installation_tokens.add(token)
                return 201, {"token": token, "expires_at": "2099-01-01T00:00:00Z"}, {}
            if (m := _REPO.match(path)) and method == "GET":
                repo = api.repos[m["repo"]]
                return 200, {"id": 1, "name": repo.full_name.split("/")[1], "full_name": repo.full_name,
                             "default_branch": repo.default_branch, "url": f"{url}/repos/{repo.full_name}",
                             "owner": api._user(repo.full_name.split("/")[0])}, {}
            if (m := _PULL.match(path)) and method == "GET":
                repo = api.repos[m["repo"]]
                pr = repo.pulls[int(m["n"])]
                return 200, self._pull_json(repo, pr), {}
            if (m := _PULL_FILES.match(path)) and method == "GET":
                repo = api.repos[m["repo"]]
                pr = repo.pulls[int(m["n"])]
                head = repo.commits.get(pr["head"], {})
                base = repo.commits.get(pr["base"], {})
                files = [{"filename": p, "status": ("modified" if p in base else "added") if p in head else "removed",
                          "sha": "0" * 40, "additions": 1, "deletions": 1, "changes": 2,
                          "patch": file_patch(base.get(p), head.get(p))} for p in pr["changed"]]
                return 200, files, {}
            if (m := _COMMIT.match(path)) and method == "GET":
                return 200, {"sha": m["sha"], "url": f"{url}/repos/{m['repo']}/commits/{m['sha']}"}, {}
            if (m := _PULL_COMMENTS.match(path)) and method == "GET":
                return 200, api.review_comments_on(m["repo"], int(m["n"])), {}
            if (m := _PULL_REVIEWS.match(path)) and method == "GET":
                return 200, [{"id": r["id"], "body": r["body"], "state": "COMMENTED", "commit_id": r["commit_id"],
                              "user": api._user(api.bot_login, "Bot")}
                             for r in api.reviews if r["repo"] == m["repo"] and r["number"] == int(m["n"])], {}
            if (m := _PULL_REVIEWS.match(path)) and method == "POST":
                return self._create_review(api.repos[m["repo"]], int(m["n"]), body)
            if path == "/app" and method == "GET":
                return 200, {"id": 1, "slug": api.app_slug, "name": "draftguard", "owner": api._user("acme")}, {}
            if path == "/user" and method == "GET":
                cred = self.headers.get("Authorization", "").partition(" ")[2]
                if cred in api.installation_tokens:  # GitHub closes /user to installation tokens
                    return 403, {"message": "Resource not accessible by integration"}, {}
                return 200, dict(api._user(api.bot_login), type="User"), {}
            if (m := _CONTENTS.match(path)) and method == "GET":
                repo = api.repos[m["repo"]]
                ref = query.get("ref", repo.default_branch)
                return self._contents(repo, ref, m["path"])
            if (m := _BLOB.match(path)) and method == "GET":
                repo = api.repos[m["repo"]]
                for files in repo.commits.values():
                    for data in files.values():
                        if isinstance(data, bytes) and git_blob_sha(data) == m["sha"]:
                            return 200, {"sha": m["sha"], "size": len(data), "encoding": "base64",
                                         "content": base64.b64encode(data).decode(),
                                         "url": f"{url}/repos/{repo.full_name}/git/blobs/{m['sha']}"}, {}
                raise KeyError(m["sha"])
            if method in ("POST", "PATCH") and (_ISSUE_COMMENTS.match(path) or _COMMENT.match(path)) \
                    and len(body.get("body") or "") > MAX_COMMENT_CHARS:
                return 422, {"message": "Validation Failed", "errors": [
                    {"resource": "IssueComment", "code": "custom", "field": "body",
                     "message": f"body is too long (maximum is {MAX_COMMENT_CHARS} characters)"}]}, {}
            if (m := _ISSUE_COMMENTS.match(path)):
                repo = api.repos[m["repo"]]
                n = int(m["n"])
                if n not in repo.pulls:
                    raise KeyError(n)
                if method == "GET":
                    return 200, [api._comment_json(c) for c in api.comments_on(repo.full_name, n)], {}
                if method == "POST":
                    c = api.add_comment(repo.full_name, n, body["body"], user=api.bot_login, user_type="Bot")
                    return 201, api._comment_json(c), {}
            if (m := _COMMENT.match(path)):
                c = api.comments[int(m["id"])]
                if method == "PATCH":
                    c["body"] = body["body"]
                    c["edits"] = c.get("edits", 0) + 1
                return 200, api._comment_json(c), {}
            if (m := _REACTIONS.match(path)):
                cid = int(m["id"])
                api.comments[cid]  # 404 for unknown comments
                if method == "POST":
                    for r in api.reactions:
                        if r["comment"] == cid and r["content"] == body["content"]:
                            return 200, r["json"], {}
                    rj = {"id": api._next_id(), "content": body["content"], "user": api._user(api.bot_login, "Bot"),
                          "created_at": "2026-01-01T00:00:00Z"}
                    api.reactions.append({"comment": cid, "content": body["content"], "json": rj})
                    return 201, rj, {}
                return 200, [r["json"] for r in api.reactions if r["comment"] == cid], {}
            if (m := _PERMISSION.match(path)) and method == "GET":
                repo = api.repos[m["repo"]]
                perm = repo.permissions.get(m["login"])
                if perm is None:
                    return 404, {"message": f"{m['login']} is not a user"}, {}
                legacy = "write" if perm == "maintain" else ("read" if perm == "triage" else perm)
                return 200, {"permission": legacy, "role_name": perm, "user": api._user(m["login"])}, {}
            if (m := _RUNS.match(path)) and method == "POST":
                rid = api._next_id()
                run = {"id": rid, "repo": m["repo"], "name": body["name"], "head_sha": body["head_sha"],
                       "status": body.get("status", "queued"), "conclusion": body.get("conclusion"),
                       "details_url": body.get("details_url"), "external_id": body.get("external_id"),
                       "output": None, "annotations": [], "edits": 0}
                self._apply_output(run, body)
                api.check_runs[rid] = run
                return 201, api._run_json(run), {}
            if (m := _RUN.match(path)):
                run = api.check_runs[int(m["id"])]
                if method == "PATCH":
                    for key in ("name", "status", "conclusion", "details_url", "external_id"):
                        if key in body:
                            run[key] = body[key]
                    run["edits"] += 1
                    self._apply_output(run, body)
                return 200, api._run_json(run), {}
            if (m := _COMMIT_RUNS.match(path)) and method == "GET":
                runs = [r for r in api.check_runs.values() if r["repo"] == m["repo"] and r["head_sha"] == m["sha"]
                        and ("check_name" not in query or r["name"] == query["check_name"])]
                return 200, {"total_count": len(runs), "check_runs": [api._run_json(r) for r in runs]}, {}
        return 404, {"message": "Not Found", "documentation_url": "fake"}, {}

    def _contents(self, repo: Repo, ref: str, path: str, hops: int = 0):
        """GET /repos/{repo}/contents/{path} as GitHub answers it: a file over 1 MB without its
        content (``encoding: "none"``); a symlink to a file in the repo as that file; any other
        symlink as ``type: "symlink"`` with its target."""
        import posixpath

        url = self.api.url
        files = repo.commits[ref]
        path = path.strip("/")
        if path not in files:
            return self._listing(repo, ref, path)
        data = files[path]
        name = path.rsplit("/", 1)[-1]
        link = f"{url}/repos/{repo.full_name}/contents/{path}?ref={ref}"
        if isinstance(data, Symlink):
            target = posixpath.normpath(posixpath.join(posixpath.dirname(path), data.target))
            if hops < 5 and not target.startswith("..") and isinstance(files.get(target), (bytes, Symlink)):
                return self._contents(repo, ref, target, hops + 1)
            return 200, {"type": "symlink", "target": data.target, "size": len(data.target), "name": name,
                         "path": path, "sha": "2" * 40, "url": link}, {}
        out = {"type": "file", "size": len(data), "name": name, "path": path, "sha": self.api.blob_sha(data),
               "url": link, "git_url": f"{url}/repos/{repo.full_name}/git/blobs/{self.api.blob_sha(data)}",
               # The media endpoint: an LFS file's object, any other file's own bytes.
               "download_url": f"{self.api.media_url}/_media/{repo.full_name}/{ref}/{path}"}
        if len(data) > CONTENTS_INLINE_LIMIT:
            out.update(encoding="none", content="")
        else:
            out.update(encoding="base64", content=base64.b64encode(data).decode())
        return 200, out, {}

    def _listing(self, repo: Repo, ref: str, wanted: str):
        """GET /repos/{repo}/contents/{folder}: one entry per file or sub-folder, as GitHub lists them."""
        url = self.api.url
        files = repo.commits[ref]
        inside = sorted(p for p in files if p.startswith(wanted + "/"))
        if not inside:
            raise KeyError(wanted)
        listing: dict[str, dict[str, Any]] = {}
        for p in inside:
            rest = p[len(wanted) + 1:]
            if "/" in rest:
                sub = f"{wanted}/{rest.split('/', 1)[0]}"
                listing[sub] = {"type": "dir", "size": 0, "name": sub.rsplit("/", 1)[-1], "path": sub,
                                "sha": "0" * 40, "url": f"{url}/repos/{repo.full_name}/contents/{sub}?ref={ref}",
                                "download_url": None}
            else:
                _, entry, _ = self._contents(repo, ref, p)
                entry = {k: v for k, v in entry.items() if k not in ("content", "encoding")}
                listing[p] = entry
        return 200, list(listing.values()), {}

    @staticmethod
    def _apply_output(run: dict[str, Any], body: dict[str, Any]) -> None:
        output = body.get("output")
        if output:
            # GitHub appends annotations across updates and keeps at most 50 per request.
            annotations = output.get("annotations") or []
            if len(annotations) > 50:
                raise ValueError("more than 50 annotations in one request")
            run["annotations"].extend(annotations)
            run["output"] = {k: v for k, v in output.items() if k != "annotations"}

    def _create_review(self, repo: Repo, number: int, body: dict[str, Any]):
        """POST /pulls/{n}/reviews as GitHub checks it: each comment on a file of the pull request, on
        RIGHT-side lines inside one hunk of that file's patch (else 422, as GitHub answers)."""
        api, pr = self.api, repo.pulls[number]
        head, base = repo.commits.get(pr["head"], {}), repo.commits.get(pr["base"], {})
        review_id = api._next_id()
        comments = []
        for c in body.get("comments") or []:
            path, line, start = c.get("path"), c.get("line"), c.get("start_line") or c.get("line")
            hunks = hunk_lines(file_patch(base.get(path), head.get(path))) if path in pr["changed"] else []
            if c.get("side", "RIGHT") != "RIGHT" or not any(start in h and line in h for h in hunks):
                return 422, {"message": "Unprocessable Entity", "errors": [
                    "Pull request review thread line must be part of the diff"]}, {}
            comments.append({"id": api._next_id(), "pull_request_review_id": review_id, "path": path, "line": line,
                             "start_line": c.get("start_line"), "side": "RIGHT", "body": c.get("body", ""),
                             "commit_id": body.get("commit_id") or pr["head"],
                             "user": api._user(api.bot_login, "Bot")})
        review = {"id": review_id, "repo": repo.full_name, "number": number, "body": body.get("body", ""),
                  "event": body.get("event"), "commit_id": body.get("commit_id") or pr["head"], "comments": comments}
        api.reviews.append(review)
        return 200, {"id": review_id, "body": review["body"], "state": "COMMENTED", "commit_id": review["commit_id"],
                     "user": api._user(api.bot_login, "Bot")}, {}

    def _pull_json(self, repo: Repo, pr: dict[str, Any]) -> dict[str, Any]:
        url = self.api.url
        head_repo = pr["head_repo"]
        return {
            "number": pr["number"], "state": "open", "title": "a change",
            "url": f"{url}/repos/{repo.full_name}/pulls/{pr['number']}",
            "html_url": f"https://github.example/{repo.full_name}/pull/{pr['number']}",
            "issue_url": f"{url}/repos/{repo.full_name}/issues/{pr['number']}",
            "user": self.api._user(pr["author"]),
            "head": {"sha": pr["head"], "ref": "feature", "repo": {"full_name": head_repo, "fork": head_repo != repo.full_name,
                                                                    "url": f"{url}/repos/{head_repo}"}},
            "base": {"sha": pr["base"], "ref": repo.default_branch,
                     "repo": {"full_name": repo.full_name, "url": f"{url}/repos/{repo.full_name}"}},
        }


# --- driving the bot over HTTP -------------------------------------------------------------------

def sign(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` header GitHub sends for a body."""
    import hashlib
    import hmac

    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """`draftguard serve` as a real process on a free loopback port (SQLite queue, 2 workers),
    started and waited for until /healthz answers. Its output goes to a log file under ``tmp_path``.
    Tests kill it with ``proc.send_signal`` to check what survives."""

    def __init__(self, tmp_path, env: dict[str, str], queue_url: str, timeout: float = 60.0,
                 args: tuple[str, ...] = ()):
        import subprocess
        import sys
        import time

        import requests

        self.port = free_port()
        self.log = open(tmp_path / f"serve-{self.port}.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "draftguard", "serve", "--port", str(self.port), "--queue", queue_url,
             "--workers", "2", *args], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + timeout
        while True:
            try:
                if requests.get(f"{self.url}/healthz", timeout=1).ok:
                    return
            except requests.ConnectionError:
                pass
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError(open(self.log.name).read()[-2000:])
            time.sleep(0.1)


class BotServer:
    """Serve an ASGI app with uvicorn on loopback in a thread (lifespan included)."""

    def __init__(self, app: Any):
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    access_log=False, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "BotServer":
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("the bot server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(20)


def post_webhook(url: str, event: str, payload: Any, *, secret: str | None, delivery: str,
                 signature: str | None = None, raw: bytes | None = None, timeout: float = 10.0):
    """POST a webhook as GitHub does; returns the ``requests`` response."""
    import requests

    body = raw if raw is not None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": delivery}
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    elif secret is not None:
        headers["X-Hub-Signature-256"] = sign(secret, body)
    return requests.post(f"{url}/webhooks/github", data=body, headers=headers, timeout=timeout)


def pr_payload(repo: str, number: int, head: str, base: str, *, action: str = "opened", author: str = "alice",
               head_repo: str | None = None, installation: int | None = None) -> dict[str, Any]:
    out = {
        "action": action,
        "repository": {"full_name": repo},
        "pull_request": {"number": number, "user": {"login": author, "type": "User"},
                         "head": {"sha": head, "repo": {"full_name": head_repo or repo}},
                         "base": {"sha": base, "repo": {"full_name": repo}}},
        "sender": {"login": author, "type": "User"},
    }
    if installation is not None:
        out["installation"] = {"id": installation}
    return out


def comment_payload(repo: str, number: int, comment: dict[str, Any], *, installation: int | None = None) -> dict[str, Any]:
    out = {
        "action": "created",
        "repository": {"full_name": repo},
        "issue": {"number": number, "pull_request": {"url": f"/repos/{repo}/pulls/{number}"}},
        "comment": {"id": comment["id"], "body": comment["body"],
                    "user": {"login": comment["user"], "type": comment.get("user_type", "User")}},
        "sender": {"login": comment["user"], "type": comment.get("user_type", "User")},
    }
    if installation is not None:
        out["installation"] = {"id": installation}
    return out
