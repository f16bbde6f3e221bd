"""A shell script read as the shell reads it, far enough to find an engine's command line: words with
their quoting, ``\\``-newline continuations, comments, command separators, ``NAME=value`` and
``export`` (kept in order, so a later ``$NAME`` sees them), and parameter expansion (``$NAME``,
``${NAME}``, ``${NAME:-word}``, ``${NAME-word}``, ``${NAME:=word}``, ``${NAME:+word}``) in unquoted
and double-quoted text only, with unquoted expansions split into fields. Command substitution,
arithmetic and globs are kept as written (nothing is run). A hand lexer rather than ``shlex``:
shlex drops the quoting that decides which ``$`` expands, and it does not say where a word began.

In: the script's text, an environment to start from, and the line its first character is on (a
script inside a YAML scalar starts there).
Out: ``run_script`` -> ``Command`` list (each word with its line; the environment the command runs
with: exported variables and its own ``NAME=value`` prefixes), or ``BadInput`` naming the line of an
unterminated quote. Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from draftguard.errors import BadInput

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
MAX_WORD_BYTES = 1024 * 1024  # a word or variable's value after expansion
SEPARATORS = (";;", "&&", "||", ";", "&", "|", "\n")


@dataclass
class Word:
    """One word of a command after expansion, and the line it starts on."""

    text: str
    line: int
    unset: tuple[str, ...] = ()  # variables it expanded that nothing set (the shell gives "")


@dataclass
class Command:
    """One simple command: its words (assignment prefixes removed) and the environment it runs with."""

    words: list[Word]
    env: dict[str, tuple[str, int]]  # name -> (value, the line that set it)
    line: int


@dataclass
class _Raw:
    """A word as lexed: parts of (kind, text), kind "lit" (single-quoted or escaped: never expanded),
    "dq" (double-quoted: expanded, not split) or "bare" (expanded and split)."""

    parts: list[tuple[str, str]] = field(default_factory=list)
    line: int = 0

    def add(self, kind: str, text: str) -> None:
        if self.parts and self.parts[-1][0] == kind:
            self.parts[-1] = (kind, self.parts[-1][1] + text)
        else:
            self.parts.append((kind, text))

    @property
    def literal(self) -> str:
        return "".join(text for _, text in self.parts)


def lex(text: str, first_line: int = 1, file: str = "<script>") -> list[_Raw | str]:
    """Words and separators (a separator is a plain string from SEPARATORS)."""
    out: list[_Raw | str] = []
    i, line, n = 0, first_line, len(text)
    word: _Raw | None = None

    def start() -> _Raw:
        nonlocal word
        if word is None:
            word = _Raw(line=line)
        return word

    def end() -> None:
        nonlocal word
        if word is not None:
            out.append(word)
            word = None

    while i < n:
        c = text[i]
        if c == "\\":
            if text.startswith("\n", i + 1):  # a continuation: neither character counts
                i, line = i + 2, line + 1
                continue
            start().add("lit", text[i + 1:i + 2])
            i += 2
        elif c == "'":
            close = text.find("'", i + 1)
            if close < 0:
                raise BadInput(f"{file}:{line}: a single quote is never closed", file=file, line=line)
            start().add("lit", text[i + 1:close])
            line += text.count("\n", i, close)
            i = close + 1
        elif c == '"':
            w, i, line = start(), i + 1, line
            while True:
                if i >= n:
                    raise BadInput(f"{file}:{w.line}: a double quote is never closed", file=file, line=w.line)
                d = text[i]
                if d == '"':
                    i += 1
                    break
                if d == "\\" and i + 1 < n and text[i + 1] in '$`"\\\n':
                    if text[i + 1] == "\n":
                        line += 1
                    else:
                        w.add("lit", text[i + 1])
                    i += 2
                    continue
                if d == "\n":
                    line += 1
                w.add("dq", d)
                i += 1
        elif c == "#" and word is None:
            while i < n and text[i] != "\n":
                i += 1
        elif c in " \t\r":
            end()
            i += 1
        elif c == "\n" or c in ";&|":
            end()
            op = next(s for s in SEPARATORS if text.startswith(s, i))
            out.append(op)
            line += op == "\n"
            i += len(op)
        elif c == "$" and text.startswith("$(", i) or c == "`":
            # command substitution: kept as written (never run), nested parentheses matched
            close = _substitution_end(text, i)
            start().add("lit", text[i:close])
            line += text.count("\n", i, close)
            i = close
        else:
            start().add("bare", c)
            i += 1
    end()
    return out


def _substitution_end(text: str, i: int) -> int:
    if text[i] == "`":
        close = text.find("`", i + 1)
        return len(text) if close < 0 else close + 1
    depth, j = 0, i + 1
    while j < len(text):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return len(text)


def expand(text: str, env: dict[str, str], unset: list[str]) -> str:
    """Parameter expansion of one unquoted or double-quoted run of text.

    Example::

        >>> expand("${MODEL:-Qwen/Qwen3-8B} $PORT ${X-}", {"PORT": "8000"}, [])
        'Qwen/Qwen3-8B 8000 '
    """
    out, i, grown = [], 0, 0
    while i < len(text):
        grown += len(out[-1]) if out else 0  # each pass adds one piece: the size checked as it grows
        if grown > MAX_WORD_BYTES:
            break
        if text[i] != "$":
            out.append(text[i])
            i += 1
            continue
        if text.startswith("${", i):
            close = text.find("}", i)
            if close < 0:
                out.append(text[i:])
                break
            out.append(_braced(text[i + 2:close], env, unset))
            i = close + 1
            continue
        match = _NAME.match(text, i + 1)
        if match:
            name = match.group(0)
            if name not in env:
                unset.append(name)
            out.append(env.get(name, ""))
            i = match.end()
        else:
            out.append("$")
            i += 1
    word = "".join(out)
    if len(word) > MAX_WORD_BYTES:
        raise BadInput(f"a word or variable expands past {MAX_WORD_BYTES // (1024 * 1024)} MB (the limit), not read")
    return word


def _braced(inner: str, env: dict[str, str], unset: list[str]) -> str:
    match = _NAME.match(inner)
    if not match:
        return "${" + inner + "}"
    name, rest = match.group(0), inner[match.end():]
    value = env.get(name)
    for op in (":-", ":=", ":+", "-", "=", "+"):
        if rest.startswith(op):
            word = expand(rest[len(op):], env, unset)
            empty = value is None or (op.startswith(":") and value == "")
            if op.endswith("+"):
                return "" if empty else word
            if empty and op.endswith("="):
                env[name] = word
            return word if empty else value
    if value is None:
        unset.append(name)
    return value or ""


def _fields(raw: _Raw, env: dict[str, str]) -> list[Word]:
    """The words one lexed word expands to (unquoted expansions split on blanks)."""
    unset: list[str] = []
    fields: list[str] = [""]
    quoted = False
    for kind, text in raw.parts:
        if kind == "lit":
            fields[-1] += text
            quoted = True
        elif kind == "dq":
            fields[-1] += expand(text, env, unset)
            quoted = True
        else:
            value = expand(text, env, unset)
            pieces = re.split(r"[ \t\n]+", value) if "$" in text else [value]
            fields[-1] += pieces[0]
            fields.extend(pieces[1:])
    words = [f for f in fields if f or quoted]
    return [Word(text, raw.line, tuple(unset)) for text in words]


def run_script(text: str, env: dict[str, tuple[str, int]] | None = None, *, first_line: int = 1,
               file: str = "<script>") -> list[Command]:
    """Every simple command of a script, expanded in order with the variables set so far.

    Example::

        >>> cmds = run_script('export M=Qwen/Qwen3-8B\\nvllm serve "$M" \\\\\\n  --max-model-len 4096\\n')
        >>> [(w.text, w.line) for w in cmds[0].words], cmds[0].env["M"]
        ([('vllm', 2), ('serve', 2), ('Qwen/Qwen3-8B', 2), ('--max-model-len', 3), ('4096', 3)], ('Qwen/Qwen3-8B', 1))
    """
    shell = {k: v for k, (v, _) in (env or {}).items()}
    exported: dict[str, tuple[str, int]] = dict(env or {})
    commands: list[Command] = []
    current: list[_Raw] = []
    allexport = False
    for token in lex(text, first_line, file) + ["\n"]:
        if isinstance(token, _Raw):
            current.append(token)
            continue
        if not current:
            continue
        prefix: dict[str, tuple[str, int]] = {}
        words: list[Word] = []
        for raw in current:
            match = _ASSIGN.match(raw.literal) if not words and raw.parts[0][0] == "bare" else None
            if match:
                value = "".join(w.text for w in _fields(_Raw(_split_assignment(raw), raw.line), shell))
                prefix[match.group(1)] = (value, raw.line)
                continue
            words.extend(_fields(raw, shell))
        current = []
        if not words:  # NAME=value alone: a shell variable (exported when it already was, or under set -a)
            for name, (value, line) in prefix.items():
                shell[name] = value
                if name in exported or allexport:
                    exported[name] = (value, line)
            continue
        head = words[0].text
        if head in ("export", "declare", "typeset") and (head == "export" or "-x" in [w.text for w in words]):
            for w in words[1:]:
                name, eq, value = w.text.partition("=")
                if _NAME.fullmatch(name):
                    if eq:
                        shell[name] = value
                    if name in shell:
                        exported[name] = (shell[name], w.line)
            continue
        if head == "set" and len(words) > 1:
            allexport = {"-a": True, "+a": False, "-o": allexport}.get(words[1].text, allexport)
        commands.append(Command(words, {**exported, **prefix}, words[0].line))
    return commands


def _split_assignment(raw: _Raw) -> list[tuple[str, str]]:
    """The value parts of ``NAME=value`` (the name and "=" dropped); assignments are not field-split."""
    parts, dropped = [], False
    for kind, text in raw.parts:
        if not dropped and kind == "bare" and "=" in text:
            text, dropped = text.split("=", 1)[1], True
            kind = "dq"
        elif kind == "bare":
            kind = "dq"
        parts.append((kind, text))
    return parts
