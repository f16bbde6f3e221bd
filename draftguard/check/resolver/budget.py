"""The time budget of checking one config: a deadline that the resolver's loops (and the check's loops
over keys) look at between steps.

Tracing builds the config class again for each value it follows (batches, one leaf at a time, each
boolean flipped, each key taken out, each candidate flag), and a build costs time in proportion to
the file. A file made of a few hundred thousand keys with a few changed values holds a worker for
minutes that way; the layer-count cap (``nodes.MAX_LAYERS``) does not see it. So the check of one
config has a deadline: ``DRAFTGUARD_CHECK_SECONDS`` seconds (default 20). Past it, the next step
raises ``BudgetSpent``, and ``resolve`` turns that into ``ResolveError("over_budget")``, which every
surface shows as an error on the file. It is never a pass.

The deadline lives in a context variable: each thread (a bot worker, an audit fetcher) has its own,
and a caller that checks a whole config may open one scope around all of it (``per_config``); the
scopes inside it keep the outer deadline. The check is cooperative: a single build is not
interrupted, so a config overruns by at most one build (bounded by the 5 MB size cap).

Standalone like the rest of the resolver, and below it: the standard library only. What the process
pays once (importing transformers and a model's config module) is ``unmetered``: it is not the file's.

In: ``DRAFTGUARD_CHECK_SECONDS`` (a number of seconds above 0), and the loops that call ``spend()``.
Out: ``per_config()`` (a context: the deadline of the config being checked, unless one is set),
``spend()`` (raises ``BudgetSpent`` once the deadline has passed), ``unmetered()`` (a context whose
time does not count: the process's one-time imports), ``budget_seconds()`` (or ``BadBudget``),
``over_budget_message(spent)`` (the text of the ResolveError ``resolve`` raises for it).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from contextvars import ContextVar
from typing import Iterator

ENV = "DRAFTGUARD_CHECK_SECONDS"
DEFAULT_SECONDS = 20.0
OVER_BUDGET = "over_budget"  # the ResolveError kinds: the budget ran out, or the setting is no budget
BAD_BUDGET = "bad_budget"

# [monotonic deadline, the budget in seconds, unmetered blocks open] of the config being checked in
# this context (a list: ``unmetered`` moves the deadline).
_DEADLINE: ContextVar[list | None] = ContextVar("draftguard_check_deadline", default=None)


class BadBudget(ValueError):
    """``DRAFTGUARD_CHECK_SECONDS`` is not a number of seconds above 0."""


class BudgetSpent(BaseException):
    """The config's time budget is spent. A BaseException, like KeyboardInterrupt: the tracing loops
    catch ``Exception`` from a class that refuses a trial value, and must let this through."""

    def __init__(self, seconds: float):
        super().__init__(f"the check did not finish within {seconds:g} s, its time budget per config")
        self.seconds = seconds


def budget_seconds() -> float:
    """The budget per config: ``DRAFTGUARD_CHECK_SECONDS``, else 20. Raises BadBudget for a value that
    is not a number of seconds above 0 (``resolve`` says it on the file: never ignored).

    Example::

        >>> os.environ[ENV] = "0.5"; budget_seconds()
        0.5
        >>> os.environ[ENV] = "soon"; budget_seconds()
        Traceback (most recent call last):
        ...
        draftguard.check.resolver.budget.BadBudget: DRAFTGUARD_CHECK_SECONDS='soon' is not a number of seconds above 0
        >>> del os.environ[ENV]; budget_seconds()
        20.0
    """
    text = os.environ.get(ENV, "").strip()
    if not text:
        return DEFAULT_SECONDS
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (seconds > 0 and math.isfinite(seconds)):
        raise BadBudget(f"{ENV}={text!r} is not a number of seconds above 0")
    return seconds


@contextlib.contextmanager
def per_config() -> Iterator[None]:
    """The deadline of one config for the block, unless an outer block set one already (the outer
    deadline holds: one budget for the whole config)."""
    if _DEADLINE.get() is not None:
        yield
        return
    seconds = budget_seconds()
    token = _DEADLINE.set([time.monotonic() + seconds, seconds, 0])
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def spend() -> None:
    """Raise BudgetSpent when this context's deadline has passed; nothing outside a ``per_config``.

    Example::

        >>> spend()  # no deadline here
        >>> os.environ[ENV] = "1e-9"
        >>> with per_config():
        ...     time.sleep(0.001)
        ...     spend()
        Traceback (most recent call last):
        ...
        draftguard.check.resolver.budget.BudgetSpent: the check did not finish within 1e-09 s, its time budget per config
        >>> del os.environ[ENV]
    """
    current = _DEADLINE.get()
    if current is not None and not current[2] and time.monotonic() > current[0]:
        raise BudgetSpent(current[1])


@contextlib.contextmanager
def unmetered() -> Iterator[None]:
    """A block whose time is the process's, not the file's: importing transformers and a model's
    config module, reading transformers' alias vocabulary (seconds on a cold start, once per process).
    The deadline moves by as long as the block took, so the first config checked has the same
    budget as the next.

    Example::

        >>> os.environ[ENV] = "0.01"
        >>> with per_config():
        ...     with unmetered():
        ...         time.sleep(0.05)
        ...     spend()  # not spent: the sleep was unmetered
        >>> del os.environ[ENV]
    """
    current = _DEADLINE.get()
    if current is None:
        yield
        return
    current[2] += 1
    started = time.monotonic()
    try:
        yield
    finally:
        current[2] -= 1
        if not current[2]:  # the outermost block moves the deadline, once
            current[0] += time.monotonic() - started


def over_budget_message(spent: BudgetSpent) -> str:
    """What ``resolve`` says when the budget ran out (ResolveError ``over_budget``): how to allow more."""
    return (f"{spent} (transformers' config class is built again for each changed value it traces, and this "
            f"file makes that slow); nothing of it was judged. Set {ENV} to allow more")
