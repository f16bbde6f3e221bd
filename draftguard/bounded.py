"""One bound, enforced by the operating system: run a function on untrusted input in a child process
with hard limits on its address space (``RLIMIT_AS``), its CPU seconds (``RLIMIT_CPU``) and its wall
time, and get back its answer as size-capped, depth-capped JSON, or ``Stopped`` naming the bound.

Every check of untrusted files runs here (``check.isolated``: the light check with its tracing builds,
the drafter rules, the engine tiers, and so ``fix``'s proofs and the bots' checks; the matrix's
resolver processes set the same limits on themselves), so a file that makes a config class build
slow or huge costs one child, never the caller: the caller and the other files go on.

In a process with threads (the bot calls from several worker threads at once) the children fork
from a ``forkserver`` that imported transformers once (``PRELOAD``), so a child costs a fork, not a
cold import, and never inherits a lock another thread held. A process of one thread (the CLI, the
Action) forks the child from itself: nothing to inherit, and nothing imported twice. A child can
ask the caller for what only the caller holds (a bot's target lookup, the vLLM worker) with
``call``; the caller answers with ``handlers``.

The limits (``Limits.from_env``): ``DRAFTGUARD_CHECK_MEMORY`` (address space, "2GB" by default),
``DRAFTGUARD_CHECK_CPU_SECONDS`` (30 by default) and a wall time of twice ``DRAFTGUARD_CHECK_SECONDS``
plus 5 s (45 s by default; that variable is the cooperative budget, 20 s by default: it stops a slow
check first and says why; the wall time stops what it cannot interrupt). The time the caller
spends answering a ``call`` is not the child's.

In: a module-level function and its (picklable) arguments, ``Limits``, optional handlers.
Out: ``start()`` (the forkserver, early); ``run(...)`` -> the function's JSON answer (a child of
its own; ``Encoded``: an answer the function wrote as JSON itself); ``Child`` (one child that runs
many calls in turn, started afresh after a call that stopped it; ``Child.stream``: many calls sent
ahead of their answers, each answered when it is ready, each under its own bounds; ``run_each``,
the same as a list; ``Child.of_thread``: each thread's, kept warm between checks); ``Stopped`` (a
``BadInput``) when a bound stopped it; ``BadInput`` re-raised with its fields when the function
raised one; ``call`` (in a child); ``forking.limit_memory`` (a process that limits its own memory);
``read_json`` (the caps, from ``draftguard.capped``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import math
import multiprocessing
import os
import re
import select
import signal
import socket
import struct
import threading
import time
from dataclasses import dataclass
from multiprocessing import reduction
from typing import Any, Callable, Iterable, Iterator

from draftguard import forking
from draftguard.capped import MAX_ANSWER, MAX_DEPTH, read_json, size_text  # noqa: F401 (callers' names)
from draftguard.errors import BadInput
from draftguard.forking import PRELOAD  # noqa: F401 (callers' name)
from draftguard.secrets import without_secrets

MEMORY_ENV, CPU_ENV, BUDGET_ENV = "DRAFTGUARD_CHECK_MEMORY", "DRAFTGUARD_CHECK_CPU_SECONDS", "DRAFTGUARD_CHECK_SECONDS"
DEFAULT_MEMORY, DEFAULT_CPU, DEFAULT_BUDGET = 2 * 10**9, 30.0, 20.0
WALL_GRACE = 5.0  # seconds past twice the budget: the cooperative budget speaks first where it can
MEMORY_EXIT = 86  # a child's exit status when an allocation failed at its address-space bound
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}

# A thread's warm child is replaced after RECYCLE calls, or sooner once its address space has grown
# by GROWTH of its headroom under the memory bound since its first check (forking.address_space).
RECYCLE, GROWTH = 5000, 0.25
AHEAD = 32  # calls of a stream sent to the child ahead of their answers, at most
MESSAGE, AHEAD_BYTES = 8, 32 * 2**20  # calls in one message; bytes not yet written past which no more are read
_THREAD = threading.local()  # each thread's warm child (Child.of_thread)
_CHILD: dict[str, Any] = {}  # in a child: its pipe to the caller and its limits


@dataclass(frozen=True)
class Limits:
    """The bounds of one child: address space in bytes, CPU seconds, wall seconds."""

    memory: int = DEFAULT_MEMORY
    cpu: float = DEFAULT_CPU
    wall: float = 2 * DEFAULT_BUDGET + 5.0

    @classmethod
    def from_env(cls) -> "Limits":
        """The limits the environment sets. Raises BadInput naming a setting that is no limit.

        Example::

            >>> os.environ[MEMORY_ENV] = "1.5GB"; Limits.from_env().memory
            1500000000
            >>> os.environ[MEMORY_ENV] = "lots"; Limits.from_env()
            Traceback (most recent call last):
            ...
            draftguard.errors.BadInput: DRAFTGUARD_CHECK_MEMORY='lots' is not an amount of memory (e.g. 2GB, 1500MB, 4GiB)
            >>> del os.environ[MEMORY_ENV]; Limits.from_env()
            Limits(memory=2000000000, cpu=30.0, wall=45.0)
        """
        return cls(memory=int(_number(MEMORY_ENV, DEFAULT_MEMORY, size=True)), cpu=_number(CPU_ENV, DEFAULT_CPU),
                   wall=2 * _number(BUDGET_ENV, DEFAULT_BUDGET) + WALL_GRACE)

    def words(self, bound: str) -> str:
        """How a message names a bound: "stopped at 2 GB of memory (DRAFTGUARD_CHECK_MEMORY)"."""
        if bound == "memory":
            return f"stopped at {size_text(self.memory)} of memory ({MEMORY_ENV})"
        if bound == "cpu":
            return f"stopped after {self.cpu:g} s of CPU ({CPU_ENV})"
        return f"stopped after {self.wall:g} s of wall time (twice {BUDGET_ENV}, plus {WALL_GRACE:g} s)"


class Encoded(bytes):
    """An answer a child's function already wrote as JSON (its own encoding of what ``json`` cannot
    write): sent as it is, not encoded twice. The caller reads it under the same caps."""


class Stopped(BadInput):
    """A child stopped at a bound (``bound``: "memory", "cpu", "wall", "answer" or "crash"): its
    input gets an error that names the bound, never a pass."""

    def __init__(self, message: str, bound: str, **where: Any):
        super().__init__(message, **where)
        self.bound = bound


def _number(env: str, default: float, size: bool = False) -> float:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    match = re.fullmatch(r"([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)", text.lower()) if size else None
    try:
        value = float(match.group(1)) * _UNITS[match.group(2)] if size and match else float(text)
    except (ValueError, KeyError):
        value = math.nan
    if size and (match is None or match.group(2) not in _UNITS):
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        what = "an amount of memory (e.g. 2GB, 1500MB, 4GiB)" if size else "a number of seconds above 0"
        raise BadInput(f"{env}={text!r} is not {what}", key=env)
    return value


def _forget_warm_child() -> None:
    """In a process forked from a caller: the forking thread's warm child is its parent's (``close()``
    leaves it)."""
    _THREAD.__dict__.pop("child", None)


os.register_at_fork(after_in_child=_forget_warm_child)


def start() -> None:
    """Start the forkserver now, in the background (it imports ``PRELOAD`` while the caller goes on
    reading its files), where children will come from it: in a process with threads. Does nothing
    once it runs, or in a process of one thread (its children fork from it)."""
    if threading.active_count() > 1:
        forking.forkserver_context()
        forking.start_servers()


def run(function: Callable[..., Any], *args: Any, limits: Limits, handlers: dict[str, Callable[..., Any]] | None = None,
        object_hook: Callable[[dict], Any] | None = None, where: dict[str, Any] | None = None) -> Any:
    """``function(*args)`` in a child of its own under ``limits`` (``Child.run``, then the child ends).

    Raises:
        Stopped: A bound stopped the child, it died, or its answer was over the caps.
        BadInput: ``function`` raised one.
    """
    with Child(limits) as child:
        return child.run(function, *args, handlers=handlers, object_hook=object_hook, where=where)


class Child:
    """One bounded child that runs many calls in turn (one check's files): each call under the wall
    time and CPU seconds of ``limits``, the child's whole life under its memory bound. A call that
    stops it (any bound) ends it; the next call starts a fresh one. Not shared between threads: each
    ``check`` has its own."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.proc = self.conn = self.sock = None  # type: Any
        self.calls = 0  # calls the running child has been sent
        self.sent: dict[str, str] | None = None  # the caller's environment when the running child was last sent it
        self.settled: int | None = None

    @classmethod
    def of_thread(cls, limits: Limits) -> "Child":
        """This thread's warm child (a bot worker's, the CLI's): kept between checks, so the config
        modules and caches a check warms stay warm; a fresh one for other limits, after ``RECYCLE``
        calls, and once what it keeps has grown (``grown``): memory one file leaves behind never
        counts against a later file's bound unnoticed."""
        child = getattr(_THREAD, "child", None)
        if child is None or child.limits != limits or child.calls >= RECYCLE or child.grown():
            if child is not None:
                child.close()
            child = _THREAD.child = cls(limits)
        return child

    def grown(self) -> bool:
        """Whether the running child's address space grew by more than ``GROWTH`` of its headroom
        under the memory bound since it was first asked (after its first check: transformers and the
        config modules loaded). False where the size cannot be read (no /proc)."""
        size = forking.address_space(self.proc.pid) if self.proc is not None else None
        if size is None or self.settled is None:
            self.settled = size
            return False
        return size - self.settled > GROWTH * (self.limits.memory - self.settled)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    def __enter__(self) -> "Child":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _start(self) -> None:
        if threading.active_count() == 1:
            # One thread (the CLI, the Action): no other thread can hold a lock the child inherits,
            # so fork this process itself; the child shares what it imported and imports the rest.
            self.conn, theirs = multiprocessing.get_context("fork").Pipe()
            self.proc = forking.ForkProcess(target=_serve, args=(theirs, self.limits, dict(os.environ), self.conn),
                                            daemon=True)
        else:  # threads (a bot's workers): a child from the forkserver, which has none, nor any secret
            self.conn, theirs = forking.forkserver_context().Pipe()
            forking.start_servers()
            self.proc = forking.ServerProcess(target=_serve, daemon=True,
                                              args=(theirs, self.limits, without_secrets(os.environ), None))
        self.proc.start()
        self.owner = os.getpid()
        theirs.close()
        self.calls, self.sent, self.settled = 0, None, None  # settled: its address space after its first check
        self.sock = socket.socket(fileno=os.dup(self.conn.fileno()))  # for writes that never wait
        self.poller = select.poll()
        self.poller.register(self.conn.fileno(), select.POLLIN)
        self.out, self.queued, self.written = bytearray(), 0, 0  # bytes not yet written; all queued, all written
        self.marks: collections.deque[_Call] = collections.deque()  # calls whose message is not all written
        self.answered = 0.0  # when the running child last answered

    def _environ(self, environ: dict[str, str]) -> dict[str, str]:
        """The environment a call runs with: the caller's, less its secrets where the child comes
        from the forkserver (a child forked from a caller of one thread has its memory anyway)."""
        forked = isinstance(self.proc, forking.ForkProcess)
        return environ if forked else without_secrets(environ)

    def run(self, function: Callable[..., Any], *args: Any, handlers: dict[str, Callable[..., Any]] | None = None,
            object_hook: Callable[[dict], Any] | None = None, where: dict[str, Any] | None = None) -> Any:
        """``function(*args)`` in the child: its answer (JSON data, read with ``read_json``).

        ``function`` must be a module-level function returning JSON-able data; it may raise
        BadInput (raised here again with its message and place). ``handlers`` answer the child's
        ``call(name, ...)`` here (their result goes back pickled: the caller's data is trusted, the
        child's is not). ``where`` (file, line, key) places a ``Stopped``.

        Raises:
            Stopped: A bound stopped the child, it died, or its answer was over the caps.
            BadInput: ``function`` raised one.
        """
        [answer] = self.run_each(function, [args], handlers=[handlers or {}], object_hook=object_hook,
                                 where=[where or {}])
        if isinstance(answer, BadInput):
            raise answer
        return answer

    def run_each(self, function: Callable[..., Any], calls: list[tuple], *,
                 handlers: list[dict[str, Callable[..., Any]]],
                 object_hook: Callable[[dict], Any] | None = None, where: list[dict[str, Any]]) -> list[Any]:
        """``stream`` of ``calls`` (each with its ``handlers`` and ``where``), its answers as a list."""
        return list(self.stream(function, zip(calls, handlers, where), object_hook=object_hook))

    def stream(self, function: Callable[..., Any], calls: Iterable[tuple[tuple, dict, dict]], *,
               object_hook: Callable[[dict], Any] | None = None) -> Iterator[Any]:
        """``function(*args)`` for each ``(args, handlers, where)`` of ``calls``, in turn in the child,
        each answer yielded in order as it comes. Calls go ahead of their answers (``AHEAD`` at most,
        ``MESSAGE`` to a message), taken from ``calls`` (a lazy one reads its next files) while the
        child works; the caller never waits on a send, so the two never wait on each other. Each
        call has its own wall time (from the answer before it, or its sending if later), CPU seconds,
        ``handlers`` and ``where``. Out: per call, its answer or its BadInput (``Stopped`` where a
        bound stopped the child: that ends it, and the calls after it go to a fresh one)."""
        source, flight, more = iter(calls), collections.deque(), True
        try:
            while more or flight:
                if self.proc is None:
                    self._start()
                    if flight:  # the calls a stopped child had not answered, to the fresh one
                        self._queue(function, list(flight))
                taken: list[_Call] = []
                while more and len(taken) < MESSAGE and self._room(len(flight)):
                    try:
                        taken.append(_Call(*next(source)))
                    except StopIteration:
                        more = False
                    if not flight:
                        break  # the child waits: what there is goes at once
                if taken:
                    self._queue(function, taken)
                    flight.extend(taken)
                self._write()
                if not flight:
                    continue
                # no room for more calls: wait for an answer; else only look, and read the next files
                answer = self._receive(flight[0], object_hook, block=not (more and self._room(len(flight))))
                if answer is _NOTHING:
                    continue
                flight.popleft()
                if isinstance(answer, Stopped):
                    self.close()  # a bound stopped this call: the next ones start afresh
                yield answer
        finally:
            if flight:
                self.close()  # stopped half-way (an error, the caller stopped reading): the child's state is unknown

    def _room(self, flying: int) -> bool:  # for a whole message more
        return flying <= AHEAD - MESSAGE and len(self.out) < AHEAD_BYTES

    def _queue(self, function: Callable[..., Any], calls: list["_Call"]) -> None:
        """One message of ``calls`` into the bytes to write; the environment goes again only when it
        changed (the child keeps the last one it was sent)."""
        environ = dict(os.environ)
        self._put(("run", function, [c.args for c in calls], None if environ == self.sent else self._environ(environ)))
        self.sent, now = environ, time.monotonic()
        for c in calls:
            c.queued, c.end, c.sent = now, self.queued, None
            self.marks.append(c)
        self.calls += len(calls)

    def _put(self, message: tuple) -> None:
        payload = reduction.ForkingPickler.dumps(message)  # as Connection.send frames it
        header = struct.pack("!i", len(payload)) if len(payload) <= 0x7FFFFFFF else struct.pack("!iQ", -1, len(payload))
        self.out += header + payload
        self.queued += len(header) + len(payload)

    def _write(self) -> None:
        """Write what the pipe takes now, never waiting; note when each call's message is all out."""
        while self.out:
            try:
                written = self.sock.send(self.out, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError:  # the child is gone: its end of input says how
                self.out.clear()
                break
            del self.out[:written]
            self.written += written
        now = time.monotonic()
        while self.marks and self.marks[0].end <= self.written:
            self.marks.popleft().sent = now

    def _receive(self, head: "_Call", object_hook: Any, block: bool) -> Any:
        """``head``'s answer (its BadInput, or ``Stopped``), or ``_NOTHING`` when none is there and
        ``block`` is False. Answers the child's ``call``s on the way."""
        while True:
            started = max(self.answered, head.queued if head.sent is None else head.sent)
            left = started + self.limits.wall + head.extra - time.monotonic()
            if left <= 0:
                return Stopped(self.limits.words("wall"), "wall", **head.where)
            self.poller.modify(self.conn.fileno(), select.POLLIN | (select.POLLOUT if self.out else 0))
            events = dict(self.poller.poll(math.ceil(left * 1000) if block else 0)).get(self.conn.fileno(), 0)
            if events & select.POLLOUT:
                self._write()
            if not events & (select.POLLIN | select.POLLHUP | select.POLLERR):
                if block:
                    continue
                return _NOTHING
            try:
                data = self.conn.recv_bytes(MAX_ANSWER)
            except (EOFError, ConnectionResetError):  # reset: it died with calls sent ahead unread
                return _died(self.proc, self.limits, head.where)
            except OSError:  # longer than MAX_ANSWER
                return Stopped(f"stopped: its answer was over {size_text(MAX_ANSWER)}", "answer", **head.where)
            try:
                message = read_json(data, object_hook)
            except ValueError as exc:
                return Stopped(f"stopped: its answer was unreadable ({exc})", "answer", **head.where)
            if "call" in message:
                asked = time.monotonic()
                self._put(("reply", *_answer(head.handlers, message)))
                head.extra += time.monotonic() - asked  # the caller's time is not the child's
                self._write()
                continue
            self.answered = time.monotonic()
            if "bad_input" in message:
                return BadInput(**message["bad_input"])
            return message["ok"]

    def close(self) -> None:
        """End the child (it is killed: nothing of it is waited for). In a process forked from its
        owner, only forget it: the child is the owner's."""
        if self.proc is not None and getattr(self, "owner", None) == os.getpid():
            if self.proc._popen is not None:  # it started
                if self.proc.is_alive():
                    self.proc.kill()
                self.proc.join()
            self.conn.close()
        elif self.conn is not None:
            with contextlib.suppress(OSError):
                self.conn.close()  # this process's copies of the pipe; the owner's stay open
        if self.sock is not None:
            self.sock.close()
        self.proc = self.conn = self.sock = None


_NOTHING = object()  # no answer yet


@dataclass(eq=False)
class _Call:
    """One call of a stream; when its message was queued (``end``: the bytes queued up to it) and all
    written (``sent``); the caller's time answering its ``call``s (``extra``: not the child's)."""

    args: tuple
    handlers: dict[str, Callable[..., Any]]
    where: dict[str, Any]
    queued: float = 0.0
    end: int = 0
    sent: float | None = None
    extra: float = 0.0


def _answer(handlers: dict[str, Callable[..., Any]], message: dict) -> tuple[str, Any]:
    handler = handlers.get(message["call"])
    if handler is None:
        return ("bad", {"message": f"no handler for {message['call']!r}"})
    try:
        return ("ok", handler(*message.get("args", [])))
    except BadInput as exc:
        return ("bad", _fields(exc))


def _fields(exc: BadInput) -> dict[str, Any]:
    return {"message": str(exc), "file": exc.file, "line": exc.line, "column": exc.column, "key": exc.key}


def _died(proc: Any, limits: Limits, where: dict[str, Any] | None) -> Stopped:
    proc.join()
    code = proc.exitcode
    if code == MEMORY_EXIT:
        return Stopped(limits.words("memory"), "memory", **(where or {}))
    if code == -signal.SIGXCPU:  # the CPU bound
        return Stopped(limits.words("cpu"), "cpu", **(where or {}))
    shown = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
    return Stopped(f"stopped: the check's process died ({shown}; the memory bound is "
                   f"{size_text(limits.memory)}, {MEMORY_ENV})", "crash", **(where or {}))


def call(name: str, *args: Any) -> Any:
    """In a child: ask the caller's handler ``name`` (JSON-able ``args``); its answer, or its
    BadInput raised here."""
    conn = _CHILD["conn"]
    conn.send_bytes(json.dumps({"call": name, "args": list(args)}).encode())
    while True:  # the caller may have sent the next calls ahead of the reply: kept for later
        message = conn.recv()
        if message[0] == "reply":
            break
        _CHILD["ahead"].append(message)
    _, status, value = message
    if status == "bad":
        raise BadInput(**value)
    return value


def current() -> Limits | None:
    """The limits of this process when it is a bounded child, else None."""
    return _CHILD.get("limits")


def _serve(conn: Any, limits: Limits, environ: dict[str, str], callers_end: Any) -> None:
    """The child: under ``limits``' memory bound for life, each call under its CPU seconds.
    ``callers_end`` (forked from the caller): the caller's end of the pipe, closed here so that the
    caller's exit is this child's end of input."""
    if callers_end is not None:
        callers_end.close()
    ahead: collections.deque = collections.deque()  # calls that came while a call waited on its reply
    _CHILD.update(conn=conn, limits=limits, ahead=ahead)
    try:
        forking.limit_memory(limits.memory)
        settings, wanted = {}, None  # the caller's environment, and as os.environ holds it (encoded)
        while True:
            try:
                _, function, calls, environ = ahead.popleft() if ahead else conn.recv()
            except EOFError:  # the caller closed: done
                return
            if environ is not None:  # None: as the last call's
                settings, wanted = environ, {os.environ.encodekey(k): os.environ.encodevalue(v) for k, v in environ.items()}
            for args in calls:
                if getattr(os.environ, "_data", None) != wanted:  # the caller's settings now (not the forkserver's),
                    os.environ.clear()  # and nothing a call before set in them
                    os.environ.update(settings)
                forking.limit_cpu(limits.cpu)
                try:
                    answer: Any = function(*args)
                    data = b'{"ok": ' + answer + b"}" if isinstance(answer, Encoded) else json.dumps(
                        {"ok": answer}, default=str).encode()
                except BadInput as exc:
                    data = json.dumps({"bad_input": _fields(exc)}, default=str).encode()
                conn.send_bytes(data)
    except MemoryError:
        os._exit(MEMORY_EXIT)  # allocates nothing: the caller names the bound from the status
