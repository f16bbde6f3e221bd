"""Moved: the GitHub handler is ``bot/github_handler.py`` and the shared review ``bot/review.py``.

In: nothing.
Out: the names this module had, re-exported for one release.
"""

from draftguard.bot.github_handler import (  # noqa: F401
    ACCEPTANCE_CHECK,
    CONFIG_CHECK,
    AcceptanceRunner,
    GitHubHandler,
    annotations,
    publish_check_run,
    run_acceptance_subprocess,
)
from draftguard.bot.review import (  # noqa: F401
    Outcome,
    PullRequestReview,
    check_pull_request,
    check_sections,
    check_title,
    matrix_section,
    read_settings,
    run_job,
)
