"""What the bounded children's forkserver imports once (``bounded.PRELOAD``), so that each child
forks with transformers and the check's modules already imported: a child costs a fork, not a cold
import of transformers (about a second). Importing this module is its whole job.

In: nothing.
Out: nothing; transformers (with torch hidden, as the light check runs it) and ``check.isolated``
are imported in the process that imports this.
"""

from __future__ import annotations

import os

from draftguard.check import isolated, resolver  # noqa: F401 (imported for the children that fork from here)

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # as the CLI sets it: no import-time notices
resolver.hide_torch()
import transformers  # noqa: E402  transformers: after hide_torch(), else it imports torch
from transformers import AutoConfig  # noqa: E402,F401  the config registry every check reads
