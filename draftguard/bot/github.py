"""Moved: the GitHub client is ``draftguard.hosts.github`` (the bot, the Action and the audit share it).

In: nothing.
Out: the same names, re-exported for one release, so code written against
``draftguard.bot.github`` keeps working. Import from ``draftguard.hosts.github`` in new code.
"""

from draftguard.hosts.github import *  # noqa: F401,F403
from draftguard.secrets import SecretFilter, remember_secret, scrub, scrub_known  # noqa: F401 (were here)
