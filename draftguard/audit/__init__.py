"""``draftguard audit``: check a whole fleet of Hub model repos, against the transformers versions
they are served with and against their targets, and say what broke and since when.

In: repo ids (a list file, or a Hub listing by org, search or tag), transformers versions and the
run's options (``run.AuditRun``), and the previous run's audit.jsonl in the output folder.
Out: audit.jsonl, audit.md and audit.html in that folder, an ``AuditResult``, optionally one Hub
discussion per failing repo, and the exit code (``cli.cmd_audit``).

Modules: inputs (which repos), repo (fetch and check one repo), record (one audit.jsonl line),
store (audit.jsonl), run (the run: local threads or the shared queue), queue (jobs on the queue
``draftguard worker`` serves), report and html (audit.md, audit.html), discussions (telling owners),
versions (``latest``), cli (the subcommand). See docs/audit.md.
"""
