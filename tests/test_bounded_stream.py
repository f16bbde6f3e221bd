"""Calls streamed to one bounded child (``bounded.Child.stream``, issue 42): the caller sends calls
ahead of their answers and reads the next files meanwhile, so the two processes no longer take
turns. What that may not cost: no deadlock when both directions of the pipe are full, a child that
dies with calls sent ahead costs only the call it was running, a child's ``call`` to the caller
still gets its reply, and a caller that stops reading leaves no child behind with calls in flight.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

from draftguard import bounded

BLOB = 512 * 1024  # each call's argument and answer: 40 of them fill the pipe both ways many times


def _big(blob: bytes, what: str) -> dict:
    """A large answer to a large argument; "die" kills the child mid-stream."""
    if what == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    return {"pid": os.getpid(), "size": len(blob), "echo": what * (BLOB // len(what))}


def _full_pipes_case() -> str:
    child = bounded.Child(bounded.Limits(memory=4 * 10**9))
    whats = [f"c{i:02d}" for i in range(40)]
    whats[13] = "die"
    calls = [(b"x" * BLOB, what) for what in whats]
    answers = child.run_each(_big, calls, handlers=[{}] * len(calls), where=[{"file": w} for w in whats])
    child.close()
    dead = answers[13]
    if not (isinstance(dead, bounded.Stopped) and dead.bound == "crash" and dead.file == "die"):
        return f"the dying call got {dead!r}"
    rest = answers[:13] + answers[14:]
    if [a["echo"][:3] for a in rest] != [w for w in whats if w != "die"] or {a["size"] for a in rest} != {BLOB}:
        return "a call's answer is missing or wrong"
    before, after = {a["pid"] for a in answers[:13]}, {a["pid"] for a in answers[14:]}
    if len(before) != 1 or len(after) != 1 or before == after:
        return f"children: {before} before the death, {after} after"
    return "ok"


def _in_a_fresh_process(case, out) -> None:
    try:
        out.put(case())
    except BaseException as exc:  # the test reads it
        out.put(repr(exc))


def test_full_pipes_both_ways_and_a_child_that_dies_mid_stream_cost_only_that_call():
    """40 calls of 512 KB each way (the pipe holds far less): the caller writes only what the pipe
    takes and reads answers in between, so neither side waits on the other for good (a caller that
    sent ahead with blocking writes hung here). The 14th call kills its child while the calls after
    it are already sent: it gets its Stopped, the others their answers, those after it from a
    fresh child. Runs in a fresh process of one thread, whose deadlock would show as a timeout."""
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    caller = ctx.Process(target=_in_a_fresh_process, args=(_full_pipes_case, out))
    caller.start()
    try:
        assert out.get(timeout=240) == "ok"
    finally:
        caller.kill()
        caller.join(30)


def _asks(number: int) -> list:
    return [os.getpid(), bounded.call("double", number)]


def test_a_call_to_the_caller_gets_its_reply_while_later_calls_are_sent_ahead():
    """Each of 30 calls asks the caller (``bounded.call``) while the calls after it are already in
    the child's pipe: the reply reaches the call that asked, and the calls sent ahead run after it."""
    with bounded.Child(bounded.Limits()) as child:
        numbers = list(range(30))
        answers = child.run_each(_asks, [(n,) for n in numbers],
                                 handlers=[{"double": lambda x, n=n: 2 * x + 0 * n} for n in numbers],
                                 where=[{}] * len(numbers))
    assert [a[1] for a in answers] == [2 * n for n in numbers]
    assert len({a[0] for a in answers}) == 1  # one child answered them all


def _nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_the_next_calls_are_read_while_the_child_runs_and_a_caller_that_stops_reading_ends_the_child():
    """The calls are taken from a lazy source while the child runs the first (the caller reads its
    next files then). A caller that stops after the first answer, with calls still sent ahead,
    ends the child: the next stream starts a fresh one and is answered in full."""
    pulled = []

    def source():
        for index in range(20):
            pulled.append(index)
            yield (0.3 if index == 0 else 0.0,), {}, {"file": f"f{index}"}

    child = bounded.Child(bounded.Limits())
    stream = child.stream(_nap, source())
    first = next(stream)
    assert len(pulled) > 1  # read ahead while the first call ran
    stream.close()
    assert child.proc is None  # calls were in flight: the child was ended, not left half-way
    again = child.run_each(_nap, [(0.0,)] * 3, handlers=[{}] * 3, where=[{}] * 3)
    assert len(set(again)) == 1 and again[0] != first
    child.close()


_KEPT: list = []


def _hold(nbytes: int) -> int:
    """Keep ``nbytes`` in the child after the call (what a file could leave behind), and say who ran it."""
    _KEPT.append(bytearray(nbytes))
    return os.getpid()


def test_a_warm_child_that_grew_is_replaced_before_the_next_check_and_one_that_did_not_is_kept():
    """A thread's warm child is kept between checks (its imports stay warm) for up to RECYCLE calls,
    but not once what it keeps has grown by a quarter of its headroom under the memory bound: memory
    one file left behind would otherwise count against a later file's bound, unnoticed."""
    limits = bounded.Limits(memory=3 * 10**9)
    first = bounded.Child.of_thread(limits)
    try:
        pid = first.run(_hold, 1)  # its first check
        assert bounded.Child.of_thread(limits) is first  # settles its size: the baseline
        assert first.run(_hold, 10 * 2**20) == pid  # 10 MB more: kept
        again = bounded.Child.of_thread(limits)
        assert again is first and again.run(_hold, 1) == pid
        assert again.run(_hold, 2**30) == pid  # 1 GB more (over a quarter of the headroom): replaced
        fresh = bounded.Child.of_thread(limits)
        assert fresh is not first and fresh.run(_hold, 1) != pid
    finally:
        bounded.Child.of_thread(limits).close()
