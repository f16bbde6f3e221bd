"""Proven fixes shown where people read results: a markdown section (the Action's step summary, the
audit's discussion text) holding each file's diff and what each edit ends.

In: local targets (folders or config.json files) with the versions and drafter target of the check,
or ``FixOutcome`` objects.
Out: ``fix_targets(...)`` -> the outcomes (targets that cannot be read are skipped: the check
reports them); ``fixes_markdown(outcomes)`` -> the section, or None when nothing was fixed.
"""

from __future__ import annotations

from draftguard.fix.engine import FixOutcome, fix_text, snapshot_checker
from draftguard.snapshot import BadInput, load_snapshot


def fix_targets(targets: list[str], *, versions: list[str] | None = None,
                drafter_target: str | None = None) -> list[FixOutcome]:
    """The proven fixes of each local target, as ``draftguard fix`` finds them (nothing written)."""
    outcomes = []
    for target in targets:
        try:
            snapshot = load_snapshot(target)
            text = snapshot.files["config.json"].decode("utf-8")
            checker = snapshot_checker(snapshot, versions=versions, target=drafter_target)
            outcomes.append(fix_text(text, checker, file=snapshot.path_of("config.json")))
        except (BadInput, UnicodeDecodeError):
            continue  # the check's own report names the file and why
    return outcomes


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
        **`config.json`**
        - set `b` to true: b is meant
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
        lines = [f"**`{outcome.file}`**"]
        for applied in outcome.fixes:
            ends = ", ".join(f"{f.rule} on `{f.key}`" for f in applied.ends)
            edits = ", ".join(e.describe() for e in applied.edits)
            lines.append(f"- {edits}" + (f" (ends {ends})" if ends else "") + f": {applied.why}")
        parts.append("\n".join(lines))
        parts.append("```diff\n" + outcome.diff().replace("```", "` ` `") + "```")
    return "\n\n".join(parts)
