"""Per-version transformers environments for the version matrix: validating versions, building each
venv once (cached), and running the resolver package in it.

In: transformers versions (strings from the CLI, the Action or .draftguard.yml) and raw configs.
Out: a ready venv per version (``ensure_env``) and, from ``run_resolver``, one resolved-config node per
config; a version that cannot be prepared or run raises ``MatrixError`` with its column state.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Iterable

from draftguard import bounded
from draftguard.check import resolver
from draftguard.errors import MatrixError
from draftguard.snapshot import BadInput


CACHE_ENV = "DRAFTGUARD_CACHE_DIR"
RESOLVE_TIMEOUT_ENV = "DRAFTGUARD_RESOLVE_TIMEOUT"
INSTALL_TIMEOUT_ENV = "DRAFTGUARD_INSTALL_TIMEOUT"
DEFAULT_RESOLVE_TIMEOUT = 60.0
DEFAULT_INSTALL_TIMEOUT = 900.0
READY_MARKER = "draftguard-env.json"
RESOLVER_PACKAGE = Path(resolver.__file__).resolve().parent
RESOLVER_IMPORT_CPU = 60  # CPU seconds a resolver process may spend importing its transformers
# The resolver's LOADER, run under the check's bounds (``bounded.Limits``, passed in the environment):
# set on the process itself, soft and hard, before any config is read; an allocation that fails at
# the memory bound exits with ``bounded.MEMORY_EXIT``. Standalone: the other venvs lack draftguard.
BOUNDED_LOADER = (
    "import os, resource\n"
    "memory, cpu = int(os.environ['DRAFTGUARD_LIMIT_MEMORY']), int(os.environ['DRAFTGUARD_LIMIT_CPU'])\n"
    "resource.setrlimit(resource.RLIMIT_CORE, (0, 0))\n"
    "resource.setrlimit(resource.RLIMIT_AS, (memory, memory))\n"
    "resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))\n"
    "try:\n"
    + "".join(f"    {line}\n" for line in resolver.LOADER.splitlines())
    + f"except MemoryError:\n    os._exit({bounded.MEMORY_EXIT})\n"
)

# A PEP 440 release, optionally a pre, post or dev release. Nothing else reaches the pip command line:
# no specifiers, no URLs, no local versions, no option-looking text.
_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){1,3}((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$")

# Column states.
OK, INSTALL_FAILED, NO_NETWORK, CRASHED, TIMED_OUT = "ok", "install failed", "no network", "crashed", "timed out"


def parse_versions(values: Iterable[str], *, source: str = "--transformers") -> list[str]:
    """Validate, deduplicate and sort transformers versions (oldest first). Raises BadInput naming
    the bad one: these strings end up on a pip command line.

    Raises:
        BadInput: A version is not a plain release number.

    Example::

        >>> parse_versions(["5.24.0", "4.52.4", "4.52.4"])
        ['4.52.4', '5.24.0']
    """
    from packaging.version import Version  # packaging (with transformers): only a --transformers list pays it

    seen: dict[str, Version] = {}
    for item in values:
        text = str(item).strip()
        if not _VERSION_RE.match(text):
            raise BadInput(
                f"{source}: {text!r} is not a transformers version; give release numbers such as "
                "4.52.4 or 5.0.0rc1, separated by commas",
                file=source if source != "--transformers" else None,
                key="transformers",
            )
        seen.setdefault(str(Version(text)), Version(text))
    if not seen:
        raise BadInput(f"{source}: no transformers version given", key="transformers")
    return [text for text, _ in sorted(seen.items(), key=lambda kv: kv[1])]


def cache_dir() -> Path:
    """Where version environments live: ``$DRAFTGUARD_CACHE_DIR``, else ``$XDG_CACHE_HOME/draftguard``,
    else ``~/.cache/draftguard``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "draftguard"


def env_dir(version: str, cache: Path | None = None) -> Path:
    """The environment of one transformers version. Keyed by the Python minor version too: a venv
    built for one interpreter does not run under another."""
    tag = f"py{sys.version_info.major}{sys.version_info.minor}"
    return (cache or cache_dir()) / "envs" / f"transformers-{version}-{tag}"


def env_python(env: Path) -> Path:
    return env / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def host_transformers_version() -> str | None:
    """The transformers version installed beside draftguard, read without importing it."""
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


# --- environments ----------------------------------------------------------------------------------


def ensure_env(
    version: str,
    *,
    cache: Path | None = None,
    progress: Callable[[str], None] | None = None,
    install_timeout: float | None = None,
) -> tuple[str, float | None]:
    """The interpreter that has transformers ``version``, installing it on first use. Returns
    (python, seconds the install took or None when it was cached). Raises MatrixError.

    Raises:
        MatrixError: The version could not be installed (its column says why).

    Example::

        >>> python, took = ensure_env(host_transformers_version())  # draftguard's own: no install
        >>> took is None
        True
    """
    if version == host_transformers_version():
        return sys.executable, None
    from filelock import FileLock  # filelock (with huggingface_hub): only building an environment pays it

    env = env_dir(version, cache)
    try:
        env.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(env) + ".lock")
        lock.acquire()
    except OSError as exc:
        raise MatrixError(
            INSTALL_FAILED,
            f"transformers {version}: cannot use the cache dir {env.parent} ({exc.strerror or exc}); set "
            f"{CACHE_ENV} to a writable directory",
        ) from None
    # Two checks (or two test workers) installing the same version must not build one venv together.
    try:
        if (env / READY_MARKER).is_file() and env_python(env).exists():
            return str(env_python(env)), None
        say = progress or (lambda text: None)
        say(f"installing transformers {version} (first use of this version) into {env}")
        started = time.monotonic()
        _install(version, env, install_timeout or _timeout(INSTALL_TIMEOUT_ENV, DEFAULT_INSTALL_TIMEOUT))
        took = time.monotonic() - started
        (env / READY_MARKER).write_text(
            json.dumps({"transformers": version, "python": sys.version.split()[0], "install_seconds": round(took, 1)})
        )
        say(f"installed transformers {version} in {took:.1f} s")
        return str(env_python(env)), took
    finally:
        lock.release()


def _install(version: str, env: Path, timeout: float) -> None:
    if env.exists():  # a half-built env from an interrupted install
        shutil.rmtree(env)
    uv = shutil.which("uv")
    if uv:
        steps = [
            [uv, "venv", "--quiet", "--python", sys.executable, str(env)],
            [uv, "pip", "install", "--quiet", "--python", str(env_python(env)), f"transformers=={version}"],
        ]
    elif _host_pip_can_target():
        # A venv without its own pip is made in a tenth of a second, against seconds for ensurepip;
        # draftguard's own pip installs into it.
        steps = [
            [sys.executable, "-m", "venv", "--without-pip", str(env)],
            [sys.executable, "-m", "pip", "--python", str(env_python(env)), "install",
             "--disable-pip-version-check", "--no-input", "--quiet", f"transformers=={version}"],
        ]
    else:
        steps = [
            [sys.executable, "-m", "venv", str(env)],
            [str(env_python(env)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
             "--quiet", f"transformers=={version}"],
        ]
    deadline = time.monotonic() + timeout
    for command in steps:
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=max(1.0, deadline - time.monotonic()),
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            shutil.rmtree(env, ignore_errors=True)
            raise MatrixError(INSTALL_FAILED, f"transformers {version} could not be installed: {exc}") from None
        except subprocess.TimeoutExpired:
            shutil.rmtree(env, ignore_errors=True)
            raise MatrixError(
                INSTALL_FAILED,
                f"installing transformers {version} took over {timeout:.0f} s and was stopped; check the "
                f"network, or raise {INSTALL_TIMEOUT_ENV}",
            ) from None
        if done.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            raise _install_error(version, done.stdout + "\n" + done.stderr, env.parent.parent)


def _host_pip_can_target() -> bool:
    """pip 22.3 and later install into another interpreter's environment with ``--python``."""
    from packaging.version import Version  # packaging (with transformers): only a --transformers list pays it

    try:
        return Version(metadata.version("pip")) >= Version("22.3")
    except (metadata.PackageNotFoundError, ValueError):
        return False


_NETWORK_SIGNS = (
    "NewConnectionError", "Failed to establish a new connection", "Temporary failure in name resolution",
    "Name or service not known", "Network is unreachable", "Connection refused", "ConnectTimeoutError",
    "Max retries exceeded", "ConnectionError", "dns error", "error sending request", "Could not connect",
    "Failed to fetch", "tcp connect error",
)
_MISSING_SIGNS = ("No matching distribution found", "there is no version of", "was not found in the package registry")


def _install_error(version: str, output: str, cache: Path) -> MatrixError:
    """Tell "no such version" from "no network" from the installer's own words (pip or uv)."""
    available = re.search(r"\(from versions: ([^)]*)\)", output)
    listed = available.group(1).strip() if available else ""
    # pip lists no versions at all when the index cannot be reached (with retries off it says
    # nothing else); every real index has some transformers release.
    offline = listed == "none" or (any(sign in output for sign in _NETWORK_SIGNS) and listed == "")
    if offline:
        return MatrixError(
            NO_NETWORK,
            f"transformers {version} is not cached and the package index could not be reached (no "
            f"network?). Connect once so it can be installed into {cache}, or point "
            f"{CACHE_ENV} at a cache that already holds it",
        )
    if any(sign in output for sign in _MISSING_SIGNS):
        newest = listed.split(",")[-1].strip() if listed and listed != "none" else None
        hint = f"; the newest on the index is {newest}" if newest else ""
        return MatrixError(
            INSTALL_FAILED,
            f"transformers {version} does not exist on the package index{hint}. Fix the version in "
            "--transformers or .draftguard.yml",
        )
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith(("error", "×", "x "))] or lines[-1:]
    return MatrixError(
        INSTALL_FAILED,
        f"transformers {version} could not be installed: {errors[-1] if errors else 'the installer failed'}",
    )


def _timeout(name: str, default: float) -> float:
    text = os.environ.get(name)
    try:
        return float(text) if text else default
    except ValueError:
        raise BadInput(f"{name}={text!r} is not a number of seconds", key=name) from None


# --- resolving -------------------------------------------------------------------------------------


def run_resolver(python: str, configs: list[dict[str, Any]], *, timeout: float,
                 limits: bounded.Limits | None = None) -> list[dict[str, Any]]:
    """Run the resolver package under ``python`` with the script protocol; one result per config (a node or
    ``{"error": ...}``). Raises MatrixError when it crashes, hangs past ``timeout``, stops at a bound
    or answers junk.

    The process sets the check's bounds on itself before it reads a config (``limits``, else
    ``bounded.Limits.from_env()``): its address space, and CPU seconds for each config it resolves
    plus a minute for its imports; its answer is read under ``bounded.read_json``'s caps.

    Raises:
        MatrixError: The resolver crashed, ran past ``timeout`` or answered something else.

    Example::

        >>> [r] = run_resolver(sys.executable, [{"raw": {"model_type": "qwen3"}}], timeout=60)
        >>> r["__config__"]
        'Qwen3Config'
    """
    # The package is loaded under a private name by resolver.LOADER, not run from its folder: the
    # folder must not land on sys.path, where a module of ours could shadow one that transformers
    # imports. -I keeps out PYTHONPATH, user site-packages and the working directory likewise.
    limits = limits or bounded.Limits.from_env()
    cpu = math.ceil(limits.cpu * max(1, len(configs)) + RESOLVER_IMPORT_CPU)
    env = dict(os.environ, TRANSFORMERS_VERBOSITY="error", TRANSFORMERS_NO_ADVISORY_WARNINGS="1",
               DRAFTGUARD_LIMIT_MEMORY=str(limits.memory), DRAFTGUARD_LIMIT_CPU=str(cpu))
    proc = subprocess.Popen(
        [python, "-I", "-c", BOUNDED_LOADER, str(RESOLVER_PACKAGE)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # so a hung resolver's children die with it
    )
    try:
        out, err = proc.communicate(json.dumps({"configs": configs}), timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        proc.communicate()
        raise MatrixError(TIMED_OUT, f"the resolver did not answer within {timeout:g} s and was stopped") from None
    if proc.returncode == bounded.MEMORY_EXIT:
        raise MatrixError(CRASHED, f"the resolver {limits.words('memory')}")
    if proc.returncode == -signal.SIGXCPU:
        raise MatrixError(CRASHED, f"the resolver stopped after {cpu} s of CPU ({limits.cpu:g} s a config, "
                                   f"{bounded.CPU_ENV})")
    if proc.returncode != 0:
        raise MatrixError(CRASHED, f"the resolver crashed ({_exit_text(proc.returncode)}): {_last_line(err)}")
    try:
        results = bounded.read_json(out.encode(), limit=bounded.MAX_ANSWER * max(1, len(configs)))["results"]
        if not isinstance(results, list) or len(results) != len(configs):
            raise ValueError("wrong number of results")
    except (ValueError, KeyError, TypeError) as exc:
        raise MatrixError(CRASHED, f"the resolver's answer was unreadable ({exc}): {_last_line(err)}") from None
    return results


def resolve_here(configs: list[dict[str, Any]], limits: bounded.Limits | None = None) -> list[dict[str, Any]]:
    """Each config resolved under draftguard's own transformers (the audit's way: no resolver
    process per batch), in one bounded child (``bounded.run``: the check's limits, times the number
    of configs for CPU and wall). Raises MatrixError naming the bound that stopped it."""
    limits = limits or bounded.Limits.from_env()
    times = max(1, len(configs))
    try:
        return bounded.run(_resolve_all, configs, limits=bounded.Limits(limits.memory, limits.cpu * times,
                                                                         limits.wall * times))
    except bounded.Stopped as exc:
        raise MatrixError(CRASHED, f"the resolver {exc}") from None


def _resolve_all(configs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """In a bounded child: each config resolved, in the resolver script's answer shape (JSON values)."""
    out = []
    for config in configs:
        try:
            node = resolver.resolve(config["raw"], trust_remote_code=bool(config.get("trust_remote_code")),
                                    pretrained=config.get("pretrained"), revision=config.get("revision"))
        except resolver.ResolveError as exc:
            out.append({"error": exc.to_json()})
            continue
        out.append(json.loads(json.dumps(node, default=str)))
    return out


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        proc.kill()


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else "no message"
