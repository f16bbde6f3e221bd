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
from starlette.responses import JSONResponse, PlainTextResponse
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


def webhook_endpoint(
    queue: Queue,
    metrics: Metrics,
    *,
    source: str,
    secret: str | None,
    verify: Callable[[str, bytes, str | None], bool],
    signature_header: str,
    delivery_header: str,
    event_header: str,
    to_job: Callable[[str, str, Any], tuple[Job | None, str]],
) -> Callable:
    """Build a webhook route handler: cap, verify, parse, dedupe, queue. Shared by GitHub and the Hub."""

    async def endpoint(request: Request) -> JSONResponse:
        try:
            body = await read_body(request)
        except BodyTooLarge:
            metrics.delivery(source, "too_large")
            return JSONResponse({"error": f"body over {MAX_BODY_BYTES} bytes"}, status_code=413)
        if not secret or not verify(secret, body, request.headers.get(signature_header)):
            metrics.delivery(source, "bad_signature")
            return JSONResponse({"error": "missing or invalid signature"}, status_code=401)
        delivery = request.headers.get(delivery_header, "").strip()
        event = request.headers.get(event_header, "").strip()
        if not delivery or len(delivery) > 200:
            metrics.delivery(source, "malformed")
            return JSONResponse({"error": f"missing {delivery_header} header"}, status_code=400)
        try:
            payload = json.loads(body)
            if not isinstance(payload, dict):
                raise ValueError("not an object")
            job, reason = to_job(event, delivery, payload)
        except (ValueError, KeyError, TypeError) as exc:
            metrics.delivery(source, "malformed")
            return JSONResponse({"error": f"malformed payload: {type(exc).__name__}"}, status_code=400)
        if job is None:
            metrics.delivery(source, "ignored")
            return JSONResponse({"status": reason}, status_code=200)
        try:
            # SQLite writes block; keep them off the event loop so other deliveries keep flowing.
            queued = await run_in_threadpool(queue.submit, job)
        except Exception:
            log.exception("could not queue delivery %s", delivery)
            metrics.delivery(source, "queue_error")
            return JSONResponse({"error": "queue unavailable; redeliver later"}, status_code=503)
        if not queued:
            metrics.delivery(source, "duplicate")
            return JSONResponse({"status": "duplicate", "job": delivery}, status_code=200)
        metrics.delivery(source, "queued")
        return JSONResponse({"status": "queued", "job": job.id}, status_code=202)

    return endpoint


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
        queue, metrics, source="github", secret=config.webhook_secret, verify=verify_signature,
        signature_header="x-hub-signature-256", delivery_header="x-github-delivery",
        event_header="x-github-event", to_job=job_from_github,
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
