"""How ``draftguard serve`` runs its app under uvicorn: with the limits a public webhook endpoint needs.

In: the ASGI app, a host and port, and ``ServerLimits`` (from the environment).
Out: a running uvicorn server (``run_server`` returns when it stops) whose connections cannot be
held open for free:

- a connection must finish sending its request headers within ``header_timeout`` seconds of opening
  (or of its previous answer), else it is closed: uvicorn itself has no such timeout, so 500
  "slowloris" connections that trickle headers would otherwise stay open for ever;
- an idle keep-alive connection closes after ``keep_alive`` seconds;
- a body must arrive within ``body_timeout`` seconds (the edge answers 408, see
  ``bot/webhooks.py``);
- at most ``max_connections`` connections at once; requests beyond are answered 503.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any, Mapping

HEADER_TIMEOUT = 10.0
KEEP_ALIVE = 5.0
MAX_CONNECTIONS = 2000


@dataclass(frozen=True)
class ServerLimits:
    """Connection limits, in seconds and connections. ``from_env`` reads ``DRAFTGUARD_HEADER_TIMEOUT``,
    ``DRAFTGUARD_KEEP_ALIVE`` and ``DRAFTGUARD_MAX_CONNECTIONS``.

    Example::

        >>> ServerLimits.from_env({"DRAFTGUARD_HEADER_TIMEOUT": "2.5"}).header_timeout
        2.5
    """

    header_timeout: float = HEADER_TIMEOUT
    keep_alive: float = KEEP_ALIVE
    max_connections: int = MAX_CONNECTIONS

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "ServerLimits":
        env = os.environ if env is None else env
        return cls(header_timeout=float(env.get("DRAFTGUARD_HEADER_TIMEOUT") or HEADER_TIMEOUT),
                   keep_alive=float(env.get("DRAFTGUARD_KEEP_ALIVE") or KEEP_ALIVE),
                   max_connections=int(env.get("DRAFTGUARD_MAX_CONNECTIONS") or MAX_CONNECTIONS))


def guarded_h11(header_timeout: float) -> type:
    """uvicorn's h11 protocol with a deadline for request headers."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _too_slow(self) -> None:
            self._header_timer = None
            # Still no complete request line and headers: a slow (or idle) client; close it.
            if self.conn.their_state == h11.IDLE and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state != h11.IDLE:  # the headers are in: the body has its own deadline
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers get the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return GuardedH11Protocol


def run_server(app: Any, host: str, port: int, limits: ServerLimits | None = None) -> None:
    """Serve ``app`` until interrupted, with ``limits`` (from the environment when None)."""
    import uvicorn

    limits = limits or ServerLimits.from_env()
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False,
                http=guarded_h11(limits.header_timeout), timeout_keep_alive=int(max(1, limits.keep_alive)),
                limit_concurrency=limits.max_connections)
