"""What a Dockerfile's image runs: its ``ENTRYPOINT`` and ``CMD`` (exec form ``["vllm", "serve"]``, or
shell form, which docker runs as ``/bin/sh -c TEXT``), the ``ENV`` it runs with (``ARG`` defaults
substituted, as docker does at build time), inherited through ``FROM`` another stage, and the engine
image it is built ``FROM`` (whose own entrypoint it inherits: ``vllm/vllm-openai`` runs ``vllm serve``).
The instructions are split by ``dockerfile-parse`` (continuations, comments, line numbers); the
shell-form text is then read by ``shell.py`` like any script.

In: a Dockerfile's path as shown and its text.
Out: ``read_dockerfile`` -> ``Built`` (the final stage's entrypoint and command words with their lines, its environment, the root image and the engine pins
its ``FROM`` tag and ``RUN pip install`` lines name), or ``BadInput`` naming the line. Pure: no I/O.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import dataclass, field

from dockerfile_parse import DockerfileParser

from draftguard.check.launch.pins import IMAGE_ENTRYPOINTS, Pin, image_name, image_pin, requirement_pin
from draftguard.check.launch.shell import Word, expand, run_script
from draftguard.errors import BadInput

DOCKERFILE_NAMES = re.compile(r"(Dockerfile|Containerfile)(\..+)?|.+\.(Dockerfile|Containerfile|dockerfile)")


def is_dockerfile(name: str) -> bool:
    """``Dockerfile``, ``Dockerfile.cpu``, ``serve.Dockerfile``, ``Containerfile``."""
    return DOCKERFILE_NAMES.fullmatch(name) is not None


@dataclass
class Built:
    """What the final stage of a Dockerfile runs."""

    file: str
    entry: list[Word] | None = None  # None: not set (the base image's, if an engine image's)
    cmd: list[Word] | None = None
    env: dict[str, tuple[str, int]] = field(default_factory=dict)
    base: str | None = None  # the image the first stage of the chain is built FROM
    base_line: int = 0
    pins: list[Pin] = field(default_factory=list)  # RUN pip install pins first, then the base image's tag

    def words(self) -> list[Word]:
        return list(self.entry or []) + list(self.cmd or [])


def _form(keyword: str, content: str, line: int, file: str) -> list[Word]:
    """An ENTRYPOINT/CMD's words: the exec form's strings each on its line, or the shell form as
    ``/bin/sh -c TEXT`` (what docker runs), the text keeping its own line breaks."""
    body = content.split(None, 1)[1] if len(content.split(None, 1)) > 1 else ""
    body = body.rstrip("\n")
    stripped = body.strip()
    if stripped.startswith("["):
        try:
            items = json.loads(re.sub(r"\\\r?\n", " ", stripped))
        except ValueError:
            items = None
        if isinstance(items, list) and all(isinstance(x, str) for x in items):
            out, at = [], 0
            for item in items:
                found = body.find(json.dumps(item)[1:-1], at)
                at = found if found >= 0 else at
                out.append(Word(item, line + body.count("\n", 0, at)))
            return out
    return [Word("/bin/sh", line), Word("-c", line), Word(body, line)]


def read_dockerfile(text: str, file: str) -> Built:
    """The final stage of a Dockerfile, through the stages it is built from."""
    try:
        parser = DockerfileParser(fileobj=io.BytesIO(text.encode("utf-8")))
        instructions = parser.structure
    except Exception as exc:  # noqa: BLE001 - the parser's own errors are not one class
        raise BadInput(f"{file}: not a Dockerfile dockerfile-parse can read ({exc})", file=file) from None
    stages: list[dict] = []
    global_args: dict[str, str] = {}
    for ins in instructions:
        kind, line = ins["instruction"], ins["startline"] + 1
        if kind == "FROM":
            words = [w for w in ins["value"].split() if not w.startswith("--")]
            if not words:
                raise BadInput(f"{file}:{line}: FROM names no image", file=file, line=line)
            image = expand(words[0], dict(global_args), [])
            name = words[2] if len(words) > 2 and words[1].lower() == "as" else None
            stages.append({"image": image, "name": name, "line": line, "ins": []})
        elif not stages:
            if kind == "ARG":
                global_args.update(_arg(ins["value"]))
        else:
            stages[-1]["ins"].append(ins)
    if not stages:
        raise BadInput(f"{file}: no FROM line: not a Dockerfile", file=file)
    chain = [stages[-1]]
    while True:  # FROM an earlier stage: that stage's settings first
        named = next((s for s in stages[:stages.index(chain[0])] if s["name"] and s["name"] == chain[0]["image"]),
                     None)
        if named is None:
            break
        chain.insert(0, named)
    built = Built(file, base=chain[0]["image"], base_line=chain[0]["line"])
    args: dict[str, str] = {}
    shell_env: dict[str, str] = {}
    for stage in chain:
        for ins in stage["ins"]:
            kind, line, value = ins["instruction"], ins["startline"] + 1, ins["value"]
            if kind == "ARG":
                args.update({k: v for k, v in _arg(value).items() if k not in args or v})
            elif kind == "ENV":
                for name, val in _env(value, {**global_args, **args, **shell_env}).items():
                    shell_env[name] = val
                    built.env[name] = (val, line)
            elif kind == "ENTRYPOINT":
                built.entry, built.cmd = _form(kind, ins["content"], line, file), None
            elif kind == "CMD":
                built.cmd = _form(kind, ins["content"], line, file)
            elif kind == "RUN":
                built.pins += _run_pins(ins["content"].split(None, 1)[-1], line, file, {**args, **shell_env})
    if built.entry is None and built.base is not None and image_name(built.base) in IMAGE_ENTRYPOINTS:
        built.entry = [Word(t, built.base_line) for t in IMAGE_ENTRYPOINTS[image_name(built.base)]]
    if built.base is not None and (pin := image_pin(built.base, f"{file} line {built.base_line}")) is not None:
        built.pins.append(pin)
    return built


def _arg(value: str) -> dict[str, str]:
    name, _, default = value.strip().partition("=")
    return {name.strip(): default.strip().strip("'\"")} if name.strip() else {}


def _env(value: str, known: dict[str, str]) -> dict[str, str]:
    """``ENV A=b C="d e"`` (values expanded from the ARGs and ENVs so far), or the old ``ENV A b c``."""
    first = value.strip().split(None, 1)
    if not first:
        return {}
    if "=" not in first[0]:
        return {first[0]: expand(first[1] if len(first) > 1 else "", known, [])}
    env = {k: (v, 0) for k, v in known.items()}
    [command] = run_script(": " + value.replace("\n", " "), env) or [None]
    out: dict[str, str] = {}
    for word in command.words[1:] if command is not None else []:
        name, eq, val = word.text.partition("=")
        if eq:
            out[name] = val
    return out


def _run_pins(text: str, line: int, file: str, known: dict[str, str]) -> list[Pin]:
    """The engine pins of ``pip install`` commands in a RUN line."""
    pins = []
    try:
        commands = run_script(text, {k: (v, 0) for k, v in known.items()}, first_line=line, file=file)
    except BadInput:
        return []
    for command in commands:
        texts = [w.text for w in command.words]
        if "install" not in texts or not any(t.rsplit("/", 1)[-1] in ("pip", "pip3") for t in texts[:texts.index("install")]):
            continue
        for word in command.words[texts.index("install") + 1:]:
            if not word.text.startswith("-") and (pin := requirement_pin(word.text, f"{file} line {word.line}")):
                pin.source = f"pip install {pin.source}"
                pins.append(pin)
    return pins
