"""The light check over the real-config corpus: false-alarm rate, findings by severity, warm speed.

Run:  python bench/bench_real_configs.py [--corpus tests/data/real-configs] [--repeat 3] [--json]

Every folder of tests/data/real-configs holds the config.json of a published checkpoint, so the
corpus is assumed healthy: any error or warning on it counts as a false alarm. The script checks
each config in one process with the same in-process API the CLI uses (load_snapshot +
check_snapshot), then prints a markdown report:

- configs checked, model families (distinct model_type), configs transformers could not resolve
  (unknown or remote-code model types: reported, not counted as false alarms);
- the false-alarm rate: resolvable configs with at least one error or warning;
- findings per config by severity;
- warm configs per second: every config once outside the clock (imports each family's class),
  then the median of --repeat timed passes over the whole corpus; the baseline in the same run is
  transformers alone resolving the same resolvable configs (`config_class.from_dict(raw)`), and
  the ratio of the two rates shows draftguard's own cost on real configs;
- per config with an error or a warning, the offending rule ids.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "data" / "real-configs"


@dataclass
class ConfigOutcome:
    """What the light check said about one corpus folder."""

    name: str
    model_type: str | None
    input_error: str | None = None
    by_severity: Counter = field(default_factory=Counter)
    alarms: list[tuple[str, str, str, str]] = field(default_factory=list)  # (rule, severity, key, message)

    @property
    def false_alarm(self) -> bool:
        return bool(self.alarms)


def corpus_folders(corpus: Path) -> list[Path]:
    """Every corpus folder that holds a config.json, sorted by name."""
    return sorted(path.parent for path in corpus.glob("*/config.json"))


def check_one(folder: Path) -> ConfigOutcome:
    """Run the light check on one folder and sort its findings by severity."""
    from draftguard.check.light import check_snapshot
    from draftguard.snapshot import BadInput, load_snapshot

    raw = json.loads((folder / "config.json").read_text())
    model_type = raw.get("model_type") if isinstance(raw.get("model_type"), str) else None
    outcome = ConfigOutcome(folder.name, model_type)
    try:
        result = check_snapshot(load_snapshot(str(folder)))
    except BadInput as exc:
        outcome.input_error = str(exc).splitlines()[0]
        return outcome
    for finding in result.findings:
        severity = finding.severity.value if hasattr(finding.severity, "value") else str(finding.severity)
        outcome.by_severity[severity] += 1
        if severity in ("error", "warning"):
            outcome.alarms.append((finding.rule, severity, finding.key, " ".join(str(finding.message).split())))
    return outcome


def median_rate(one_pass, count: int, repeat: int) -> float:
    """Median items per second over `repeat` timed calls of one_pass, after one untimed call."""
    one_pass()
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        one_pass()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates)


def warm_rates(folders: list[Path], resolvable: list[Path], repeat: int) -> tuple[float, float]:
    """(draftguard configs/s over every folder, transformers-alone configs/s over the resolvable ones)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from draftguard.check.light import check_snapshot
    from draftguard.snapshot import BadInput, load_snapshot

    def ours() -> None:
        for folder in folders:
            try:
                check_snapshot(load_snapshot(str(folder)))
            except BadInput:
                pass

    # The baseline resolves what transformers has a class for: a config the check reads on its keys
    # (a drafter whose model_type transformers lacks, e.g. minimax_m3: DG126) has no from_dict to time.
    raws = [raw for raw in (json.loads((folder / "config.json").read_text()) for folder in resolvable)
            if raw.get("model_type") in CONFIG_MAPPING]

    def bare() -> None:
        for raw in raws:
            CONFIG_MAPPING[raw["model_type"]].from_dict(raw)

    # The classes' own warnings and log records are left alone: capturing them may be part of the check.
    return median_rate(ours, len(folders), repeat), median_rate(bare, len(raws), repeat)


def render_markdown(outcomes: list[ConfigOutcome], rates: tuple[float, float] | None, transformers_version: str) -> str:
    """The report as markdown: a summary table, then one row per config with an alarm."""
    resolvable = [o for o in outcomes if o.input_error is None]
    unresolvable = [o for o in outcomes if o.input_error is not None]
    alarmed = [o for o in resolvable if o.false_alarm]
    with_error = [o for o in resolvable if any(sev == "error" for _, sev, _, _ in o.alarms)]
    with_warning = [o for o in resolvable if any(sev == "warning" for _, sev, _, _ in o.alarms)]
    totals: Counter = Counter()
    for outcome in resolvable:
        totals.update(outcome.by_severity)
    per = max(len(resolvable), 1)
    families = {o.model_type for o in outcomes if o.model_type}
    lines = [
        f"## Light check on the real-config corpus (transformers {transformers_version})",
        "",
        "| measure | value |",
        "|---|---|",
        f"| configs | {len(outcomes)} |",
        f"| families (distinct model_type) | {len(families)} |",
        f"| resolvable by transformers | {len(resolvable)} |",
        f"| not resolvable (unknown or remote-code model_type) | {len(unresolvable)} |",
        f"| false-alarm rate (error or warning) | {len(alarmed)}/{len(resolvable)} = "
        f"{100 * len(alarmed) / per:.1f}% |",
        f"| configs with a false error | {len(with_error)} |",
        f"| configs with a false warning | {len(with_warning)} |",
        f"| errors per config | {totals['error'] / per:.3f} |",
        f"| warnings per config | {totals['warning'] / per:.3f} |",
        f"| info per config | {totals['info'] / per:.3f} |",
    ]
    if rates is not None:
        ours, bare = rates
        lines.append(f"| warm configs/s, draftguard light check (one process) | {ours:,.0f} |")
        lines.append(f"| warm configs/s, transformers from_dict alone (same run) | {bare:,.0f} |")
        lines.append(f"| ratio of rates (draftguard / transformers) | {ours / bare:.2f} |")
    if alarmed:
        lines += ["", "### Configs with an error or a warning", "", "| config | model_type | rules |", "|---|---|---|"]
        for outcome in alarmed:
            rules = ", ".join(f"{rule} ({sev}) `{key}`" for rule, sev, key, _ in outcome.alarms)
            lines.append(f"| {outcome.name} | {outcome.model_type} | {rules} |")
    if unresolvable:
        lines += ["", "### Not resolvable", "", "| config | model_type | message |", "|---|---|---|"]
        for outcome in unresolvable:
            lines.append(f"| {outcome.name} | {outcome.model_type} | {outcome.input_error[:160]} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="folder of <name>/config.json (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=3, help="timed passes for the warm rate (0 skips timing)")
    parser.add_argument("--json", action="store_true", help="print every alarm as JSON lines instead of markdown")
    args = parser.parse_args(argv)

    from draftguard.check.resolver import hide_torch, transformers_version

    hide_torch()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    folders = corpus_folders(args.corpus)
    if not folders:
        print(f"{args.corpus}: no <name>/config.json folders", file=sys.stderr)
        return 2
    outcomes = [check_one(folder) for folder in folders]
    resolvable = [folder for folder, outcome in zip(folders, outcomes) if outcome.input_error is None]
    rates = warm_rates(folders, resolvable, args.repeat) if args.repeat > 0 else None
    if args.json:
        for outcome in outcomes:
            for rule, severity, key, message in outcome.alarms:
                print(json.dumps({"config": outcome.name, "model_type": outcome.model_type, "rule": rule,
                                  "severity": severity, "key": key, "message": message}))
            if outcome.input_error:
                print(json.dumps({"config": outcome.name, "model_type": outcome.model_type,
                                  "input_error": outcome.input_error}))
    else:
        print(render_markdown(outcomes, rates, transformers_version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
