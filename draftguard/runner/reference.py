"""The reference backend: our own DFlash drafter and greedy block drafting with lossless verification.

Written from the z-lab checkpoint format facts in the design notes (``docs`` and ``shared/DESIGN.md``):

- the drafter is a few Qwen3-style decoder layers with the weights ``fc``, ``hidden_norm``,
  ``layers.{i}.self_attn.{q,k,v,o}_proj`` (+ biases when ``attention_bias``),
  ``layers.{i}.self_attn.{q,k}_norm``, ``layers.{i}.mlp.{gate,up,down}_proj``,
  ``layers.{i}.{input,post_attention}_layernorm`` and ``norm``; no embeddings, no lm_head;
- context = ``hidden_norm(fc(concat(target hidden_states[id + 1])))`` for every token before the anchor,
  fed straight into each layer's k_proj / v_proj;
- queries come from the block ``[anchor, mask x (B-1)]`` embedded with the target's embeddings (times
  ``input_embedding_scale``); keys/values are [context; block]; q_norm on queries, k_norm on all keys;
- RoPE positions: context [0, n), block [n, n + B);
- a "sliding_attention" layer is causal within its window, a "full_attention" layer is non-causal
  unless ``is_causal`` is set; a sliding layer whose window resolved to None is causal, unwindowed;
- draft logits = target lm_head(norm(h)) at block positions 1..B-1, times ``output_multiplier``.

Greedy verification accepts the longest prefix of drafted tokens that equals the target's own argmax,
then takes the target's token at the first mismatch (the bonus), so the output equals plain greedy
decoding of the target: the speed-up never changes the text.

In: a target and a drafter (built and loaded by ``runner/dflash_model.py``) and prompts as token ids.
Out: the generated tokens and their ``DraftCounts``, per prompt a ``PromptResult`` (``ReferenceBackend``).

Needs the ``runner`` extra (torch). Example::

    target, tok = load_target("tests/fixtures/models/target")
    drafter = load_drafter("tests/fixtures/models/drafter", target)
    tokens, counts = speculative_generate(target, drafter, [40, 3, 6, 9], max_new_tokens=32)
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import nn

from draftguard.runner.dflash_model import SMALL_MODEL_PARAMS, DFlashDrafter, load_drafter, load_target
from draftguard.runner.result import PromptResult
from draftguard.snapshot import BadInput


# --------------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------------


@dataclass
class DraftCounts:
    """Counters of one generation, as the JSON contract defines them."""

    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)


def open_target(load: Callable[[str, str, Any], tuple[nn.Module, Any]], target: str, device: str,
                dtype: torch.dtype | None) -> tuple[nn.Module, Any]:
    """``load(target, device, dtype)`` -> (model, tokenizer), for every reference backend: --device cuda is
    refused where torch sees no GPU, and a small model on CPU gets one intra-op thread (its matmuls are too
    short to split: extra threads only spin, and on a busy machine they ran the fixtures 10-30x slower)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BadInput(f"--device {device}: no CUDA GPU is visible to torch here; run on a GPU runner or use --device cpu")
    model, tokenizer = load(target, device, dtype)
    if device == "cpu" and sum(p.numel() for p in model.parameters()) < SMALL_MODEL_PARAMS:
        torch.set_num_threads(1)
    return model, tokenizer


def stop_token_ids(target: nn.Module, tokenizer: Any = None) -> list[int]:
    """End-of-sequence ids from the target's generation config (else its config, else the tokenizer)."""
    ids: Any = None
    gen = getattr(target, "generation_config", None)
    if gen is not None:
        ids = gen.eos_token_id
    if ids is None:
        ids = getattr(target.config, "eos_token_id", None)
    if ids is None and tokenizer is not None:
        ids = tokenizer.eos_token_id
    if ids is None:
        return []
    return [int(i) for i in (ids if isinstance(ids, (list, tuple)) else [ids])]


def _features(hidden_states: Sequence[torch.Tensor], ids: Sequence[int], offset: int = 1) -> torch.Tensor:
    # hidden_states[0] is the embedding output, so layer i's output is hidden_states[i + 1].
    return torch.cat([hidden_states[i + offset] for i in ids], dim=-1)


class TargetTrace:
    """What one speculative run learned about the target on one prompt: its greedy tokens and the
    drafter's context features at every position. Speculative decoding is lossless, so both are the
    same whichever drafter ran; another drafter reading the same layers can be replayed against the
    trace (``replay_generate``) with no target pass of its own. Filled by ``speculative_generate``.

    Past the first run's last token the trace grows on demand by plain greedy steps of the target
    (``greedy``), because a replayed drafter's last block may look a few tokens further ahead."""

    def __init__(self) -> None:
        self.prompt_length = 0
        self.tokens: list[int] = []  # new tokens, the first at position prompt_length
        self.layer_ids: list[int] = []
        self.layer_offset = 1
        self._chunks: list[torch.Tensor] = []
        self._features: torch.Tensor | None = None
        self._target: nn.Module | None = None
        self._cache: Any = None
        self.extended = 0  # greedy target steps taken past the first run

    def _start(self, target: nn.Module, prompt_length: int, ids: Sequence[int], offset: int) -> None:
        self._target, self.prompt_length, self.layer_ids, self.layer_offset = target, prompt_length, list(ids), offset

    def _finish(self, cache: Any, tokens: list[int]) -> None:
        self._cache, self.tokens = cache, list(tokens)

    @property
    def known_positions(self) -> int:
        return sum(c.shape[1] for c in self._chunks)

    def features(self, begin: int, end: int) -> torch.Tensor:
        """Context features of positions [begin, end)."""
        if self._features is None or self._features.shape[1] < end:
            self._features = torch.cat(self._chunks, dim=1)
        return self._features[:, begin:end]

    @torch.inference_mode()
    def greedy(self, first: int, count: int) -> list[int]:
        """New tokens ``first`` .. ``first + count - 1`` of the target's greedy output, past a stop token
        too: vLLM counts a replayed block's drafts that the target confirms after a stop (``_count_step``),
        so the replay needs the tokens the verify pass would have seen there."""
        while len(self.tokens) < first + count:
            target = self._target
            assert target is not None and self._cache is not None, "trace was not filled by speculative_generate"
            position = self.prompt_length + len(self.tokens) - 1  # the last token is not in the cache yet
            device = next(target.parameters()).device
            out = target(torch.tensor([[self.tokens[-1]]], device=device),
                         position_ids=torch.tensor([[position]], device=device),
                         **{_cache_arg(target): self._cache}, use_cache=True, output_hidden_states=True)
            self._chunks.append(_features(out.hidden_states, self.layer_ids, self.layer_offset))
            token = int(out.logits[0, -1].argmax())
            self.tokens.append(token)
            self.extended += 1
        return self.tokens[first:first + count]


def _cache_arg(target: nn.Module) -> str:
    """The keyword the target's forward takes its KV cache by: transformers 5.2x renamed
    ``past_key_values`` to ``cache`` (the old name still works there, with a warning)."""
    return "cache" if "cache" in inspect.signature(target.forward).parameters else "past_key_values"


def _new_cache(target: nn.Module) -> Any:
    from transformers import DynamicCache  # transformers: seconds to import; only a model run pays it

    cache = DynamicCache(config=target.config)
    # A sliding-window layer past its window keeps the states a rejected draft must be cropped back to
    # (transformers refuses ``crop`` there otherwise: a dots3 target's window of 4 raised it mid-run).
    for layer in getattr(cache, "layers", []):
        if hasattr(layer, "activate_past_recording"):
            layer.activate_past_recording()
    return cache


def _crop(cache: Any, length: int) -> None:
    remove = cache.get_seq_length() - length
    if remove > 0:
        cache.crop(-remove)


@torch.inference_mode()
def speculative_generate(
    target: nn.Module,
    drafter: DFlashDrafter,
    input_ids: Sequence[int],
    max_new_tokens: int,
    *,
    block_size: int | None = None,
    stop_ids: Iterable[int] = (),
    on_step: Callable[[float], None] | None = None,
    trace: TargetTrace | None = None,
) -> tuple[list[int], DraftCounts]:
    """Greedy DFlash decoding: draft a block, verify it with one target pass, keep the longest matching
    prefix plus the target's bonus token. Returns the new tokens (at most ``max_new_tokens``; they equal
    the target's plain greedy tokens) and the counters. With ``trace``, also records the target's
    tokens and features there, so other drafters can be replayed against them (``replay_generate``).

    Every step drafts a full block, also the last, so τ measures the drafter, not where the budget
    ended; tokens past ``max_new_tokens`` are dropped from the output only. Generation stops at a stop
    token, and accepted tokens after it are not counted.
    """
    spec = drafter.spec
    bsz = block_size or spec.block_size
    if bsz < 2:
        raise BadInput(f"--block-size must be at least 2 (an anchor and one drafted token), got {bsz}")
    device = next(target.parameters()).device
    stops = set(stop_ids)
    embed = target.get_input_embeddings()
    head = target.get_output_embeddings()
    counts = DraftCounts(accepted_per_position=[0] * (bsz - 1))
    ids = torch.tensor([list(input_ids)], dtype=torch.long, device=device)
    n = ids.shape[1]
    if n == 0:
        raise BadInput("a prompt has no tokens")
    cache = _new_cache(target)
    kv = _cache_arg(target)
    out = target(ids, **{kv: cache}, use_cache=True, output_hidden_states=True)
    anchor = int(out.logits[0, -1].argmax())
    new = [anchor]
    context = _features(out.hidden_states, spec.target_layer_ids, spec.layer_offset)
    if trace is not None:
        trace._start(target, n, spec.target_layer_ids, spec.layer_offset)
        trace._chunks.append(context)
    dcache = drafter.new_cache()
    start = n  # position of the anchor
    mask_row = torch.full((1, bsz - 1), spec.mask_token_id, dtype=torch.long, device=device)
    while len(new) < max_new_tokens and anchor not in stops:
        t0 = time.perf_counter()
        block = torch.cat([torch.tensor([[anchor]], device=device), mask_row], dim=1)
        h = drafter(context, embed(block) * spec.input_embedding_scale, dcache)
        logits = head(h[:, 1:]) * spec.output_multiplier
        if spec.final_logit_softcapping:
            cap = spec.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        block[:, 1:] = logits.argmax(-1)
        positions = torch.arange(start, start + bsz, device=device)[None]
        out = target(block, position_ids=positions, **{kv: cache}, use_cache=True, output_hidden_states=True)
        posterior = out.logits[0].argmax(-1)
        drafted = block[0, 1:]
        accepted = int((drafted == posterior[:-1]).long().cumprod(0).sum())
        produced = drafted[:accepted].tolist() + [int(posterior[accepted])]
        produced, accepted = _count_step(counts, produced, accepted, stops, bsz)
        new.extend(produced)
        # The target's cache keeps the anchor and the accepted drafts; the bonus is the next anchor.
        _crop(cache, start + accepted + 1)
        context = _features(out.hidden_states, spec.target_layer_ids, spec.layer_offset)[:, : accepted + 1]
        if trace is not None:
            trace._chunks.append(context)
        start += accepted + 1
        anchor = produced[-1]
        if on_step is not None:
            on_step(time.perf_counter() - t0)
    if trace is not None:
        trace._finish(cache, new)
    return new[:max_new_tokens], counts


def _count_step(counts: DraftCounts, produced: list[int], accepted: int, stops: set[int],
                bsz: int) -> tuple[list[int], int]:
    """One verified block into the counters, counted as vLLM counts it, and its output cut at the first
    stop token. Shared by the live run and the replay, so both count alike.

    vLLM's scheduler counts a block's accepted drafts from the rejection sampler's tokens before it
    checks for stop tokens (``Scheduler.update_from_output`` calls ``make_spec_decoding_stats`` before
    ``_update_request_with_output``): a draft the target confirms after an accepted stop token counts
    though the output ends at the stop. The counters here do the same (the output does not change).
    Returns the output tokens and how many of them precede the last one (what the caller keeps in its
    cache and features: never the stop token, which becomes the anchor the run ends on)."""
    counts.drafts += 1
    counts.draft_tokens += bsz - 1
    counts.accepted_tokens += accepted
    for i in range(accepted):
        counts.accepted_per_position[i] += 1
    for j, tok in enumerate(produced):
        if tok in stops:
            return produced[: j + 1], min(accepted, j)
    return produced, accepted


@torch.inference_mode()
def replay_generate(
    drafter: DFlashDrafter,
    trace: TargetTrace,
    max_new_tokens: int,
    *,
    block_size: int | None = None,
    stop_ids: Iterable[int] = (),
) -> tuple[list[int], DraftCounts]:
    """``speculative_generate`` for another drafter on a prompt the target already ran: the same steps
    and counters, with the target's verify passes replaced by its greedy tokens and features from
    ``trace``. Exact because verification is lossless and the target is causal: the tokens a verify
    pass would accept, and the features it would hand on, are the ones already in the trace.

    The drafter must read the same target layers as the run that filled the trace."""
    spec = drafter.spec
    if list(spec.target_layer_ids) != trace.layer_ids or spec.layer_offset != trace.layer_offset:
        raise ValueError("replay needs a drafter that reads the same target layers as the traced run")
    bsz = block_size or spec.block_size
    if bsz < 2:
        raise BadInput(f"--block-size must be at least 2 (an anchor and one drafted token), got {bsz}")
    target = trace._target
    assert target is not None, "trace was not filled by speculative_generate"
    device = next(target.parameters()).device
    stops = set(stop_ids)
    embed, head = target.get_input_embeddings(), target.get_output_embeddings()
    counts = DraftCounts(accepted_per_position=[0] * (bsz - 1))
    n = trace.prompt_length
    anchor = trace.tokens[0]
    new = [anchor]
    dcache = drafter.new_cache()
    fed, start = 0, n
    mask_row = torch.full((1, bsz - 1), spec.mask_token_id, dtype=torch.long, device=device)
    while len(new) < max_new_tokens and anchor not in stops:
        block = torch.cat([torch.tensor([[anchor]], device=device), mask_row], dim=1)
        h = drafter(trace.features(fed, start), embed(block) * spec.input_embedding_scale, dcache)
        fed = start
        logits = head(h[:, 1:]) * spec.output_multiplier
        if spec.final_logit_softcapping:
            cap = spec.final_logit_softcapping
            logits = torch.tanh(logits / cap) * cap
        drafted = logits[0].argmax(-1).tolist()
        # The target's greedy tokens after the anchor: what its verify pass would have produced.
        truth = trace.greedy(start - n + 1, bsz)
        accepted = 0
        while accepted < bsz - 1 and accepted < len(truth) and drafted[accepted] == truth[accepted]:
            accepted += 1
        produced = truth[: accepted + 1]
        produced, accepted = _count_step(counts, produced, accepted, stops, bsz)
        new.extend(produced)
        start += accepted + 1
        anchor = produced[-1]
    return new[:max_new_tokens], counts


@torch.inference_mode()
def greedy_generate(target: nn.Module, input_ids: Sequence[int], max_new_tokens: int,
                    stop_ids: Iterable[int] = ()) -> list[int]:
    """Plain greedy decoding of the target alone, one token per forward pass (the baseline that
    speculative decoding must reproduce token for token, and the speed it is measured against)."""
    device = next(target.parameters()).device
    stops = set(stop_ids)
    cache = _new_cache(target)
    kv = _cache_arg(target)
    ids = torch.tensor([list(input_ids)], dtype=torch.long, device=device)
    new: list[int] = []
    while len(new) < max_new_tokens:
        out = target(ids, **{kv: cache}, use_cache=True)
        tok = int(out.logits[0, -1].argmax())
        new.append(tok)
        if tok in stops:
            break
        ids = torch.tensor([[tok]], device=device)
    return new


class ReferenceBackend:
    """Loads a target and a drafter once and runs prompts through ``speculative_generate``.

    With several ``views`` (``("resolved", "raw")``) the target is loaded once and each view's drafter
    is built from the same weights; ``run_prompt_views`` runs the first view for real and replays the
    others against its target trace (``replay_generate``), so a second view costs drafter passes only.

    ``layer_offset=0`` builds a backend whose drafter reads the target's layer ids one off: not a
    reference at all, but a stand-in for an engine with that bug (``LAYER_IDS_ONE_OFF``), so the
    engine diagnosis can be tested where no vLLM is installed. Its ``name`` says so.

    Example::

        backend = ReferenceBackend("tests/fixtures/models/target", "tests/fixtures/models/drafter")
        result = backend.run_prompt(0, [40, 3, 6, 9], max_new_tokens=32)
        both = ReferenceBackend(target, drafter, views=("resolved", "raw")).run_prompt_views(0, ids, 32)
    """

    name = "reference"

    def __init__(self, target: str, drafter: str, *, device: str = "cpu", view: str = "resolved",
                 dtype: torch.dtype | None = None, views: Sequence[str] | None = None, layer_offset: int = 1):
        self.device = device
        self.views = tuple(views or (view,))
        if layer_offset != 1:
            self.name = LAYER_IDS_ONE_OFF
        self.target, self.tokenizer = open_target(load_target, target, device, dtype)
        self.drafters = {v: load_drafter(drafter, self.target, v, device, layer_offset=layer_offset)
                         for v in self.views}
        self.drafter = self.drafters[self.views[0]]
        self.stop_ids = stop_token_ids(self.target, self.tokenizer)
        self.replayed_steps = 0  # greedy target steps the replays needed past the first view's run

    @property
    def block_size(self) -> int:
        return self.drafter.spec.block_size

    def _result(self, index: int, c: DraftCounts, tokens: list[int], wall: float, label: str | None) -> PromptResult:
        return PromptResult.from_counts(
            index, drafts=c.drafts, draft_tokens=c.draft_tokens, accepted_tokens=c.accepted_tokens,
            accepted_per_position=c.accepted_per_position, new_tokens=len(tokens), wall_seconds=wall, label=label,
        )

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def run_prompt(self, index: int, input_ids: Sequence[int], max_new_tokens: int, *,
                   block_size: int | None = None, label: str | None = None) -> tuple[PromptResult, list[int]]:
        """Generate for one prompt with the first view's drafter; returns its counters and the new tokens."""
        t0 = time.perf_counter()
        tokens, c = speculative_generate(self.target, self.drafter, input_ids, max_new_tokens,
                                         block_size=block_size, stop_ids=self.stop_ids)
        self._sync()
        return self._result(index, c, tokens, time.perf_counter() - t0, label), tokens

    def run_prompt_views(self, index: int, input_ids: Sequence[int], max_new_tokens: int, *,
                         block_size: int | None = None, label: str | None = None
                         ) -> dict[str, tuple[PromptResult, list[int]]]:
        """Every view on one prompt: the first runs speculative decoding, the others replay against its
        trace (one prefill, one set of target passes). Returns each view's counters and tokens."""
        out: dict[str, tuple[PromptResult, list[int]]] = {}
        trace = TargetTrace()
        t0 = time.perf_counter()
        first = self.views[0]
        tokens, c = speculative_generate(self.target, self.drafters[first], input_ids, max_new_tokens,
                                         block_size=block_size, stop_ids=self.stop_ids, trace=trace)
        self._sync()
        out[first] = self._result(index, c, tokens, time.perf_counter() - t0, label), tokens
        for view in self.views[1:]:
            t0 = time.perf_counter()
            try:
                tokens, c = replay_generate(self.drafters[view], trace, max_new_tokens, block_size=block_size,
                                            stop_ids=self.stop_ids)
            except ValueError:  # this view reads other target layers: it needs target passes of its own
                tokens, c = speculative_generate(self.target, self.drafters[view], input_ids, max_new_tokens,
                                                 block_size=block_size, stop_ids=self.stop_ids)
            self._sync()
            out[view] = self._result(index, c, tokens, time.perf_counter() - t0, label), tokens
        self.replayed_steps += trace.extended
        return out


# The name a backend built with layer_offset=0 reports: it simulates an engine fault, it is no engine.
LAYER_IDS_ONE_OFF = "simulated engine (reference reading target layer ids one off)"
