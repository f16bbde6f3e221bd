"""The bots: webhooks in, Jobs on a durable queue, one sticky comment and check runs out.

Needs the ``bot`` extra (starlette, uvicorn, huey, redis, PyGithub). Modules: ``app`` (ASGI),
``jobs`` (Job, Queue), ``pipeline`` (what a GitHub Job does), ``github`` (PyGithub adapter),
``commands`` (/recheck, /ok-to-test).
"""
