"""Benchmark `draftguard accept` on the tiny fixtures (CPU).

    python bench/bench_accept.py [--repeats 5] [--device cpu|cuda]

Reports, each measured against a baseline in the same run (runs interleaved, medians):

1. Fixture run wall time per pair: the full ``draftguard accept`` command in a fresh process (imports,
   model loading, 24 prompts x 32 new tokens, early stop on), healthy pair and each seeded fault;
   the baseline is ``draftguard --version`` in a fresh process (interpreter start-up), so the ratio
   says what the test itself adds.
2. Reference overhead per verification step: one speculative step (drafter block forward + target
   verify forward over the block + bookkeeping) against one plain target decode forward (one token
   with a KV cache), and the drafter forward alone against it. Then end-to-end tokens/s of
   speculative decoding against plain greedy decoding of the same prompts (the speed-up, which on the
   fixtures' tiny models is bound by per-call overhead, not arithmetic).
3. Both config views against one view (``--config-view both`` against ``--config-view resolved``), same
   prompts, no early stop: in process (the generation alone, one target load each) and as a fresh
   ``draftguard accept`` process (imports, loading, light check, both views, the diagnosis). The goal is
   at most 1.6x one view; two separate one-view runs are shown beside it as what sharing saves.

    python bench/bench_accept.py --views-only [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "tests" / "fixtures" / "models"
PAIRS = ["drafter", "drafter-window-lost", "drafter-layers-off", "drafter-wrong-mask"]


def timed(cmd: list[str]) -> tuple[float, int, str, float]:
    """Wall seconds, exit code, stdout and CPU seconds (user + sys) of a child process. On a shared,
    busy machine wall time includes waiting for a core; CPU time does not."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, done.returncode, done.stdout, cpu


def bench_runs(repeats: int, device: str) -> None:
    py = sys.executable
    base_cmd = [py, "-m", "draftguard", "--version"]
    rows: dict[str, list[float]] = {"startup": []}
    taus: dict[str, float] = {}
    codes: dict[str, int] = {}
    for _ in range(repeats):
        rows["startup"].append(timed(base_cmd)[0])
        for pair in PAIRS:
            cmd = [py, "-m", "draftguard", "accept", "--target", str(MODELS / "target"), "--drafter",
                   str(MODELS / pair), "--prompts", str(MODELS / "prompts.jsonl"), "--max-new-tokens", "32",
                   "--min-acceptance-length", "3", "--format", "json", "--quiet", "--device", device]
            wall, code, out, cpu = timed(cmd)
            rows.setdefault(pair, []).append(wall)
            rows.setdefault(pair + " (cpu)", []).append(cpu)
            result = json.loads(out)
            taus[pair], codes[pair] = result["mean_acceptance_length"], code
            rows.setdefault(pair + " (prompts only)", []).append(result["wall_seconds"])
    start = statistics.median(rows["startup"])
    print(f"\n1. fixture run, fresh process, median of {repeats} (24 prompts x 32 tokens, early stop)")
    print(f"   baseline `draftguard --version`: {start:.2f} s")
    for pair in PAIRS:
        wall = statistics.median(rows[pair])
        prompts = statistics.median(rows[pair + " (prompts only)"])
        cpu = statistics.median(rows[pair + " (cpu)"])
        print(f"   {pair:<22} τ {taus[pair]:.2f} exit {codes[pair]}  wall {wall:5.2f} s "
              f"({wall / start:4.1f}x start-up)  cpu {cpu:5.2f} s  prompts {prompts:.2f} s")


def bench_step(repeats: int, device: str) -> None:
    import torch

    from draftguard.runner import reference as ref

    torch.set_num_threads(1)
    target, _ = ref.load_target(str(MODELS / "target"), device)
    drafter = ref.load_drafter(str(MODELS / "drafter"), target, device=device)
    prompts = [json.loads(line)["input_ids"] for line in (MODELS / "prompts.jsonl").read_text().splitlines()]
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    step_times: list[float] = []
    spec_wall, plain_wall, spec_tokens, plain_tokens = [], [], 0, 0
    for _ in range(repeats):
        # interleaved: speculative then plain on the same prompts, each round
        t0 = time.perf_counter()
        for p in prompts:
            toks, _ = ref.speculative_generate(target, drafter, p, 32, on_step=step_times.append)
            spec_tokens += len(toks)
        sync()
        spec_wall.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for p in prompts:
            plain_tokens += len(ref.greedy_generate(target, p, 32))
        sync()
        plain_wall.append(time.perf_counter() - t0)

    # One plain decode forward (one token, KV cache of a typical context) and one drafter block forward.
    kv = ref._cache_arg(target)
    with torch.inference_mode():
        cache = ref._new_cache(target)
        ctx = torch.tensor([prompts[0] + list(range(30))], device=device)
        target(ctx, **{kv: cache}, use_cache=True)
        one = torch.tensor([[5]], device=device)
        fwd = []
        for _ in range(200 * repeats):
            t0 = time.perf_counter()
            target(one, **{kv: cache}, use_cache=True)
            sync()
            fwd.append(time.perf_counter() - t0)
            ref._crop(cache, ctx.shape[1])
        feats = torch.zeros(1, ctx.shape[1], 2 * 64, device=device)
        dcache = drafter.new_cache()
        block = target.get_input_embeddings()(torch.tensor([[5, 47, 47, 47]], device=device))
        drafter(feats, block, dcache)
        empty = feats[:, :0]
        dft = []
        for _ in range(200 * repeats):
            t0 = time.perf_counter()
            drafter(empty, block, dcache)
            sync()
            dft.append(time.perf_counter() - t0)
    f, s, d = statistics.median(fwd), statistics.median(step_times), statistics.median(dft)
    print("\n2. reference backend overhead per verification step (healthy pair, block 4, medians)")
    print(f"   plain target decode forward (1 token, KV cache): {f * 1e3:.2f} ms  (baseline)")
    print(f"   drafter block forward:                           {d * 1e3:.2f} ms  ({d / f:.2f}x)")
    print(f"   whole speculative step (draft + verify + crop):  {s * 1e3:.2f} ms  ({s / f:.2f}x)")
    sw, pw = statistics.median(spec_wall), statistics.median(plain_wall)
    st, pt = spec_tokens / repeats, plain_tokens / repeats
    print(f"   end to end, 24 prompts x 32 tokens: speculative {st / sw:.0f} tok/s, plain greedy {pt / pw:.0f} tok/s "
          f"-> {(st / sw) / (pt / pw):.2f}x")


VIEW_PAIRS = ["drafter-window-lost", "drafter-wrong-mask", "drafter"]


def bench_views(repeats: int, device: str) -> None:
    import torch

    from draftguard.runner.reference import ReferenceBackend

    torch.set_num_threads(1)
    prompts = [json.loads(line)["input_ids"] for line in (MODELS / "prompts.jsonl").read_text().splitlines()]
    print("\n3. both config views against one (24 prompts x 32 tokens, no early stop, medians)")
    for pair in VIEW_PAIRS:
        one = ReferenceBackend(str(MODELS / "target"), str(MODELS / pair), device=device, views=("resolved",))
        both = ReferenceBackend(str(MODELS / "target"), str(MODELS / pair), device=device, views=("resolved", "raw"))
        raw = ReferenceBackend(str(MODELS / "target"), str(MODELS / pair), device=device, views=("raw",))
        t_one, t_both, t_raw = [], [], []
        for _ in range(repeats):  # interleaved, so load on the machine hits all three alike
            for backend, times in ((one, t_one), (both, t_both), (raw, t_raw)):
                t0 = time.process_time()
                for i, p in enumerate(prompts):
                    backend.run_prompt_views(i, p, 32)
                times.append(time.process_time() - t0)
        a, b, r = statistics.median(t_one), statistics.median(t_both), statistics.median(t_raw)
        print(f"   {pair:<20} in process (CPU s): one view {a:.2f}, both {b:.2f} ({b / a:.2f}x), "
              f"two separate views {a + r:.2f} ({(a + r) / a:.2f}x)")
    py = sys.executable
    for pair in VIEW_PAIRS:
        base = [py, "-m", "draftguard", "accept", "--target", str(MODELS / "target"), "--drafter", str(MODELS / pair),
                "--prompts", str(MODELS / "prompts.jsonl"), "--max-new-tokens", "32", "--format", "json", "--quiet",
                "--device", device, "--no-early-stop"]
        rows: dict[str, list[float]] = {"resolved": [], "both": [], "raw": []}
        cause = None
        for _ in range(repeats):
            for view in rows:
                _, code, out, cpu = timed(base + ["--config-view", view])
                rows[view].append(cpu)
                if view == "both":
                    cause = (json.loads(out).get("diagnosis") or {}).get("cause")
        a, b, r = (statistics.median(rows[k]) for k in ("resolved", "both", "raw"))
        print(f"   {pair:<20} fresh process (CPU s): one view {a:.2f}, both {b:.2f} ({b / a:.2f}x), "
              f"two separate runs {a + r:.2f} ({(a + r) / a:.2f}x); cause: {cause}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--skip-runs", action="store_true", help="only the per-step overhead")
    ap.add_argument("--views-only", action="store_true", help="only both config views against one")
    args = ap.parse_args()
    import os
    import platform

    print(f"bench_accept: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}, device {args.device}")
    if args.views_only:
        bench_views(args.repeats, args.device)
        return
    if not args.skip_runs:
        bench_runs(args.repeats, args.device)
    bench_step(args.repeats, args.device)
    bench_views(args.repeats, args.device)


if __name__ == "__main__":
    main()
