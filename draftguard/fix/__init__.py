"""``draftguard fix``: the smallest edit to config.json that makes it mean what it says, proven by
checking the edited file again.

In: a config.json's text and a checker (``engine.snapshot_checker``), or a ``Snapshot``.
Out: a ``FixOutcome`` (``engine``): the edited text, each fix kept with the reading it chose and
why, the findings left with the reason, a unified diff and review-suggestion hunks.

Modules: ``text`` (edits to JSON text that keep every other byte), ``proposals`` (candidate edits
per finding, by rule id and key), ``engine`` (try, recheck, keep or drop).
"""

from draftguard.fix.engine import (AppliedFix, FixOutcome, Hunk, Unfixed, config_checker, fix_targets, fix_text,
                                   snapshot_checker)

__all__ = ["AppliedFix", "FixOutcome", "Hunk", "Unfixed", "config_checker", "fix_targets", "fix_text", "snapshot_checker"]
