"""Probes for values tracing could not place: flags that switch them, keys that decide them,
and name lists the class translates.

In: a config class, the raw dict, the unexplained leaves, and the stored values of the built config.
Out: ``flag_switches`` ({leaf: [flag path, whether the file sets it]}), ``deciders`` ({leaf: [other file
path, stored path, "copies" | "derives", leaf_is_input]}) and ``translations`` ({leaf: {old: new}}).
"""

from __future__ import annotations

from typing import Any

from .nodes import MISSING, config_node, copy_tree, get_path, node_values, plain, same, set_path
from .budget import spend
from .tracing import FLAG_CACHE, build_quietly, file_shape, sentinel_for, storage


def translations(cls: type, raw: dict[str, Any], leaves: list[str], node: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Lists of names the class rewrites element by element into its own vocabulary (NemotronH's
    "mamba" -> "linear_attention"), with the evidence that it is a translation: each old name maps to
    one new name and back, and the class keeps the new list unchanged when given it."""
    values = node_values(node)
    out: dict[str, dict[str, str]] = {}
    for leaf in leaves:
        old, new = get_path(raw, leaf), get_path(values, leaf)
        if not (isinstance(old, list) and isinstance(new, list) and len(old) == len(new) and old
                and all(isinstance(v, str) for v in old + new)):
            continue
        forward: dict[str, str] = {}
        backward: dict[str, str] = {}
        if any(forward.setdefault(a, b) != b or backward.setdefault(b, a) != a for a, b in zip(old, new)):
            continue
        memo = (cls, leaf, file_shape(raw), tuple(old), tuple(new))
        if memo not in FLAG_CACHE:
            trial = copy_tree(raw)
            set_path(trial, leaf, list(new))
            try:
                again = get_path(node_values(config_node(build_quietly(cls, trial), trial)), leaf)
            except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
                raise
            except Exception:
                again = MISSING
            FLAG_CACHE[memo] = same(again, new)
        if FLAG_CACHE[memo]:
            out[leaf] = {a: b for a, b in forward.items() if a != b}
    return out


def _holder(path: str) -> str:
    return path.rsplit(".", 1)[0] + "." if "." in path else ""


def flag_switches(cls: type, raw: dict[str, Any], leaves: list[str], landed: dict[str, list[list[str]]],
              stored: dict[str, Any]) -> dict[str, list[Any]]:
    """For each leaf the class changed, a boolean whose flip to true makes the class keep the leaf's
    value: {leaf: [flag path, whether the file sets it]}.

    A flag the file sets to false switched the feature off on purpose (use_sliding_window: false).
    A flag the file does not set is the class's default gate, and the file's value is lost to it
    (the Qwen3 window: kept only when use_sliding_window, which defaults to false, is true)."""
    if not leaves:
        return {}
    candidates: dict[str, bool] = {}
    for leaf in leaves:
        holder = _holder(leaf)
        given = get_path(raw, holder[:-1]) if holder else raw
        for name, value in (given.items() if isinstance(given, dict) else ()):
            if value is False:
                candidates[holder + name] = True
        for path, value in stored.items():
            if value is False and _holder(path) == holder and not path.rsplit(".", 1)[-1].startswith("_"):
                candidates.setdefault(path, get_path(raw, path) is False)
    if not candidates:
        return {}

    def overlap(flag: str) -> int:
        words = set(flag.rsplit(".", 1)[-1].split("_"))
        return max(len(words & set(leaf.rsplit(".", 1)[-1].split("_"))) for leaf in leaves)

    # The file's own flags first, then the ones that share a word with a leaf (use_sliding_window).
    ordered = sorted(candidates, key=lambda f: (not candidates[f], -overlap(f)))[:12]

    def kept(flipped: list[str]) -> set[str] | None:
        trial = copy_tree(raw)
        for flag in flipped:
            if "." in flag and not isinstance(get_path(trial, _holder(flag)[:-1]), dict):
                continue  # a nested config the file does not spell out
            set_path(trial, flag, True)
        try:
            after = storage(build_quietly(cls, trial))
        except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
            raise
        except Exception:
            return None
        out = set()
        for leaf in leaves:
            want = get_path(raw, leaf)
            name = leaf.rsplit(".", 1)[-1]
            # Where it goes when kept: its own place, a traced place, or a nested config that a
            # composite class moves flat keys into (qwen2_vl's text_config).
            places = [leaf] + [path for path, how in landed.get(leaf, []) if how == "same"]
            places += [path for path in after if path.endswith("." + name) and path.count(".") == leaf.count(".") + 1]
            if any(path in after and same(want, plain(after[path], None))
                   and not same(want, plain(stored.get(path, MISSING), None)) for path in places):
                out.add(leaf)
        return out

    found: dict[str, list[Any]] = {}
    together = kept(ordered)
    if together is not None and not together:
        return {}
    if len(ordered) == 1:
        return {leaf: [ordered[0], candidates[ordered[0]]] for leaf in together or ()}
    wanted = set(together) if together is not None else set(leaves)
    for flag in ordered[:6]:  # which one switches each leaf; the likeliest flags come first
        for leaf in kept([flag]) or ():
            found.setdefault(leaf, [flag, candidates[flag]])
        if wanted <= set(found):
            break
    return found


def _is_sub_config(node: dict[str, Any], path: str) -> bool:
    for part in path.split("."):
        value = node.get("values", {}).get(part) if isinstance(node, dict) else None
        if not (isinstance(value, dict) and "__config__" in value):
            return False
        node = value
    return True


def _delete(tree: dict[str, Any], path: str) -> None:
    holder = get_path(tree, _holder(path)[:-1]) if "." in path else tree
    if isinstance(holder, dict):
        holder.pop(path.rsplit(".", 1)[-1], None)


def _leaves_of(tree: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(tree, dict):
        return [leaf for k, v in tree.items() if isinstance(k, str) for leaf in _leaves_of(v, f"{prefix}.{k}")]
    return [(prefix, tree)]


def deciders(cls: type, raw: dict[str, Any], leaves: list[str], stored: dict[str, Any], node: dict[str, Any]) -> dict[str, list[Any]]:
    """For each leaf the class did not keep, another value of the file that decides what is stored
    in its place: {leaf: [other file path, stored path, how, leaf_is_input]}.

    ``how`` is "copies" (the place holds the other value) or "derives" (the place follows it through
    a computation: MiMo's sliding_window = sliding_window_size + 1). ``leaf_is_input`` says whether
    the class reads the leaf at all once the other key is gone: rope_theta beside
    rope_parameters.rope_theta is an input (two inputs that disagree), GLM-DSA's head_dim is not (the
    class always sets it from qk_rope_head_dim)."""
    found: dict[str, list[Any]] = {}
    builds = 0

    def build(trial: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal builds
        builds += 1
        try:
            return storage(build_quietly(cls, trial))
        except MemoryError:  # the memory bound (draftguard.bounded): never a pass, never swallowed
            raise
        except Exception:
            return None

    for index, leaf in enumerate(leaves):
        name, top = leaf.rsplit(".", 1)[-1], leaf.split(".", 1)[0]
        mine = get_path(raw, leaf)
        here = stored.get(leaf, MISSING)
        holder_path = _holder(leaf)[:-1]
        holder = get_path(raw, holder_path) if holder_path else raw
        containers = [(f"{holder_path}.{k}" if holder_path else k) for k in holder if isinstance(k, str)]
        containers += [k for k in raw if isinstance(k, str) and k != top and k not in containers]
        for container in containers:  # every key of the file, for each leaf: look at the budget
            spend()
            if container == leaf or builds >= 12 or leaf in found or _is_sub_config(node, container):
                continue  # a whole nested config is no rival of one value: taking it out changes everything
            value = get_path(raw, container)
            words = set(name.split("_")) - {""}
            rivals = [
                (path, v) for path, v in _leaves_of(value, container)
                if path.rsplit(".", 1)[-1] == name
                or (isinstance(v, (int, float, str)) and not isinstance(v, bool)
                    and ((here is not MISSING and same(v, plain(here, None))) or same(v, mine)
                         # a dropped key: where would it go? rivals share a word (rotary_pct,
                         # rope_parameters.partial_rotary_factor)
                         or (here is MISSING and type(v) is type(mine)
                             and words & set(path.rsplit(".", 1)[-1].split("_")))))
            ]
            if not rivals:
                continue
            trial = copy_tree(raw)
            _delete(trial, container)
            sentinel = sentinel_for(mine, index)
            if sentinel is not None:
                set_path(trial, leaf, sentinel)
            without = build(trial)
            if without is None:
                continue
            want = sentinel if sentinel is not None else mine
            lands = [path for path, v in without.items() if same(want, plain(v, None))]
            place = leaf if here is not MISSING else (lands[0] if lands else None)
            if place is None or place not in stored:
                continue
            is_input = place in lands
            for rival, rival_value in rivals:
                decides, how = is_input, None
                if same(rival_value, plain(stored[place], None)):
                    how = "copies"
                rival_sentinel = sentinel_for(rival_value, index + 60)
                if rival_sentinel is not None:
                    trial = copy_tree(raw)
                    set_path(trial, rival, rival_sentinel)
                    moved = build(trial)
                    if moved is not None and place in moved and not same(plain(moved[place], None), plain(stored[place], None)):
                        decides = True
                        how = how or ("copies" if same(plain(moved[place], None), rival_sentinel) else "derives")
                if decides and how is None:
                    how = "derives"
                if decides:
                    found[leaf] = [rival, place, how, is_input]
                    break
    return found
