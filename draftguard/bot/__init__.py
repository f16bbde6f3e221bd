"""The bots: webhooks in, Jobs on a durable queue, one sticky comment and check runs out.

In: GitHub and Hub webhook deliveries over HTTP (``draftguard serve``), and Jobs taken from the queue
by workers (``draftguard worker``).
Out: HTTP answers in milliseconds (202 queued, 200 ignored or duplicate, 4xx refused, 503 queue
down), then per Job one sticky comment, check runs on GitHub, and acceptance Jobs on the gpu queue.

Needs the ``bot`` extra (starlette, uvicorn, huey, redis, PyGithub). Modules: ``webhooks`` (the
platform-free edge) with ``github_events`` and ``hub_events`` (payload -> Jobs); ``pr_check`` (a
pull request read and checked) with ``github_handler`` and ``hub_handler``; ``commands``
(/recheck, /ok-to-test); ``app``, ``server`` and ``cli`` (serve, worker). The host clients are
``draftguard.hosts``; the queue is ``draftguard.jobs``.
"""
