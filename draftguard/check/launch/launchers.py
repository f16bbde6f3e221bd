"""Launchers that run an engine's command for it, unwrapped to the command they run, with the release
they pin when they pin one.

- ``uv run [OPTIONS] CMD`` (``--with vllm==X`` pins), ``poetry run``, ``pdm run``, ``hatch run``,
  ``pipenv run``, ``rye run``;
- ``uv tool run [OPTIONS] PKG[@V] ARGS``, ``uvx [OPTIONS] PKG[@V] ARGS``, ``--from SPEC`` (the
  package is the command's name unless ``--from`` names it; ``@latest`` pins nothing);
- ``pixi run [-e ENV] CMD``; ``conda run -n ENV CMD`` (and ``mamba``, ``micromamba``).
An option is one word with ``=`` (``--python=3.12``); otherwise the options listed below as taking a
value take the next word (from each tool's own ``--help``), and every other option is a switch.

In: a command's words.
Out: ``unwrap`` -> the words of the command it runs and the pins it names (``pins.Pin``), or None when
the first word is no launcher. Pure: no I/O.
"""

from __future__ import annotations

from pathlib import Path

from packaging.requirements import Requirement

from draftguard.check.launch.pins import Pin, requirement_pin
from draftguard.check.launch.shell import Word

# uv run / uv tool run / uvx options that take a value (uv's command reference).
UV_VALUED = {"--with", "-w", "--with-editable", "--with-requirements", "--python", "-p", "--project",
             "--directory", "--package", "--extra", "--group", "--only-group", "--no-group", "--env-file",
             "--index", "--index-url", "-i", "--extra-index-url", "--default-index", "--find-links", "-f",
             "--config-file", "--cache-dir", "--index-strategy", "--keyring-provider", "--resolution",
             "--prerelease", "--exclude-newer", "--exclude-newer-package", "--link-mode", "--refresh-package",
             "--reinstall-package", "--upgrade-package", "-P", "--python-platform", "--color",
             "--allow-insecure-host", "--config-setting", "-C", "--no-binary-package", "--no-build-package",
             "--no-build-isolation-package", "--from", "--build-constraints", "-b", "--constraints", "-c",
             "--overrides", "--torch-backend", "--no-sources-package", "--script", "-s", "--gui-script",
             "--module", "-m"}
PIXI_VALUED = {"-e", "--environment", "--manifest-path", "--color", "--executable", "-x", "--workspace",
               "--concurrent-downloads", "--concurrent-solves", "--pypi-keyring-provider", "--tls-root-certs"}
CONDA_VALUED = {"-n", "--name", "-p", "--prefix", "--cwd"}
PLAIN_RUN = ("poetry", "pdm", "hatch", "pipenv", "rye")


def _options(words: list[Word], valued: set[str]) -> tuple[list[Word], dict[str, list[Word]]]:
    """The words after the launcher's own options, and those options (name -> values)."""
    seen: dict[str, list[Word]] = {}
    i = 0
    while i < len(words) and words[i].text.startswith("-"):
        text = words[i].text
        if text == "--":
            return words[i + 1:], seen
        name, eq, value = text.partition("=")
        if not eq and name in valued and i + 1 < len(words):
            seen.setdefault(name, []).append(words[i + 1])
            i += 2
            continue
        seen.setdefault(name, []).append(Word(value, words[i].line) if eq else words[i])
        i += 1
    return words[i:], seen


def _where(word: Word, file: str) -> str:
    return f"{file} line {word.line}"


def _tool_run(words: list[Word], file: str, shown: str) -> tuple[list[Word], list[Pin]]:
    rest, seen = _options(words, UV_VALUED)
    pins = [p for w in seen.get("--from", []) + seen.get("--with", []) + seen.get("-w", [])
            if (p := requirement_pin(w.text, _where(w, file))) is not None]
    if not rest:
        return rest, pins
    spec = rest[0]
    tail = rest[1:]
    if tail and tail[0].text == "--":
        tail = tail[1:]
    if seen.get("--from"):
        return [spec, *tail], pins
    name, at, version = spec.text.partition("@")
    if at:
        text = f"{name}=={version}" if version != "latest" else name
        pin = requirement_pin(text, _where(spec, file))
        if pin is not None:
            pin.source = f"{shown} {spec.text} ({_where(spec, file)})" + ("" if pin.release else ": no release pinned")
            pins.append(pin)
        return [Word(name, spec.line), *tail], pins
    pin = requirement_pin(spec.text, _where(spec, file))
    if pin is not None:  # uvx 'vllm>=0.6' serve: the package spec names the command
        pins.append(pin)
        return [Word(Requirement(spec.text).name, spec.line), *tail], pins
    return [spec, *tail], pins


def unwrap(words: list[Word], file: str) -> tuple[list[Word], list[Pin]] | None:
    """The command a launcher runs, and the engine pins its options name; None when ``words`` starts
    with no launcher.

    Example::

        >>> rest, pins = unwrap([Word(t, 5) for t in "uv tool run vllm@v0.9.1 serve --model=m".split()], "s.sh")
        >>> [w.text for w in rest], pins[0].release, pins[0].source
        (['vllm', 'serve', '--model=m'], 'v0.9.1', 'uv tool run vllm@v0.9.1 (s.sh line 5)')
    """
    if not words:
        return None
    name = Path(words[0].text).name
    texts = [w.text for w in words[:3]]
    if name == "uv" and texts[1:3] == ["tool", "run"]:
        return _tool_run(words[3:], file, "uv tool run")
    if name == "uvx":
        return _tool_run(words[1:], file, "uvx")
    if texts[1:2] != ["run"]:
        return None
    if name == "uv":
        rest, seen = _options(words[2:], UV_VALUED)
        return rest, [p for w in seen.get("--with", []) + seen.get("-w", [])
                      if (p := requirement_pin(w.text, _where(w, file))) is not None]
    if name == "pixi":
        return _options(words[2:], PIXI_VALUED)[0], []
    if name in ("conda", "mamba", "micromamba"):
        return _options(words[2:], CONDA_VALUED)[0], []
    if name in PLAIN_RUN:
        return _options(words[2:], set())[0], []
    return None
