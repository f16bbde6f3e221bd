"""How a bounded child (``draftguard.bounded``) is made: forked from the caller (a process of one
thread), or from multiprocessing's forkserver (a process with threads), which imports ``PRELOAD``
once and, with the resource tracker, is started from an environment without secrets. Neither
refuses to start in a daemonic process (a queue's worker) nor imports the caller's main module again.

In: the ``Process`` arguments of ``bounded``'s children.
Out: ``ForkProcess`` and ``ServerProcess`` (a child forked from here, or from the forkserver);
``forkserver_context()``; ``start_servers()``; ``forget_forkserver`` (run in every forked child);
``PRELOAD``; ``limit_memory`` and ``limit_cpu`` (a child's own bounds); ``address_space(pid)`` (a
child's size, for when to replace it).
"""

from __future__ import annotations

import contextlib
import io
import math
import multiprocessing
import multiprocessing.context as context
import os
import resource
import threading
from multiprocessing import forkserver, popen_forkserver, reduction, resource_tracker, spawn, util
from multiprocessing import process as mp_process
from typing import Any

from draftguard.secrets import is_secret_name

PRELOAD = ["draftguard.check.preload"]  # what the forkserver imports once (transformers)
_CONTEXT: Any = None  # the forkserver context, made once


def forget_forkserver() -> None:
    """In a child forked from a caller (a queue's process worker): the caller's forkserver is not its
    child, so this process starts its own (multiprocessing would wait on a process it cannot)."""
    server = forkserver._forkserver
    if getattr(server, "_forkserver_alive_fd", None) is not None:
        with contextlib.suppress(OSError):
            os.close(server._forkserver_alive_fd)
    for name in ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid", "_forkserver_authkey",
                 "_inherited_fds"):
        if hasattr(server, name):
            setattr(server, name, None)
    server._lock = threading.Lock()


os.register_at_fork(after_in_child=forget_forkserver)


def forkserver_context() -> Any:
    """multiprocessing's forkserver context, which imports ``PRELOAD`` once."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(PRELOAD)
    return _CONTEXT


_SERVERS = threading.Lock()


def start_servers() -> None:
    """Start multiprocessing's forkserver and its resource tracker (if not running) from an
    environment without a secret (``secrets.is_secret_name``): both are exec'd with the environment
    of the moment, and every child forks from the forkserver. The secrets are taken out of this
    process's environment for the few milliseconds of the two starts, under a lock."""
    with _SERVERS:
        if getattr(forkserver._forkserver, "_forkserver_pid", None) is not None and getattr(
                resource_tracker._resource_tracker, "_pid", None) is not None:
            return  # both running (a dead one is started again by the next ensure_running, here)
        hidden = {k: os.environ.pop(k) for k in list(os.environ) if is_secret_name(k)}
        try:
            resource_tracker.ensure_running()
            forkserver.ensure_running()
        finally:
            os.environ.update(hidden)


class Popen(popen_forkserver.Popen):
    """The forkserver's Popen, less one step: the child does not import the caller's main module
    again (a console script, a bench, a test runner: seconds of imports, and code that is not the
    check's). The child runs module-level functions of draftguard only."""

    def _launch(self, process_obj: Any) -> None:  # popen_forkserver.Popen._launch (3.10-3.13), main left out
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        buf = io.BytesIO()
        context.set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            context.set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class ServerProcess(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return Popen(process_obj)

    def start(self) -> None:
        """``BaseProcess.start`` less its refusal in a daemonic process: a queue's process worker
        (huey's are daemonic) checks files too. The child ends by itself when its caller's pipe
        closes, so no child outlives its caller."""
        self._check_closed()
        assert self._popen is None and self._parent_pid == os.getpid()
        mp_process._cleanup()  # type: ignore[attr-defined]
        self._popen = self._Popen(self)
        self._sentinel = self._popen.sentinel
        del self._target, self._args, self._kwargs
        mp_process._children.add(self)  # type: ignore[attr-defined]


class ForkProcess(multiprocessing.context.ForkProcess):
    start = ServerProcess.start


def address_space(pid: int) -> int | None:
    """The address space of process ``pid`` in bytes (what the memory bound, RLIMIT_AS, counts), read
    from /proc; None where it cannot be read (not Linux, or the process is gone)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def limit_memory(memory: int) -> None:
    """Set an address space of ``memory`` bytes on this process, soft and hard (what it runs, remote
    code included, cannot raise it again), and no core files."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))


def limit_cpu(seconds: float) -> None:
    """SIGXCPU (which ends the process) once it has used ``seconds`` more CPU seconds. The hard limit
    stays open so that the next call can move it; the caller's wall time stops a process that
    moves it itself."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = math.ceil(used.ru_utime + used.ru_stime + seconds), resource.getrlimit(resource.RLIMIT_CPU)[1]
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard))
