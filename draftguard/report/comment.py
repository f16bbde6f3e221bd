"""The sticky comment: one comment per pull request (or Hub discussion), edited in place on every run.

The body is a hidden marker plus named sections (light check, transformers matrix, what the engines
serve (``report.engines``), acceptance test), each fenced by hidden HTML comments. A job that owns one
section reads the current body, replaces its section and writes the body back, so the light-check job
and the GPU job never erase each other's work and no state needs to live anywhere but the comment
itself.

Everything taken from a pull request (keys, values, messages quoting them) is HTML-escaped, so a
config value cannot close a section marker, ping people or inject markup.

In: a ``Report`` (and the base's findings, for what is new), a matrix table, an acceptance state with
its ``AcceptanceResult`` JSON, and the comment's current body (or None).
Out: markdown strings: each section (``render_light_section``, ``render_matrix_section``,
``render_acceptance_section``) and the whole body (``update_sticky``); ``parse_sticky`` -> sections by name.

Example::

    >>> body = update_sticky(None, light="### light\\nall good")
    >>> is_sticky(body), parse_sticky(body)["light"]
    (True, '### light\\nall good')
    >>> body = update_sticky(body, acceptance=render_acceptance_section("queued"))
    >>> sorted(parse_sticky(body))
    ['acceptance', 'light']
"""

from __future__ import annotations

import html
import re
from typing import Any, Iterable, Mapping

from draftguard.check.findings import RULES, Finding, Report, attention_runs
from draftguard.check.matrix import OK
from draftguard.markers import STICKY as MARKER
from draftguard.markers import is_sticky
from draftguard.report.acceptance import diagnosis_table, number_text
from draftguard.report.views import (FindingGroup, causes_first, change, display_items, is_config_value_rule, location,
                                     summary_line)

SECTIONS = ("light", "matrix", "engines", "acceptance")
# A section is named for what it holds, and optionally for one use of the Action: "light.models-a"
# (``section_name``), so two uses on one pull request keep a section each.
_SECTION = re.compile(
    r"<!-- draftguard:section:(?P<name>[a-z]+(?:\.[a-z0-9]+(?:-[a-z0-9]+)*)?) -->\n(?P<body>.*?)\n"
    r"<!-- /draftguard:section:(?P=name) -->",
    re.S,
)
_SECTION_KEY = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_ICON = {"error": ":x:", "warning": ":warning:", "info": ":information_source:"}
_VERDICT_ICON = {"pass": ":white_check_mark:", "fail": ":x:", "inconclusive": ":grey_question:"}
# Bodies over GitHub's 65536-character limit are refused; leave room for the other sections.
MAX_SECTION_CHARS = 20000
MAX_BODY_CHARS = 65536
TRUNCATED = "\n\n_(truncated: see the check run)_"


def esc(text: Any) -> str:
    """Escape text from a pull request for a markdown table cell: no HTML, no pipes, no mentions.

    Example::

        >>> esc("a|b <!-- x --> @team")
        'a&#124;b &lt;!-- x --&gt; @&#8203;team'
    """
    # Pipes (table cells), mentions, backticks and brackets (markdown still renders inside <code>, and
    # a link or image, a tracking pixel, needs brackets); emphasis and strikethrough (an entity is
    # never a delimiter, and an underscore inside a word is none anyway, so snake_case stays as it
    # is); autolinks; references to issues and pull requests (#12, owner/repo#12), which notify.
    text = html.escape(str(text), quote=False).replace("\r", " ").replace("\n", " ")
    return _MARKDOWN.sub(lambda m: _ESCAPED.get(m.group(0)) or m.group(0)[:-1] + "&#8203;" + m.group(0)[-1], text)


_ESCAPED = {"|": "&#124;", "@": "@&#8203;", "`": "&#96;", "[": "&#91;", "]": "&#93;", "*": "&#42;", "~": "&#126;",
            "#": "#&#8203;", "_": "&#95;"}
_MARKDOWN = re.compile(r"[|@`\[\]*~#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|(?i:://|www\.)")


def code(text: Any) -> str:
    return f"<code>{esc(text)}</code>"


def esc_message(text: str) -> str:
    """Escape a finding's message, keeping its `backticked` spans as code.

    Example::

        >>> esc_message("set `use_sliding_window` <b>")
        'set <code>use_sliding_window</code> &lt;b&gt;'
    """
    parts = str(text).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: no code spans
        return esc(text)
    return "".join(code(p) if i % 2 else esc(p) for i, p in enumerate(parts))


def parse_sticky(body: str | None) -> dict[str, str]:
    """The sections of a sticky comment body, by name; empty for any other body."""
    if not is_sticky(body):
        return {}
    return {m.group("name"): m.group("body") for m in _SECTION.finditer(body or "")}


def section_name(kind: str, key: str | None = None) -> str:
    """The name of a section of ``kind`` (light, matrix, engines, acceptance) written for ``key`` (one use of
    the Action: letters, digits and single dashes), or the plain kind without a key.

    Example::

        >>> section_name("light"), section_name("light", "models-a")
        ('light', 'light.models-a')
    """
    if kind not in SECTIONS:
        raise ValueError(f"section kind must be one of {', '.join(SECTIONS)}, not {kind!r}")
    if key is None:
        return kind
    if not _SECTION_KEY.fullmatch(key):
        raise ValueError(f"section key {key!r}: use lowercase letters, digits and single dashes")
    return f"{kind}.{key}"


def _is_known(name: str) -> bool:
    return name.partition(".")[0] in SECTIONS


def _order(name: str) -> tuple[int, str, str]:
    kind, _, key = name.partition(".")
    return (SECTIONS.index(kind) if kind in SECTIONS else len(SECTIONS), key, name)


def _cut(text: str, limit: int) -> str:
    """``text`` cut at a line to at most ``limit`` characters, saying so."""
    if len(text) <= limit:
        return text
    return text[:max(0, limit - len(TRUNCATED))].rsplit("\n", 1)[0] + TRUNCATED


def render_sticky(sections: Mapping[str, str | None], *, footer: str | None = None) -> str:
    """Assemble a sticky body from sections (known kinds in fixed order, each kind's plain section
    before its keyed ones; None or "" leaves one out), each cut to ``MAX_SECTION_CHARS`` and all of
    them to fit GitHub's ``MAX_BODY_CHARS`` (the longest cut first)."""
    out = [MARKER, "## draftguard", ""]
    texts = {name: _cut(text, MAX_SECTION_CHARS) for name in sorted(sections, key=_order)
             if (text := (sections.get(name) or "").strip("\n"))}
    # Sections keyed per use of the Action are not bounded in number: share what GitHub allows.
    room = (MAX_BODY_CHARS - len(f"<sub>{footer}</sub>" if footer else "") - 40
            - sum(2 * len(name) + 60 for name in texts))
    for i, name in enumerate(sorted(texts, key=lambda n: len(texts[n]))):
        texts[name] = _cut(texts[name], max(200, room // (len(texts) - i)))
        room -= len(texts[name])
    for name, text in texts.items():
        out += [f"<!-- draftguard:section:{name} -->", text, f"<!-- /draftguard:section:{name} -->", ""]
    if footer:
        out.append(f"<sub>{footer}</sub>")
    return "\n".join(out).rstrip() + "\n"


def update_sticky(old_body: str | None, *, footer: str | None = None, **sections: str | None) -> str:
    """Replace the given sections of an existing sticky body (or start one), keeping the others.

    Passing ``name=None`` removes that section. Only the known sections of the old body (``SECTIONS``,
    plain or keyed by ``section_name``) are kept: a section the bot does not write (pasted in by
    someone else) is dropped. Keyed sections are passed as a mapping, as their names hold a dot:
    ``update_sticky(old, **{"light.models-a": text})``.
    """
    merged: dict[str, str | None] = {k: v for k, v in parse_sticky(old_body).items() if _is_known(k)}
    merged.update(sections)
    return render_sticky(merged, footer=footer)


# --- light check ---------------------------------------------------------------------------------

def finding_id(finding: Finding) -> tuple[str, str, str]:
    """What makes two findings the same across revisions: file, rule and key (not the line)."""
    return (finding.file, finding.rule, finding.key)


def new_findings(head: Iterable[Finding], base: Iterable[Finding]) -> set[tuple[str, str, str]]:
    """Ids of head findings that the base does not have: what the pull request introduced."""
    before = {finding_id(f) for f in base}
    return {finding_id(f) for f in head if finding_id(f) not in before}


def render_light_section(
    report: Report,
    new: set[tuple[str, str, str]] | None = None,
    *,
    head: str | None = None,
    base: str | None = None,
    fail_on: str = "error",
    notes: Iterable[str] = (),
    label: str | None = None,
) -> str:
    """The light-check section: summary, findings table (new ones first), layer attention.

    ``new`` holds the ids (``finding_id``) the pull request introduced; None when there is no base to
    compare with, and then no finding is marked. ``label`` names what this section covers when the
    comment holds more than one (one per use of the Action).
    """
    counts = report.summary()
    state = ":x: fails" if report.fails(fail_on) or report.errors else ":white_check_mark: passes"
    named = f" of {code(label)}" if label else ""
    where = f" at `{head[:12]}`" if head else ""
    against = f" against base `{base[:12]}`" if base and new is not None else ""
    out = [f"### Light check{named}{where}{against}", ""]
    line = summary_line(counts, len(report.targets), len(report.errors))
    if new is not None:
        n_new = sum(1 for f in report.findings if finding_id(f) in new)
        line += f"; {n_new} new in this pull request"
    out += [f"**{state}** (fail on: {fail_on}): {line}. transformers {esc(report.transformers_version)}", ""]
    for note in notes:
        out.append(f"- {esc_message(note)}")
    for line in report.silenced:  # .draftguard.yml's rules and ignore (check.policy)
        out.append(f"- :mute: {esc_message(line)}")
    for e in report.errors:
        out.append(f"- :no_entry: could not check {code(e.file or e.source)}: {esc(e.message)}")
    if report.errors or notes or report.silenced:
        out.append("")
    findings = causes_first(report.findings)  # a symptom that says "see the ... finding" after that finding
    if new is not None:
        findings = sorted(findings, key=lambda f: finding_id(f) not in new)  # stable: keeps severity order
    if findings:
        out += ["| | new | rule | key | where | config.json → model code | what, why, fix |",
                "|---|---|---|---|---|---|---|"]
        for f in display_items(findings):
            if isinstance(f, FindingGroup):
                is_new = "**new**" if new is not None and any(finding_id(m) in new for m in f.findings) else ""
                where = f"{f.file}:{f.line}" if f.line else f.file
                out.append(
                    f"| {_ICON[f.severity.value]} | {is_new} | {f.rule} {RULES[f.rule].name} | "
                    f"{', '.join(code(k) for k in f.keys)} | {code(where)} | | {esc_message(f.message)} |"
                )
                continue
            is_new = "**new**" if new is not None and finding_id(f) in new else ""
            name = RULES[f.rule].name if f.rule in RULES else ""
            out.append(
                f"| {_ICON[f.severity.value]} | {is_new} | {f.rule} {name} | {code(f.key)} | "
                f"{code(location(f))} | {code(change(f)) if is_config_value_rule(f.rule) else ''} | "
                f"{esc_message(f.message)} |"
            )
        out.append("")
    for t in report.targets:
        if any(layer.mismatch for layer in t.attention):
            matrix = getattr(report, "matrix", None)
            under = f" (transformers {esc(matrix.attention_from[t.file])})" if matrix and t.file in matrix.attention_from else ""
            out += [f"<details><summary>Effective attention of {code(t.file)}{under}</summary>", "",
                    "| layers | config.json declares | model runs |", "|---|---|---|"]
            for layers, declared, effective in attention_runs(t.attention):
                mark = " :x:" if declared != effective else ""
                out.append(f"| {layers} | {esc(declared)} | {esc(effective)}{mark} |")
            out += ["", "</details>", ""]
    if not findings and not report.errors:
        out.append("No differences between config.json and what the model code reads.")
    return "\n".join(out).rstrip()


def matrix_note(matrix: Any, has_rows: bool) -> str | None:
    """The note under the matrix table: no value differs, and which versions did not run.

    Example::

        >>> from types import SimpleNamespace as NS
        >>> m = NS(versions=["4.52.4", "5.24.0"], columns=[NS(version="4.52.4", status="install failed"),
        ...                                                 NS(version="5.24.0", status="ok")])
        >>> matrix_note(m, has_rows=False)
        'no resolved value differs between transformers 4.52.4, 5.24.0. Not run: transformers 4.52.4: install failed.'
    """
    failed = [f"transformers {c.version}: {c.status}" for c in matrix.columns if c.status != OK]
    note = None if has_rows else f"no resolved value differs between transformers {', '.join(matrix.versions)}."
    if failed:
        note = (note + " " if note else "") + "Not run: " + "; ".join(failed) + "."
    return note


def render_matrix_section(header: list[str], rows: list[list[str]], *, note: str | None = None) -> str:
    """The transformers-matrix section: the key x version table of resolved values that differ
    (``VersionMatrix.table()``), escaped, with a note (versions that did not run, or no difference).

    Example::

        >>> print(render_matrix_section(["key", "config.json", "4.52.4", "5.24.0"],
        ...                             [["sliding_window", "2048", "2048", "null"]]))
        ### transformers matrix
        <BLANKLINE>
        | key | config.json | 4.52.4 | 5.24.0 |
        |---|---|---|---|
        | sliding_window | <code>2048</code> | <code>2048</code> | <code>null</code> |
    """
    out = ["### transformers matrix", ""]
    if header and rows:
        out += ["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
        plain = 2 if header[0] == "file" else 1  # file and key as text, values as code
        for row in rows:
            cells = [esc(c) for c in row[:plain]] + [code(c) for c in row[plain:]]
            out.append("| " + " | ".join(cells) + " |")
    if note:
        out += ["", esc_message(note)] if rows else [esc_message(note)]
    return "\n".join(out).rstrip()


# --- acceptance test -----------------------------------------------------------------------------

ACCEPTANCE_STATES = ("queued", "running", "done", "skipped", "error")


def bar(rate: float | None, width: int = 20) -> str:
    """A text bar for a rate in [0, 1].

    Example::

        >>> bar(0.5, 10)
        '█████░░░░░'
    """
    if rate is None:
        return "░" * width
    filled = round(max(0.0, min(1.0, float(rate))) * width)
    return "█" * filled + "░" * (width - filled)


def render_acceptance_section(state: str, result: Mapping[str, Any] | None = None, *, detail: str | None = None) -> str:
    """The acceptance-test section for a state: queued, running, done (with the result), skipped or
    error. ``result`` is the AcceptanceResult JSON contract (``AcceptanceResult.to_dict()``).

    Example::

        >>> print(render_acceptance_section("queued", detail="waiting for a GPU worker"))
        ### Acceptance test
        <BLANKLINE>
        :hourglass: **queued**: waiting for a GPU worker
    """
    if state not in ACCEPTANCE_STATES:
        raise ValueError(f"acceptance state must be one of {', '.join(ACCEPTANCE_STATES)}, not {state!r}")
    out = ["### Acceptance test", ""]
    if state != "done" or result is None:
        icon = {"queued": ":hourglass:", "running": ":hourglass_flowing_sand:", "skipped": ":fast_forward:",
                "error": ":no_entry:", "done": ":grey_question:"}[state]
        out.append(f"{icon} **{state}**" + (f": {esc(detail)}" if detail else ""))
        return "\n".join(out)
    verdict = result.get("verdict") or {}
    status = str(verdict.get("status", "inconclusive"))
    tau = result.get("mean_acceptance_length")
    # Config views x backends and the named cause (draftguard accept --config-view both / --backend both);
    # its cause line carries the reason, so the verdict line does not repeat it.
    table = diagnosis_table(result.get("views"), result.get("diagnosis"), escape=esc_message)
    out.append(
        f"{_VERDICT_ICON.get(status, ':grey_question:')} **{esc(status)}**: τ = **{number_text(tau)}**"
        + (f" ({esc(verdict.get('reason'))})" if verdict.get("reason") and not table else "")
    )
    out.append("")
    thresholds = result.get("thresholds") or {}
    interval = verdict.get("interval")
    run = result.get("run") if isinstance(result.get("run"), dict) else {}
    facts = [f"{drafting_text(run)}, draft acceptance rate {number_text(result.get('draft_acceptance_rate'), 3)}"
             if run.get("method") else
             f"draft acceptance rate {number_text(result.get('draft_acceptance_rate'), 3)}",
        f"{result.get('accepted_tokens', 0)} of {result.get('draft_tokens', 0)} drafted tokens accepted "
        f"over {result.get('drafts', 0)} drafts",
        f"{len(result.get('per_prompt') or [])} prompts, {number_text(result.get('tokens_per_second'), 1)} tokens/s, "
        f"{number_text(result.get('wall_seconds'), 1)} s",
    ]
    if thresholds.get("bar") is not None:
        facts.append(f"bar τ ≥ {number_text(thresholds.get('bar'))}")
    if interval:
        facts.append(f"interval [{number_text(interval[0])}, {number_text(interval[1])}]")
    out += [", ".join(facts) + ".", ""]
    if table:
        out += [*table, ""]
    per_pos = result.get("per_position_acceptance") or []
    if per_pos:
        out += ["| position | accepted | |", "|---|---|---|"]
        for i, rate in enumerate(per_pos):
            out.append(f"| {i + 1} | {number_text(rate, 3)} | <code>{bar(rate)}</code> |")  # 1-based, as accept prints them
        out.append("")
    if detail:
        out.append(esc(detail))
    return "\n".join(out).rstrip()


def drafting_text(run: Mapping[str, Any]) -> str:
    """How the result's drafter drafted, from its ``run`` record: the method and its block.

    Example::

        >>> drafting_text({"method": "eagle3", "block_size": 4}), drafting_text({"method": "dflash", "block_size": 16})
        ('EAGLE-3 chain drafting, 3 draft tokens per step', 'DFlash block drafting, block of 16')
    """
    block = run.get("block_size")
    if run.get("method") == "eagle3":
        return "EAGLE-3 chain drafting" + (f", {block - 1} draft tokens per step" if isinstance(block, int) else "")
    return f"{esc(run.get('method') or 'dflash').replace('dflash', 'DFlash')} block drafting" + (
        f", block of {block}" if isinstance(block, int) else "")


def render_untested_section(untested: Mapping[str, str]) -> str:
    """The acceptance section for drafters that ``draftguard accept`` does not run: skipped, each
    with its reason (the bot and the Action show the same words).

    Example::

        >>> print(render_untested_section({"mtp/config.json": "MTP heads are not run"}))
        ### Acceptance test
        <BLANKLINE>
        :fast_forward: **skipped**: mtp/config.json: MTP heads are not run.
    """
    reasons = "; ".join(f"{path}: {why}" for path, why in sorted(untested.items()))
    return render_acceptance_section("skipped", detail=reasons + ".")

