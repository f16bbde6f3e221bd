"""``draftguard audit``: check a whole fleet of Hub model repos, against the transformers versions
they are served with and against their targets, and say what broke and since when.

Modules: inputs (which repos), repo (fetch and check one repo), record (one audit.jsonl line),
store (audit.jsonl), run (the run: local threads or the shared queue), queue (jobs on the queue
``draftguard worker`` serves), report and html (audit.md, audit.html), discussions (telling owners),
versions (``latest``), cli (the subcommand). See docs/audit.md.
"""
