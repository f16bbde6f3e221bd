"""Each rule's documentation, read from docs/rules.md as the package ships it.

docs/rules.md is the one source: ``draftguard/data/rules.md`` is a symlink to it, which a wheel and an
sdist carry as a file (package data), so ``draftguard explain`` and SARIF's rule help read the same
words the docs show, installed or from a clone.

In: a rule id (``DG005``, any case) or a rule name (``value-overridden``), and the shipped rules.md.
Out: ``rule_sections()`` (id -> its section's markdown), ``find_rules(query)`` (the ``Rule`` objects
it names; ``BadInput`` naming the nearest ids when it names none), ``explain(query)`` (the text
``draftguard explain`` prints) and ``anchor(rule)`` (the GitHub anchor of its heading).
"""

from __future__ import annotations

import difflib
import functools
import re
from importlib import resources

from draftguard.check.findings import RULES, Rule
from draftguard.errors import BadInput

DOC_NAME = "docs/rules.md"
_HEADING = re.compile(r"^### (DG\d{3}) ", re.M)


@functools.lru_cache(maxsize=1)
def rules_markdown() -> str:
    """The text of docs/rules.md as this install ships it."""
    return resources.files("draftguard").joinpath("data", "rules.md").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def rule_sections() -> dict[str, str]:
    """Each documented rule's section: from its ``### DGxxx`` heading up to the next heading."""
    text = rules_markdown()
    out: dict[str, str] = {}
    for match in _HEADING.finditer(text):
        rest = text[match.start():]
        end = re.search(r"^#{2,3} ", rest[4:], re.M)
        out[match.group(1)] = rest[: end.start() + 4 if end else len(rest)].strip()
    return out


def anchor(rule: Rule) -> str:
    """The anchor GitHub gives the rule's heading in docs/rules.md (``dg001-value-overridden-error``)."""
    words = f"{rule.id} {rule.name} ({rule.severity.value})".lower()
    return re.sub(r"[^a-z0-9 _-]", "", words).replace(" ", "-")


def find_rules(query: str) -> list[Rule]:
    """The rules ``query`` names: an id (any case) or a name (two rules may share one, e.g.
    ``engine-refuses``).

    Raises:
        BadInput: No rule has that id or name; the message names the nearest ones.

    Example::

        >>> [r.id for r in find_rules("dg005")], [r.id for r in find_rules("value-overridden")]
        (['DG005'], ['DG001'])
    """
    wanted = query.strip()
    if wanted.upper() in RULES:
        return [RULES[wanted.upper()]]
    named = [r for r in RULES.values() if r.name == wanted.lower()]
    if named:
        return named
    near = nearest_rules(wanted)
    hint = f"; did you mean {', '.join(near)}?" if near else f" (rules: {min(RULES)}-{max(RULES)}; see {DOC_NAME})"
    raise BadInput(f"no rule `{query}`{hint}", key=query)


_ID_SHAPED = re.compile(r"^dg(\d+)$", re.I)


def nearest_rules(query: str) -> list[str]:
    """What a query that names no rule most likely meant: for an id-shaped query (``DG07``, ``dg5``)
    the id its number spells with zero padding (``DG007``), not an id a digit away that merely looks
    close (``DG407`` for ``DG07``, issue 42), and nothing for a number no rule has; else the ids and ``id name`` pairs of the closest ids
    and names (``DG0055``: ``DG005``).

    Example::

        >>> nearest_rules("DG07"), nearest_rules("dg5"), nearest_rules("DG999"), nearest_rules("DG0055")[0]
        (['DG007'], ['DG005'], [], 'DG005')
        >>> nearest_rules("value-overriden")[0]
        'DG001 value-overridden'
    """
    shaped = _ID_SHAPED.match(query.strip())
    if shaped:
        padded = f"DG{int(shaped.group(1)):03d}"
        if padded in RULES or len(shaped.group(1)) <= 3:  # a number no rule has: no guess at another
            return [padded] if padded in RULES else []
    ids = difflib.get_close_matches(query.upper(), list(RULES), n=3, cutoff=0.6)
    names = difflib.get_close_matches(query.lower(), sorted({r.name for r in RULES.values()}), n=3, cutoff=0.6)
    return ids + [f"{r.id} {r.name}" for r in RULES.values() if r.name in names]


def explain(query: str) -> str:
    """What ``draftguard explain QUERY`` prints: each named rule's section of docs/rules.md (what it
    catches, why, the incident, the fix, an example), or its summary where the docs have no section."""
    parts = []
    for rule in find_rules(query):
        section = rule_sections().get(rule.id) or f"### {rule.id} {rule.name} ({rule.severity.value})\n\n{rule.summary}"
        parts.append(f"{section}\n\n(docs/rules.md#{anchor(rule)})")
    return "\n\n".join(parts) + "\n"
