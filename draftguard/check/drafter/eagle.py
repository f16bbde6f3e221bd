"""Rules for the EAGLE family: EAGLE-3 heads (and P-EAGLE, which drafts from the same features),
EAGLE 1/2 heads, and MTP heads that a model declares (DG114, DG115, DG118).

In: what ``DrafterCheck`` holds (snapshot, raw config, ``DrafterFormat``, ``TargetModel``, ``Weights``).
Out: ``Eagle3Check``, ``EagleCheck`` and ``MtpCheck``, whose ``run()`` returns a list of ``Finding``.
"""

from __future__ import annotations

from draftguard.check.drafter.engines import eagle3_default_aux_ids
from draftguard.check.drafter.detect import MTP_KEYS
from draftguard.check.drafter.rules import DrafterCheck


class Eagle3Check(DrafterCheck):
    """A one-layer head fed by three (or more) target layers, concatenated and projected by ``fc``."""

    def missing_ids(self, count: tuple[int, str] | None) -> None:
        """DG114: no aux ids, so the engine picks the layers (vLLM PR #50170: a published head without
        them, trained on other layers, ran at 1.2% acceptance)."""
        key = "eagle_aux_hidden_state_layer_ids"
        if count is not None:
            n, why = count
            target = [i - 1 for i in eagle3_default_aux_ids(n)]
            instead = (f"Instead ({why}), vLLM, SGLang and the EAGLE authors' trainer read aux ids "
                       f"{eagle3_default_aux_ids(n)}, the (2, N//2, N-3) default, which are the outputs of target "
                       f"layers {target}, and SpecForge's trainer trains on those same layers. They agree, so a "
                       f"head trained with SpecForge's or the EAGLE "
                       f"authors' defaults works; one trained on other layers (NVIDIA's "
                       f"Llama-3.3-70B-Instruct-Eagle3 in vLLM PR #50170 ran at 1.2% acceptance) reads the "
                       f"wrong features and nothing reports it.")
            expected = eagle3_default_aux_ids(n)
            fix = f"state the layers it was trained on: `\"{key}\": {expected}` if those were target layers {target}"
        else:
            instead = ("Engines then use their default (2, N//2, N-3) for a target of N layers, right only "
                       "if the head was trained on those (vLLM PR #50170: 1.2% acceptance when it was not).")
            expected, fix = None, f"state `{key}` with the layers it was trained on"
        self.finding("DG114", key, None, expected,
                     f"This {self.fmt.label} head does not say which target layers feed it (no `{key}`, at the "
                     f"top level or in `eagle_config`). {instead} Fix: {fix}.")

    def canonical_ids(self, n: int) -> tuple[list[int], str] | None:
        if n < 6:
            return None
        return [i - 1 for i in eagle3_default_aux_ids(n)], "the engines' and trainers' default (2, N//2, N-3)"

    def shifted_ids(self, usable, count) -> None:
        # Only the top-level list is aux ids in every reader; SpecForge's eagle_config list is read in
        # target form by SGLang and in aux form by vLLM, so "shifted" has no single meaning there.
        super().shifted_ids([u for u in usable if u[0].key == "eagle_aux_hidden_state_layer_ids"], count)


class EagleCheck(DrafterCheck):
    """EAGLE 1/2: a one-layer head on the target's last hidden state. No layer ids to check; the
    shared rules compare hidden size and vocabulary with the target."""


class MtpCheck(DrafterCheck):
    """A model that declares its own MTP heads. Recognised so that a pair is not refused; no draft
    rule exists for it yet, and the note says so."""

    def run(self):
        stated = self.fmt.num_target_layers
        key = stated.key if stated else MTP_KEYS[0]
        self.finding("DG118", key, stated.value if stated else None, None,
                     f"This config declares {stated.value if stated else 'its own'} MTP (multi-token "
                     f"prediction) layer(s) through `{key}`: the model drafts for itself. draftguard "
                     "recognises MTP heads but has no drafter rule for them yet, so only the config rules "
                     "above ran. Fix: nothing to fix; this note says what was not checked.")
        return self.findings
