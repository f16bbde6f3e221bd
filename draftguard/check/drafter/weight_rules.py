"""Weight-shape rules (DG120-DG124, DG131), from safetensors headers only: no weight bytes are read.

In: the ``Weights`` (tensor dtypes and shapes) and config values a ``DrafterCheck`` holds, and the
target layer ids the shared rules found usable.
Out: ``WeightRules``, a mixin whose methods append ``Finding`` objects to the check's ``findings``.
"""

from __future__ import annotations

import re
from pathlib import Path

from draftguard.check.drafter.detect import stated as stated_keys
from draftguard.check.drafter.files import _is_int
from draftguard.check.findings import show as _show
from draftguard.check.weights import Tensor, Weights

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_PREFIXES = ("model.", "drafter.", "draft_model.")


class WeightRules:
    """The weight rules of ``DrafterCheck``, kept apart because they read headers, not config keys."""

    def weight_shapes(self, ids: list[int] | None) -> None:
        weights = self.weights
        assert weights is not None
        if weights.unreachable:
            return  # said by DG125
        for problem in weights.problems:
            self.finding("DG120", Path(problem.file).name, None, None,
                         f"{problem.file}: {problem.message}. Fix: re-save the checkpoint (safetensors "
                         "save_file) and commit every file the index names.",
                         file=problem.file, line=problem.line)
        tensors = _strip_prefix(weights.tensors)
        if not tensors:
            return
        self.fc_shape(tensors, ids)
        self.layers_in_weights(tensors)
        self.attention_shapes(tensors)
        self.dtype_note(weights)

    def fc_shape(self, tensors: dict[str, Tensor], ids: list[int] | None) -> None:
        fc = tensors.get("fc.weight")
        if fc is None or len(fc.shape) != 2:
            return
        n_ids = len(ids) if ids else (3 if self.fmt.family == "eagle3" else None)
        t_hidden = self.target_value("hidden_size")
        source = f"{self.target_name}'s hidden_size" if self.target is not None else ""
        if not _is_int(t_hidden):
            t_hidden = self.fmt.target_hidden.value if self.fmt.target_hidden else self.drafter("hidden_size")
            source = "the drafter's hidden_size" if not self.fmt.target_hidden else "`target_hidden_size`"
        if n_ids is None or not _is_int(t_hidden) or t_hidden <= 0:
            return  # a non-positive size is reported by the size rules; nothing to divide by here
        expected_in = n_ids * t_hidden
        hidden = self.drafter("hidden_size")
        ids_key = (self.fmt.target_ids or self.fmt.aux_ids)[0].key if (self.fmt.target_ids or self.fmt.aux_ids) else "hidden_size"
        if fc.shape[1] != expected_in:
            guess = f" ({fc.shape[1] // t_hidden} layers' worth)" if fc.shape[1] % t_hidden == 0 else ""
            self.finding("DG121", ids_key, list(fc.shape), [hidden, expected_in],
                         f"`fc.weight` in {fc.file} has {fc.shape[1]} in-features{guess}, but the config reads "
                         f"{n_ids} target layers x {source} {t_hidden} = {expected_in}. The weights were trained "
                         "for other target layers or another target. Fix: make the layer ids match the ones "
                         "the checkpoint was trained with.")
        elif _is_int(hidden) and fc.shape[0] != hidden:
            self.finding("DG121", self.layer_key("hidden_size"), list(fc.shape), [hidden, expected_in],
                         f"`fc.weight` in {fc.file} projects to {fc.shape[0]}, but the drafter's hidden_size is "
                         f"{hidden}. Fix: set `hidden_size` to the checkpoint's.")

    def layers_in_weights(self, tensors: dict[str, Tensor]) -> None:
        found = _layer_indices(tensors)
        n = self.drafter("num_hidden_layers")
        if not found or not _is_int(n) or len(found) == n:
            return
        key = self.layer_key("num_hidden_layers")
        self.finding("DG122", key, n, len(found),
                     f"`{key}` is {n}, but the weights hold {len(found)} decoder layers "
                     f"(layers.{min(found)} to layers.{max(found)}). The engine builds {n} layers and "
                     f"{'leaves some randomly initialised' if n > len(found) else 'ignores trained ones'}. "
                     "Fix: set `num_hidden_layers` to the checkpoint's layer count.")

    def attention_shapes(self, tensors: dict[str, Tensor]) -> None:
        heads, kv_heads = self.drafter("num_attention_heads"), self.drafter("num_key_value_heads")
        head_dim, hidden = self.drafter("head_dim"), self.drafter("hidden_size")
        if not _is_int(kv_heads):
            kv_heads = heads
        if not (_is_int(heads) and _is_int(head_dim)):
            return
        if _is_int(self.drafter("qk_nope_head_dim")) and _is_int(self.drafter("qk_rope_head_dim")):
            return  # MLA (a DeepSeek EAGLE-3 head): q_proj is heads x (nope + rope), no k/v_proj; head_dim unread
        expected = {"q_proj": heads * head_dim, "k_proj": kv_heads * head_dim, "v_proj": kv_heads * head_dim}
        check_in = self.fmt.is_dflash and _is_int(hidden)  # EAGLE-3's first layer reads 2 x hidden
        bad: list[str] = []
        for name, tensor in sorted(tensors.items()):
            for proj, out in expected.items():
                if name.endswith(f"self_attn.{proj}.weight") and len(tensor.shape) == 2:
                    if tensor.shape[0] != out or (check_in and tensor.shape[1] != hidden):
                        want = [out, hidden] if check_in else [out, tensor.shape[1]]
                        bad.append(f"{name} is {list(tensor.shape)}, expected {want}")
        if not bad or any(f.rule == "DG123" for f in self.result.findings):
            return  # the config check's DG123 already said it, from the same q_proj
        key = self.layer_key("head_dim") if "head_dim" in (self.layer_raw or {}) else self.layer_key("num_attention_heads")
        derived = ("" if "head_dim" in (self.layer_raw or {}) else
                   " (not in config.json: derived by the config class, from hidden_size / num_attention_heads "
                   "or its default)")
        self.finding("DG123", key, bad[0], None,
                     f"Attention weights do not match the config: {bad[0]}"
                     + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "")
                     + f". The config gives num_attention_heads {heads}, num_key_value_heads {kv_heads}, "
                     f"head_dim {head_dim}{derived}, hidden_size {hidden}. Loading fails, or the heads are split "
                     "differently from training. Fix: set these to the checkpoint's values"
                     + (", and state `head_dim`." if derived else "."))

    def dtype_note(self, weights: Weights) -> None:
        dtypes = weights.dtypes
        text = ", ".join(f"{d} ({n} tensors)" for d, n in sorted(dtypes.items(), key=lambda kv: -kv[1]))
        stated = (self.layer_raw or {}).get("dtype", (self.layer_raw or {}).get("torch_dtype", self.raw.get("torch_dtype")))
        key = self.layer_key("dtype") if "dtype" in (self.layer_raw or {}) else self.layer_key("torch_dtype")
        names = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
        agree = stated is None or any(names.get(d) == str(stated).replace("torch.", "") for d in dtypes)
        note = "" if agree else f"; config.json says {stated}, so the engine casts on load"
        where = weights.files[0] if len(weights.files) == 1 else f"{len(weights.files)} files"
        self.finding("DG124", key, stated, sorted(dtypes),
                     f"Weights ({where}) are {text}{note}.")

    # reduced draft vocabulary

    def vocab_keys(self) -> tuple[tuple[str, object] | None, tuple[str, object] | None]:
        """The keys that hold the target's vocabulary and the draft vocabulary, each (key, value) or
        None, as this drafter's trainer writes them. Most write the target's as `vocab_size` and a
        reduced head's as `draft_vocab_size`; speculators' Eagle3 heads trained with DeepSpeed
        (``Eagle3Deepspeed``) write the draft vocabulary as `vocab_size` and the target's as
        `target_vocab_size` (issue 34: reading `vocab_size` as the target's gave a false DG107)."""
        target_vocab = next(iter(stated_keys(self.raw, ("target_vocab_size", self.layer_key("target_vocab_size")))),
                            None)
        draft = next(iter(stated_keys(self.raw, ("draft_vocab_size", self.layer_key("draft_vocab_size")))), None)
        if target_vocab is not None:
            if draft is None:
                draft = next(iter(stated_keys(self.raw, (self.layer_key("vocab_size"), "vocab_size"))), None)
            return (target_vocab.key, target_vocab.value), (draft.key, draft.value) if draft is not None else None
        vocab = self.drafter("vocab_size")
        return ((self.layer_key("vocab_size"), vocab) if vocab is not None else None,
                (draft.key, draft.value) if draft is not None else None)

    def draft_vocab(self) -> None:
        """DG131. A drafter that drafts over ``draft_vocab_size`` tokens of the target's vocabulary,
        mapped back by ``d2t`` (draft id -> target id) and ``t2d`` (target id -> in the draft vocab),
        as speculators and EAGLE-3 save them. Tensor shapes come from the headers only."""
        target_vocab, stated = self.vocab_keys()
        if stated is None:
            self.reduced_head_unstated()
            return
        key, draft = stated
        if not _is_int(draft) or draft < 1:
            self.finding("DG131", key, draft, None,
                         f"`{key}` must be a positive integer (the rows of the drafter's lm_head), got {_show(draft)}.")
            return
        full, whose = self.target_value("vocab_size"), f"{self.target_name}'s vocab_size" if self.target else ""
        if not _is_int(full) and target_vocab is not None:
            full, whose = target_vocab[1], f"the drafter's `{target_vocab[0]}`"
        if not _is_int(full):
            full = None
        if full is not None and draft > full:
            self.finding("DG131", key, draft, full,
                         f"`{key}` is {draft}, above {whose} ({full}). The draft vocabulary is a subset of the "
                         "target's (d2t maps each draft id to a target id), so it cannot be larger. Fix: set "
                         "`draft_vocab_size` to the rows of the trained lm_head, for this target.")
        if self.weights is None or self.weights.unreachable:
            return  # no checkpoint, or DG125 says it was not read
        tensors = _strip_prefix(self.weights.tensors)
        if not tensors:
            return
        d2t, t2d = _tensor(tensors, "d2t"), _tensor(tensors, "t2d")
        head, embed = _tensor(tensors, "lm_head.weight"), _tensor(tensors, "embed_tokens.weight")
        faults: list[tuple[Tensor, list[int], str]] = []
        if d2t is not None and d2t.shape != (draft,):
            faults.append((d2t, [draft], f"one target id per draft token, [{key}]"))
        if t2d is not None and full is not None and t2d.shape != (full,):
            faults.append((t2d, [full], f"one flag per target token, [{whose}]"))
        if head is not None and len(head.shape) == 2 and head.shape[0] != draft:
            faults.append((head, [draft, head.shape[1]], f"its rows are the draft vocabulary, `{key}`"))
        if embed is not None and full is not None and len(embed.shape) == 2 and embed.shape[0] != full:
            faults.append((embed, [full, embed.shape[1]],
                           f"the drafter embeds target token ids, so its rows are {whose}; only the head is reduced"))
        for tensor, expected, why in faults:
            self.finding("DG131", key, list(tensor.shape), expected,
                         f"`{tensor.name}` in {tensor.file} has shape {list(tensor.shape)}, expected {expected} "
                         f"({why}). Engines index it with the other size and fail to load, or map drafted "
                         f"tokens to the wrong target ids. Fix: ship the tensors saved with this `{key}` "
                         f"({draft}), built for this target's vocabulary.")
        if d2t is None and head is not None and full is not None and draft < full and head.shape[0] == draft:
            self.finding("DG131", key, draft, full,
                         f"`{key}` is {draft}, below {whose} ({full}), and `{head.name}` in {head.file} drafts "
                         f"over {draft} tokens, but the checkpoint has no `d2t` to map draft ids to target ids. "
                         "Engines then read draft ids as target ids (vLLM 0.32 runs it with its map at zeros: "
                         "draft id i drafts target id i). Fix: ship the `d2t` and `t2d` tensors saved with the drafter.")


    def reduced_head_unstated(self) -> None:
        """DG131 without `draft_vocab_size`: the checkpoint's lm_head drafts over fewer rows than the
        vocabulary, so every reader builds a full-vocabulary head and the weights do not load
        (SafeAILab/EAGLE#249: lm_head [32000, 4096] against vocab 128,256)."""
        if self.fmt.family not in ("eagle3", "eagle") or self.weights is None or self.weights.unreachable:
            return
        head = _tensor(_strip_prefix(self.weights.tensors), "lm_head.weight")
        full, whose = self.target_value("vocab_size"), f"{self.target_name}'s vocab_size" if self.target else ""
        if not _is_int(full):
            full, whose = self.drafter("vocab_size"), f"the drafter's `{self.layer_key('vocab_size')}`"
        if head is None or len(head.shape) != 2 or not _is_int(full) or head.shape[0] == full:
            return
        rows = head.shape[0]
        self.finding("DG131", "draft_vocab_size", None, rows,
                     f"`{head.name}` in {head.file} has {rows} rows, but config.json states no `draft_vocab_size`, "
                     f"so readers build the head over {whose} ({full}) rows and loading fails with a size mismatch "
                     f"(SafeAILab/EAGLE#249: lm_head [32000, 4096] against 128256). Fix: add "
                     f"\"draft_vocab_size\": {rows}, and ship the `d2t`/`t2d` tensors saved with the head.")


def _strip_prefix(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """Checkpoints saved from a wrapper prefix every name ("model.fc.weight"); match on the rest."""
    for prefix in _PREFIXES:
        if tensors and all(name.startswith(prefix) for name in tensors):
            return {name[len(prefix):]: t for name, t in tensors.items()}
    return tensors


def _tensor(tensors: dict[str, Tensor], name: str) -> Tensor | None:
    """A tensor by name, or by a name that ends with it: EAGLE-3 checkpoints mix bare (``d2t``) and
    prefixed (``model.embed_tokens.weight``) names, which _strip_prefix leaves as they are."""
    found = tensors.get(name)
    if found is None:
        found = next((t for n, t in sorted(tensors.items()) if n.endswith("." + name)), None)
    return found


def _layer_indices(tensors: dict[str, Tensor]) -> set[int]:
    found = set()
    for name in tensors:
        match = _LAYER.search(name)
        if match:
            found.add(int(match.group(1)))
    return found

