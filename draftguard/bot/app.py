"""``draftguard serve``'s app, composed from the environment: the edge (``bot/webhooks.py``) with
the GitHub route and, when configured, the Hub route, each with its handler on the queue.

In: environment variables (secrets, tokens, API URLs) and a queue URL.
Out: a Starlette app (``build_from_env``), or ``BotConfigError`` when no webhook secret or
credentials are set; ``configure_logging`` sends scrubbed logs to stderr.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

from starlette.applications import Starlette

from draftguard.hosts.github import BotConfigError, GitHubConfig

from draftguard.bot.github_events import github_route
from draftguard.bot.github_handler import GitHubHandler
from draftguard.bot.hub_events import hub_route
from draftguard.bot.hub_handler import HubHandler
from draftguard.jobs import Queue
from draftguard.bot.webhooks import BODY_TIMEOUT, WebhookRoute, create_app
from draftguard.hosts.hub import HubConfig
from draftguard.secrets import SecretFilter


def build_from_env(
    queue_url: str,
    *,
    consumers: dict[str, int] | None,
    env: dict[str, str] | None = None,
) -> Starlette:
    """The app as ``draftguard serve`` runs it: configuration from the environment, the GitHub
    handler (and the Hub handler, when DRAFTGUARD_HUB_WEBHOOK_SECRET is set) on the queue."""
    config = GitHubConfig.from_env(env)
    hub = HubConfig.from_env(env)
    if not config.webhook_secret and not hub.webhook_secret:
        raise BotConfigError("set DRAFTGUARD_GITHUB_WEBHOOK_SECRET to the secret of the App's or repo's webhook "
                             "(or DRAFTGUARD_HUB_WEBHOOK_SECRET for the Hub bot)")
    queue = Queue(queue_url)
    # GitHub's route is always served: without its secret it answers 401 to everything.
    routes: list[WebhookRoute] = [github_route(config.webhook_secret)]
    if config.webhook_secret:
        config.require_auth()
        queue.handlers["github"] = GitHubHandler(config)
    if hub.webhook_secret:
        hub.require_auth()
        queue.handlers["hub"] = HubHandler(hub)
        routes.append(hub_route(hub.webhook_secret))
    env_ = os.environ if env is None else env
    body_timeout = float(env_.get("DRAFTGUARD_BODY_TIMEOUT") or BODY_TIMEOUT)
    return create_app(queue, routes, consumers=consumers, body_timeout=body_timeout)


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
