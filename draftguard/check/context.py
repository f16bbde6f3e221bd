"""What a judgement of one changed value may look at (``Context``), and when two values are the same
to the model code (``same``).

In: the raw node of config.json, the node the config class resolved, the class's evidence, and where
to point (file, prefix, line lookup).
Out: ``Context`` (with ``finding`` to file a Finding at the key's line) and ``same``; used by
``judges`` and ``agreement``, which both judge with it and so cannot hold it themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from draftguard.check.findings import ABSENT, RULES, Finding


@dataclass
class Context:
    """What a judgement may look at: the whole raw node, the resolved node, and where to point."""

    raw: dict[str, Any]
    node: dict[str, Any]
    prefix: str
    config_class: str
    version: str
    file: str
    line_of: Callable[[str], int | None]
    moved: dict[str, list[str]] = field(default_factory=dict)
    # The top node's evidence (resolver.gather_evidence), shared by nested contexts; paths in it
    # are dotted from the top of the file.
    evidence: dict[str, Any] = field(default_factory=dict)
    # The whole file, for evidence that names a key outside this node.
    root: dict[str, Any] = field(default_factory=dict)

    @property
    def values(self) -> dict[str, Any]:
        return self.node["values"]

    def landed(self, key: str) -> list[tuple[str, str, Any]]:
        """Where tracing saw the class store this key's value: (storage path, how, value there)."""
        return [tuple(item) for item in self.evidence.get("landed", {}).get(self.prefix + key, [])]

    def sub(self, node: dict[str, Any], prefix: str | None = None) -> "Context":
        return Context(self.raw, node, self.prefix if prefix is None else prefix, node["__config__"], self.version,
                       self.file, self.line_of, evidence=self.evidence, root=self.root)

    def finding(self, rule: str, key: str, raw: Any, resolved: Any, message: str, line_key: str | None = None) -> Finding:
        path = self.prefix + key
        return Finding(
            rule=rule,
            severity=RULES[rule].severity,
            key=path,
            raw=raw,
            resolved=resolved,
            file=self.file,
            line=self.line_of(self.prefix + (line_key or key)),
            message=message,
        )


def same(a: Any, b: Any) -> bool:
    """Equal as the model code would use them: JSON lists and tuples alike, 1 == 1.0, but a bool is
    not a number and a string is not a number."""
    if a is ABSENT or b is ABSENT:
        return a is b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b
