"""The webhook edge: HTTP in, Jobs on the queue out, for any platform that supplies a route.

In: a ``WebhookRoute`` per platform (its path, a header check run before the body is read, a body
check run after, and a pure ``to_jobs(headers, payload)``) and the ``Queue``.
Out: a Starlette app (``create_app``) that answers every delivery in milliseconds (202 queued, 200
ignored or duplicate, 400/401/403/408/413 refused, 503 when the queue is down): it admits or refuses
on the headers, reads the body under a size limit and a budget of unauthenticated bytes in flight,
verifies it, parses it with bounded depth, asks the route for Jobs and writes them to the durable
queue. All API calls and checks happen in the workers. Nothing here knows a platform: each
platform's events module raises ``WebhookRefused`` (with the HTTP status) or ``PayloadError`` (400),
and this module maps them.

Routes: the platforms' webhook routes, ``GET /healthz``, ``GET /metrics`` (Prometheus text).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from draftguard.jobs import STATES, Job, Queue
from draftguard.errors import PayloadError, WebhookRefused

log = logging.getLogger("draftguard.bot")

MAX_BODY_BYTES = 10 * 1024 * 1024
# Bytes of bodies not yet authenticated that all connections together may hold in memory. A delivery
# that would go over waits for none: it is answered 503 (the sender redelivers), so 50 connections of
# 9 MB each cost about this much, not 450 MB (bench/bench_webhooks.py, door).
MAX_UNVERIFIED_BYTES = 16 * 1024 * 1024
MAX_DELIVERY_ID_CHARS = 200
# Seconds a body may take to arrive once its headers are in (the server's own header deadline is in
# bot/server.py). GitHub and the Hub send a whole body in well under a second.
BODY_TIMEOUT = 30.0
LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600)


class BodyTooLarge(WebhookRefused):
    def __init__(self, limit: int = MAX_BODY_BYTES):
        super().__init__(413, f"body over {limit} bytes", "too_large")


class UnverifiedBudget:
    """A count of body bytes held before their sender is authenticated, shared by all connections.

    Example::

        >>> budget = UnverifiedBudget(10)
        >>> budget.take(6), budget.take(6), budget.held
        (True, False, 6)
    """

    def __init__(self, limit: int = MAX_UNVERIFIED_BYTES):
        self.limit = limit
        self.held = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.held + n > self.limit:
                return False
            self.held += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self.held = max(0, self.held - n)


async def read_body(request: Request, limit: int = MAX_BODY_BYTES,
                    budget: UnverifiedBudget | None = None) -> bytearray:
    """The raw request body, refusing more than ``limit`` bytes before reading them all, and (with a
    ``budget``) refusing with 503 when the bytes in flight of all unauthenticated bodies would pass
    it. The caller gives the taken bytes back (``budget.give(len(body))``) once the body is verified
    or dropped; on a refusal here they are given back already."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(limit)
    # One growing buffer, not a list of chunks joined at the end: the join would hold the body twice.
    body, size = bytearray(), 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BodyTooLarge(limit)
            if budget is not None and not budget.take(len(chunk)):
                size -= len(chunk)
                raise WebhookRefused(503, "too many unverified bytes in flight; redeliver later", "busy")
            body += chunk
    except BaseException:  # refused, the client went away (ClientDisconnect), or cancelled
        if budget is not None:
            budget.give(size)
        raise
    return body


def parse_payload(body: bytes | bytearray, content_type: str | None) -> dict[str, Any]:
    """A webhook body as a JSON object: ``application/json``, or a form whose ``payload`` field holds
    the JSON (``application/x-www-form-urlencoded``). Nesting deeper than the interpreter's recursion
    limit (the C parser stops there with a RecursionError, in one pass), numbers that are not finite
    (``1e999``, ``NaN``) and anything but an object raise PayloadError.

    Raises:
        PayloadError: The body is not a JSON object (answered 400).

    Example::

        >>> parse_payload(b'{"a": [1]}', "application/json")
        {'a': [1]}
        >>> parse_payload(b"payload=%7B%22a%22%3A1%7D", "application/x-www-form-urlencoded")
        {'a': 1}
        >>> parse_payload(b'{"n": 1e999}', None)
        Traceback (most recent call last):
        ...
        draftguard.errors.PayloadError: malformed payload: a number that is not finite
    """
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == "application/x-www-form-urlencoded":
        try:
            fields = parse_qs(body.decode("utf-8"), max_num_fields=16, strict_parsing=False)
        except (UnicodeDecodeError, ValueError) as exc:
            raise PayloadError(f"malformed form body: {type(exc).__name__}") from None
        values = fields.get("payload")
        if not values:
            raise PayloadError("malformed form body: no payload field")
        body = values[0].encode("utf-8")

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise PayloadError("malformed payload: a number that is not finite")
        return value

    def constant(name: str) -> Any:
        raise PayloadError("malformed payload: a number that is not finite")

    try:
        payload = json.loads(body, parse_float=finite, parse_constant=constant)
    except PayloadError:
        raise
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and huge int literals are ValueErrors
        raise PayloadError(f"malformed payload: {type(exc).__name__}") from None
    if not isinstance(payload, dict):
        raise PayloadError("malformed payload: not an object")
    return payload


class Metrics:
    """Counters for /metrics. Deliveries are this process's; job states (and, when the jobs run in
    worker processes, their latencies) come from the shared store.

    /metrics needs no credentials, so what it costs must not grow with the store: the job counts
    (a scan of every record) are taken at most once per ``ttl`` seconds, by one request at a time;
    the others answer from the last counts at once (B6 of issue 25: 16 clients polling a store of
    50k records took a light check from 0.2 s to 51 s)."""

    def __init__(self, ttl: float | None = None) -> None:
        self.deliveries: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self.ttl = float(os.environ.get("DRAFTGUARD_METRICS_TTL", "15")) if ttl is None else ttl
        self._scan = threading.Lock()
        self._counts: dict[str, int] | None = None
        self._stored: list[float] = []  # latencies of the last finished jobs in the store
        self._counted = float("-inf")

    def job_counts(self, queue: Queue) -> dict[str, int] | None:
        """Jobs in the store by state, at most ``ttl`` seconds old; None before the first count
        finished (a request that arrives while another counts does not wait)."""
        if time.monotonic() - self._counted > self.ttl and self._scan.acquire(blocking=False):
            try:
                if time.monotonic() - self._counted > self.ttl:
                    counts: dict[str, int] = {state: 0 for state in STATES}
                    finished: list[tuple[float, float]] = []
                    for job in queue.jobs():  # one scan: the states, and the latency of finished jobs
                        counts[job.state] = counts.get(job.state, 0) + 1
                        if job.finished:
                            finished.append((job.finished, job.finished - job.created))
                    self._stored = [lag for _, lag in sorted(finished)[-10000:]]
                    self._counts, self._counted = counts, time.monotonic()
            finally:
                self._scan.release()
        return self._counts

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
        for state, n in sorted((self.job_counts(queue) or {}).items()):
            out.append(f'draftguard_jobs{{state="{state}"}} {n}')
        # Jobs run in worker processes (bot/workers.py): their latencies come from the store's records,
        # taken with the counts; worker threads in this process (--worker-type thread) record their own.
        latencies = list(queue.latencies) or self._stored
        out += ["# HELP draftguard_job_latency_seconds From webhook to finished job: the last 10000 finished.",
                "# TYPE draftguard_job_latency_seconds histogram"]
        for bound in LATENCY_BUCKETS:
            out.append(f'draftguard_job_latency_seconds_bucket{{le="{bound}"}} {sum(1 for x in latencies if x <= bound)}')
        out.append(f'draftguard_job_latency_seconds_bucket{{le="+Inf"}} {len(latencies)}')
        out.append(f"draftguard_job_latency_seconds_sum {sum(latencies):.6f}")
        out.append(f"draftguard_job_latency_seconds_count {len(latencies)}")
        return "\n".join(out) + "\n"


Headers = Mapping[str, str]


def _admit_all(headers: Headers) -> None:
    return None


@dataclass(frozen=True)
class WebhookRoute:
    """One platform's webhook, as the edge serves it.

    - ``admit(headers)`` runs before the body is read and raises ``WebhookRefused`` to refuse (a
      missing signature, a wrong shared secret);
    - ``verify(headers, body)``, when given, runs on the body and raises ``WebhookRefused`` (a
      signature over the body). Until it passes, the body counts against the unverified budget;
    - ``to_jobs(headers, payload)`` returns the Jobs the payload asks for (none, with the reason, when
      it asks for nothing) and raises ``PayloadError`` for a payload it cannot use;
    - ``delivery_header``, when named, must be present and short (400 otherwise);
    - ``many``: answers name the queued jobs as ``"jobs": [ids]`` instead of ``"job": id``.
    """

    path: str
    source: str
    to_jobs: Callable[[Headers, dict[str, Any]], "tuple[list[Job] | None, str]"]
    admit: Callable[[Headers], None] = _admit_all
    verify: Callable[[Headers, bytes], None] | None = None
    delivery_header: str | None = None
    many: bool = False


def webhook_endpoint(route: WebhookRoute, queue: Queue, metrics: Metrics,
                     budget: UnverifiedBudget | None = None, body_timeout: float = BODY_TIMEOUT) -> Callable:
    """The Starlette handler for ``route``: admit, read (capped), verify, parse, dedupe, queue.

    Example::

        >>> from starlette.testclient import TestClient
        >>> import tempfile
        >>> demo = WebhookRoute("/h", "demo", to_jobs=lambda headers, payload: (None, "ignored: demo"))
        >>> app = create_app(Queue(f"sqlite:///{tempfile.mkdtemp()}/q.db"), [demo], recover=False)
        >>> TestClient(app).post("/h", content=b"{}").json()
        {'status': 'ignored: demo'}
    """
    source = route.source
    budget = budget or UnverifiedBudget()

    def answer(outcome: str, body: dict[str, Any], status: int) -> Response:
        metrics.delivery(source, outcome)
        headers = {"Retry-After": "10"} if status == 503 else None
        return JSONResponse(body, status_code=status, headers=headers)

    async def endpoint(request: Request) -> Response:
        headers = request.headers
        try:
            route.admit(headers)
            body = await asyncio.wait_for(read_body(request, budget=budget if route.verify is not None else None),
                                          body_timeout)
        except asyncio.TimeoutError:
            return answer("slow_body", {"error": f"body not received within {body_timeout:g} s"}, 408)
        except WebhookRefused as exc:
            return answer(exc.outcome, {"error": str(exc)}, exc.status)
        except ClientDisconnect:  # the sender went away mid-body: nobody to answer, nothing to log
            return answer("disconnected", {"error": "client disconnected"}, 400)
        if route.verify is not None:
            try:
                route.verify(headers, body)
            except WebhookRefused as exc:
                return answer(exc.outcome, {"error": str(exc)}, exc.status)
            finally:
                budget.give(len(body))
        if route.delivery_header is not None:
            delivery = headers.get(route.delivery_header, "").strip()
            if not delivery or len(delivery) > MAX_DELIVERY_ID_CHARS:
                return answer("malformed", {"error": f"missing {route.delivery_header} header"}, 400)
        try:
            payload = parse_payload(body, headers.get("content-type"))
            jobs, reason = route.to_jobs(headers, payload)
        except (PayloadError, ValueError, KeyError, TypeError, OverflowError, RecursionError) as exc:
            text = str(exc) if isinstance(exc, PayloadError) else f"malformed payload: {type(exc).__name__}"
            return answer("malformed", {"error": text}, 400)
        if not jobs:
            log.info("%s delivery %s: %s", source, headers.get(route.delivery_header or "", "-"), reason)
            return answer("ignored", {"status": reason}, 200)
        queued = []
        try:
            for job in jobs:
                # SQLite writes block; keep them off the event loop so other deliveries keep flowing.
                if await run_in_threadpool(queue.submit, job):
                    queued.append(job.id)
        except Exception:
            log.exception("could not queue %s delivery %s", source, ", ".join(j.id for j in jobs))
            return answer("queue_error", {"error": "queue unavailable; redeliver later"}, 503)
        key = "jobs" if route.many else "job"
        ids = [j.id for j in jobs] if not queued else queued
        shown = ids if route.many else ids[0]
        if not queued:
            return answer("duplicate", {"status": "duplicate", key: shown}, 200)
        return answer("queued", {"status": "queued", key: shown}, 202)

    return endpoint


def create_app(
    queue: Queue,
    routes: Iterable[WebhookRoute | BaseRoute] = (),
    *,
    consumers: dict[str, int] | None = None,
    workers: Callable[[], Callable[[], None]] | None = None,
    recover: bool = True,
    metrics: Metrics | None = None,
    budget: UnverifiedBudget | None = None,
    body_timeout: float = BODY_TIMEOUT,
) -> Starlette:
    """The bot's ASGI app: each ``WebhookRoute`` served by the edge (other Starlette routes as they
    are), plus ``/healthz`` and ``/metrics``. ``consumers`` (``{"cpu": 2, "gpu": 1}``) start in process
    with the app, after unfinished jobs from a previous run are queued again (``recover``); so does
    ``workers()`` (``serve``'s worker processes), which returns the call that stops them.

    Example::

        >>> import tempfile
        >>> demo = WebhookRoute("/webhooks/demo", "demo", to_jobs=lambda headers, payload: (None, "ignored"))
        >>> app = create_app(Queue(f"sqlite:///{tempfile.mkdtemp()}/q.db"), [demo])
        >>> sorted(r.path for r in app.routes)
        ['/healthz', '/metrics', '/webhooks/demo']
    """
    metrics = metrics or Metrics()
    budget = budget or UnverifiedBudget()
    served: list[BaseRoute] = []
    for route in routes:
        if isinstance(route, WebhookRoute):
            served.append(Route(route.path, webhook_endpoint(route, queue, metrics, budget, body_timeout),
                                methods=["POST"]))
        else:
            served.append(route)

    async def healthz(request: Request) -> JSONResponse:
        try:
            await run_in_threadpool(queue.ping)
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
        stop_workers = workers() if workers is not None else None  # worker processes, after recovery
        try:
            yield
        finally:
            queue.stop_consumers()
            if stop_workers is not None:
                await run_in_threadpool(stop_workers)

    app = Starlette(
        routes=[*served, Route("/healthz", healthz, methods=["GET"]),
                Route("/metrics", metrics_endpoint, methods=["GET"])],
        lifespan=lifespan,
    )
    app.state.queue, app.state.metrics, app.state.budget = queue, metrics, budget
    return app


__all__ = ["BodyTooLarge", "Metrics", "PayloadError", "UnverifiedBudget", "WebhookRefused", "WebhookRoute",
           "create_app", "parse_payload", "read_body", "webhook_endpoint"]
