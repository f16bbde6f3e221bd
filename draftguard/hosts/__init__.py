"""Host clients: GitHub and the Hugging Face Hub behind the few idempotent operations draftguard
needs, used alike by the bot, the Action and the audit.

In: a host configuration (URL, credentials) and a repository or pull request.
Out: file bytes, the default branch, and idempotent writes (the sticky comment, replies, check runs).
Transient faults become ``errors.TransientError`` subclasses with a delay (``hosts.retry``).
"""
