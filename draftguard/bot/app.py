"""``draftguard serve``'s app, composed from the environment: the edge (``bot/webhooks.py``) with
the GitHub route and, when configured, the Hub route, each with its handler on the queue.

In: environment variables (secrets, tokens, API URLs) and a queue URL; the hosts of ``bot/platforms.py``.
Out: a Starlette app (``build_from_env``), or ``BotConfigError`` when no webhook secret or
credentials are set; ``configure_logging`` sends scrubbed logs to stderr.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Sequence

from starlette.applications import Starlette

from draftguard.bot.platforms import NO_SECRET, PLATFORMS, configs_from_env
from draftguard.bot.webhooks import BODY_TIMEOUT, WebhookRoute, create_app
from draftguard.hosts.github import BotConfigError
from draftguard.jobs import Queue
from draftguard.secrets import SecretFilter


def build_from_env(
    queue_url: str,
    *,
    consumers: dict[str, int] | None,
    env: dict[str, str] | None = None,
    workers: Callable[[], Callable[[], None]] | None = None,
) -> Starlette:
    """The app as ``draftguard serve`` runs it: configuration from the environment, and each host of
    the registry (``bot/platforms.py``) whose webhook secret is set: its route, and its handler on the
    queue."""
    configs = configs_from_env(env)
    if not any(c.webhook_secret for c in configs.values()):
        raise BotConfigError(NO_SECRET)
    queue = Queue(queue_url)
    routes: list[WebhookRoute] = []
    for platform in PLATFORMS:
        config = configs[platform.source]
        if config.webhook_secret or platform.always_routed:  # GitHub's answers 401 without its secret
            routes.append(platform.route(config.webhook_secret))
        if config.webhook_secret:
            config.require_auth()
            queue.handlers[platform.source] = platform.handler(config)
    env_ = os.environ if env is None else env
    body_timeout = float(env_.get("DRAFTGUARD_BODY_TIMEOUT") or BODY_TIMEOUT)
    return create_app(queue, routes, consumers=consumers, workers=workers, body_timeout=body_timeout)


def configure_logging(secrets: Sequence[str], level: int = logging.INFO) -> None:
    """Log to stderr with every secret scrubbed; PyGithub's debug log (bodies with tokens) stays off."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(SecretFilter(secrets))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("github").setLevel(logging.WARNING)
    logging.getLogger("huey").setLevel(logging.WARNING)
