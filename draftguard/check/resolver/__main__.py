"""``python -m draftguard.check.resolver``: the script protocol by hand, for debugging a resolve.

In: one JSON request on stdin (see the package docstring).
Out: one JSON answer on stdout; exit code 0.
"""

from __future__ import annotations

import sys

from .build import main

if __name__ == "__main__":
    sys.exit(main())
