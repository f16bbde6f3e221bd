"""The core: a model repo's config.json judged against what transformers resolves, and drafters
judged against their target. No surface (report, bot, Action, runner, audit) is imported here.

In: targets (folders, config.json files, Hub repo ids) or ``snapshot.Snapshot`` objects, with
optional transformers versions and a drafter's target.
Out: a ``findings.Report`` (``run.check``, the one entry every surface calls), the one thing every
view in ``report/`` renders; bad input becomes an ``InputError`` in it or a ``BadInput`` raised.

Modules: ``run`` (sources -> Report: picks light or matrix, adds the drafter and engine rules),
``light`` (one version, in process), ``matrix`` + ``environments`` (several versions, one
venv each), ``resolver`` (standalone: config.json -> resolved node), ``fidelity`` + ``judges`` (the
judge), ``findings`` (rules, Finding, Report), ``weights`` (safetensors headers), ``drafter/``.
"""
