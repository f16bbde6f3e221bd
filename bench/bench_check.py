"""Benchmark of the light check: cold start against bare transformers, and warm throughput.

Run:  python bench/bench_check.py [--runs 9] [--python PYTHON] [--skip-cold] [--skip-warm]

Cold: the median wall time of `draftguard check DIR` against
`python -c "import transformers; transformers.AutoConfig.from_pretrained(DIR)"` in the same
environment, measured in turn (A, B, A, B...) so that machine noise hits both alike. The target is a
ratio of at most 1.15. Peak memory (max RSS) of each is reported too.

Warm: one process checks many different configs read from disk; the target is at least 1,000 configs
per second. The baseline in the same run is transformers alone resolving the same configs
(`config_class.from_dict(raw)`), so the ratio shows draftguard's own overhead. The same configs are
also checked without tracing (``check_snapshot(trace=False)``), config by config in turn with the
full check, in CPU seconds of this process: the cost of tracing changed values, whose target is at
most 20%. The real-config corpus
(tests/data/real-configs) is measured the same way, and its first pass (every file shape new) too.

Corpus against AutoConfig: one `draftguard check DIR DIR ...` over every corpus folder that
transformers resolves, against one process that runs `AutoConfig.from_pretrained(DIR)` over the same
folders, in turn (A, B, A, B...), CPU seconds of each process (the steadier figure on a shared
machine), median of --corpus-runs. Both pay interpreter start and imports once; the ratio is what
a user pays for the whole check of many real repos. Target: at most 1.6 (issue 23).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import timed  # bench/timing.py: sys.path[0] is this folder when run as a script

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "qwen3-swa-drafter"


def peak_rss(cmd: list[str]) -> int:
    """Max RSS in MB of one command, measured in a fresh wrapper so earlier children do not count."""
    probe = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], capture_output=True); "
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)"
    )
    out = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True)
    return int(out.stdout.strip() or 0)


def cold(python: str, runs: int, target: Path) -> dict:
    draftguard = [python, "-c", "from draftguard.cli import entry; import sys; sys.argv[0]='draftguard'; entry()",
                  "check", str(target)]
    script = Path(python).with_name("draftguard")
    if script.exists():
        draftguard = [str(script), "check", str(target)]
    bare = [python, "-c", f"import transformers; transformers.AutoConfig.from_pretrained({str(target)!r})"]
    torch_installed = subprocess.run(
        [python, "-c", "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('torch') else 1)"]
    ).returncode == 0
    # The base install's baseline where torch is installed: the same bare command with torch hidden
    # from transformers' probe, as draftguard's check hides it (resolver.hide_torch).
    from draftguard.check.resolver.classes import _HIDDEN_PACKAGES

    hidden = [python, "-c", f"import sys\nfor name in {list(_HIDDEN_PACKAGES)!r}: sys.modules.setdefault(name, None)\n"
              f"import transformers; transformers.AutoConfig.from_pretrained({str(target)!r})"]
    timed(draftguard), timed(bare), timed(hidden)  # warm the page cache for each
    ours, theirs, theirs_hidden = [], [], []
    ours_cpu, hidden_cpu = [], []
    for _ in range(runs):
        wall, cpu = timed(draftguard)
        ours.append(wall), ours_cpu.append(cpu)
        theirs.append(timed(bare)[0])
        wall, cpu = timed(hidden)
        theirs_hidden.append(wall), hidden_cpu.append(cpu)
    result = {
        "bare_torch_hidden_median_s": round(statistics.median(theirs_hidden), 3),
        "ratio_torch_hidden": round(statistics.median(ours) / statistics.median(theirs_hidden), 3),
        "ratio_torch_hidden_cpu": round(statistics.median(ours_cpu) / statistics.median(hidden_cpu), 3),
        "torch_installed": torch_installed,
        "runs": runs,
        "draftguard_check_median_s": round(statistics.median(ours), 3),
        "bare_transformers_median_s": round(statistics.median(theirs), 3),
        "ratio": round(statistics.median(ours) / statistics.median(theirs), 3),
        "draftguard_max_rss_mb": peak_rss(draftguard),
        "bare_max_rss_mb": peak_rss(bare),
    }
    return result


def make_configs(folder: Path, count: int) -> list[Path]:
    """Different configs of several families, so no cache of one answer can help."""
    families = [
        lambda i: {"model_type": "qwen3", "hidden_size": 64 * (1 + i % 8), "num_attention_heads": 1 + i % 4,
                   "num_hidden_layers": 2 + i % 6, "sliding_window": 256 + i, "vocab_size": 1000 + i,
                   "layer_types": ["sliding_attention", "full_attention"] * ((2 + i % 6) // 2)
                   + (["full_attention"] if (2 + i % 6) % 2 else []), "rope_theta": 10000.0 + i,
                   "torch_dtype": "bfloat16"},
        lambda i: {"model_type": "llama", "hidden_size": 128 + 4 * i, "num_attention_heads": 2,
                   "num_hidden_layers": 4, "rope_theta": 500000.0, "vocab_size": 32000 + i,
                   "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}},
        lambda i: {"model_type": "qwen2", "hidden_size": 64, "num_attention_heads": 2, "num_hidden_layers": 4,
                   "use_sliding_window": False, "sliding_window": 4096 + i, "max_window_layers": 28},
        lambda i: {"model_type": "gpt2", "n_embd": 64 + i, "n_head": 2, "n_layer": 3, "vocab_size": 500 + i},
        lambda i: {"model_type": "mistral", "hidden_size": 256, "num_attention_heads": 8,
                   "num_hidden_layers": 4, "sliding_window": 1024 + i},
    ]
    paths = []
    for i in range(count):
        path = folder / f"c{i}" / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(families[i % len(families)](i), indent=2))
        paths.append(path)
    return paths


def warm(count: int) -> dict:
    from draftguard.check.resolver import hide_torch

    hide_torch()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from draftguard.check.light import check_snapshot
    from draftguard.snapshot import load_snapshot

    with tempfile.TemporaryDirectory() as tmp:
        paths = make_configs(Path(tmp), count)
        for path in paths[:20]:  # import each family's class once, outside the clock
            check_snapshot(load_snapshot(str(path)))
            check_snapshot(load_snapshot(str(path)), trace=False)
        # The same configs without tracing (the evidence about changed values), timed in turn with
        # the full check so that machine noise hits both alike: the cost of tracing on the warm path.
        # CPU time of this process: the shared build machine runs other jobs, which stretch wall time
        # at random and would decide a 20% question by noise.
        ours = untraced = 0.0
        findings = 0
        for path in paths:
            start = time.process_time()
            check_snapshot(load_snapshot(str(path)), trace=False)
            middle = time.process_time()
            findings += len(check_snapshot(load_snapshot(str(path))).findings)
            untraced += middle - start
            ours += time.process_time() - middle
        start = time.perf_counter()
        for path in paths:
            raw = json.loads(path.read_text())
            CONFIG_MAPPING[raw["model_type"]].from_dict(raw)
        bare = time.perf_counter() - start
    return {
        "configs": count,
        "findings": findings,
        "draftguard_configs_per_s": round(count / ours),
        "draftguard_without_tracing_configs_per_s": round(count / untraced),
        "tracing_cost": round(ours / untraced - 1, 3),
        "bare_from_dict_configs_per_s": round(count / bare),
        "ratio_of_rates": round((count / ours) / (count / bare), 2),
    }


def warm_corpus(corpus: Path, repeat: int) -> dict:
    """Tracing's cost on the real-config corpus: every config checked with and without tracing, in
    turn, after one untimed pass (a bot's warm process has seen each family before)."""
    from draftguard.check.resolver import hide_torch

    hide_torch()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from draftguard.check.light import check_snapshot
    from draftguard.snapshot import BadInput, load_snapshot

    folders = sorted(path.parent for path in corpus.glob("*/config.json"))
    resolvable = []
    for folder in folders:
        try:
            check_snapshot(load_snapshot(str(folder)), trace=False)
        except BadInput:
            continue
        resolvable.append(folder)
    first = time.process_time()
    for folder in resolvable:  # first sight of each file shape: tracing runs in full
        check_snapshot(load_snapshot(str(folder)))
    first = time.process_time() - first
    traced = untraced = 0.0
    for _ in range(repeat):  # CPU time, as in warm()
        for folder in resolvable:
            start = time.process_time()
            check_snapshot(load_snapshot(str(folder)), trace=False)
            middle = time.process_time()
            check_snapshot(load_snapshot(str(folder)))
            untraced += middle - start
            traced += time.process_time() - middle
    count = len(resolvable) * repeat
    return {
        "configs": len(resolvable),
        "first_pass_configs_per_s": round(len(resolvable) / first),
        "draftguard_configs_per_s": round(count / traced),
        "draftguard_without_tracing_configs_per_s": round(count / untraced),
        "tracing_cost": round(traced / untraced - 1, 3),
    }


def corpus_against_autoconfig(python: str, corpus: Path, runs: int) -> dict:
    """One `draftguard check` over the corpus against a bare AutoConfig loop over the same folders.

    draftguard's check never imports torch (resolver.hide_torch); where torch is installed, the
    baseline hides it the same way, so both measure what a base install pays."""
    from draftguard.check.resolver.classes import _HIDDEN_PACKAGES

    prelude = f"import sys\nfor name in {list(_HIDDEN_PACKAGES)!r}: sys.modules.setdefault(name, None)\n"
    prelude += "import json, transformers\ntransformers.logging.set_verbosity_error()\n"
    listing = subprocess.run(  # noqa: PLW1510 (the return code is read below)
        [python, "-c", prelude + "ok = []\n"
         "for d in json.loads(sys.argv[1]):\n"
         "    try:\n"
         "        transformers.AutoConfig.from_pretrained(d, trust_remote_code=False)\n"
         "        ok.append(d)\n"
         "    except Exception:\n"
         "        pass\n"
         "print('FOLDERS' + json.dumps(ok))",
         json.dumps(sorted(str(path.parent) for path in corpus.glob("*/config.json")))],
        capture_output=True, text=True, stdin=subprocess.DEVNULL, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if listing.returncode != 0 or "FOLDERS" not in listing.stdout:
        sys.exit(f"listing the corpus failed: {listing.stderr[-2000:]}")
    folders = json.loads(listing.stdout.rsplit("FOLDERS", 1)[1])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(folders, handle)
    draftguard = [python, "-c", "from draftguard.cli import entry; import sys; sys.argv[0]='draftguard'; entry()",
                  "check", "--format", "json", "--fail-on", "never", *folders]
    script = Path(python).with_name("draftguard")
    if script.exists():
        draftguard = [str(script), "check", "--format", "json", "--fail-on", "never", *folders]
    bare = [python, "-c", prelude + "for d in json.load(open(sys.argv[1])): transformers.AutoConfig.from_pretrained(d)",
            handle.name]
    timed(draftguard), timed(bare)  # warm the page cache for both
    ours, theirs = [], []
    for _ in range(runs):
        ours.append(timed(draftguard)[1])
        theirs.append(timed(bare)[1])
    os.unlink(handle.name)
    return {
        "configs": len(folders),
        "runs": runs,
        "draftguard_check_cpu_s": round(statistics.median(ours), 3),
        "bare_autoconfig_loop_cpu_s": round(statistics.median(theirs), 3),
        "ratio": round(statistics.median(ours) / statistics.median(theirs), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--python", default=sys.executable, help="interpreter of the environment to measure")
    parser.add_argument("--warm-configs", type=int, default=2000)
    parser.add_argument("--skip-warm", action="store_true")
    parser.add_argument("--skip-cold", action="store_true")
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "real-configs",
                        help="real configs for the tracing cost on published files (default: %(default)s)")
    parser.add_argument("--corpus-repeat", type=int, default=3)
    parser.add_argument("--corpus-runs", type=int, default=5, help="runs of the corpus against AutoConfig")
    parser.add_argument("--skip-corpus-cli", action="store_true", help="skip the corpus against AutoConfig")
    args = parser.parse_args()
    results = {} if args.skip_cold else {"cold": cold(args.python, args.runs, EXAMPLE)}
    if not args.skip_corpus_cli and args.corpus.is_dir():
        results["corpus_cli"] = corpus_against_autoconfig(args.python, args.corpus, args.corpus_runs)
    if not args.skip_warm:
        results["warm"] = warm(args.warm_configs)
        if args.corpus.is_dir():
            results["warm_corpus"] = warm_corpus(args.corpus, args.corpus_repeat)
    print(json.dumps(results, indent=2))
    if "cold" in results:
        c = results["cold"]
        print(f"cold: draftguard check {c['draftguard_check_median_s']} s vs bare transformers "
              f"{c['bare_transformers_median_s']} s -> ratio {c['ratio']} (target <= 1.15; torch installed: "
              f"{c['torch_installed']}); against bare transformers with torch hidden (a base install) "
              f"{c['bare_torch_hidden_median_s']} s -> ratio {c['ratio_torch_hidden']} (CPU: "
              f"{c['ratio_torch_hidden_cpu']})", file=sys.stderr)
    if "corpus_cli" in results:
        c = results["corpus_cli"]
        print(f"real corpus, one process ({c['configs']} configs): draftguard check {c['draftguard_check_cpu_s']} "
              f"CPU s vs a bare AutoConfig loop {c['bare_autoconfig_loop_cpu_s']} CPU s -> ratio {c['ratio']} "
              "(target <= 1.6)", file=sys.stderr)
    if "warm_corpus" in results:
        w = results["warm_corpus"]
        print(f"warm, real corpus ({w['configs']} configs): {w['draftguard_configs_per_s']} configs/s, without "
              f"tracing {w['draftguard_without_tracing_configs_per_s']}/s (tracing costs "
              f"{100 * w['tracing_cost']:.0f}%); first sight of each file {w['first_pass_configs_per_s']}/s",
              file=sys.stderr)
    if "warm" in results:
        w = results["warm"]
        print(f"warm: {w['draftguard_configs_per_s']} configs/s (target >= 1000); without tracing "
              f"{w['draftguard_without_tracing_configs_per_s']}/s (tracing costs {100 * w['tracing_cost']:.0f}%, "
              f"target <= 20%); transformers alone {w['bare_from_dict_configs_per_s']}/s", file=sys.stderr)


if __name__ == "__main__":
    main()
