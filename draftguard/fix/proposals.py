"""Candidate edits for one finding: what a maintainer would change, keyed off the finding's rule id
and key, never off its wording alone. A candidate is only a proposal: ``engine`` keeps it only when
the whole check, run again on the edited file, no longer reports the finding and reports nothing new.

Ambiguous intent is settled by what the rest of the file states (``window``): a window beside layers
declared ``sliding_attention`` means the window is meant, so the switch is turned on; a window with
no sliding layer anywhere means it is not, and the file is made to say so. ``prefer`` ("on"/"off")
asks for the other reading.

In: a ``Finding``, the file as parsed (``dict``), and ``prefer`` (None, "on" or "off").
Out: ``propose(...)`` -> (candidates, reason): ``Candidate`` objects in the order to try them, and
the reason there is none (or why the preferred reading was chosen) as one sentence.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from draftguard.check.drafter.engines import build_target_layer_ids
from draftguard.check.findings import ABSENT, RULES, Finding, is_int, show
from draftguard.fix.text import Edit

WINDOW_KEYS = ("sliding_window", "layer_types", "use_sliding_window")
# Rules about the window that are not a lost or contradicted window: an injected window's value is
# the author's to state, and renames, class corrections and contradictions have fixes of their own.
NOT_WINDOW_RULES = {"DG002", "DG004", "DG007", "DG009", "DG117"}
SLIDING, FULL = "sliding_attention", "full_attention"
# The mask token is missing or invalid (DG109), an ordinary word (DG110), or a token the target uses (DG116).
MASK_RULES = {"DG109", "DG110", "DG116"}


@dataclass
class Candidate:
    """One way to make a finding go: the edits, and what they mean (the reading chosen and why)."""

    edits: list[Edit]
    why: str


def propose(finding: Finding, raw: dict[str, Any], prefer: str | None = None,
            masks: dict[int, str] | None = None) -> tuple[list[Candidate], str]:
    """The candidate edits for ``finding`` on the file ``raw``, best first, and a reason when there
    are none. ``masks`` are the mask tokens the drafter's target reserves (id -> token), for the
    mask-token rules.

    Example::

        >>> from draftguard.check.findings import Finding, Severity
        >>> raw = {"sliding_window": 2048, "layer_types": ["sliding_attention", "full_attention"]}
        >>> f = Finding("DG005", Severity.ERROR, "layer_types", None, None, "config.json", 3, "")
        >>> [c.edits for c in propose(f, raw)[0]][0]
        [Edit(key='use_sliding_window', value=True, remove=False, near='sliding_window')]
    """
    leaf = finding.key.rsplit(".", 1)[-1]
    if leaf in WINDOW_KEYS and finding.rule not in NOT_WINDOW_RULES:
        return window(finding, raw, prefer)
    if finding.rule in MASK_RULES and finding.key.endswith("mask_token_id"):
        return mask_token(finding, masks or {})
    maker = _BY_RULE.get(finding.rule)
    if maker is None:
        name = RULES[finding.rule].name if finding.rule in RULES else finding.rule
        return [], f"no known fix for {finding.rule} ({name}); its message says what to check"
    return maker(finding, raw)


def _lookup(raw: Any, dotted: str) -> Any:
    for part in dotted.split(".") if dotted else []:
        if not isinstance(raw, dict) or part not in raw:
            return ABSENT
        raw = raw[part]
    return raw


def _ranges(indices: list[int]) -> str:
    parts: list[str] = []
    for i in indices:
        if parts and parts[-1].split("-")[-1] == str(i - 1):
            parts[-1] = parts[-1].split("-")[0] + f"-{i}"
        else:
            parts.append(str(i))
    return ", ".join(parts)


# --- the window: on or off -------------------------------------------------------------------------


def window(finding: Finding, raw: dict[str, Any], prefer: str | None) -> tuple[list[Candidate], str]:
    """A window that the class drops or never uses, or a switch that contradicts declared layers."""
    prefix = finding.key.rpartition(".")[0]
    node = _lookup(raw, prefix) if prefix else raw
    if not isinstance(node, dict):
        return [], f"`{prefix}` is not an object in the file"
    at = f"{prefix}." if prefix else ""
    types = node.get("layer_types")
    declared = [i for i, t in enumerate(types) if t == SLIDING] if isinstance(types, list) else []
    size = node.get("sliding_window")
    flag = node.get("use_sliding_window", ABSENT)
    on = ([Candidate([Edit(f"{at}use_sliding_window", True, near="sliding_window")], "")]
          if flag is not True and is_int(size) else [])
    off: list[Candidate] = []
    if declared:
        full = [FULL if t == SLIDING else t for t in types]
        set_full = Edit(f"{at}layer_types", full)
        off.append(Candidate([set_full] + ([Edit(f"{at}sliding_window", remove=True)] if "sliding_window" in node else []), ""))
        if is_int(size) and flag is ABSENT:
            off.append(Candidate([set_full, Edit(f"{at}use_sliding_window", False, near="sliding_window")], ""))
    elif is_int(size):
        off.append(Candidate([Edit(f"{at}use_sliding_window", False, near="sliding_window")], ""))
        off.append(Candidate([Edit(f"{at}sliding_window", remove=True)], ""))
    if declared:
        default = "on"
        because = (f"layers {_ranges(declared)} are declared sliding_attention, so the window "
                   f"({show(size)}) is meant: turn it on")
        other = "`--prefer off` declares those layers full_attention instead, as they run today"
    elif finding.rule in ("DG006", "DG113"):
        # The switch (or the class) says slide, but no layer is said to: which layers were trained to
        # slide is not in the file, and calling the window vestigial would quiet a true finding.
        default = None
        because = ("no layer is declared sliding_attention, so which layers slide is not in the file; "
                   "list every layer in `layer_types` by hand")
        other = "`--prefer off` states that no layer slides"
    else:
        default = "off"
        because = (f"no layer is declared sliding_attention, so the window ({show(size)}) is not used and "
                   "the file is made to say so")
        other = "`--prefer on` turns the window on instead"
    reading = prefer or default
    if reading is None:
        return [], because + f" ({other})."
    chosen = on if reading == "on" else off
    if prefer and prefer != default:
        why = (f"`--prefer {prefer}`: "
               + ("turn the window on" if prefer == "on" else "the model runs without a window, and the file says so")
               + f" (by default: {because})")
    else:
        why = because + f"; {other}"
    for candidate in chosen:
        candidate.why = why
    if not chosen:
        return [], (f"the window cannot be turned {reading} by an edit here "
                    f"(`use_sliding_window` is {show(flag)}, `sliding_window` is {show(size)})")
    return chosen, why


# --- the other rules ---------------------------------------------------------------------------------


def _drop_loser(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG002: two keys set one attribute; the model runs with the other key's value. Removing the key
    that loses keeps what runs and ends the contradiction."""
    if _lookup(raw, finding.key) is ABSENT:
        return [], f"`{finding.key}` is not in the file"
    return [Candidate([Edit(finding.key, remove=True)],
                      f"the model runs with {show(finding.resolved)}, not `{finding.key}`'s {show(finding.raw)}: "
                      f"removing `{finding.key}` keeps what runs and ends the contradiction")], ""


_ADD = re.compile(r'Fix: add "([A-Za-z_][\w]*)": ([^\s,]+?)\.?(?:$|\s)')


def _add_named(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG011 (an alias the class ignores) and DG123 (head_dim against the weights): the key the class
    reads, added with the value the file (or the weights) states."""
    match = _ADD.search(finding.message)
    if not match:
        return [], f"{finding.rule} names no value to add"
    key, value = match.group(1), match.group(2)
    try:
        parsed = json.loads(value)
    except ValueError:
        return [], f"{finding.rule} names no value to add"
    prefix = finding.key.rpartition(".")[0]
    near = finding.key.rsplit(".", 1)[-1] if finding.rule == "DG011" else "num_attention_heads"
    source = (f"`{finding.key}` states {show(finding.raw)}" if finding.rule == "DG011"
              else "the weights hold that head size")
    return [Candidate([Edit(f"{prefix}.{key}" if prefix else key, parsed, near=near)],
                      f"{source}; the class reads `{key}`")], ""


def _set_expected(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG104, DG115: the list the finding names as the one the other form or the trainer gives."""
    if not isinstance(finding.resolved, list):
        return [], f"{finding.rule} names no list to use"
    why = ("the drafter's trainer uses these layers, and every id is one off: the +1 offset applied twice or "
           "left out (if it really was trained on the stated layers, do not apply this)"
           if finding.rule == "DG115" else "both forms must name the same layers")
    return [Candidate([Edit(finding.key, finding.resolved)], why)], ""


def _state_top_level(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG119: vLLM and SGLang read an EAGLE-3 head's ids as different layers; the top-level list the
    finding names makes every engine read the layers SGLang (and so the trainer) reads."""
    if not isinstance(finding.resolved, list):
        return [], "the layers every engine would agree on are not known here"
    return [Candidate([Edit("eagle_aux_hidden_state_layer_ids", finding.resolved, near="eagle_config")],
                      "the trainer read these layers through SGLang; stated at the top level, vLLM reads the same")], ""


def _shift_down(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG102: ids one past the end, aux ids written where 0-based ids belong."""
    ids = _lookup(raw, finding.key)
    if not isinstance(ids, list) or not ids or not all(is_int(i) for i in ids) or min(ids) < 1:
        return [], "the ids are not a list that one step down would bring into range"
    return [Candidate([Edit(finding.key, [i - 1 for i in ids])],
                      "the last id is one past the target's last layer: aux ids (layer + 1) written where "
                      "0-based target layer ids belong")], ""


def _add_defaults(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG114: an EAGLE-3 head with no ids runs on the engines' default; stating it changes nothing
    that runs and makes the file say which layers feed the head."""
    if not isinstance(finding.resolved, list):
        return [], "the target's depth is unknown, so its default layers are too (give --target)"
    return [Candidate([Edit(finding.key, finding.resolved, near="draft_vocab_size")],
                      "vLLM, SGLang and the trainers read these layers today; the file now says so (if the "
                      "head was trained on other layers, write those instead)")], ""


def _dflash_ids(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG101 with no ids at all, for a z-lab DFlash drafter: its trainer's default layers."""
    if finding.raw is not None or not finding.key.endswith("layer_ids"):
        return [], "DG101 here is about ids that are stated; only the drafter's author knows the right ones"
    archs = raw.get("architectures")
    layers, n = raw.get("num_hidden_layers"), raw.get("num_target_layers")
    if not (isinstance(archs, list) and "DFlashDraftModel" in archs and is_int(layers) and is_int(n) and n >= 4):
        return [], "the trainer's default is known only for a z-lab DFlash drafter that states num_target_layers"
    ids = build_target_layer_ids(n, layers)
    if finding.key.endswith("aux_hidden_state_layer_ids"):
        ids = [i + 1 for i in ids]
    return [Candidate([Edit(finding.key, ids)],
                      f"z-lab's trainer picks these for {layers} draft layers over {n} target layers (if the "
                      "drafter was trained on other layers, write those instead)")], ""


def mask_token(finding: Finding, masks: dict[int, str]) -> tuple[list[Candidate], str]:
    """A mask token that the target reserves for masking: an added token of its tokenizer named like
    a mask (``<|mask|>``), which the target never emits. Without one, only the drafter's author knows
    the token it was trained with."""
    choices = [(i, token) for i, token in sorted(masks.items()) if i != finding.raw]
    if not choices:
        return [], ("the target's tokenizer reserves no mask token (an added token named like <mask>); use the "
                    "id the drafter was trained with")
    return [Candidate([Edit(finding.key, i, near="target_layer_ids")],
                      f"the target's tokenizer reserves {token!r} (id {i}) for masking and never emits it, and "
                      "DFlash drafters are trained with their target's mask token (if this one was trained with "
                      "another reserved token, write that id instead)")
            for i, token in choices], ""


_IMPLIED_HEAD_DIM = re.compile(r'Fix: add "head_dim": (\d+)')


def _implied_head_dim(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG003: the class's default head_dim contradicts hidden_size / num_attention_heads; the file
    implies that ratio, and the message names it. (With the weights beside the file a mismatch is
    DG123, which reads the head size from them instead.)"""
    match = _IMPLIED_HEAD_DIM.search(finding.message)
    if not match:
        return [], "DG003 names no head size the file implies"
    prefix = finding.key.rpartition(".")[0]
    implied = int(match.group(1))
    return [Candidate([Edit(finding.key, implied, near="num_attention_heads")],
                      f"hidden_size / num_attention_heads = {implied}, not the class's default {show(finding.resolved)}; "
                      "the file now states the head size it implies" + (f" in `{prefix}`" if prefix else "")
                      + f"; if the weights were trained with {show(finding.resolved)}, write that instead")], ""


def _state_injected_window(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG004: no window in the file, but the class injects one that layers use. The message's fix is
    to add `sliding_window`; the one value known is the window the model runs with today, so the file
    is made to state it (nothing that runs changes). If it was trained with another, its author
    writes that one."""
    if not is_int(finding.resolved):
        return [], "the window the model runs with is not a number here"
    prefix = finding.key.rpartition(".")[0]
    node = _lookup(raw, prefix) if prefix else raw
    if not isinstance(node, dict):
        return [], f"`{prefix}` is not an object in the file"
    near = next((k for k in ("use_sliding_window", "layer_types", "max_window_layers") if k in node), None)
    return [Candidate([Edit(finding.key, finding.resolved, near=near)],
                      f"the class injects {finding.resolved} and the model runs with it today: the file now says "
                      "so; if the model was trained with another window, write that one instead")], ""


def _tie_root(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG405: state the root's tie_word_embeddings as text_config states it; DG406: tie the head
    (the checkpoint holds no lm_head.weight, so the embeddings are the only trained head)."""
    if finding.rule == "DG405":
        inner = _lookup(raw, "text_config.tie_word_embeddings")
        if not isinstance(inner, bool):
            return [], "text_config states no tie_word_embeddings"
        return [Candidate([Edit("tie_word_embeddings", inner, near="text_config")],
                          f"text_config ties {'the head' if inner else 'nothing'}; stated at the root too, every "
                          "reader ties the same way")], ""
    return [Candidate([Edit("tie_word_embeddings", True, near="vocab_size")],
                      "the checkpoint holds no lm_head.weight, so the head can only be the embeddings (if an "
                      "lm_head.weight was meant to ship, ship it instead)")], ""


def _router_convention(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG407: the family's published value for the router setting the file leaves out."""
    match = re.search(r"states (\S+?): the router", finding.message)
    if not match:
        return [], "DG407 names no value"
    try:
        value = json.loads(match.group(1))
    except ValueError:
        return [], "DG407 names no value"
    return [Candidate([Edit(finding.key, value, near="model_type")],
                      f"every published checkpoint of the family states {show(value)} (if this model was trained "
                      "with another value, write that one)")], ""


def _stop_token(finding: Finding, raw: dict[str, Any]) -> tuple[list[Candidate], str]:
    """DG408 where the repo has no generation_config.json: config.json's eos_token_id is the stop list
    engines build, so the template's turn-end token joins it."""
    if not finding.file.endswith("config.json") or finding.file.endswith("generation_config.json"):
        return [], "the stop list to edit is generation_config.json's `eos_token_id`, which fix does not edit"
    if not is_int(finding.resolved):
        return [], "DG408 names no token id"
    now = raw.get("eos_token_id")
    ids = [now] if is_int(now) else list(now) if isinstance(now, list) else []
    return [Candidate([Edit("eos_token_id", ids + [finding.resolved], near="bos_token_id")],
                      f"the chat template ends turns with id {finding.resolved}; as a stop token the model stops there")], ""


_BY_RULE = {
    "DG405": _tie_root,
    "DG406": _tie_root,
    "DG407": _router_convention,
    "DG408": _stop_token,
    "DG002": _drop_loser,
    "DG011": _add_named,
    "DG123": _add_named,
    "DG104": _set_expected,
    "DG115": _set_expected,
    "DG102": _shift_down,
    "DG119": _state_top_level,
    "DG114": _add_defaults,
    "DG101": _dflash_ids,
    "DG003": _implied_head_dim,
    "DG004": _state_injected_window,
}
