"""How often the light tier says what vLLM itself says, config by config (docs/engines.md's figures).

Run in an environment with vLLM (the real tier's worker runs under this interpreter):

    PYTHONPATH=$PWD .venv-vllm/bin/python scripts/measure_engine_tiers.py [--out FILE] [FOLDER...]
    PYTHONPATH=$PWD .venv-vllm/bin/python scripts/measure_engine_tiers.py --drafters [--out FILE]

Per target config (default: every folder of tests/data/real-configs) it compares the light tier's view
with vLLM's own answer (``check.engines.vllm_probe``): whether vLLM serves it at all, then the served
max_model_len, dtype, head size, KV heads and per-layer windows (where the model builds on meta): a config agrees when vLLM serves it and every field
the light tier states equals vLLM's, or when both tiers refuse it. ("agree-but-silent-on-a-field" counts
the agreeing configs where the light tier states nothing for a field vLLM serves.) A
config vLLM cannot configure for a reason of this CPU machine (quantization kernels, remote code) is
counted apart ("not comparable"); one it refuses for a reason any machine shares (an architecture it
does not have) is a refusal both tiers should state.

In: config folders. Out: one JSON line per config (``--out``) and a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from draftguard.check.engines import parse_engines  # noqa: E402
from draftguard.check.engines.real import PYTHON_ENV, _Worker  # noqa: E402
from draftguard.check.run import check as check_targets  # noqa: E402

# vLLM's words when this machine, not the model, is the reason it cannot configure.
MACHINE = ("quantization", "Quantization", "remote code", "trust_remote_code", "CUDA", "cuda", "Triton",
           "not supported on CPU", "fp8", "FP8", "mxfp4", "nvfp4", "NVFP4", "compressed-tensors", "GPU",
           # offline here, with config.json alone: a deployment has the processor files
           "Can't load image processor")


def classify(error: str) -> str:
    return "machine" if any(word in error for word in MACHINE) else "refusal"


def compare(light, real) -> tuple[dict, dict]:
    """(claims, silent): the fields where the light tier states a value vLLM does not serve (light value,
    real value), and those where it states nothing and vLLM serves a value."""
    claims, silent = {}, {}
    for field in ("max_model_len", "dtype", "head_size", "num_kv_heads"):
        mine, theirs = getattr(light, field), real.get(field)
        if theirs is not None and mine != theirs:
            (silent if mine is None else claims)[field] = (mine, theirs)
    if real.get("windows") is not None:
        mine = [w for w in (light.windows or []) if w is not None]
        theirs = [w for w in real["windows"] if w is not None]
        if mine != theirs:
            claims["windows"] = (mine[:3], theirs[:3])
    return claims, silent


def _target_for(name: str, targets: Path) -> Path:
    """The corpus target a drafter folder names (qwen3-8b, llama3...), else Qwen3-8B."""
    squash = name.replace("-", "").replace(".", "")
    for target in sorted((p.name for p in targets.iterdir() if p.is_dir()), key=len, reverse=True):
        if target.replace("-", "").replace(".", "") in squash:
            return targets / target
    for marker, target in (("llama3", "llama-3.1-8b"), ("gpt-oss", "gpt-oss-20b"), ("qwen2.5", "qwen2.5-7b")):
        if marker in name:
            return targets / target
    return targets / "qwen3-8b"


def drafters(out) -> dict:
    """Per real DFlash/EAGLE-3 drafter (tests/data/real-drafters, with its target or Qwen3-8B): whether
    each vLLM runner serves it, light tier against vLLM itself (the check's own path, ``RealEngines``)."""
    from draftguard.check.engines.real import RealEngines

    corpus = ROOT / "tests/data/real-drafters"
    folders = sorted(p.parent for p in corpus.glob("*/config.json")) + sorted(p.parent for p in corpus.glob("broken/*/config.json"))
    vllm = parse_engines("vllm==0.32.0")
    os.environ[PYTHON_ENV] = sys.executable
    real = RealEngines.find(vllm)
    counts: dict[str, int] = {}
    try:
        for folder in folders:
            target = _target_for(folder.name, corpus / "targets")
            light = check_targets([str(folder)], drafter_target=str(target), engines=vllm)
            views = light.targets[0].engine_views if light.targets else []
            if not views or not any(v.runner for v in views):
                continue  # not a DFlash or EAGLE-3 drafter (Medusa, MTP): no drafter view
            served = check_targets([str(folder)], drafter_target=str(target), engines=vllm, real_engines=real)
            theirs = served.targets[0].engine_views
            if any(v.tier != "engine" for v in theirs):
                fell = getattr(real, "fallbacks", None)  # (absent before the real tier recorded them)
                row = {"drafter": folder.name, "outcome": "not-comparable",
                       "why": fell[-1][2][:200] if fell else "no engine view"}
            else:
                mine = {r: v for v in views for r in v.runner.split(" and ")}
                said = {r: v for v in theirs for r in v.runner.split(" and ")}
                differ = {r: ((mine[r].refusal or "")[:80], (v.refusal or "")[:80]) for r, v in said.items()
                          if r in mine and (mine[r].refusal is None) != (v.refusal is None)}
                row = {"drafter": folder.name, "target": target.name,
                       "outcome": "disagree" if differ else "agree", "diff": differ}
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
            if out:
                out.write(json.dumps(row) + "\n")
    finally:
        real.close()
    return counts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folders", nargs="*")
    parser.add_argument("--out")
    parser.add_argument("--drafters", action="store_true", help="the real drafters, per vLLM runner: served or refused")
    args = parser.parse_args()
    if args.drafters:
        with open(args.out or os.devnull, "w") as out:
            print(json.dumps(drafters(out)))
        return
    folders = [Path(f) for f in args.folders] or sorted(p.parent for p in (ROOT / "tests/data/real-configs").glob("*/config.json"))
    vllm = parse_engines("vllm==0.32.0")
    os.environ.pop(PYTHON_ENV, None)
    worker = _Worker(sys.executable)
    counts: dict[str, int] = {}
    out = open(args.out, "w") if args.out else None
    started = time.monotonic()
    try:
        for folder in folders:
            report = check_targets([str(folder)], engines=vllm)
            if report.errors or not report.targets or not report.targets[0].engine_views:
                row = {"config": folder.name, "outcome": "light-cannot-resolve"}
            elif report.targets[0].engine_views[0].runner:
                row = {"config": folder.name, "outcome": "drafter"}
            else:
                light = report.targets[0].engine_views[0]
                answer = worker.ask({"model": str(folder)})
                if isinstance(answer, dict):
                    kind = classify(answer["error"])
                    if kind == "machine":
                        row = {"config": folder.name, "outcome": "not-comparable", "error": answer["error"]}
                    else:
                        agree = light.refusal is not None
                        row = {"config": folder.name, "outcome": "agree" if agree else "disagree",
                               "real_refusal": answer["error"], "light_refusal": light.refusal}
                elif light.refusal is not None:
                    row = {"config": folder.name, "outcome": "disagree", "light_refusal": light.refusal}
                else:
                    claims, silent = compare(light, answer[0])
                    row = {"config": folder.name, "outcome": "disagree" if claims else "agree", "diff": claims,
                           "silent": silent}
                    if silent and not claims:
                        counts["agree-but-silent-on-a-field"] = counts.get("agree-but-silent-on-a-field", 0) + 1
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
            if out:
                out.write(json.dumps(row, default=str) + "\n")
                out.flush()
    finally:
        worker.close()
        if out:
            out.close()
    compared = counts.get("agree", 0) + counts.get("disagree", 0)
    print(json.dumps({"configs": len(folders), **counts, "compared": compared,
                      "seconds": round(time.monotonic() - started)}))


if __name__ == "__main__":
    main()
