"""Resolve a raw config.json the way transformers' model code will read it.

In: a raw config.json dict (``resolve``), or, run as a script by the version matrix, one JSON request
on stdin.
Out: the node of what the model code reads: for every key of the raw file, and every public
attribute of the resolved object, the value that ``getattr(config, key)`` returns, with the evidence
of what the class did to the values it changed; or ``ResolveError``.

``getattr`` is what modeling code reads, and it follows ``attribute_map`` aliases; ``to_dict()``
would not show that, and ``to_diff_dict()`` drops values equal to the defaults. Nested configs
(``text_config``...) become nested nodes.

This package is standalone on purpose: the transformers version matrix runs it in environments that
hold nothing but transformers. Its modules import only the standard library, transformers, and each
other by relative import; check/environments.py loads the folder under a private package name
(``LOADER`` below) without putting it on ``sys.path``. tests/test_shape.py keeps it so.

Script protocol (one JSON document each way)::

    stdin:  {"configs": [{"raw": {...}, "trust_remote_code": false, "pretrained": null, "revision": null}]}
    stdout: {"transformers_version": "5.24.0", "results": [<node> | {"error": {...}}, ...]}

The modules, in the order they build on each other: ``classes`` (which class, ResolveError),
``budget`` (the time budget of one config: ``DRAFTGUARD_CHECK_SECONDS``), ``nodes`` (the node, tree helpers), ``tracing`` (where values land), ``probes`` (flags, deciders,
translations), ``aliases`` (unread aliases), ``evidence`` (all of it as one dict), ``build``
(``resolve`` and the script's ``main``).
"""

from __future__ import annotations

from .aliases import alias_vocabulary
from .budget import OVER_BUDGET, BudgetSpent, per_config, spend
from .build import main, resolve
from .classes import BOOKKEEPING_KEYS, ResolveError, built_in_reader, config_class_name, hide_torch, plausible_typos, transformers_version
from .evidence import gather_evidence
from .nodes import DEFAULTED_KEYS, MAX_LAYERS, config_node, node_values
from .tracing import FLAG_CACHE, TRACE_CACHE, class_voice

__all__ = [
    "BOOKKEEPING_KEYS", "BudgetSpent", "DEFAULTED_KEYS", "FLAG_CACHE", "MAX_LAYERS", "OVER_BUDGET", "TRACE_CACHE",
    "ResolveError", "per_config", "spend",
    "alias_vocabulary", "built_in_reader", "class_voice", "config_class_name", "config_node",
    "gather_evidence", "hide_torch", "main", "node_values", "plausible_typos", "resolve",
    "transformers_version",
]

# How check/environments.py starts this package in an environment without draftguard: the folder is
# loaded under a private name, so its relative imports work and nothing lands on sys.path where a
# module of ours could shadow one that transformers imports. Run as ``python -I -c LOADER <folder>``.
LOADER = (
    "import importlib.util, sys\n"
    "folder = sys.argv[1]\n"
    "spec = importlib.util.spec_from_file_location(\n"
    "    '_draftguard_resolver', folder + '/__init__.py', submodule_search_locations=[folder])\n"
    "package = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = package\n"
    "spec.loader.exec_module(package)\n"
    "sys.exit(package.main())\n"
)
