"""draftguard: catch silent config overrides and broken speculative-decoding drafters before merge.

In: nothing at import: importing the package loads no submodule (the light check must never load
torch, so every layer imports only what it needs).
Out: ``__version__``. The entry points are ``draftguard.cli`` (the ``draftguard`` command), the
``check`` core with its ``report`` views, and the surfaces ``action``, ``bot``, ``runner``, ``audit``.
"""

# Releases are tagged vX.Y.Z (never moved) and the moving major tag (v0 while 0.x) follows the latest
# release; CHANGELOG.md has an entry per version. docs/action.md says how to pin either.
__version__ = "0.2.0"

# The project's home, named here only (pyproject.toml's [project.urls] says the same, which
# tests/test_release.py checks): SARIF's help links, the settings schema's $id and the docs follow it.
# Until the home is published, every snippet in the docs also has a form that works from a clone.
HOME = "https://github.com/draftguard/draftguard"
RAW_HOME = HOME.replace("https://github.com/", "https://raw.githubusercontent.com/", 1)
