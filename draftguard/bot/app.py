"""The bot's ASGI app (Starlette, served by uvicorn): verify, record, queue, answer 202.

A webhook is answered in milliseconds. The handler checks the signature, caps the body, parses it,
decides whether it asks for work (a pure function of the payload), and writes the Job record and its
task to the durable queue; all GitHub API calls and checks happen in the workers.

Routes: ``POST /webhooks/github``, ``GET /healthz``, ``GET /metrics`` (Prometheus text), plus any
extra routes a surface adds (the Hub bot adds ``POST /webhooks/hub``).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import threading
from typing import Any, Callable, Iterable, Sequence

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from draftguard.bot.github import GitHubConfig
from draftguard.bot.jobs import Job, Queue
from draftguard.bot.pipeline import job_from_github

log = logging.getLogger("draftguard.bot")

MAX_BODY_BYTES = 10 * 1024 * 1024
LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)


class BodyTooLarge(Exception):
    pass


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The raw request body, refusing more than ``limit`` bytes before reading them all."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge()
        chunks.append(chunk)
    return b"".join(chunks)


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """Check GitHub's ``X-Hub-Signature-256`` (HMAC-SHA256 of the raw body), in constant time.

    Example::

        >>> sig = "sha256=" + hmac.new(b"s3cret", b"{}", hashlib.sha256).hexdigest()
        >>> verify_signature("s3cret", b"{}", sig), verify_signature("s3cret", b"{ }", sig)
        (True, False)
    """
    if not header or not header.startswith("sha256="):
        return False
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), header.strip().encode())


class Metrics:
    """Counters for /metrics. Deliveries are this process's; job states come from the shared store."""

    def __init__(self) -> None:
        self.deliveries: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def delivery(self, source: str, outcome: str) -> None:
        with self._lock:
            key = (source, outcome)
            self.deliveries[key] = self.deliveries.get(key, 0) + 1

    def render(self, queue: Queue) -> str:
        out = ["# HELP draftguard_webhook_deliveries_total Webhook deliveries received, by outcome.",
               "# TYPE draftguard_webhook_deliveries_total counter"]
        with self._lock:
            items = sorted(self.deliveries.items())
        for (source, outcome), n in items:
            out.append(f'draftguard_webhook_deliveries_total{{source="{source}",outcome="{outcome}"}} {n}')
        out += ["# HELP draftguard_jobs Jobs in the queue's store, by state.", "# TYPE draftguard_jobs gauge"]
        for state, n in sorted(queue.counts().items()):
            out.append(f'draftguard_jobs{{state="{state}"}} {n}')
        latencies = list(queue.latencies)
        out += ["# HELP draftguard_job_latency_seconds From webhook to finished job, for jobs this process ran.",
                "# TYPE draftguard_job_latency_seconds histogram"]
        for bound in LATENCY_BUCKETS:
            out.append(f'draftguard_job_latency_seconds_bucket{{le="{bound}"}} {sum(1 for x in latencies if x <= bound)}')
        out.append(f'draftguard_job_latency_seconds_bucket{{le="+Inf"}} {len(latencies)}')
        out.append(f"draftguard_job_latency_seconds_sum {sum(latencies):.6f}")
        out.append(f"draftguard_job_latency_seconds_count {len(latencies)}")
        return "\n".join(out) + "\n"


Authorize = Callable[[Request, "bytes | None"], "Response | None"]
ToJobs = Callable[[Request, "dict[str, Any]"], "tuple[list[Job] | None, str]"]


def webhook_endpoint(
    queue: Queue,
    metrics: Metrics,
    *,
    source: str,
    authorize: Authorize,
    to_jobs: ToJobs,
    body_signed: bool = True,
    delivery_header: str | None = None,
    many: bool = False,
) -> Callable:
    """Build a webhook route handler: authorize, cap, parse, dedupe, queue. Shared by GitHub and the Hub.

    ``authorize(request, body)`` answers a refused delivery (None lets it in). With ``body_signed``
    it gets the body (a signature over it); without, it runs before the body is read, with None.
    ``delivery_header``, when named, must be present (400 otherwise). ``to_jobs(request, payload)``
    returns the Jobs the payload asks for, or none and the reason. Answers name the queued job as
    ``"job": id``, or with ``many`` as ``"jobs": [ids]``.

    Example::

        >>> from starlette.testclient import TestClient
        >>> import tempfile
        >>> app = Starlette(routes=[Route("/h", webhook_endpoint(
        ...     Queue(f"sqlite:///{tempfile.mkdtemp()}/q.db"), Metrics(), source="demo",
        ...     authorize=lambda request, body: None, to_jobs=lambda request, payload: (None, "ignored: demo"),
        ...     ), methods=["POST"])])
        >>> TestClient(app).post("/h", content=b"{}").json()
        {'status': 'ignored: demo'}
    """

    def refused(answer: Response) -> Response:
        metrics.delivery(source, "bad_signature")
        return answer

    def ids(names: list[str]) -> Any:
        return names if many else names[0]

    async def endpoint(request: Request) -> Response:
        if not body_signed and (answer := authorize(request, None)) is not None:
            return refused(answer)
        try:
            body = await read_body(request)
        except BodyTooLarge:
            metrics.delivery(source, "too_large")
            return JSONResponse({"error": f"body over {MAX_BODY_BYTES} bytes"}, status_code=413)
        if body_signed and (answer := authorize(request, body)) is not None:
            return refused(answer)
        if delivery_header is not None:
            delivery = request.headers.get(delivery_header, "").strip()
            if not delivery or len(delivery) > 200:
                metrics.delivery(source, "malformed")
                return JSONResponse({"error": f"missing {delivery_header} header"}, status_code=400)
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise ValueError("not an object")
            jobs, reason = to_jobs(request, payload)
        except (ValueError, KeyError, TypeError) as exc:
            metrics.delivery(source, "malformed")
            return JSONResponse({"error": f"malformed payload: {type(exc).__name__}"}, status_code=400)
        if not jobs:
            metrics.delivery(source, "ignored")
            return JSONResponse({"status": reason}, status_code=200)
        queued = []
        try:
            for job in jobs:
                # SQLite writes block; keep them off the event loop so other deliveries keep flowing.
                if await run_in_threadpool(queue.submit, job):
                    queued.append(job.id)
        except Exception:
            log.exception("could not queue %s delivery %s", source, ", ".join(j.id for j in jobs))
            metrics.delivery(source, "queue_error")
            return JSONResponse({"error": "queue unavailable; redeliver later"}, status_code=503)
        key = "jobs" if many else "job"
        if not queued:
            metrics.delivery(source, "duplicate")
            return JSONResponse({"status": "duplicate", key: ids([j.id for j in jobs])}, status_code=200)
        metrics.delivery(source, "queued")
        return JSONResponse({"status": "queued", key: ids(queued)}, status_code=202)

    return endpoint


def github_authorize(secret: str | None) -> Authorize:
    """GitHub's check: ``X-Hub-Signature-256`` over the body, else 401 (always 401 without a secret)."""

    def authorize(request: Request, body: bytes | None) -> Response | None:
        if not secret or body is None or not verify_signature(secret, body, request.headers.get("x-hub-signature-256")):
            return JSONResponse({"error": "missing or invalid signature"}, status_code=401)
        return None

    return authorize


def github_jobs(request: Request, payload: dict[str, Any]) -> tuple[list[Job] | None, str]:
    """``job_from_github`` on the delivery's event and id headers, as the shared endpoint's ``to_jobs``."""
    job, reason = job_from_github(request.headers.get("x-github-event", "").strip(),
                                  request.headers.get("x-github-delivery", "").strip(), payload)
    return ([job] if job is not None else None), reason


def create_app(
    queue: Queue,
    config: GitHubConfig,
    *,
    consumers: dict[str, int] | None = None,
    recover: bool = True,
    routes: Iterable[BaseRoute] = (),
    metrics: Metrics | None = None,
    hub_secret: str | None = None,
) -> Starlette:
    """The bot's ASGI app. ``consumers`` (``{"cpu": 2, "gpu": 1}``) start in process with the app,
    after unfinished jobs from a previous run are queued again. ``hub_secret`` (the Hub webhook's
    secret) adds ``POST /webhooks/hub``.

    Example::

        >>> import tempfile
        >>> app = create_app(Queue(f"sqlite:///{tempfile.mkdtemp()}/q.db"), GitHubConfig(webhook_secret="s"))
        >>> sorted(r.path for r in app.routes)
        ['/healthz', '/metrics', '/webhooks/github']
    """
    metrics = metrics or Metrics()
    github = webhook_endpoint(
        queue, metrics, source="github", authorize=github_authorize(config.webhook_secret),
        to_jobs=github_jobs, delivery_header="x-github-delivery",
    )

    extra = list(routes)
    if hub_secret:
        from draftguard.bot.hub_events import hub_webhook_endpoint

        extra.append(Route("/webhooks/hub", hub_webhook_endpoint(queue, metrics, secret=hub_secret), methods=["POST"]))

    async def healthz(request: Request) -> JSONResponse:
        try:
            await run_in_threadpool(queue.store.has_data_for_key, "healthz")
        except Exception as exc:
            return JSONResponse({"ok": False, "queue": queue.backend, "error": type(exc).__name__}, status_code=503)
        return JSONResponse({"ok": True, "queue": queue.backend})

    async def metrics_endpoint(request: Request) -> PlainTextResponse:
        text = await run_in_threadpool(metrics.render, queue)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        if recover:
            # One process owns a SQLite queue, so at its start nothing can be running: take every
            # unfinished job. With Redis, other workers may be running jobs: honour their leases.
            await run_in_threadpool(queue.recover, lease=queue.backend != "sqlite")
        if consumers:
            queue.start_consumers(consumers, in_process=True)
        try:
            yield
        finally:
            queue.stop_consumers()

    app = Starlette(
        routes=[
            Route("/webhooks/github", github, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/metrics", metrics_endpoint, methods=["GET"]),
            *extra,
        ],
        lifespan=lifespan,
    )
    app.state.queue, app.state.metrics, app.state.config = queue, metrics, config
    return app


def build_from_env(
    queue_url: str,
    *,
    consumers: dict[str, int] | None,
    env: dict[str, str] | None = None,
) -> Starlette:
    """The app as ``draftguard serve`` runs it: configuration from the environment, the GitHub
    handler (and the Hub handler, when DRAFTGUARD_HUB_WEBHOOK_SECRET is set) on the queue."""
    from draftguard.bot.hub import HubConfig
    from draftguard.bot.hub_events import HubHandler
    from draftguard.bot.pipeline import GitHubHandler

    config = GitHubConfig.from_env(env)
    hub = HubConfig.from_env(env)
    if not config.webhook_secret and not hub.webhook_secret:
        from draftguard.bot.github import BotConfigError

        raise BotConfigError("set DRAFTGUARD_GITHUB_WEBHOOK_SECRET to the secret of the App's or repo's webhook "
                             "(or DRAFTGUARD_HUB_WEBHOOK_SECRET for the Hub bot)")
    queue = Queue(queue_url)
    if config.webhook_secret:
        config.require_auth()
        queue.handlers["github"] = GitHubHandler(config)
    if hub.webhook_secret:
        hub.require_auth()
        queue.handlers["hub"] = HubHandler(hub)
    return create_app(queue, config, consumers=consumers, hub_secret=hub.webhook_secret)


def configure_logging(secrets: Sequence[str], level: int = logging.INFO) -> None:
    """Log to stderr with every secret scrubbed; PyGithub's debug log (bodies with tokens) stays off."""
    from draftguard.bot.github import SecretFilter

    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(SecretFilter(secrets))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("github").setLevel(logging.WARNING)
    logging.getLogger("huey").setLevel(logging.WARNING)
