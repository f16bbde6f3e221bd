"""The acceptance test: speculative decoding on real prompts, measured and turned into a verdict.

``result`` (the AcceptanceResult contract) and ``stats`` import nothing heavy; ``reference`` and
``cli`` need the ``runner`` extra (torch).
"""
