"""The time budget of checking one config, on draftguard's side of the resolver.

The deadline itself is the resolver's (``check/resolver/budget.py``: it is standalone, so it holds
the context variable and ``BudgetSpent``). Here a spent budget becomes ``CheckOverBudget``, a
BadInput that names the file, so every surface shows it where it shows a file it could not check:
the CLI's line and exit 2, the bot's sticky comment and check run, the Action's annotation, the
audit's record. A check that cannot finish in bounded time is an error on the file, never silence.

In: the file a block checks (``within_budget``), or a ResolveError the resolver raised for it.
Out: ``within_budget(file)`` (a context with the config's deadline, in which ``spend()`` may stop the
block with CheckOverBudget), ``raise_if_over_budget(exc, file)``, ``spend`` (the resolver's).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from draftguard.check.resolver import OVER_BUDGET, BudgetSpent, ResolveError, per_config, spend
from draftguard.check.resolver.budget import BAD_BUDGET, BadBudget, over_budget_message
from draftguard.errors import CheckOverBudget

__all__ = ["raise_if_over_budget", "spend", "within_budget"]


@contextlib.contextmanager
def within_budget(file: str) -> Iterator[None]:
    """The config's deadline for the block (unless an outer block set it); a spent budget inside
    raises CheckOverBudget naming ``file``.

    Example::

        >>> import os, time
        >>> os.environ["DRAFTGUARD_CHECK_SECONDS"] = "1e-9"
        >>> with within_budget("acme/config.json"):
        ...     time.sleep(0.001)
        ...     spend()
        Traceback (most recent call last):
        ...
        draftguard.errors.CheckOverBudget: acme/config.json: the check did not finish within 1e-09 s, its time budget per config (transformers' config class is built again for each changed value it traces, and this file makes that slow); nothing of it was judged. Set DRAFTGUARD_CHECK_SECONDS to allow more
        >>> del os.environ["DRAFTGUARD_CHECK_SECONDS"]
    """
    try:
        with per_config():
            yield
    except BudgetSpent as spent:
        raise CheckOverBudget(f"{file}: {over_budget_message(spent)}", file=file) from None
    except BadBudget as exc:  # DRAFTGUARD_CHECK_SECONDS is no number of seconds: said, not ignored
        raise CheckOverBudget(f"{file}: {exc}", file=file) from None


def raise_if_over_budget(exc: ResolveError, file: str) -> None:
    """Raise CheckOverBudget for the resolver's ``over_budget`` error (or a bad budget setting), for a
    caller that otherwise goes on without the resolved values (a drafter, a target)."""
    if exc.kind in (OVER_BUDGET, BAD_BUDGET):
        raise CheckOverBudget(f"{file}: {exc}", file=file) from None
