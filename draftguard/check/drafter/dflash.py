"""Rules for DFlash drafters and their relatives (z-lab DFlash, DFlash2, DSpark, Domino, and the
speculators dflash format): mask token, block size, sliding windows, default and shifted target
layers, and what vLLM's runners refuse (DG101, DG109-DG117).

In: what ``DrafterCheck`` holds: the drafter's ``Snapshot``, raw config, ``DrafterFormat``, resolved
values, the ``TargetModel`` (or None) and ``Weights``; tokenizer files through ``files.read_optional``.
Out: ``DFlashCheck``, whose ``run()`` returns the shared rules' findings plus these (a list of ``Finding``).
"""

from __future__ import annotations

import json

from draftguard.check.drafter.engines import (
    V1_CANDIDATE_DRAFTS, V1_MIXED_DRAFTS, VLLM_RUNNER_FACTS, build_target_layer_ids, dflash_fallbacks,
    dflash_v1_refusal,
)
from draftguard.check.drafter.detect import ZLAB_DEFAULT_IDS, Stated
from draftguard.check.drafter.files import _is_int
from draftguard.check.drafter.rules import DrafterCheck
from draftguard.check.drafter.target import special_token_ids
from draftguard.check.findings import show as _show


class DFlashCheck(DrafterCheck):
    """A drafter that drafts a block [anchor, mask, ...] in one pass from concatenated target layers."""

    def format_rules(self, count: tuple[int, str] | None) -> None:
        self.mask_token()
        self.block_size()
        self.window()
        self.engine_refusal()

    def missing_ids(self, count: tuple[int, str] | None) -> None:
        """DG101: no target layer ids. Engines and trainers disagree on the fallback, so say each."""
        key = "aux_hidden_state_layer_ids" if self.fmt.layer_prefix else "dflash_config.target_layer_ids"
        draft_layers = self.drafter("num_hidden_layers")
        if count is not None:
            fallbacks = dflash_fallbacks(count[0], draft_layers if _is_int(draft_layers) else None)
            instead = (f" Instead ({count[1]}): " + "; ".join(f.describe() for f in fallbacks)
                       + ". These differ, so the drafter reads other layers in each.")
        else:
            instead = " Engines then fall back to their own defaults, which differ from engine to engine."
        self.finding("DG101", key, None, None,
                     f"This {self.fmt.label} drafter does not say which target layers it reads (no `{key}`)."
                     f"{instead} Fix: add `{key}` with the layers it was trained on.")

    def canonical_ids(self, n: int) -> tuple[list[int], str] | None:
        """z-lab's build_target_layer_ids, for the trainers known to use it (ZLAB_DEFAULT_IDS). Other
        DFlash-family trainers (DSpark, Domino, DFlare, TorchSpec) pick their own layers on purpose."""
        if self.fmt.architecture not in ZLAB_DEFAULT_IDS:
            return None
        layers = self.drafter("num_hidden_layers")
        if not _is_int(layers) or layers < 1 or n < 4:
            return None
        ids = build_target_layer_ids(n, layers)
        if len(set(ids)) != len(ids):
            return None  # a target too shallow for this many draft layers: no usual list to compare with
        return ids, f"z-lab's build_target_layer_ids({n}, {layers})"

    # mask token

    def mask_token(self) -> None:
        """DG109, DG110, DG116: the token that fills every drafted block after the anchor."""
        vocab_values = [(self.drafter("vocab_size"), "the drafter's vocab_size")]
        if self.target is not None:
            vocab_values.append((self.target_value("vocab_size"), f"{self.target_name}'s vocab_size"))
        masks = self.fmt.mask_tokens
        if not masks:
            key = "mask_token_id" if self.fmt.layer_prefix else "dflash_config.mask_token_id"
            self.finding("DG109", key, None, None,
                         f"This {self.fmt.label} drafter has no `{key}`. Every drafted block is [anchor, mask, "
                         "...], so an engine without it fills the block with some other token. Fix: add the "
                         "mask token id the drafter was trained with.")
            return
        if len({json.dumps(m.value) for m in masks}) > 1:
            self.finding("DG109", masks[1].key, masks[1].value, masks[0].value,
                         f"`{masks[1].key}` is {_show(masks[1].value)} but `{masks[0].key}` is "
                         f"{_show(masks[0].value)}. Fix: state the mask token once.")
        stated = masks[0]
        mask = stated.value
        if not _is_int(mask) or mask < 0:
            self.finding("DG109", stated.key, mask, None, f"`{stated.key}` must be a token id >= 0, got {_show(mask)}.")
            return
        for vocab, what in vocab_values:
            if _is_int(vocab) and mask >= vocab:
                self.finding("DG109", stated.key, mask, vocab,
                             f"`{stated.key}` is {mask}, not below {what} ({vocab}): the embedding lookup of "
                             "every drafted block goes out of range. Fix: use the mask token id the drafter "
                             "was trained with, for this target's vocabulary.")
                return
        self.mask_is_used_token(stated, mask)
        tokenizer = self.target.tokenizer if self.target is not None else None
        # Cheapest first: tokenizer_config.json's added tokens settle most masks without tokenizer.json.
        if tokenizer is None or mask in tokenizer.added(config_only=True) or mask in tokenizer.added():
            return
        token = tokenizer.token_of(mask)
        if token is not None:
            self.finding("DG110", stated.key, mask, token,
                         f"`{stated.key}` is {mask}, which {self.target_name}'s tokenizer ({tokenizer.shown()}) "
                         f"maps to the ordinary token {token!r}, not a special or added token. The drafter "
                         "cannot tell a masked slot from that word, and acceptance collapses (a wrong mask "
                         "token measured tau 1.14 against 4.00 healthy). Fix: use the special token the "
                         "drafter was trained with.")

    # block size

    def block_size(self) -> None:
        sizes = self.fmt.block_sizes
        if not sizes:
            self.finding("DG111", "block_size", None, None,
                         "The drafter states no `block_size` (at the top level or in `dflash_config`), so the "
                         "number of tokens it drafts per step cannot be resolved; engines guess. Fix: add "
                         "\"block_size\" with the size the drafter was trained with.")
            return
        for stated in sizes:
            if not _is_int(stated.value) or stated.value < 2:
                self.finding("DG111", stated.key, stated.value, None,
                             f"`{stated.key}` must be an integer of at least 2 (the anchor plus one drafted "
                             f"token), got {_show(stated.value)}.")
                return
        first = sizes[0]
        for stated in sizes[1:]:
            if stated.value != first.value:
                self.finding("DG112", stated.key, stated.value, first.value,
                             f"`{stated.key}` is {stated.value} but `{first.key}` is {first.value}. Readers "
                             "take one or the other, so the engine and the reference may draft blocks of "
                             "different sizes. Fix: state the block size once, or make both agree.")

    # effective attention, from the fidelity engine's view

    def window(self) -> None:
        """DG113. The fidelity engine's DG005 already covers layers declared sliding that run full;
        this covers the drafter that gives a window but whose resolved layers hold no sliding layer at
        all (layer types derived from max_window_layers), which DG006 rates only a warning."""
        layers = self.result.attention
        raw_window = (self.layer_raw or {}).get("sliding_window")
        if not layers or not _is_int(raw_window) or (self.layer_raw or {}).get("use_sliding_window") is False:
            return
        if any(layer.declared.startswith("sliding") for layer in layers):
            return  # declared sliding layers are DG005's, whatever their effective window
        if any(layer.effective.startswith("sliding") for layer in layers):
            return
        key = self.layer_key("sliding_window")
        # DG006 (window unused, a warning) states the same fact for the same key: DG113 says it once,
        # with why it matters for a drafter and the fix.
        self.result.findings[:] = [f for f in self.result.findings if not (f.rule == "DG006" and f.key == key)]
        self.finding("DG113", key, raw_window, f"full attention at layers 0-{len(layers) - 1}",
                     f"The drafter sets `sliding_window` {raw_window}, but every one of its {len(layers)} "
                     "layers resolves to full attention (no `layer_types`, and Qwen-style configs slide only "
                     "from `max_window_layers` on). A DFlash drafter with a window was trained to slide; run "
                     "without one it attends over the whole context and its acceptance drops. Fix: list each "
                     "layer in `layer_types`, with \"sliding_attention\" where it was trained to slide.")

    def mask_is_used_token(self, stated: Stated, mask: int) -> None:
        """DG116: the mask id is a token the target really uses (bos, eos or pad): NeMo Automodel
        PR #2461, where the mask fell back to the pad token (often the eos) and acceptance degraded
        without an error. Read from the target's config.json, generation_config.json and
        tokenizer_config.json, and from the drafter's own config.json, which copies the target's ids."""
        used: dict[int, str] = {}
        if self.target is not None:
            target_ids = special_token_ids(self.target.values, self.target.snapshot, self.target.tokenizer)
            used.update({i: f"{self.target_name}'s {where}" for i, where in target_ids.items()})
        for i, where in special_token_ids(self.layer_raw or {}, None, None).items():
            used.setdefault(i, f"the drafter's {where}")
        if self.layer_raw is not self.raw:
            for i, where in special_token_ids(self.raw, None, None).items():
                used.setdefault(i, f"the drafter's {where}")
        if mask not in used:
            return
        self.finding("DG116", stated.key, mask, used[mask],
                     f"`{stated.key}` is {mask}, which is also {used[mask]}. Every drafted block fills its slots "
                     "with this token, so they carry an embedding the target gives real meaning to, and the "
                     "drafter cannot tell \"predict here\" from that token; acceptance degrades quietly "
                     "(NeMo Automodel PR #2461, where the mask fell back to the pad token). Fix: use a reserved "
                     "or added token that the target never emits, as the drafter was trained with.")

    def engine_refusal(self) -> None:
        """DG117: what vLLM will refuse to run, said before deployment rather than at engine start.
        Only for a pair, drafter and target, which is what gets deployed: a drafter checked alone (the
        shipped examples, every pull request on a drafter repo) is not told this again and again."""
        if self.target is None:
            return
        layer_types = (self.layer_raw or {}).get("layer_types")
        reason = dflash_v1_refusal(layer_types if isinstance(layer_types, list) else None, self.fmt.architecture)
        if reason is None:
            return
        mixed = V1_MIXED_DRAFTS in reason
        what = (f"a DFlash candidate-head drafter ({self.fmt.architecture})" if V1_CANDIDATE_DRAFTS in reason
                else "a drafter")
        if mixed:
            what += " whose layers mix sliding_attention and full_attention"
        key = self.layer_key("layer_types") if mixed else "architectures"
        self.finding("DG117", key, layer_types if key.endswith("layer_types") else self.fmt.architecture, None,
                     f"This is {what}. {VLLM_RUNNER_FACTS}: the V1 model runner refuses it (ValueError "
                     f"\"Model Runner V1 does not support: {reason}\"), and the V2 runner, which runs it, "
                     "needs Triton; vLLM picks V2 for it by itself when Triton is there. So it will not start "
                     "where V1 is forced (VLLM_USE_V2_MODEL_RUNNER=0) or Triton is missing, as on vLLM's CPU "
                     "build. Fix: nothing in the drafter; serve it with the V2 runner on a GPU with Triton.")
