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
    _open: list[tuple[str, list[str]]] = field(default_factory=list, repr=False)

    def add(self, kind: str, text: str) -> None:
        # Pieces gather in lists and are joined once (``close``): adding to a string kept in a tuple
        # copied the whole word per character, quadratic on a long word.
        if self._open and self._open[-1][0] == kind:
            self._open[-1][1].append(text)
        else:
            self._open.append((kind, [text]))

    def close(self) -> "_Raw":
        self.parts += [(kind, "".join(texts)) for kind, texts in self._open]
        self._open = []
        return self

    @property
    def literal(self) -> str:
        return "".join(text for _, text in self.parts)


def lex(text: str, first_line: int = 1, file: str = "<script>") -> list[_Raw | str]:
    """Words and separators (a separator is a plain string from SEPARATORS). Redirections are dropped
    with their target (``> log``, ``2>&1``, ``&>> log``, ``< in``): they are the shell's, never the
    command's arguments; a here-document's body (``<<EOF`` ... ``EOF``) is skipped, never read as
    commands.

    Example::

        >>> [w.literal if isinstance(w, _Raw) else w for w in lex("vllm serve M > log 2>&1 &")]
        ['vllm', 'serve', 'M', '&']
    """
    out: list[_Raw | str] = []
    i, line, n = 0, first_line, len(text)
    word: _Raw | None = None
    drop = ""  # "": keep the next word; ">": it is a redirection's target; "<<" / "<<-": a heredoc's delimiter
    heredocs: list[tuple[str, bool]] = []  # delimiters whose bodies start on the next line

    def start() -> _Raw:
        nonlocal word
        if word is None:
            word = _Raw(line=line)
        return word

    def end() -> None:
        nonlocal word, drop
        if word is not None:
            word.close()
            if drop.startswith("<<"):
                heredocs.append((word.literal, drop == "<<-"))
            elif not drop:
                out.append(word)
            drop, word = "", None

    while i < n:
        c = text[i]
        if c == "\\":
            if text.startswith("\n", i + 1) or i + 1 == n:  # a continuation (or the script's last byte)
                i, line = i + 2, line + (i + 1 < n)
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
            w, i = start(), i + 1
            while True:
                if i >= n:
                    raise BadInput(f"{file}:{w.line}: a double quote is never closed", file=file, line=w.line)
                run = _DQ_RUN.match(text, i)
                if run.end() > i:  # a run of plain characters at once
                    w.add("dq", run.group(0))
                    line += run.group(0).count("\n")
                    i = run.end()
                    continue
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
                w.add("dq", d)
                i += 1
        elif c == "#" and word is None:
            while i < n and text[i] != "\n":
                i += 1
        elif c in " \t\r":
            end()
            i += 1
        elif c in "<>" or text.startswith("&>", i):
            # a redirection: an all-digit word right before it is its file descriptor (2>&1)
            if word is not None and not word._open[1:] and word._open and word._open[0][0] == "bare" \
                    and "".join(word._open[0][1]).isdigit():
                word = None
            end()
            op = _REDIRECT.match(text, i).group(0)
            drop = op if op in ("<<", "<<-") else ">"
            i += len(op)
        elif c == "\n" or c in ";&|":
            end()
            drop = ""  # a redirection with no target before the separator: nothing to drop
            op = next(s for s in SEPARATORS if text.startswith(s, i))
            out.append(op)
            line += op == "\n"
            i += len(op)
            if op == "\n" and heredocs:
                i, line = _skip_heredocs(text, i, line, heredocs)
                heredocs = []
        elif text.startswith("${", i):
            # a parameter expansion is one piece of its word, quotes inside it included: ${X:+--revision "$X"}
            close = _brace_end(text, i)
            start().add("bare", text[i:close])
            line += text.count("\n", i, close)
            i = close
        elif c == "$" and text.startswith("$(", i) or c == "`":
            # command substitution: kept as written (never run), nested parentheses matched
            close = _substitution_end(text, i)
            start().add("lit", text[i:close])
            line += text.count("\n", i, close)
            i = close
        else:
            run = _BARE_RUN.match(text, i)
            start().add("bare", run.group(0))
            i = run.end()
    end()
    return out


_DQ_RUN = re.compile(r'[^"\\]*')
_BARE_RUN = re.compile(r"[^\\'\"#\s<>;&|$`]+|.", re.S)
_REDIRECT = re.compile(r"&>>?|<<<|<<-|<<|<>|<&|>>|>&|>\||<|>")


def _brace_end(text: str, i: int) -> int:
    """The end of the ``${...}`` at ``i``: its matching brace, quoted text and nested braces skipped."""
    depth, j, n = 0, i + 1, len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c in "'\"":
            close = text.find(c, j + 1)
            j = n if close < 0 else close + 1
            continue
        depth += (c == "{") - (c == "}")
        j += 1
        if depth == 0:
            return j
    return n


def _skip_heredocs(text: str, i: int, line: int, heredocs: list[tuple[str, bool]]) -> tuple[int, int]:
    """Past the bodies of the here-documents opened on the line just ended: each runs to a line that is
    its delimiter (leading tabs stripped for ``<<-``), or to the end of the script."""
    for delimiter, tabs in heredocs:
        while i < len(text):
            stop = text.find("\n", i)
            stop = len(text) if stop < 0 else stop
            body_line = text[i:stop]
            i, line = stop + 1, line + 1
            if (body_line.lstrip("\t") if tabs else body_line) == delimiter:
                break
    return min(i, len(text)), line


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
            word = _quoted_word(rest[len(op):], env, unset)
            empty = value is None or (op.startswith(":") and value == "")
            if op.endswith("+"):
                return "" if empty else word
            if empty and op.endswith("="):
                env[name] = word
            return word if empty else value
    if value is None:
        unset.append(name)
    return value or ""


def _quoted_word(word: str, env: dict[str, str], unset: list[str]) -> str:
    """The word of ``${NAME:-word}`` with its quotes removed, as the shell removes them: single-quoted
    text kept as written, double-quoted and bare text expanded."""
    out = []
    for single, double, bare in re.findall(r"'([^']*)'|\"((?:[^\"\\]|\\.)*)\"|((?:[^'\"]|\\.)+)", word):
        out.append(single if single else expand(double or bare, env, unset))
    return "".join(out)


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
