"""DG408 and DG409: the token the chat template ends a turn with, against the stop tokens the files
give: config.json's and generation_config.json's ``eos_token_id`` and tokenizer_config.json's
``eos_token``.

What each consumer stops on, as its code reads the files: transformers' ``generate()`` on the
generation config's ``eos_token_id`` only (generation_config.json, else built from config.json); MLX
(mlx-lm, mlx-vlm) on that list too, the tokenizer's eos only where there is none; vLLM and SGLang on
that list and the tokenizer's eos token. config.json's list is read by none of them once
generation_config.json exists. A model whose template closes each turn with a token none of these
name never stops (Llama 3 Instruct as first published: ``<|eot_id|>`` closes turns, every file says
``<|end_of_text|>``; vllm-project/vllm#4180). One whose turn-end token only the tokenizer names stops
in vLLM and SGLang and runs to the length limit in ``generate()`` and MLX (Blaizzy/mlx-vlm#2112): DG408
names the consumers that never stop. One whose turn-end token only generation_config.json names stops
only where that file is read (vllm-project/vllm#45591: a Gemma model that never stops once it is not).

In: the raw config.json (dict), ``RepoFiles``; ``emit`` from ``check_repo``.
Out: findings, through ``emit``.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from draftguard.check.findings import is_int
from draftguard.check.repo.files import GENERATION_CONFIG, TOKENIZER_CONFIG, RepoFiles

# Special tokens that end a turn or a text, by name; headers and starts are not ends.
_END = re.compile(r"eot|eos|end_of_turn|end_of_text|endoftext|im_end|end▁of▁sentence|end_of_sentence|"
                  r"^<\|end\|>$|^<\|return\|>$|^</s>$|^<turn\|>$|END_OF_TURN", re.I)
_NOT_END = re.compile(r"header|start|begin|think|tool|box|quad|image|video|audio|vision|pad", re.I)


def _ids(value: Any) -> set[int]:
    if is_int(value):
        return {value}
    if isinstance(value, list):
        return {v for v in value if is_int(v)}
    return set()


def _content(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def _specials(tokenizer: dict[str, Any]) -> dict[str, int]:
    """Special added tokens of tokenizer_config.json: content -> id."""
    decoder = tokenizer.get("added_tokens_decoder")
    found: dict[str, int] = {}
    if isinstance(decoder, dict):
        for key, entry in decoder.items():
            if isinstance(entry, dict) and isinstance(entry.get("content"), str) and str(key).isdigit() \
                    and entry.get("special", True):
                found.setdefault(entry["content"], int(key))
    return found


def turn_ends(template: str, specials: dict[str, int]) -> dict[str, int]:
    """The special tokens the template writes that end a turn or a text (content -> id).

    Example::

        >>> turn_ends("{{ '<|start_header_id|>' + m + '<|eot_id|>' }}",
        ...           {"<|eot_id|>": 9, "<|start_header_id|>": 6, "<|end_header_id|>": 7})
        {'<|eot_id|>': 9}
    """
    return {token: i for token, i in specials.items()
            if token in template and _END.search(token) and not _NOT_END.search(token)}


def stop_tokens(raw: dict[str, Any], files: RepoFiles, emit: Callable[..., None]) -> None:
    tokenizer = files.json(TOKENIZER_CONFIG)
    found = files.chat_template()
    if tokenizer is None or found is None:
        return
    template, where = found
    specials = _specials(tokenizer)
    ends = turn_ends(template, specials)
    if not ends:
        return
    generation = files.json(GENERATION_CONFIG)
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else {}
    config_ids = _ids(raw.get("eos_token_id")) | _ids(text.get("eos_token_id"))
    generation_ids = _ids(generation.get("eos_token_id")) if generation is not None else config_ids
    eos = _content(tokenizer.get("eos_token"))
    eos_id = specials.get(eos) if eos else None
    tokenizer_ids = {eos_id} if eos_id is not None else set()
    stops = consumer_stops(generation_ids, tokenizer_ids)
    ended = set(ends.values())
    never = [name for name, ids in stops.items() if not ids & ended and not (name in ENGINES and eos in ends)]
    token, i = next(iter(ends.items()))
    if not never:
        if generation is not None and not ended & (config_ids | tokenizer_ids) and eos not in ends:
            emit("DG409", "eos_token_id", sorted(config_ids), sorted(generation_ids),
                 f"The chat template ends turns with `{token}` (id {i}), and only generation_config.json's "
                 f"`eos_token_id` ({sorted(generation_ids)}) names it: config.json says {sorted(config_ids) or 'none'}, "
                 f"tokenizer_config.json's `eos_token` is {eos!r}. The model stops wherever generation_config.json "
                 "is read, and never where it is not (vLLM `--generation-config vllm`, an override that "
                 "replaces it: vllm-project/vllm#45591, a Gemma model that never stops). Fix: add "
                 f"{i} to config.json's `eos_token_id` as well.",
                 line_key="eos_token_id")
        return
    said = (f"generation_config.json's `eos_token_id` is {sorted(generation_ids)}" if generation is not None
            else f"config.json's `eos_token_id` is {sorted(config_ids) or 'absent'} (no generation_config.json)")
    unread = (f" config.json names it ({sorted(config_ids & ended)}), but no reader takes config.json's list "
              "once generation_config.json exists." if generation is not None and config_ids & ended else "")
    where_fix = "generation_config.json" if generation is not None else "config.json"
    if len(never) < len(stops):
        stopping = [name for name in stops if name not in never]
        emit("DG408", "eos_token_id", sorted(generation_ids), i,
             f"The chat template ({where}) ends every turn with `{token}` (id {i}), and {said}: "
             f"{_join(never)} stop only on that list and never stop, generating to the length limit "
             f"(Blaizzy/mlx-vlm#2112). {_join(stopping)} stop, because they add tokenizer_config.json's "
             f"`eos_token` ({eos!r}).{unread} Fix: add {i} to `eos_token_id` in {where_fix}.",
             file=files.shown(GENERATION_CONFIG) if generation is not None else None,
             line_key="eos_token_id")
        return
    emit("DG408", "eos_token_id", sorted(config_ids), i,
         f"The chat template ({where}) ends every turn with `{token}` (id {i}), but no stop token names it: "
         f"{said}, and tokenizer_config.json's `eos_token` is {eos!r}.{unread} The model writes `{token}` and goes "
         f"on generating until the length limit in {_join(never)} alike (Llama 3 Instruct as "
         "first published; vllm-project/vllm#4180). Fix: add "
         f"{i} to `eos_token_id` in generation_config.json (and config.json), or set tokenizer_config.json's "
         f"`eos_token` to {token!r}.",
         file=files.shown(GENERATION_CONFIG) if generation is not None else None,
         line_key="eos_token_id")


ENGINES = ("vLLM", "SGLang")


def consumer_stops(generation_ids: set[int], tokenizer_ids: set[int]) -> dict[str, set[int]]:
    """The ids each consumer stops on, as its code reads them. ``generation_ids``: generation_config.json's
    ``eos_token_id`` (config.json's where the repo has none, as ``GenerationConfig.from_model_config``
    builds it). transformers' ``generate()`` stops on that list only; MLX (mlx-lm, mlx-vlm) on that list
    where there is one, else the tokenizer's eos; vLLM and SGLang on that list and the tokenizer's eos.

    Example::

        >>> consumer_stops({151643}, {151645})["vLLM"], consumer_stops({151643}, {151645})["MLX"]
        ({151643, 151645}, {151643})
    """
    return {"transformers generate()": set(generation_ids),
            "MLX": set(generation_ids) if generation_ids else set(tokenizer_ids),
            "vLLM": generation_ids | tokenizer_ids, "SGLang": generation_ids | tokenizer_ids}


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
