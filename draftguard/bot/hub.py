"""Moved: the Hugging Face Hub client is ``draftguard.hosts.hub`` (the bot, the Action and the audit share it).

In: nothing.
Out: the same names, re-exported for one release, so code written against
``draftguard.bot.hub`` keeps working. Import from ``draftguard.hosts.hub`` in new code.
"""

from draftguard.hosts.hub import *  # noqa: F401,F403
