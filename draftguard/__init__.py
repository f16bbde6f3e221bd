"""draftguard: catch silent config overrides and broken speculative-decoding drafters before merge.

In: nothing at import: importing the package loads no submodule (the light check must never load
torch, so every layer imports only what it needs).
Out: ``__version__``. The entry points are ``draftguard.cli`` (the ``draftguard`` command), the
``check`` core with its ``report`` views, and the surfaces ``action``, ``bot``, ``runner``, ``audit``.
"""

__version__ = "0.1.0"
