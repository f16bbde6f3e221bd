"""The registry of hosts the bot serves: one entry per host, which ``draftguard serve`` (its webhook
routes and handlers) and ``draftguard worker`` (its handlers) both loop over. A new host is its
client (``hosts/<host>.py``), its webhook route (``bot/<host>_events.py``), its ``PullRequestHost`` and
handler on the one flow (``bot/<host>_handler.py``), and one line here.

In: the environment (each host reads its own configuration from it).
Out: ``PLATFORMS`` (a ``Platform`` per host: its Job source, configuration, route, handler and
credential test) and ``configs_from_env`` -> each host's configuration by source.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from draftguard.bot.github_events import github_route
from draftguard.bot.github_handler import GitHubHandler
from draftguard.bot.hub_events import hub_route
from draftguard.bot.hub_handler import HubHandler
from draftguard.bot.webhooks import WebhookRoute
from draftguard.hosts.github import GitHubConfig
from draftguard.hosts.hub import HubConfig
from draftguard.jobs import Handler


@dataclass(frozen=True)
class Platform:
    """One host the bot serves. ``config_from_env(env)`` reads its configuration (``webhook_secret``,
    ``secrets``, ``require_auth()``); ``route(secret)`` is its webhook route; ``handler(config)`` runs
    its Jobs; ``has_credentials(config)`` says whether a worker can run them; ``credentials`` says how
    to give them. A host whose route is ``always_routed`` answers 401 without a secret, rather than
    404."""

    source: str
    config_from_env: Callable[[Mapping[str, str] | None], Any]
    route: Callable[[Any], WebhookRoute]
    handler: Callable[[Any], Handler]
    has_credentials: Callable[[Any], bool]
    credentials: str
    always_routed: bool = False


PLATFORMS: tuple[Platform, ...] = (
    Platform("github", GitHubConfig.from_env, github_route, GitHubHandler, lambda c: bool(c.token or c.app_id),
             "GITHUB_TOKEN (or DRAFTGUARD_GITHUB_APP_ID with its private key) for GitHub jobs", always_routed=True),
    Platform("hub", HubConfig.from_env, hub_route, HubHandler, lambda c: bool(c.token), "HF_TOKEN for Hub jobs"),
)

NO_SECRET = ("set DRAFTGUARD_GITHUB_WEBHOOK_SECRET to the secret of the App's or repo's webhook "
             "(or DRAFTGUARD_HUB_WEBHOOK_SECRET for the Hub bot)")
NO_CREDENTIALS = "no credentials: set " + ", and/or ".join(p.credentials for p in PLATFORMS)


def configs_from_env(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Each host's configuration, by Job source. Raises ``BotConfigError`` for one that is unusable."""
    return {p.source: p.config_from_env(env) for p in PLATFORMS}
