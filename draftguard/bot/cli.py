"""``draftguard serve`` and ``draftguard worker``: the bot's entry points.

In: the parsed arguments (host, port, queue URL, worker counts, which queue a worker serves) and
the environment (secrets, tokens; see ``hosts.github`` and ``hosts.hub``).
Out: a running server (``serve``: uvicorn answering webhooks in its own interpreter; on SQLite it
starts its workers as ``draftguard worker`` processes, or as threads with ``--worker-type thread``) or
a huey consumer (``worker``: GitHub and Hub Jobs, and the ``others`` it is given: the audit's; process
workers by default, ``bot/workers.py``), until stopped; the exit code.

Bad configuration (a missing secret, an unusable queue URL, a missing extra) is one line on stderr
and exit 2, never a traceback, and never shows a secret.
"""

from __future__ import annotations

import argparse
import os
import sys

from huey.consumer import Consumer

from draftguard.bot.app import build_from_env, configure_logging
from draftguard.bot.platforms import NO_CREDENTIALS, PLATFORMS, configs_from_env
from draftguard.bot.server import run_server
from draftguard.bot.workers import ProcessConsumer, WorkerProcesses
from draftguard.check import resolver
from draftguard.errors import QueueConfigError
from draftguard.hosts.github import BotConfigError
from draftguard.jobs import Handler, Queue
from draftguard.queue_store import parse_queue_url

EXIT_BAD_INPUT = 2


def _fail(message: str) -> int:
    print(f"draftguard: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def serve(args: argparse.Namespace) -> int:
    """Run the ASGI app under uvicorn; with SQLite it starts the workers too (worker processes, or
    threads in this process with ``--worker-type thread``). The caller
    (draftguard.cli) has said so in one line already when the `bot` extra is missing."""
    try:
        backend, _ = parse_queue_url(args.queue)
        configure_logging([s for c in configs_from_env().values() for s in c.secrets])
        sqlite = backend == "sqlite"
        workers = args.workers if args.workers is not None else (2 if sqlite else 0)
        gpu = args.gpu_workers if args.gpu_workers is not None else (1 if sqlite else 0)
        kinds = {"cpu": workers, "gpu": gpu}
        threads = getattr(args, "worker_type", "process") == "thread"
        if threads:
            app = build_from_env(args.queue, consumers=kinds)
        else:
            # Started once the queue is recovered; stopped with the server.
            app = build_from_env(args.queue, consumers=None, workers=lambda: WorkerProcesses(args.queue, kinds).start().stop)
    except (BotConfigError, QueueConfigError) as exc:
        return _fail(str(exc))
    if threads:
        _warm_up()
        # Worker threads share the interpreter lock with the event loop; a 1 ms switch interval (default
        # 5 ms) lets a webhook be answered between a job's steps instead of waiting behind them.
        sys.setswitchinterval(0.001)
    run_server(app, args.host, args.port)
    return 0


def worker(args: argparse.Namespace, others: dict[str, Handler] | None = None) -> int:
    """Consume one queue (cpu or gpu) of a shared queue until interrupted. ``others`` are the handlers
    of the other surfaces' Jobs (``draftguard.cli`` passes the audit's), which need no credentials."""
    try:
        configs = configs_from_env()
        served = [p for p in PLATFORMS if p.has_credentials(configs[p.source])]
        # Without any credentials a cpu worker still serves `draftguard audit` jobs; but a bot
        # deployment (a webhook secret is set) without its token is a mistake, said at once.
        bot_deployment = any(c.webhook_secret for c in configs.values())
        if not served and (args.queue != "cpu" or bot_deployment):
            raise BotConfigError(NO_CREDENTIALS)
        configure_logging([s for c in configs.values() for s in c.secrets])
        queue = Queue(args.queue_url)
    except (BotConfigError, QueueConfigError) as exc:
        return _fail(str(exc))
    for platform in served:
        queue.handlers[platform.source] = platform.handler(configs[platform.source])
    # `draftguard audit --queue` jobs read public repos (HF_TOKEN when set): no credentials needed.
    queue.handlers.update(others or {})
    if not served:
        print("draftguard: no GitHub or Hub credentials: this worker serves `draftguard audit` jobs only",
              file=sys.stderr)
    if args.queue == "cpu":
        _warm_up()
    queue.recover(lease=True)
    queue.start_recovery()
    if getattr(args, "parent_pid", None) is not None:
        # Started by serve, on its machine: the webhook edge comes first when the CPUs are short.
        os.nice(_worker_nice())
    if getattr(args, "worker_type", "process") == "thread":
        Consumer(queue.hueys[args.queue], workers=args.workers, periodic=False, initial_delay=0.05,
                 max_delay=1.0, check_worker_health=True).run()
    else:
        poll = 0.5 if queue.backend == "sqlite" else 1.0
        ProcessConsumer(queue, args.queue, args.workers, parent=getattr(args, "parent_pid", None),
                        initial_delay=0.05, max_delay=poll, backoff=1.3).run()
    return 0


def _worker_nice() -> int:
    """How much lower than serve its worker processes run: ``DRAFTGUARD_WORKER_NICE`` (10; 0 for the same)."""
    raw = os.environ.get("DRAFTGUARD_WORKER_NICE", "").strip()
    return int(raw) if raw.lstrip("-").isdigit() else 10


def _warm_up() -> None:
    """Import transformers before the first webhook, so the first job does not pay for it while
    other deliveries wait on the interpreter lock."""
    resolver.hide_torch()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    resolver.transformers_version()
