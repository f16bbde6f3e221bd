"""Gemma 4's MTP drafter: the separate "assistant" checkpoint (``Gemma4AssistantForCausalLM``,
``model_type`` gemma4_assistant, e.g. google/gemma-4-e2b-it-assistant) that vLLM 0.32 serves with
``speculative_config={"method": "mtp", "model": <assistant>}`` beside a Gemma 4 target; its config is
rewritten to ``gemma4_mtp`` (``Gemma4MTPModel``, ``model_executor/models/gemma4_mtp.py``) and drafted by
``v1/spec_decode/gemma4.py``. Unlike the MTP layers other families ship inside the target, the drafter
lives in its own repo, so accept takes it as ``--drafter``.

The forward, as vLLM runs it, for one draft step from the last position p the target has processed:

- the target's own embedding table (``embed_tokens``, shared after load; the assistant's draft-dim
  copy is dropped) of the token, times sqrt(backbone_hidden_size) as Gemma scales it, concatenated
  with a backbone-dim hidden state, then ``pre_projection`` to the draft width;
- every decoder layer of the assistant (``model.layers.{i}``): Q-only attention (``q_proj``,
  ``q_norm``, RoPE of the layer's type, scaling 1, softcap ``attn_logit_softcapping`` where set)
  over the target's K/V: the last non-shared target layer of the same type (sliding or full),
  positions 0..p, the sliding layers within the target's window; Gemma's four norms, the GeLU MLP,
  ``layer_scalar``;
- ``model.norm``: its output gives the logits through the assistant's own draft-dim ``lm_head``
  (tied to its ``embed_tokens``; centroid-masked where ``use_ordered_embeddings``; softcapped by
  ``final_logit_softcapping``; the generation config's ``suppress_tokens`` masked), and
  ``post_projection`` of it is the backbone-dim hidden state fed to the next step.
- The first step reads the target's final-normed hidden state at p and the target's next token (the
  anchor); every step queries at the same position p (``constant_draft_positions``): neither the
  position nor the K/V advance while drafting.

In: a Gemma 4 target folder and an assistant folder.
Out: ``Gemma4Backend`` (the reference backend's interface: ``run_prompt``, ``run_prompt_views``,
``target``, ``tokenizer``, ``block_size``), ``Gemma4Drafter`` and ``gemma4_generate`` (also for
training a fixture). Needs the ``runner`` extra (torch).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn

from draftguard.runner.dflash_model import _local_folder, _read_weights, load_target
from draftguard.runner.eagle3 import DEFAULT_SPECULATIVE_TOKENS, Eagle3Backend
from draftguard.check.drafter.detect import is_mtp_assistant
from draftguard.runner.mtp_assistant import assistant_faults
from draftguard.runner.reference import DraftCounts, _count_step, open_target, stop_token_ids
from draftguard.snapshot import BadInput

def _text_model(target: nn.Module) -> nn.Module:
    """The target's decoder stack: ``model`` (Gemma4ForCausalLM) or ``model.language_model`` (the
    multimodal Gemma4ForConditionalGeneration)."""
    inner = target.model
    return getattr(inner, "language_model", inner)


def target_pass(target: nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, Any]]:
    """The target over a whole sequence (no cache: recomputing is exact): its logits, its final-normed
    hidden states (what vLLM's Gemma4Model returns and the proposer feeds) and the K/V its last
    non-shared layer of each type stores (transformers' ``store`` layers: the ones vLLM's proposer
    maps the drafter's layers to)."""
    out = _text_model(target)(input_ids=ids, use_cache=False, return_shared_kv_states=True)
    hidden = out.last_hidden_state
    logits = target.lm_head(hidden)
    cap = target.config.get_text_config().final_logit_softcapping
    if cap is not None:
        logits = torch.tanh(logits / cap) * cap
    return logits, hidden, dict(out.shared_kv_states)


class Gemma4Drafter(nn.Module):
    """The assistant as vLLM's ``Gemma4MTP`` runs it (module docstring). ``forward(tokens, hidden,
    positions, kv)`` runs queries at ``positions`` [B, L] (each attending the target's K/V at 0..its
    position, no further: the queries are independent, so a whole sequence trains in one pass) and
    returns the draft logits and the backbone-dim state for the next step."""

    def __init__(self, config: Any, target: nn.Module, suppress: Sequence[int] = ()):
        super().__init__()
        from transformers import Gemma4AssistantForCausalLM  # transformers: only a model run pays it

        self.config = config
        self.assistant = Gemma4AssistantForCausalLM(config)
        self.text = config.get_text_config()
        self.target_text = target.config.get_text_config()
        self.register_buffer("suppress", torch.tensor(list(suppress), dtype=torch.long), persistent=False)
        # Shared, not owned: vLLM replaces the assistant's embed_tokens with the target's after loading.
        self._shared = {"embed": _text_model(target).embed_tokens}
        self.normalizer = float(config.backbone_hidden_size) ** 0.5

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        table = self._shared["embed"]
        return nn.functional.embedding(tokens, table.weight) * torch.tensor(self.normalizer, dtype=table.weight.dtype)

    def _masks(self, positions: torch.Tensor, length: int) -> dict[str, torch.Tensor]:
        """Per type, which of the target's ``length`` K/V each query reads: those at or before its position,
        and for a sliding layer the last ``sliding_window`` of them (vLLM's per-layer window)."""
        kv = torch.arange(length, device=positions.device)
        pos = positions[:, None, :, None]
        full = kv <= pos
        window = int(self.target_text.sliding_window)
        additive = {"full_attention": full, "sliding_attention": full & (kv > pos - window)}
        zero = torch.zeros((), dtype=self.assistant.pre_projection.weight.dtype, device=positions.device)
        return {t: torch.where(m, zero, float("-inf")) for t, m in additive.items()}  # eager and sdpa alike

    def forward(self, tokens: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor,
                kv: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.assistant
        x = a.pre_projection(torch.cat([self.embed(tokens), hidden], -1))
        length = next(iter(kv.values()))[0].shape[2]
        out = a.model(inputs_embeds=x, position_ids=positions, attention_mask=self._masks(positions, length),
                      shared_kv_states=dict(kv), use_cache=False,
                      # no query dropped (transformers 5.24 slices absent per-layer inputs for an int here)
                      logits_to_keep=slice(None)).last_hidden_state
        if a.masked_embedding is not None:  # use_ordered_embeddings: vLLM's centroid-masked logits
            logits = a.masked_embedding(out, a.lm_head.weight)
        else:
            logits = a.lm_head(out)
            cap = self.text.final_logit_softcapping
            if cap is not None:
                logits = torch.tanh(logits / cap) * cap
        if self.suppress.numel():
            logits = logits.index_fill(-1, self.suppress, float("-inf"))
        return logits, a.post_projection(out)


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(f"{path}: cannot read ({exc})", file=str(path)) from None
    if not isinstance(data, dict):
        raise BadInput(f"{path}: not a JSON object", file=str(path))
    return data


def load_gemma4_drafter(name: str, target: nn.Module, device: str | None = None) -> tuple[Gemma4Drafter, list[str]]:
    """Build the assistant of folder ``name`` beside ``target`` and load its tensors as an engine holds
    them: an absent one zero, and named in the returned faults (the cause ``mtp-weights``); a tensor the
    assistant does not name, or of another shape, is bad input naming the file and key (vLLM refuses it too).
    Example: ``drafter, faults = load_gemma4_drafter("google/gemma-4-e2b-it-assistant", target)``."""
    from transformers import AutoConfig  # transformers: only a model run pays it

    folder = _local_folder(name, "drafter")
    where = folder / "config.json"
    raw = read_json(where)
    if not is_mtp_assistant(raw):
        raise BadInput(f"{where}: model_type {raw.get('model_type')!r} is no Gemma 4 assistant", file=str(where),
                       key="model_type")
    config = AutoConfig.from_pretrained(str(folder))
    backbone = int(target.config.get_text_config().hidden_size)
    if int(config.backbone_hidden_size) != backbone:
        raise BadInput(f"{where}: backbone_hidden_size {config.backbone_hidden_size} is not the target's hidden_size "
                       f"{backbone}", file=str(where), key="backbone_hidden_size")
    gen = folder / "generation_config.json"
    suppress = (read_json(gen).get("suppress_tokens") or []) if gen.is_file() else []
    drafter = Gemma4Drafter(config, target, suppress)
    expected = drafter.assistant.state_dict()
    weights = _read_weights(folder)
    state: dict[str, torch.Tensor] = {}
    for key, tensor in weights.items():
        if key not in expected:
            raise BadInput(f"{folder}: `{key}` is no tensor of the Gemma 4 assistant this config builds (vLLM's "
                           "gemma4_mtp has no parameter for it either)", file=str(folder), key=key)
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise BadInput(f"{folder}: `{key}` has shape {tuple(tensor.shape)}, the config calls for "
                           f"{tuple(expected[key].shape)}", file=str(folder), key=key)
        state[key] = tensor.to(expected[key].dtype) if tensor.is_floating_point() else tensor
    tied = {"lm_head.weight"} if config.tie_word_embeddings else set()
    # A buffer the checkpoint lacks (``layer_scalar``) keeps its initial value, as vLLM's loader leaves it.
    buffers = {k for k, _ in drafter.assistant.named_buffers()}
    state.update({k: expected[k] for k in buffers - set(state) if k in expected})
    absent = sorted(set(expected) - set(state) - tied)
    faults = assistant_faults(folder)  # from the headers, as the CLI names the cause (runner/mtp_assistant.py)
    for key in absent:
        state[key] = torch.zeros_like(expected[key])
    if "lm_head.weight" in tied:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    drafter.assistant.load_state_dict(state)
    param = next(target.parameters())
    return drafter.to(device=device or param.device, dtype=param.dtype).eval(), faults


@torch.inference_mode()
def gemma4_generate(target: nn.Module, drafter: Gemma4Drafter, input_ids: Sequence[int], max_new_tokens: int, *,
                    num_speculative_tokens: int = DEFAULT_SPECULATIVE_TOKENS, stop_ids: Sequence[int] = ()
                    ) -> tuple[list[int], DraftCounts]:
    """Greedy decoding with the assistant drafting K tokens from the last processed position and the
    target verifying [anchor, d1 .. dK] in one pass; the output equals the target's greedy tokens."""
    k = num_speculative_tokens
    if k < 1:
        raise BadInput(f"--num-speculative-tokens must be at least 1, got {k}")
    if not input_ids:
        raise BadInput("a prompt has no tokens")
    device = next(target.parameters()).device
    stops = set(stop_ids)
    counts = DraftCounts(accepted_per_position=[0] * k)
    context = list(input_ids)  # the tokens whose K/V the target holds (positions 0..p)
    logits, hidden, kv = target_pass(target, torch.tensor([context], device=device))
    anchor = int(logits[0, -1].argmax())
    state = hidden[:, -1:]
    new = [anchor]
    while len(new) < max_new_tokens and anchor not in stops:
        p = len(context) - 1
        at = torch.tensor([[p]], device=device)
        seen = {t: (key[:, :, : p + 1], value[:, :, : p + 1]) for t, (key, value) in kv.items()}
        token, drafted = torch.tensor([[anchor]], device=device), []
        for _ in range(k):
            draft_logits, state = drafter(token, state, at, seen)
            token = draft_logits.argmax(-1)
            drafted.append(int(token[0, 0]))
        logits, hidden, kv = target_pass(target, torch.tensor([context + [anchor] + drafted], device=device))
        posterior = logits[0, p + 1:].argmax(-1).tolist()
        accepted = 0
        while accepted < k and drafted[accepted] == posterior[accepted]:
            accepted += 1
        produced, accepted = _count_step(counts, drafted[:accepted] + [posterior[accepted]], accepted, stops, k + 1)
        context += [anchor] + produced[:-1]
        state = hidden[:, len(context) - 1:len(context)]
        new.extend(produced)
        anchor = produced[-1]
    return new[:max_new_tokens], counts


class Gemma4Backend(Eagle3Backend):
    """The reference backend for a Gemma 4 target and its assistant (``--method mtp --drafter <assistant>``).
    K defaults to 3 (vLLM takes ``num_speculative_tokens`` from the user; the assistant drafts one per step).

    Example::

        backend = Gemma4Backend("google/gemma-4-e2b-it", "google/gemma-4-e2b-it-assistant")
        result, tokens = backend.run_prompt(0, [2, 818, 5279], max_new_tokens=32)
    """

    name = "reference"

    def __init__(self, target: str, drafter: str, *, device: str = "cpu", dtype: torch.dtype | None = None,
                 num_speculative_tokens: int | None = None):
        self.device, self.views = device, ("resolved",)
        self.target, self.tokenizer = open_target(load_target, target, device, dtype)
        self.drafter, self.faults = load_gemma4_drafter(drafter, self.target, device)
        self.drafters = {"resolved": self.drafter}
        self.k = num_speculative_tokens or DEFAULT_SPECULATIVE_TOKENS
        self.stop_ids = stop_token_ids(self.target, self.tokenizer)
        self.replayed_steps = 0

    def generate(self, head: nn.Module, input_ids: Sequence[int], max_new_tokens: int, k: int
                 ) -> tuple[list[int], DraftCounts]:
        return gemma4_generate(self.target, head, input_ids, max_new_tokens, num_speculative_tokens=k,
                               stop_ids=self.stop_ids)


__all__ = ["Gemma4Backend", "Gemma4Drafter", "gemma4_generate", "load_gemma4_drafter", "target_pass"]
