"""The acceptance test: speculative decoding on real prompts, measured and turned into a verdict.

``result`` (the AcceptanceResult contract), ``stats``, ``render`` and ``diagnosis`` import no torch,
so the bot and the Action read and show results with them; ``reference`` and
``dflash_model`` need the ``runner`` extra (torch), ``vllm`` the ``vllm`` extra, and ``cli`` imports
them only when ``draftguard accept`` runs.

In: a drafter and its target (folders or Hub ids), prompts (built-in or a JSONL file), thresholds
and engine options (``draftguard accept``, or ``gpu_job.run_acceptance_job`` for the bot's GPU queue).
Out: an ``AcceptanceResult`` (counters, τ, per-position rates, verdict, diagnosis) as text, markdown
or JSON, an optional chart, and the exit code.
"""
