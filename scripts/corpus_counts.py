"""The counts the README states about the real-drafter corpus, from the files on disk and a fresh
check of each (run: `python scripts/corpus_counts.py`; a minute on 2 cores).

In: tests/data/real-drafters (each folder with a SOURCE.md) and the lists in tests/test_dflash_corpus.py.
Out: on stdout, how many drafters are on disk, how many are checked against a real target, and the
errors and warnings each group gets; how many broken cases are caught by their rule.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from draftguard.check.light import check_targets  # noqa: E402
from tests.test_dflash_corpus import BROKEN, CORPUS, EXPECTED_WARNINGS, HEALTHY, TARGETS  # noqa: E402


def findings(drafter: Path, target: Path | None) -> Counter:
    report = check_targets([str(drafter)], drafter_target=str(target) if target else None)
    return Counter((f.severity.value, f.rule) for t in report.targets for f in t.findings) + Counter(
        ("input-error", e.message[:60]) for e in report.errors)


def main() -> None:
    on_disk = sorted(p.name for p in CORPUS.iterdir() if p.is_dir() and p.name not in ("broken", "targets"))
    with_target = [n for n in on_disk if HEALTHY.get(n, (None,))[0]]
    no_target = [n for n in on_disk if n in HEALTHY and not HEALTHY[n][0]]
    other = [n for n in on_disk if n not in HEALTHY]
    print(f"drafters on disk: {len(on_disk)}; in the healthy list: {len(HEALTHY)} "
          f"({len(with_target)} with a real target config, {len(no_target)} without: {', '.join(no_target)}); "
          f"not in it: {', '.join(other)}")
    errors, warned, states_all, clean_states_all = [], [], 0, 0
    for name in sorted(HEALTHY):
        target, _label, states_every_id = HEALTHY[name]
        found = findings(CORPUS / name, TARGETS / target if target else None)
        sev = {s for s, _ in found}
        if "error" in sev or "input-error" in sev:
            errors.append(name)
        warns = {r for s, r in found if s == "warning"}
        if warns:
            warned.append(f"{name} {sorted(warns)}")
        if states_every_id:
            states_all += 1
            clean_states_all += not warns
    print(f"healthy list: {len(HEALTHY) - len(errors)} of {len(HEALTHY)} give no error; "
          f"{states_all} state every layer id, {clean_states_all} of those give no warning")
    print("  warnings: " + "; ".join(warned))
    print(f"  expected warnings (test_dflash_corpus): {EXPECTED_WARNINGS}")
    caught = 0
    for name, (target, rule, _severity) in sorted(BROKEN.items()):
        found = findings(CORPUS / "broken" / name, CORPUS / target if target else None)
        caught += any(r == rule for _, r in found)
    print(f"broken cases: {caught} of {len(BROKEN)} caught by their rule")


if __name__ == "__main__":
    main()
