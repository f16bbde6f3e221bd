"""Images a repository builds, found and read: the Dockerfile a compose service's ``build:`` names, and
the one that builds an image a Kubernetes container names (``vllm-gemma4:local``), with how their
``ENTRYPOINT``/``CMD`` combine with the command a compose file or manifest sets.

Which Dockerfile builds an image (``local_image``), in this order: a compose file of the repository
whose service names the image in ``image:`` beside a ``build:``; else a Dockerfile named after the
image (``Dockerfile.NAME``, ``NAME.Dockerfile``, ``NAME/Dockerfile``; NAME the image's last path part
without its tag). The repository is the checkout holding the launch file (``pins.checkout_root``).

In: YAML nodes, folders.
Out: ``dockerfile.Built`` or None. Reads only regular files inside the checkout (no symlink), 1 MB at
most each, and lists at most MAX_REPO_FILES entries.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import yaml

from draftguard.check.launch import reading
from draftguard.check.launch.dockerfile import Built, read_dockerfile
from draftguard.check.launch.pins import checkout_root, image_name
from draftguard.check.launch.shell import Word
from draftguard.errors import BadInput

MAX_DOCKERFILE_BYTES = 1024 * 1024
# Dockerfiles searched for a locally built image (a Kubernetes container's image:), at most this many entries
MAX_REPO_FILES = 5000


def node_get(node: Any, key: str) -> Any:
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.value == key:
                return v
    return None


def over(built: Built, entry_node: Any, entry: list[Word], command_node: Any, command: list[Word],
         line: int) -> tuple[list[Word], list[Word]]:
    """A built image's entrypoint and command under compose's or the kubelet's: an entrypoint set
    there replaces the image's and drops its CMD; a command set there replaces the CMD. Words taken
    from the Dockerfile are placed on ``line`` (the ``build:`` or ``image:`` line of the file being
    checked: findings name that file, and the Dockerfile's own lines mean nothing in it)."""
    if entry_node is None:
        entry = [Word(w.text, line, w.unset) for w in built.entry or []]
        if command_node is None:
            command = [Word(w.text, line, w.unset) for w in built.cmd or []]
    return entry, command


def compose_build(node: Any, folder: Path) -> Built | None:
    """The Dockerfile a service's ``build:`` names (``build: ./dir`` or ``context:`` + ``dockerfile:``),
    read; None when there is none or it is not a file inside the compose file's repository."""
    if node is None:
        return None
    context, name = node, None
    if isinstance(node, yaml.MappingNode):
        context, name = node_get(node, "context"), node_get(node, "dockerfile")
    where = folder / (context.value if isinstance(context, yaml.ScalarNode) and context.value else ".")
    dockerfile = where / (name.value if isinstance(name, yaml.ScalarNode) and name.value else "Dockerfile")
    return built_from(dockerfile, folder)


def built_from(dockerfile: Path, folder: Path) -> Built | None:
    """A Dockerfile read, when it is a regular file inside the checkout holding ``folder``; shown
    relative to the current folder."""
    root = checkout_root(folder)
    if dockerfile.is_symlink() or not dockerfile.is_file() or not dockerfile.resolve().is_relative_to(root.resolve()):
        return None
    if dockerfile.stat().st_size > MAX_DOCKERFILE_BYTES:
        return None
    shown = os.path.relpath(dockerfile)
    shown = str(dockerfile) if shown.startswith("..") else shown
    try:  # the same bounded read as every launch file (O_NOFOLLOW, regular files only, size-capped)
        text = reading.read_bytes(dockerfile, shown, MAX_DOCKERFILE_BYTES).decode("utf-8", errors="replace")
    except BadInput:
        return None
    return read_dockerfile(text, shown)


def local_image(image: str, folder: Path) -> Built | None:
    """The Dockerfile of this repository (the checkout holding the launch file) that builds ``image``:
    a compose service that names it in ``image:`` beside a ``build:``, else a Dockerfile named after it
    (``Dockerfile.NAME``, ``NAME.Dockerfile``, ``NAME/Dockerfile``, NAME the image's last path part
    without its tag). The first in path order; None when none does. Reads at most MAX_REPO_FILES
    entries, never through a symlink, never in hidden folders."""
    root = checkout_root(folder)
    name = image_name(image).rsplit("/", 1)[-1]
    composes, named = [], []
    seen = 0
    for at, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "node_modules")
        seen += len(files) + len(dirs)
        if seen > MAX_REPO_FILES:
            break
        for f in sorted(files):
            full = Path(at) / f
            if re.fullmatch(r"(docker-)?compose[\w.-]*\.ya?ml", f):
                composes.append(full)
            elif f in (f"Dockerfile.{name}", f"{name}.Dockerfile") or (f == "Dockerfile" and Path(at).name == name):
                named.append(full)
    for compose in composes:
        if compose.is_symlink() or compose.stat().st_size > MAX_DOCKERFILE_BYTES:
            continue
        try:  # within the alias and node budgets: a compose file found by walking the repo is a stranger's too
            text = reading.read_bytes(compose, str(compose), MAX_DOCKERFILE_BYTES).decode("utf-8", errors="replace")
            docs = reading.compose_all(text, str(compose))
        except (yaml.YAMLError, BadInput):
            continue
        doc = docs[0] if docs else None
        services = node_get(doc, "services")
        for _, service in services.value if isinstance(services, yaml.MappingNode) else []:
            node = node_get(service, "image")
            if isinstance(node, yaml.ScalarNode) and _same(node.value, image) and node_get(service, "build") is not None:
                built = compose_build(node_get(service, "build"), compose.parent)
                if built is not None:
                    return built
    for dockerfile in named:
        built = built_from(dockerfile, root)
        if built is not None:
            return built
    return None


def _same(a: str, b: str) -> bool:
    """Two image references name the same image: ``docker.io/library/x:latest`` is ``x``."""
    def norm(image: str) -> str:
        name = image_name(image).removeprefix("library/")
        last = image.split("@")[0].rsplit("/", 1)[-1]
        return f"{name}:{last.rsplit(':', 1)[1] if ':' in last else 'latest'}"
    return norm(a) == norm(b)
