"""Proven fixes shown where people read results: a markdown section (the Action's step summary)
holding each file's diff and what each edit ends, and the pieces the bot's suggestions share.

In: ``FixOutcome`` objects (``draftguard.fix``); text from a pull request is escaped (``comment.esc``).
Out: ``fixes_markdown(outcomes)`` -> the section, or None when nothing was fixed; ``describe`` (one
fix in one line) and ``fenced`` (a code block no backtick in the file can close).
"""

from __future__ import annotations

import re

from draftguard.fix import AppliedFix, FixOutcome
from draftguard.report.comment import code, esc_message


def fenced(text: str, info: str) -> str:
    """``text`` in a code fence longer than any run of backticks in it, so a file's own backticks can
    neither close the block early nor turn the rest of a comment into markdown.

    Example::

        >>> fenced('"a": "``` x"', "suggestion")
        '````suggestion\\n"a": "``` x"\\n````'
    """
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    bar = "`" * max(3, longest + 1)
    return f"{bar}{info}\n{text.rstrip(chr(10))}\n{bar}"


def describe(applied: AppliedFix) -> str:
    """One line: the edits, the findings they end, and why (keys in backticks)."""
    ends = ", ".join(f"{f.rule} on `{f.key}`" for f in applied.ends)
    edits = ", ".join(e.describe() for e in applied.edits)
    return edits + (f" (ends {ends})" if ends else "") + f": {applied.why}"


def fixes_markdown(outcomes: list[FixOutcome], heading: str = "### draftguard fix") -> str | None:
    """One section: per file, what each edit ends and why, and the unified diff to apply.

    Example::

        >>> from draftguard.fix.engine import AppliedFix
        >>> from draftguard.fix.text import Edit
        >>> o = FixOutcome("config.json", '{"a": 1}\\n', '{"a": 1, "b": true}\\n',
        ...                fixes=[AppliedFix([Edit("b", True)], [], "b is meant")])
        >>> print(fixes_markdown([o]))
        ### draftguard fix
        <BLANKLINE>
        Each edit below was checked by running the whole check again on the edited file: its finding is gone and nothing new appears. Apply it with `draftguard fix --write` or `git apply`.
        <BLANKLINE>
        **<code>config.json</code>**
        - set <code>b</code> to true: b is meant
        <BLANKLINE>
        ```diff
        --- a/config.json
        +++ b/config.json
        @@ -1 +1 @@
        -{"a": 1}
        +{"a": 1, "b": true}
        ```
    """
    fixed = [o for o in outcomes if o.changed]
    if not fixed:
        return None
    parts = [heading, "Each edit below was checked by running the whole check again on the edited file: its finding "
             "is gone and nothing new appears. Apply it with `draftguard fix --write` or `git apply`."]
    for outcome in fixed:
        lines = [f"**{code(outcome.file)}**"]
        for applied in outcome.fixes:
            lines.append("- " + esc_message(describe(applied)))
        parts.append("\n".join(lines))
        parts.append(fenced(outcome.diff(), "diff"))
    return "\n\n".join(parts)
