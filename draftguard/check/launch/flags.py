"""A launch's arguments read as its engine's parser reads them, far enough for the light tier: each
option with its value and line (the last one given wins, as in argparse), the model (vLLM's positional
``model_tag`` or ``--model``; SGLang's ``--model-path``), JSON options parsed (vLLM's
``--speculative-config`` and ``--hf-overrides``, with its dotted ``--speculative-config.method x``
form merged in; SGLang's ``--json-model-override-args``). vLLM's parser takes ``--max_model_len``
for ``--max-model-len``. Switches are told from options, and an option the parser refuses from one it
takes, by the parser of the release the launch is judged under (``engines.releases``: each release's
options generated from its own code); with no release, by ``known_flags`` (the rules' own release).

In: a ``Launch``.
Out: ``read_flags`` -> ``Flags``; ``BadInput`` (file, line) for an option's JSON that does not parse.
Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from draftguard.check.launch import reading
from draftguard.check.engines import releases
from draftguard.check.launch.known_flags import NO_VALUE, OPTIONS
from draftguard.check.launch.shell import Word
from draftguard.check.launch.sources import Launch
from draftguard.errors import BadInput

JSON_OPTIONS = {"vllm": ("speculative-config", "hf-overrides", "compilation-config"),
                "sglang": ("json-model-override-args",)}
MODEL_OPTIONS = {"vllm": ("model",), "sglang": ("model-path", "model")}


@dataclass
class Flag:
    name: str  # without the leading dashes, "-" for "_"
    value: str | None
    line: int
    data: Any = None  # the parsed JSON of a JSON option
    at: list[int] = field(default_factory=list)  # the indices of the words it was read from
    long: bool = True  # written with "--" (short options such as -tp are not checked against the list)


@lru_cache(maxsize=None)
def parser_options(engine: str, version: str | None) -> tuple[frozenset[str], frozenset[str], dict[str, list[str]]]:
    """(switches, every long option, option -> choices) of ``engine``'s launcher in release ``version``:
    that release's generated data where it is known, else ``known_flags`` (the rules' own release)."""
    if version is not None:
        if version in releases.known(engine):
            options = releases.facts(engine, version).options
            switches = frozenset(n for n, kind in options.items() if kind == "switch")
            choices = {n: list(kind) for n, kind in options.items() if isinstance(kind, (list, tuple))}
            return switches, frozenset(options), choices
    return frozenset(NO_VALUE[engine]), frozenset(OPTIONS[engine]), {}


@dataclass
class Flags:
    engine: str
    version: str | None = None  # the release whose parser read them (None: known_flags' release)
    options: dict[str, Flag] = field(default_factory=dict)
    positional: list[Word] = field(default_factory=list)
    positional_at: list[int] = field(default_factory=list)

    def get(self, name: str) -> Flag | None:
        return self.options.get(name)

    def value(self, name: str) -> str | None:
        flag = self.options.get(name)
        return flag.value if flag is not None else None

    def data(self, name: str) -> Any:
        flag = self.options.get(name)
        return flag.data if flag is not None else None

    @property
    def model(self) -> Word | None:
        """The served model as written: ``vllm serve MODEL`` or the model option."""
        if self.engine == "vllm" and self.positional:
            return self.positional[0]
        for name in MODEL_OPTIONS[self.engine]:
            flag = self.options.get(name)
            if flag is not None and flag.value:
                return Word(flag.value, flag.line)
        return None


def read_flags(launch: Launch, version: str | None = None) -> Flags:
    """The launch's options and positional words.

    Example::

        >>> from pathlib import Path
        >>> from draftguard.check.launch.sources import command_launches
        >>> [launch] = command_launches("vllm serve Qwen/Qwen3-8B --max_model_len=4096 --enforce-eager "
        ...                             "--speculative-config.method eagle3")
        >>> flags = read_flags(launch)
        >>> flags.model.text, flags.value("max-model-len"), flags.data("speculative-config")
        ('Qwen/Qwen3-8B', '4096', {'method': 'eagle3'})
    """
    engine = launch.engine
    flags = Flags(engine, version)
    switches, known, _ = parser_options(engine, version)
    words = launch.args
    i = 0
    while i < len(words):
        word = words[i]
        text = word.text
        if not text.startswith("-") or text in ("-", "--") or _number(text) or _spaced(text, engine, known):
            flags.positional.append(word)
            flags.positional_at.append(i)
            i += 1
            continue
        raw_name, eq, value = text.lstrip("-").partition("=")
        head, dot, rest = raw_name.partition(".")  # vLLM reads --max_model_len as --max-model-len (not the keys)
        name = (head.replace("_", "-") if engine == "vllm" else head) + dot + rest
        base = name.split(".", 1)[0]
        if text.startswith("--") and base not in known:  # argparse takes an unambiguous prefix
            whole = [o for o in known if o.startswith(base)]
            if len(whole) == 1:
                name, base = whole[0] + name[len(base):], whole[0]
        at = [i]
        if not eq:
            takes = base not in switches and i + 1 < len(words) and not (
                words[i + 1].text.startswith("--") or (words[i + 1].text.startswith("-") and not _number(words[i + 1].text)))
            value = words[i + 1].text if takes else None
            at += [i + 1] if takes else []
            i += 1 + takes
        else:
            i += 1
        if "." in name and base in JSON_OPTIONS[engine]:  # --speculative-config.method eagle3
            parent = flags.options.get(base) or Flag(base, None, word.line, {})
            if not isinstance(parent.data, dict):
                parent.data = {}
            _set_dotted(parent.data, name.split(".")[1:], _scalar(value))
            parent.line = word.line
            parent.at += at
            flags.options[base] = parent
            continue
        flag = Flag(name, value, word.line, at=at, long=text.startswith("--"))
        if name in JSON_OPTIONS[engine] and value is not None:
            if not reading.json_depth_ok(value):
                raise BadInput(f"{launch.file}:{word.line}: --{name} nests JSON past {reading.MAX_JSON_DEPTH} levels "
                               "(the limit), not read", file=launch.file, line=word.line, key=f"--{name}")
            try:
                flag.data = json.loads(value)
            except ValueError as exc:
                raise BadInput(f"{launch.file}:{word.line}: --{name} is not JSON ({exc})", file=launch.file,
                               line=word.line, key=f"--{name}") from None
        flags.options[name] = flag
    return flags


def unknown_option(flags: Flags) -> str | None:
    """The first long option the engine's parser does not know (nor as the unambiguous prefix argparse
    accepts), or a positional word it takes no place for, or None.

    Example::

        >>> from draftguard.check.launch.sources import command_launches
        >>> unknown_option(read_flags(command_launches("vllm serve m --max-model 9 --bogus-flag 3")[0]))
        'bogus-flag'
    """
    _, known, _ = parser_options(flags.engine, flags.version)
    extra = flags.positional[1:] if flags.engine == "vllm" else flags.positional
    if extra:  # `vllm serve` takes one positional (the model); SGLang's launcher none
        return extra[0].text
    for flag in flags.options.values():
        base = flag.name.split(".", 1)[0]
        if flag.long and base not in known and not any(option.startswith(base) for option in known):
            return base
    return None


def invalid_choice(flags: Flags) -> tuple[str, str, list[str]] | None:
    """The first option whose value the release's parser refuses as not one of its ``choices`` (vLLM's
    ``--quantization bitsandbytes`` from the release that dropped the method): (option, value, choices),
    or None. Only the releases whose generated data carries choices are judged.

    Example::

        >>> from draftguard.check.launch.sources import command_launches
        >>> invalid_choice(read_flags(command_launches("vllm serve m --max-model-len 9")[0])) is None
        True
    """
    _, _, choices = parser_options(flags.engine, flags.version)
    for flag in flags.options.values():
        allowed = choices.get(flag.name)
        if allowed and flag.value is not None and flag.value not in allowed:
            return flag.name, flag.value, allowed
    return None


def _spaced(text: str, engine: str, known: frozenset[str] | None = None) -> bool:
    """argparse's rule: a word that starts with "-" but holds a space, and is no known option (nor
    ``--option=value``), is a positional (``vllm serve "$ARGS"`` gives vLLM one positional)."""
    if " " not in text:
        return False
    name = text.lstrip("-").partition("=")[0]
    name = name.replace("_", "-") if engine == "vllm" else name
    return not ("=" in text and " " not in name and name in (OPTIONS[engine] if known is None else known))


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def _scalar(value: str | None) -> Any:
    if value is None:
        return True
    if not reading.json_depth_ok(value):  # kept as text: too deep to be a value the engine takes
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _set_dotted(data: dict, path: list[str], value: Any) -> None:
    for part in path[:-1]:
        data = data.setdefault(part, {})
    data[path[-1]] = value


def human_int(text: str | None) -> int | None:
    """vLLM's ``human_readable_int``: "32768", "32k" (x1000), "32K" (x1024), "1m", "1M"; None for "auto",
    -1 or anything else.

    Example::

        >>> human_int("32k"), human_int("32K"), human_int("4096"), human_int("auto")
        (32000, 32768, 4096, None)
    """
    if text is None:
        return None
    text = text.strip()
    units = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    try:
        if text and text[-1] in units:
            value = int(float(text[:-1]) * units[text[-1]])
        else:
            value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None
