"""EAGLE-3 chain drafting with greedy, lossless verification: the reference backend's loop for
EAGLE-3 heads (``runner/eagle3_model.py``), as vLLM's EAGLE proposer runs it.

Each step: the head drafts K tokens one after another. Its first pass reads, at every known
position i, the token at i + 1 and ``fc`` of the target's aux features at i (the last position's
next token is the anchor, the target's own latest token); each further pass appends the token just
drafted with the head's own pre-norm output at the previous position. The target then verifies
[anchor, d1 .. dK] in one pass: the longest prefix equal to its own argmax is accepted, plus its
token at the first mismatch, so the output equals plain greedy decoding of the target. Positions
are the target's.

In: the target, an ``Eagle3Head``, a prompt as token ids, K (``num_speculative_tokens``).
Out: the new tokens and their ``DraftCounts`` (``eagle3_generate``); ``chain_draft`` for training.
Needs the ``runner`` extra (torch).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Sequence

import torch
from torch import nn

from draftguard.runner.eagle3_model import Eagle3Head, PrenormHook, aux_features
from draftguard.runner.reference import DraftCounts, _cache_arg, _count_step, _crop, _new_cache
from draftguard.snapshot import BadInput

DEFAULT_SPECULATIVE_TOKENS = 3


def chain_draft(head: Eagle3Head, embed: nn.Module, features: torch.Tensor, next_tokens: torch.Tensor, k: int,
                feed: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Draft k tokens after a context: ``features`` [B, L, len(ids) x H] are the target's aux
    features at positions 0..L-1 and ``next_tokens`` [B, L] the tokens at positions 1..L (the last
    one is the anchor). Returns the draft-vocabulary logits of each chain step at the last position
    ([B, draft vocab] each); differentiable, so training runs the same chain as inference, feeding
    the true tokens ``feed`` [B, k - 1] where inference feeds its own drafts."""
    hidden = head.fc(features)
    embeds = embed(next_tokens)
    length = features.shape[1]
    positions = torch.arange(length, device=features.device)[None].expand(features.shape[0], -1)
    out = []
    for step in range(k):
        logits, pre = head(hidden, embeds, positions)
        out.append(logits[:, -1])
        if step + 1 == k:
            break
        token = head.draft_to_target(logits[:, -1].argmax(-1)) if feed is None else feed[:, step]
        hidden = torch.cat([hidden, pre[:, -1:]], 1)
        embeds = torch.cat([embeds, embed(token)[:, None]], 1)
        positions = torch.cat([positions, positions[:, -1:] + 1], 1)
    return out


@torch.inference_mode()
def eagle3_generate(
    target: nn.Module,
    head: Eagle3Head,
    input_ids: Sequence[int],
    max_new_tokens: int,
    *,
    num_speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS,
    stop_ids: Iterable[int] = (),
    on_step: Callable[[float], None] | None = None,
) -> tuple[list[int], DraftCounts]:
    """Greedy EAGLE-3 decoding: K chain-drafted tokens per step, verified by one target pass.
    Returns the new tokens (at most ``max_new_tokens``; they equal the target's greedy tokens) and
    the counters, counted as ``speculative_generate`` counts them (a block is the anchor plus K)."""
    k = num_speculative_tokens
    if k < 1:
        raise BadInput(f"--num-speculative-tokens must be at least 1, got {k}")
    device = next(target.parameters()).device
    stops = set(stop_ids)
    embed = target.get_input_embeddings()
    counts = DraftCounts(accepted_per_position=[0] * k)
    ids = list(input_ids)
    if not ids:
        raise BadInput("a prompt has no tokens")
    hook = PrenormHook(target)
    try:
        cache, kv = _new_cache(target), _cache_arg(target)
        out = target(torch.tensor([ids], device=device), **{kv: cache}, use_cache=True, output_hidden_states=True)
        anchor = int(out.logits[0, -1].argmax())
        features = aux_features(target, out, head.spec.aux_ids, hook.value)
        seq = ids + [anchor]  # every token whose position the target has seen, and the anchor
        new = [anchor]
        while len(new) < max_new_tokens and anchor not in stops:
            t0 = time.perf_counter()
            following = torch.tensor([seq[1:]], device=device)
            drafted = [int(head.draft_to_target(step.argmax(-1))[0])
                       for step in chain_draft(head, embed, features, following, k)]
            start = len(seq) - 1  # the anchor's position
            block = torch.tensor([[anchor] + drafted], device=device)
            positions = torch.arange(start, start + k + 1, device=device)[None]
            out = target(block, position_ids=positions, **{kv: cache}, use_cache=True, output_hidden_states=True)
            posterior = out.logits[0].argmax(-1).tolist()
            accepted = 0
            while accepted < k and drafted[accepted] == posterior[accepted]:
                accepted += 1
            produced = drafted[:accepted] + [posterior[accepted]]
            produced, accepted = _count_step(counts, produced, accepted, stops, k + 1)
            _crop(cache, start + accepted + 1)
            step_features = aux_features(target, out, head.spec.aux_ids, hook.value)[:, : accepted + 1]
            features = torch.cat([features, step_features], 1)
            seq.extend(produced)
            new.extend(produced)
            anchor = produced[-1]
            if on_step is not None:
                on_step(time.perf_counter() - t0)
    finally:
        hook.handle.remove()
    return new[:max_new_tokens], counts
