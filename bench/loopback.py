"""Pieces the bot benchmarks share: a bare Starlette endpoint as the latency baseline, and helpers
to start processes on loopback ports and wait for them."""

from __future__ import annotations

import subprocess
import time


def bare_app(path: str):
    """A Starlette app that only reads the body and answers 202 at ``path``: the floor any webhook
    endpoint on this machine can reach."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def hook(request):
        await request.body()
        return JSONResponse({"status": "queued"}, status_code=202)

    async def health(request):
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route(path, hook, methods=["POST"]), Route("/healthz", health)])


def run_bare(path: str, port: int) -> None:
    import uvicorn

    uvicorn.run(bare_app(path), host="127.0.0.1", port=port, log_level="warning", access_log=False)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    import requests

    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            if requests.get(url, timeout=1).ok:
                return
        except requests.ConnectionError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")
