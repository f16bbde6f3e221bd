"""The resolver in threads, as the bot's workers run it: what a config class logs and warns while it
builds is collected process-wide (the transformers logger, logging.Logger's methods, the warnings
filters, every logger's cache), so two builds at once heard each other's voice, and clearing the
logger cache while another thread imported a transformers module failed a bot job with
"dictionary changed size during iteration". ``class_voice`` now lets one block run at a time."""

from __future__ import annotations

import threading
from pathlib import Path

from draftguard.check.light import check_snapshot
from draftguard.check.resolver.tracing import class_voice
from draftguard.snapshot import load_snapshot

ROOT = Path(__file__).resolve().parent.parent


def test_a_second_thread_waits_while_a_class_speaks():
    inside, release, entered = threading.Event(), threading.Event(), []

    def first():
        with class_voice([]):
            inside.set()
            release.wait(5)
            entered.append("first out")

    def second():
        inside.wait(5)
        with class_voice([]):
            entered.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    inside.wait(5)
    threads[1].join(0.3)
    assert entered == [] and threads[1].is_alive()  # it waits for the first block to end
    release.set()
    for t in threads:
        t.join(5)
    assert entered == ["first out", "second in"]


def test_checks_in_threads_find_what_one_thread_finds():
    snap = load_snapshot(str(ROOT / "examples/qwen3-swa-drafter"))
    alone = sorted((f.rule, f.key) for f in check_snapshot(snap).findings)
    assert ("DG001", "sliding_window") in alone
    results, errors = [], []

    def work():
        try:
            for _ in range(5):
                results.append(sorted((f.rule, f.key) for f in check_snapshot(snap).findings))
        except Exception as exc:  # noqa: BLE001 - any failure in a thread is the finding here
            errors.append(repr(exc))

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == [] and len(results) == 15 and all(r == alone for r in results)
