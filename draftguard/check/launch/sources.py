"""Where a deployment writes its engine launch: a shell script, a compose file or a Kubernetes manifest,
read into ``Launch`` objects (the engine, its arguments with their lines, the environment it runs with,
and the folders a container path maps back to).

- Scripts (``shell.run_script``): ``vllm serve ...``, ``python -m vllm.entrypoints.openai.api_server``,
  ``python -m sglang.launch_server``, ``sglang serve``, ``docker run ... vllm/vllm-openai ARGS``, and
  any of those inside ``bash -c '...'``; wrappers (``exec``, ``nohup``, ``env``, ``time``) are skipped.
- Compose files: each service's ``entrypoint`` and ``command`` (a list, or a string split as compose
  splits it), its ``environment`` (list or map) and ``volumes`` (short or long syntax), with compose's
  own ``${VAR:-default}`` interpolation from the ``.env`` beside the file. The ``vllm/vllm-openai``
  image's entrypoint is ``vllm serve``; ``lmsysorg/sglang`` has none.
- Kubernetes manifests (multi-document): every container of a Pod, Deployment, StatefulSet, Job,
  CronJob and the like: ``command`` + ``args`` (``$(VAR)`` expanded from ``env`` as the kubelet does),
  ``env`` ``value`` entries, and ``hostPath`` volumes behind ``volumeMounts``.

In: a launch file's path (or a command line, ``--launch``).
Out: ``read_launches`` -> ``Launch`` list, or ``BadInput`` naming the file and line of what is wrong
(unterminated quotes, invalid YAML, a file that launches no engine).
"""

from __future__ import annotations

import os
import io
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from draftguard.check.launch import reading, stacks
from draftguard.check.launch.built import compose_build, local_image, over
from draftguard.check.launch.built import node_get as _get
from draftguard.check.launch.dockerfile import is_dockerfile, read_dockerfile
from draftguard.check.launch.launchers import unwrap
from draftguard.check.launch.pins import ENGINE_IMAGES, IMAGE_ENTRYPOINTS, Pin, decide, image_name, image_pin
from draftguard.check.launch.reading import MAX_LAUNCH_BYTES
from draftguard.check.launch.shell import Word, expand, run_script
from draftguard.errors import BadInput

PLACE_WINDOW = 4096  # how far past the previous word a word's source text is looked for
WRAPPERS = ("exec", "nohup", "time", "sudo", "command", "then", "do", "else", "{", "(", "!", "stdbuf")
SUDO_VALUED = {"-u", "--user", "-g", "--group", "-C", "--close-from", "-D", "--chdir", "-h", "--host", "-p",
               "--prompt", "-r", "--role", "-t", "--type", "-U", "--other-user", "-T", "--command-timeout"}
# docker (and podman) run's switches, the options that take no value (docker's `docker run` reference:
# every other option takes one, as the next word or after "="). A list of the few switches rather than of
# the ~100 valued options: a valued option missing from a hand list (--log-opt) lost the image.
DOCKER_SWITCHES = {"-d", "--detach", "-i", "--interactive", "-t", "--tty", "--rm", "--privileged", "--init",
                   "-P", "--publish-all", "--read-only", "--sig-proxy", "--no-healthcheck", "--oom-kill-disable",
                   "--disable-content-trust", "-q", "--quiet", "--help", "--use-api-socket",
                   # podman's own switches
                   "--replace", "--env-host", "--no-hosts", "--rootfs", "--read-only-tmpfs", "--http-proxy",
                   "--tls-verify", "--passwd", "--rmi", "--privileged"}


@dataclass
class Launch:
    """One engine launch found in a file."""

    engine: str  # "vllm" or "sglang"
    args: list[Word]  # the engine's own arguments, after `vllm serve` / the launcher module
    env: dict[str, tuple[str, int]]  # name -> (value, line)
    file: str  # the launch file as shown
    line: int  # where the command starts
    folder: Path  # relative model paths resolve from here
    volumes: dict[str, str] = field(default_factory=dict)  # container path -> host path
    where: str = ""  # "service vllm", "Deployment/llm container vllm", ""
    image: str | None = None
    # The engine release it pins as written ("v0.10.1", "0.9.1"; None: none pinned) and where that was
    # read, decided by pins.decide (sources: the launcher, the image built, the image, the repo's files).
    release: str | None = None
    release_source: str = ""
    pins: list[Pin] = field(default_factory=list, repr=False)  # the candidates, in the order they win


def _launch_of(words: list[Word], env: dict[str, tuple[str, int]], file: str, folder: Path,
               volumes: dict[str, str], where: str = "", image: str | None = None,
               pins: list[Pin] | None = None) -> Launch | None:
    """The engine launch a command's words make, or None. ``pins``: the release pins the image it runs
    in names (a built image's); a launcher's own pins go first."""
    words, pins = list(words), list(pins or [])
    while words:
        head = words[0].text
        if head in WRAPPERS or (head == "env" and len(words) > 1):
            words.pop(0)
            while head != "env" and words and words[0].text.startswith("-"):  # sudo -E -u me, stdbuf -oL, time -p
                words = words[1 + (head == "sudo" and words[0].text in SUDO_VALUED and len(words) > 1):]
            while head == "env" and words and ("=" in words[0].text and not words[0].text.startswith("-")):
                name, _, value = words.pop(0).text.partition("=")
                env = {**env, name: (value, words[0].line if words else 0)}
            continue
        unwrapped = unwrap(words, file)
        if unwrapped is not None:
            words, pins = unwrapped[0], unwrapped[1] + pins
            continue
        break
    if not words:
        return None
    texts = [w.text for w in words]
    name = Path(texts[0]).name
    flags_c = [i for i, t in enumerate(texts[1:], 1) if t.startswith("-") and not t.startswith("--") and "c" in t]
    if name in ("bash", "sh", "zsh", "dash") and flags_c:  # bash -c / -exc 'script'
        at = flags_c[0]
        if at + 1 < len(words):
            inner = words[at + 1]
            return _first([_launch_of(c.words, {**env, **c.env}, file, folder, volumes, where, image, pins)
                           for c in run_script(inner.text, env, first_line=inner.line, file=file)])
        return None

    def made(engine: str, rest: list[Word]) -> Launch:
        return Launch(engine, rest, env, file, words[0].line, folder, volumes, where, image, pins=pins)
    if name == "vllm" and len(texts) > 1 and texts[1] == "serve":
        return made("vllm", words[2:])
    if name == "sglang" and len(texts) > 1 and texts[1] == "serve":
        return made("sglang", words[2:])
    if re.fullmatch(r"python(\d(\.\d+)?)?", name):  # python -u -m, python3.11 -m
        module = next((i for i, t in enumerate(texts) if t == "-m"), None)
        if module is not None and module + 1 < len(texts):
            mod = texts[module + 1]
            if mod in ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server"):
                return made("vllm", words[module + 2:])
            if mod in ("sglang.launch_server", "sglang.srt.server"):
                return made("sglang", words[module + 2:])
            if mod == "vllm.entrypoints.cli.main" and texts[module + 2:module + 3] == ["serve"]:
                return made("vllm", words[module + 3:])
        return None
    if name in ("docker", "podman") and len(texts) > 1 and texts[1] == "run":
        return _docker_run(words[2:], env, file, folder, volumes, where)
    return None


def _first(found: list[Launch | None]) -> Launch | None:
    return next((f for f in found if f is not None), None)


def _docker_valued(flag: str) -> tuple[str, str | None]:
    """A docker run option word read as docker's parser reads it: (the option, its value written in the
    same word or None when it takes the next word, "" for a switch). ``-it``, ``-dit``: switches;
    ``-p8000:8000``: -p with its value; ``-itp 80:80``: -p takes the next word."""
    if flag.startswith("--") or len(flag) == 2:
        return flag, "" if flag in DOCKER_SWITCHES else None
    for at, letter in enumerate(flag[1:], 1):
        if f"-{letter}" not in DOCKER_SWITCHES:
            rest = flag[at + 1:]
            return f"-{letter}", rest or None
    return flag, ""


def _docker_run(words: list[Word], env: dict, file: str, folder: Path, volumes: dict, where: str) -> Launch | None:
    env, volumes, entry = dict(env), dict(volumes), None
    i = 0
    while i < len(words) and words[i].text.startswith("-"):
        flag, eq, value = words[i].text.partition("=")
        if not eq:
            flag, attached = _docker_valued(flag)
            if attached is None and i + 1 < len(words):
                i, value = i + 1, words[i + 1].text
            else:
                value = attached or ""
        if flag in ("-e", "--env") and "=" in value:
            name, _, val = value.partition("=")
            env[name] = (val, words[i].line)
        elif flag in ("-v", "--volume") and ":" in value:
            host, container = value.split(":")[:2]
            # the shell's tilde expansion of an unquoted ~/ (docker wants an absolute host path)
            volumes[container] = host if host.startswith("/") else str(
                Path(host).expanduser() if host.startswith("~") else folder / host)
        elif flag == "--entrypoint":
            entry = value
        i += 1
    if i >= len(words):
        return None
    image = words[i].text
    rest = words[i + 1:]
    default = [] if entry is not None else IMAGE_ENTRYPOINTS.get(image_name(image), [])
    head = ([Word(entry, words[i].line)] if entry else []) + [Word(t, words[i].line) for t in default]
    pins = [p for p in [image_pin(image, f"{file} line {words[i].line}")] if p is not None]
    built = local_image(image, folder) if image_name(image) not in ENGINE_IMAGES else None
    if built is not None:  # docker run an image this repository builds: its ENTRYPOINT/CMD, its ENV under -e
        head, rest = over(built, entry, head, rest or None, rest, words[i].line)
        env, pins = {**built.env, **env}, built.pins
    return _launch_of(head + rest, env, file, folder, volumes, where, image, pins)


# --- files --------------------------------------------------------------------------------------------------


def read_launches(path: str) -> list[Launch]:
    """Every engine launch in a launch file. Raises BadInput (file and line) for a file that cannot be
    read as its kind, or one that launches no engine."""
    file = Path(path)
    if not os.path.lexists(file):
        raise BadInput(f"{path}: no such launch file", file=path)
    try:  # a regular file, inside the checkout (reading.confined), at most 1 MB
        text = reading.read_bytes(file, path, MAX_LAUNCH_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path}: not UTF-8 text (byte {exc.start})", file=path) from None
    folder = file.resolve().parent
    if is_dockerfile(file.name):
        built = read_dockerfile(text, path)
        found = _launch_of(built.words(), built.env, path, folder, {}, "", built.base, built.pins)
        if found is None:  # say what the image runs instead, and where
            runs = built.words()
            what = (f"runs {' '.join(w.text for w in runs)[:80]!r} (line {runs[0].line})" if runs else
                    f"sets no ENTRYPOINT or CMD and is built FROM {built.base} (line {built.base_line})")
            raise BadInput(f"{path}:{runs[0].line if runs else built.base_line}: the image {what}, which is no "
                           "engine command (vllm serve, python -m vllm.entrypoints.openai.api_server, python -m "
                           "sglang.launch_server, sglang serve)", file=path, line=runs[0].line if runs else built.base_line)
        launches = [found]
    elif file.suffix in (".yml", ".yaml") or text.lstrip().startswith(("services:", "apiVersion:", "version:", "---")):
        launches = _yaml_launches(text, path, folder)
    else:
        launches = [found for c in run_script(text, file=path)
                    if (found := _launch_of(c.words, c.env, path, folder, {})) is not None]
    if not launches:
        raise BadInput(f"{path}: launches no engine (looked for vllm serve, python -m vllm.entrypoints.openai."
                       "api_server, python -m sglang.launch_server, sglang serve, launchers such as uv run, uvx, "
                       "pixi run and conda run, Dockerfile ENTRYPOINT/CMD, and the vllm/vllm-openai and "
                       "lmsysorg/sglang images and images built FROM them)", file=path)
    return [_pinned(launch) for launch in launches]


def _pinned(launch: Launch) -> Launch:
    """The launch with its release decided (pins.decide: the one place that decides it)."""
    launch.release, launch.release_source = decide(launch.engine, launch.pins, launch.folder)
    return launch


def command_launches(command: str, name: str = "--launch") -> list[Launch]:
    """``--launch 'vllm serve ...'``: the command line read as a one-line script from the current folder
    (``name`` is how findings name it: "--launch", or "--launch 2" for the second)."""
    launches = [found for c in run_script(command, file=name)
                if (found := _launch_of(c.words, c.env, name, Path.cwd(), {})) is not None]
    if not launches:
        raise BadInput(f"{name}: not an engine command (vllm serve ..., python -m sglang.launch_server ...)",
                       file=name)
    return [_pinned(launch) for launch in launches]


def _yaml_launches(text: str, path: str, folder: Path) -> list[Launch]:
    try:
        docs = reading.compose_all(text, path)  # aliases within a budget
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise BadInput(f"{path}:{line or 1}: not valid YAML: {problem}", file=path, line=line) from None
    launches: list[Launch] = []
    for doc in docs:
        if not isinstance(doc, yaml.MappingNode):
            continue
        services = _get(doc, "services")
        if isinstance(services, yaml.MappingNode):
            launches += _compose(services, text, path, folder)
        elif stacks.is_stack(doc):  # the vLLM production stack's Helm values: one launch per modelSpec
            found, _ = stacks.production_stack(doc, path)
            launches += [launch for s in found if (launch := _launch_of(
                s.words, s.env, path, folder, {}, s.where, s.image,
                [p for p in [image_pin(s.image, f"{path} line {s.image_line}")] if p] if s.image else [])) is not None]
        else:
            launches += [found for c in _containers(doc)
                         if (found := _k8s_container(c, doc, text, path, folder)) is not None]
    return launches


def _line(node: Any) -> int:
    return node.start_mark.line + 1


def _scalar_words(node: yaml.ScalarNode, text: str, interpolate: dict[str, str] | None) -> list[Word]:
    """One YAML string read as compose reads a string command (split like a shell, no expansion):
    each word gets the line where it appears in the scalar's source."""
    value = _interpolate(node.value, interpolate) if interpolate is not None else node.value
    try:
        parts = shlex.split(value)
    except ValueError as exc:
        raise BadInput(f"{_here(node)}: {exc}", line=_line(node)) from None
    return _place(parts, node, text)


def _place(parts: list[str], node: Any, text: str) -> list[Word]:
    """Words at the lines where their text first appears in ``node``'s source, in order."""
    source = text[node.start_mark.index:node.end_mark.index]
    at, lines, out = 0, 0, []
    for part in parts:
        key = part.split("\n")[0][:40] or part  # looked for near the last word only: linear, not quadratic
        found = source.find(key, at, at + len(key) + PLACE_WINDOW) if part else -1
        if found >= 0:
            lines += source.count("\n", at, found)  # counted from the last word, not from the start
            at = found
        out.append(Word(part, _line(node) + lines))
    return out


def _here(node: Any) -> str:
    return f"line {_line(node)}"


def _words(node: Any, text: str, interpolate: dict[str, str] | None, path: str) -> list[Word]:
    if node is None:
        return []
    if isinstance(node, yaml.ScalarNode):
        return _scalar_words(node, text, interpolate) if node.value else []
    if isinstance(node, yaml.SequenceNode):
        out = []
        for item in node.value:
            if not isinstance(item, yaml.ScalarNode):
                raise BadInput(f"{path}:{_line(item)}: a command item that is not a string", file=path, line=_line(item))
            value = _interpolate(item.value, interpolate) if interpolate is not None else item.value
            out.append(Word(value, _line(item) + (item.style in ("|", ">"))))  # a block starts below its indicator
        return out
    raise BadInput(f"{path}:{_line(node)}: a command that is not a string or a list", file=path, line=_line(node))


def _dotenv(folder: Path) -> dict[str, str]:
    """The ``.env`` beside a compose file, read only as a regular file inside the checkout (``reading``),
    then by python-dotenv (quotes, ``export``, inline comments, multi-line values as compose reads them); a
    variable without a value is left out."""
    from dotenv import dotenv_values  # python-dotenv; only compose files pay its import

    text = reading.dotenv_text(folder)  # a regular file inside the checkout, or an error on it
    if text is None:
        return {}
    return {k: v for k, v in dotenv_values(stream=io.StringIO(text), interpolate=False).items() if v is not None}


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's interpolation: ``${VAR}``, ``${VAR:-default}``, ``$VAR``; ``$$`` is a literal ``$``."""
    pieces = value.split("$$")
    return "$".join(expand(p, env, []) for p in pieces)


def _compose(services: yaml.MappingNode, text: str, path: str, folder: Path) -> list[Launch]:
    out = []
    dotenv = _dotenv(folder)
    for key, service in services.value:
        if not isinstance(service, yaml.MappingNode):
            continue
        image_node = _get(service, "image")
        image = _interpolate(image_node.value, dotenv) if isinstance(image_node, yaml.ScalarNode) else None
        env = _compose_env(_get(service, "environment"), dotenv)
        volumes = _compose_volumes(_get(service, "volumes"), folder, dotenv)
        entry_node, command_node = _get(service, "entrypoint"), _get(service, "command")
        entry = _words(entry_node, text, dotenv, path)
        command = _words(command_node, text, dotenv, path)
        built = compose_build(_get(service, "build"), folder)
        pins: list[Pin] = []
        if built is not None:  # the image the service builds: its ENTRYPOINT, CMD and ENV under compose's
            entry, command = over(built, entry_node, entry, command_node, command, _line(_get(service, "build")))
            env = {**built.env, **env}
            pins = built.pins
        elif image:
            line = _line(image_node)
            pins = [p for p in [image_pin(image, f"{path} line {line}")] if p is not None]
            if entry_node is None:
                entry = [Word(t, line) for t in IMAGE_ENTRYPOINTS.get(image_name(image), [])]
        found = _launch_of(entry + command, env, path, folder, volumes, f"service {key.value}", image, pins)
        if found is not None:
            out.append(found)
    return out


def _compose_env(node: Any, dotenv: dict[str, str]) -> dict[str, tuple[str, int]]:
    env: dict[str, tuple[str, int]] = {}
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            if isinstance(item, yaml.ScalarNode):
                name, eq, value = _interpolate(item.value, dotenv).partition("=")
                if eq:
                    env[name] = (value, _line(item))
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(v, yaml.ScalarNode) and v.value is not None:
                env[k.value] = (_interpolate(str(v.value), dotenv), _line(k))
    return env


def _compose_volumes(node: Any, folder: Path, dotenv: dict[str, str]) -> dict[str, str]:
    volumes: dict[str, str] = {}
    for item in node.value if isinstance(node, yaml.SequenceNode) else []:
        if isinstance(item, yaml.ScalarNode):
            parts = _interpolate(item.value, dotenv).split(":")
            if len(parts) >= 2:
                host, container = parts[0], parts[1]
            else:
                continue
        elif isinstance(item, yaml.MappingNode):
            src, dst = _get(item, "source"), _get(item, "target")
            if not (isinstance(src, yaml.ScalarNode) and isinstance(dst, yaml.ScalarNode)):
                continue
            host, container = _interpolate(src.value, dotenv), dst.value
        else:
            continue
        if host.startswith((".", "/", "~")):  # a bind mount (a bare name is a named volume)
            volumes[container] = str(Path(host).expanduser() if host.startswith(("/", "~")) else folder / host)
    return volumes


def _containers(doc: Any) -> list[Any]:
    """Every container mapping under any ``containers`` / ``initContainers`` list of a manifest."""
    found = []
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == "containers" and isinstance(v, yaml.SequenceNode):
                    found += [c for c in v.value if isinstance(c, yaml.MappingNode)]
                else:
                    stack.append(v)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return sorted(found, key=_line)


def _k8s_container(container: Any, doc: Any, text: str, path: str, folder: Path) -> Launch | None:
    env: dict[str, tuple[str, int]] = {}
    env_node = _get(container, "env")
    for item in env_node.value if isinstance(env_node, yaml.SequenceNode) else []:
        name, value = _get(item, "name"), _get(item, "value")
        if isinstance(name, yaml.ScalarNode) and isinstance(value, yaml.ScalarNode):
            env[name.value] = (value.value, _line(value))
    plain = {k: v for k, (v, _) in env.items()}

    def kube(words: list[Word]) -> list[Word]:  # $(VAR) from env, as the kubelet expands it; $$ escapes
        return [Word(re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                            lambda m: "$" if m.group(0) == "$$" else plain.get(m.group(1), m.group(0)), w.text),
                     w.line) for w in words]

    command_node, args_node = _get(container, "command"), _get(container, "args")
    command = kube(_words(command_node, text, None, path))
    args = kube(_words(args_node, text, None, path))
    image_node = _get(container, "image")
    image = image_node.value if isinstance(image_node, yaml.ScalarNode) else None
    pins: list[Pin] = []
    built = local_image(image, folder) if image and image_name(image) not in ENGINE_IMAGES else None
    if built is not None:  # an image this repository builds FROM an engine image
        command, args = over(built, command_node, command, args_node, args, _line(image_node))
        env = {**built.env, **env}
        pins = built.pins
    elif image:
        pins = [p for p in [image_pin(image, f"{path} line {_line(image_node)}")] if p is not None]
        if not command:
            command = [Word(t, _line(image_node)) for t in IMAGE_ENTRYPOINTS.get(image_name(image), [])]
    kind, meta = _get(doc, "kind"), _get(doc, "metadata")
    name = _get(meta, "name") if meta is not None else None
    cname = _get(container, "name")
    where = "/".join(n.value for n in (kind, name) if isinstance(n, yaml.ScalarNode))
    where += f" container {cname.value}" if isinstance(cname, yaml.ScalarNode) else ""
    return _launch_of(command + args, env, path, folder, _host_paths(doc, container), where, image, pins)


def _host_paths(doc: Any, container: Any) -> dict[str, str]:
    """mountPath -> hostPath.path for the container's mounts of hostPath volumes in the same pod spec."""
    host: dict[str, str] = {}
    for spec in _all(doc, "volumes"):
        for vol in spec.value if isinstance(spec, yaml.SequenceNode) else []:
            name, hp = _get(vol, "name"), _get(vol, "hostPath")
            path = _get(hp, "path") if hp is not None else None
            if isinstance(name, yaml.ScalarNode) and isinstance(path, yaml.ScalarNode):
                host[name.value] = path.value
    mounts = _get(container, "volumeMounts")
    out = {}
    for m in mounts.value if isinstance(mounts, yaml.SequenceNode) else []:
        name, at = _get(m, "name"), _get(m, "mountPath")
        if isinstance(name, yaml.ScalarNode) and isinstance(at, yaml.ScalarNode) and name.value in host:
            out[at.value] = host[name.value]
    return out


def _all(node: Any, key: str) -> list[Any]:
    found, stack = [], [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, yaml.MappingNode):
            for k, v in cur.value:
                if isinstance(k, yaml.ScalarNode) and k.value == key:
                    found.append(v)
                stack.append(v)
        elif isinstance(cur, yaml.SequenceNode):
            stack.extend(cur.value)
    return found
