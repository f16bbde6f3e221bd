"""Rules for the EAGLE family: EAGLE-3 heads (and P-EAGLE, which drafts from the same features),
EAGLE 1/2 heads, Medusa heads, and MTP heads that a model declares (DG114, DG115, DG118).

In: what ``DrafterCheck`` holds (snapshot, raw config, ``DrafterFormat``, ``TargetModel``, ``Weights``).
Out: ``Eagle3Check``, ``EagleCheck``, ``MedusaCheck`` and ``MtpCheck``, whose ``run()`` returns a list of ``Finding``.
"""

from __future__ import annotations

from draftguard.check.drafter.detect import MTP_KEYS
from draftguard.check.drafter.engines import (
    SGLANG_EAGLE3_FORM,
    SGLANG_VERSION_READ,
    eagle3_default_aux_ids,
    eagle3_readings,
    sglang_layers,
    sglang_list_for,
    shifted,
)
from draftguard.check.drafter.rules import DrafterCheck
from draftguard.check.findings import is_int, show

TOP_KEY = "eagle_aux_hidden_state_layer_ids"
NESTED_KEY = "eagle_config.eagle_aux_hidden_state_layer_ids"


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

    # The top-level list and SpecForge's eagle_config list are read differently by the engines (see
    # engines.py, "Where each engine reads an EAGLE-3 head's layer ids from"): vLLM reads the top-level
    # list first, as aux ids; SGLang reads only eagle_config's, and for most targets adds 1 to it.

    def is_plain_eagle3(self) -> bool:
        """A plain EAGLE-3 config, which vLLM and SGLang both load (not the speculators format, which
        SGLang does not read and vLLM maps onto the top-level key)."""
        return self.fmt.kind == "eagle3"

    def stated_ids(self, key: str) -> list[int] | None:
        """The list at ``key`` when it is a usable list of ids (DG101 speaks for any other)."""
        ids = next((s.value for s in self.fmt.aux_ids if s.key == key), None)
        if not isinstance(ids, list) or not ids or not all(is_int(i) for i in ids) or ids != sorted(set(ids)):
            return None
        return ids

    def sglang_form(self) -> tuple[str, str] | None:
        """SGLang's conversion of eagle_config's list for this target's architecture, and the
        architecture; None without a target, or for an architecture whose SGLang code was not read."""
        archs = self.target_value("architectures") if self.target else None
        for arch in archs if isinstance(archs, list) else []:
            if arch in SGLANG_EAGLE3_FORM:
                return SGLANG_EAGLE3_FORM[arch], arch
        return None

    def range_of(self, stated, ids, shift, count) -> None:
        """DG102/DG103 on eagle_config's list in the form SGLang reads it for this target: target layer
        ids for most, so 0 is layer 0's output there, not the embeddings."""
        if stated.key != NESTED_KEY or not self.is_plain_eagle3():
            return super().range_of(stated, ids, shift, count)
        sglang = self.sglang_form()
        if sglang is not None and count is not None:
            as_aux = sglang_layers(ids, count[0], sglang[0]) != ids
            return super().range_of(stated, ids, 1 if as_aux else 0, count)
        high = count[0] if count is not None else None  # either form: ids lie in [0, N]
        bad = [i for i in ids if i < 0 or (high is not None and i > high)]
        if bad:
            self.finding("DG102", stated.key, ids, None,
                         f"`{stated.key}` holds {show(bad)}: no target layer has that id in either form "
                         f"(target layer ids or aux ids){f', {count[1]}' if count else ''}. Fix: use the layer "
                         "ids the head was trained with.")

    def forms_agree(self, usable) -> None:
        # For a plain EAGLE-3 head both keys hold one list in two engines' forms, so comparing them as two
        # aux lists (DG104) would call SpecForge's own fix an error; DG119 compares what each engine reads.
        if not self.is_plain_eagle3():
            super().forms_agree(usable)

    def shifted_ids(self, usable, count) -> None:
        """DG115 on the top-level list (aux ids in every reader), then on eagle_config's list as SGLang,
        the one engine that reads it alone, reads it for this target."""
        super().shifted_ids([u for u in usable if u[0].key == TOP_KEY], count)
        nested = self.stated_ids(NESTED_KEY)
        sglang = self.sglang_form()
        if (any(f.rule == "DG115" for f in self.findings) or not self.is_plain_eagle3() or nested is None
                or count is None or count[0] < 6 or sglang is None):
            return
        n, why = count
        form, arch = sglang
        usual = [i - 1 for i in eagle3_default_aux_ids(n)]
        read = sglang_layers(nested, n, form)
        step = shifted(read, usual)
        expected = sglang_list_for(usual, n, form)
        if step is None or expected is None:
            return
        cause = "the +1 hidden-state offset applied twice" if step > 0 else "the +1 hidden-state offset left out"
        self.finding("DG115", NESTED_KEY, nested, expected,
                     f"`{NESTED_KEY}` is {show(nested)}: {SGLANG_VERSION_READ}, which reads this list, reads it "
                     f"for the target's {arch} as target layers {show(read)}. SpecForge's trainer and the "
                     f"engines' default (2, N//2, N-3) use target layers {show(usual)} ({why}), and every one "
                     f"is one {'higher' if step > 0 else 'lower'}. That is the pattern of {cause} (SGLang PR "
                     f"#25454, vLLM PR #40727): the head then reads the layer next to the one it was trained "
                     f"on, and acceptance drops with no error. Fix: if it was trained with the usual layers, "
                     f"set `{NESTED_KEY}` to {show(expected)}; if it really was trained on these, nothing to do.")

    def format_rules(self, count: tuple[int, str] | None) -> None:
        self.engines_disagree(count)

    def engines_disagree(self, count: tuple[int, str] | None) -> None:
        """DG119: the head's ids, top-level and in eagle_config, read as different target layers by
        vLLM's V1 runner, its V2 runner and SGLang. Needs the target's layer count (the defaults depend
        on it); SGLang is judged only for target architectures whose SGLang code was read."""
        top, nested = self.stated_ids(TOP_KEY), self.stated_ids(NESTED_KEY)
        if not self.is_plain_eagle3() or count is None or (top is None and nested is None):
            return
        n, why = count
        sglang = self.sglang_form()
        readings = eagle3_readings(top, nested, n, sglang[0] if sglang else None)
        if len({tuple(r.layers) for r in readings}) < 2:
            return
        each = "; ".join(f"{r.engine} {r.how}, so target layers {show(r.layers)}" for r in readings)
        key = NESTED_KEY if nested is not None else TOP_KEY
        sglang_reading = readings[-1].layers if sglang else None
        if sglang and nested is not None:
            trained, who = sglang_reading, (f"what {SGLANG_VERSION_READ} reads; SpecForge trains through SGLang, "
                                            "so a SpecForge head was trained on those")
        elif top is not None:
            trained, who = readings[0].layers, "what vLLM reads"
        else:
            trained, who = None, ""
        if trained is not None and sglang is not None:
            form, arch = sglang
            top_fix, nested_fix = [i + 1 for i in trained], sglang_list_for(trained, n, form)
            fix = (f"if the head was trained on target layers {show(trained)} ({who}), state them for both "
                   f"engines: `\"{TOP_KEY}\": {top_fix}` at the top level (both vLLM runners read it first, "
                   f"as aux ids) and `{NESTED_KEY}` {show(nested_fix)} (what SGLang reads as those layers "
                   f"for {arch}). If it was trained on other layers, state those the same way")
        else:
            fix = (f"find the target layers the head was trained on and state them as aux ids (layer + 1) in "
                   f"the top-level `{TOP_KEY}`, which both vLLM runners read first; keep `{NESTED_KEY}` in the "
                   f"form SGLang reads for this target")
            top_fix = None
        self.finding("DG119", key, nested if key == NESTED_KEY else top, top_fix,
                     f"The engines read this {self.fmt.label} head's layer ids as different target layers "
                     f"({why}): {each}. Only one of these is what the head was trained on; the others feed it "
                     f"other layers' features, and acceptance drops with no error. Fix: {fix}.")


class EagleCheck(DrafterCheck):
    """EAGLE 1/2: a one-layer head on the target's last hidden state. No layer ids to check; the
    shared rules compare hidden size and vocabulary with the target."""


class MtpCheck(DrafterCheck):
    """A model that declares its own MTP heads. Recognised so that a pair is not refused; no draft
    rule exists for it yet, and the note says so."""

    def run(self):
        if self.fmt.kind == "mtp-assistant":
            self.finding("DG118", "model_type", self.fmt.kind, None,
                         f"This config is {self.fmt.article} {self.fmt.label}: an MTP drafter in its own checkpoint, "
                         "which vLLM serves with `method: mtp` beside its Gemma 4 target (`draftguard accept "
                         "--target <the Gemma 4 model> --drafter <this folder>` runs it). draftguard has no drafter "
                         "rule for it yet, so only the config rules above ran. Fix: nothing to fix; this note says "
                         "what was not checked.")
            return self.findings
        stated = self.fmt.num_target_layers
        key = stated.key if stated else MTP_KEYS[0]
        self.finding("DG118", key, stated.value if stated else None, None,
                     f"This config declares {stated.value if stated else 'its own'} MTP (multi-token "
                     f"prediction) layer(s) through `{key}`: the model drafts for itself. draftguard "
                     "recognises MTP heads but has no drafter rule for them yet, so only the config rules "
                     "above ran. Fix: nothing to fix; this note says what was not checked.")
        return self.findings


class MedusaCheck(DrafterCheck):
    """Medusa heads (FasterDecoding's ``medusa_num_heads``, vLLM's ``model_type: "medusa"``): extra
    heads on the target's last hidden state. No layer ids; the shared rules compare hidden size and
    vocabulary with the target, which the heads read and predict over."""

