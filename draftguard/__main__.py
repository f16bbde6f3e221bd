"""``python -m draftguard``: the same command as the ``draftguard`` console script.

In: the command line (``sys.argv``).
Out: the process's exit code, from ``cli.entry`` (0 pass, 1 fail, 2 bad input, 3 a bug).
"""

from draftguard.cli import entry

entry()
