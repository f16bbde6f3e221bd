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
Out: the new tokens and their ``DraftCounts`` (``eagle3_generate``); ``chain_draft`` for training;
``Eagle3Backend``, the reference backend's interface for a head.
Needs the ``runner`` extra (torch).
"""

from __future__ import annotations

import copy
import time
from typing import Callable, Iterable, Sequence

import torch
from torch import nn

from draftguard.runner.dflash_model import load_target
from draftguard.runner.eagle3_model import Eagle3Head, PrenormHook, head_features, load_eagle3
from draftguard.runner.reference import (DraftCounts, _cache_arg, _count_step, _crop, _new_cache, open_target,
                                         stop_token_ids)
from draftguard.runner.result import PromptResult
from draftguard.snapshot import BadInput

DEFAULT_SPECULATIVE_TOKENS = 3


def chain_draft(head: Eagle3Head, embed: nn.Module, features: torch.Tensor, next_tokens: torch.Tensor, k: int,
                feed: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Draft k tokens after a context: ``features`` [B, L, len(ids) x H] are the target's aux
    features at positions 0..L-1 and ``next_tokens`` [B, L] the tokens at positions 1..L (the last
    one is the anchor). Returns the draft-vocabulary logits of each chain step at the last position
    ([B, draft vocab] each); differentiable, so training runs the same chain as inference, feeding
    the true tokens ``feed`` [B, k - 1] where inference feeds its own drafts."""
    hidden = head.combine(features)
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
    embed = head.own_embed if head.own_embed is not None else target.get_input_embeddings()
    counts = DraftCounts(accepted_per_position=[0] * k)
    ids = list(input_ids)
    if not ids:
        raise BadInput("a prompt has no tokens")
    hook = PrenormHook(target)
    try:
        cache, kv = _new_cache(target), _cache_arg(target)
        out = target(torch.tensor([ids], device=device), **{kv: cache}, use_cache=True, output_hidden_states=True)
        anchor = int(out.logits[0, -1].argmax())
        features = head_features(head, target, out, hook.value)
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
            before = copy.deepcopy(cache) if _recurrent(cache) else None
            out = target(block, position_ids=positions, **{kv: cache}, use_cache=True, output_hidden_states=True)
            posterior = out.logits[0].argmax(-1).tolist()
            accepted = 0
            while accepted < k and drafted[accepted] == posterior[accepted]:
                accepted += 1
            produced = drafted[:accepted] + [posterior[accepted]]
            produced, accepted = _count_step(counts, produced, accepted, stops, k + 1)
            if before is not None and accepted < k:  # a recurrent state cannot be cropped: rerun what was kept
                cache = before
                target(block[:, :accepted + 1], position_ids=positions[:, :accepted + 1], **{kv: cache}, use_cache=True)
            else:
                _crop(cache, start + accepted + 1)
            step_features = head_features(head, target, out, hook.value)[:, : accepted + 1]
            features = torch.cat([features, step_features], 1)
            seq.extend(produced)
            new.extend(produced)
            anchor = produced[-1]
            if on_step is not None:
                on_step(time.perf_counter() - t0)
    finally:
        hook.handle.remove()
    return new[:max_new_tokens], counts


def _recurrent(cache: object) -> bool:
    """Whether the cache holds a layer whose state is recurrent (Mamba-2, Gated DeltaNet: Nemotron-H's,
    Qwen3-Next's), which ``crop`` cannot roll back past a rejected draft: the verification step then
    keeps a copy from before the block and reruns the kept tokens on it (exact, as recomputing is)."""
    try:
        from transformers.cache_utils import LinearAttentionCacheLayerMixin  # transformers: only a model run pays it
    except ImportError:  # a transformers without such layers
        return False
    return any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in getattr(cache, "layers", ()))


class Eagle3Backend:
    """The reference backend for an EAGLE-3 head: ``ReferenceBackend``'s interface (``run_prompt``,
    ``run_prompt_views``, ``tokenizer``, ``target``, ``block_size``) over ``eagle3_generate``. A head
    has one config view here: the LLaMA config class rewrites none of the keys it reads. ``aux_ids``
    maps views to the aux ids the head reads in each (``--model-runner both``: "v1" and "v2", as each
    vLLM runner reads the head's config, ``runner/model_runners.py``); each view then runs the head
    on the same target with its own features (no replay: each drafts other tokens to verify).

    Example::

        backend = Eagle3Backend("tests/fixtures/vllm-models/target", "tests/fixtures/vllm-models/eagle3")
        result, tokens = backend.run_prompt(0, [40, 3, 6, 9], max_new_tokens=32)
    """

    name = "reference"

    def __init__(self, target: str, drafter: str, *, device: str = "cpu", dtype: torch.dtype | None = None,
                 num_speculative_tokens: int | None = None, aux_ids: dict[str, Sequence[int]] | None = None,
                 max_model_len: int | None = None):
        self.device, self.views = device, tuple(aux_ids or ("resolved",))
        self.target, self.tokenizer = open_target(load_target, target, device, dtype)
        self.drafters = {v: load_eagle3(drafter, self.target, device, aux_ids=(aux_ids or {}).get(v),
                                        max_model_len=max_model_len) for v in self.views}
        self.drafter = self.drafters[self.views[0]]
        self.k = num_speculative_tokens or DEFAULT_SPECULATIVE_TOKENS
        self.stop_ids = stop_token_ids(self.target, self.tokenizer)
        self.replayed_steps = 0

    @property
    def block_size(self) -> int:
        return self.k + 1

    def generate(self, head: nn.Module, input_ids: Sequence[int], max_new_tokens: int, k: int
                 ) -> tuple[list[int], DraftCounts]:
        """One prompt's speculative decoding with ``head`` drafting k tokens a step (a subclass's own loop)."""
        return eagle3_generate(self.target, head, input_ids, max_new_tokens, num_speculative_tokens=k,
                               stop_ids=self.stop_ids)

    def run_prompt(self, index: int, input_ids: Sequence[int], max_new_tokens: int, *,
                   block_size: int | None = None, label: str | None = None,
                   view: str | None = None) -> tuple[PromptResult, list[int]]:
        k = block_size - 1 if block_size else self.k
        head = self.drafters[view] if view is not None else self.drafter
        t0 = time.perf_counter()
        tokens, c = self.generate(head, input_ids, max_new_tokens, k)
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        return PromptResult.from_counts(
            index, drafts=c.drafts, draft_tokens=c.draft_tokens, accepted_tokens=c.accepted_tokens,
            accepted_per_position=c.accepted_per_position, new_tokens=len(tokens),
            wall_seconds=time.perf_counter() - t0, label=label), tokens

    def run_prompt_views(self, index: int, input_ids: Sequence[int], max_new_tokens: int, *,
                         block_size: int | None = None, label: str | None = None
                         ) -> dict[str, tuple[PromptResult, list[int]]]:
        return {v: self.run_prompt(index, input_ids, max_new_tokens, block_size=block_size, label=label, view=v)
                for v in self.views}
