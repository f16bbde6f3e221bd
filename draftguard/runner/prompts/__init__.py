"""Prompts for the acceptance test: a built-in set (chat, math, code) and JSONL prompt files.

A prompt file has one JSON object per line, one of:

- ``{"prompt": "text"}``: the text, tokenized as is;
- ``{"messages": [{"role": "user", "content": "..."}]}``: the target's chat template applied (thinking
  off where the template has the switch);
- ``{"input_ids": [1, 2, 3]}``: token ids, for targets without a tokenizer (the tiny test models).

An optional ``"label"`` names the prompt in per-prompt results. Blank lines are skipped.

Kept in Python, not a data file, so it ships inside the package without packaging rules.

In: ``builtin`` or a JSONL file's path (and how many prompts), then a tokenizer (or None).
Out: ``select_prompts`` -> a list of ``PromptSpec``; ``encode``/``encode_all`` -> token ids per
prompt; ``BadInput`` naming the file, line and key of a bad line.

Example::

    >>> [p.label for p in builtin_prompts()[:4]]
    ['chat-1', 'math-1', 'code-1', 'chat-2']
    >>> encode(PromptSpec(label="x", input_ids=[5, 6]), tokenizer=None)
    [5, 6]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from draftguard.snapshot import BadInput

MAX_PROMPT_FILE_BYTES = 64 * 1024 * 1024

_CHAT = [
    "Write a short, friendly email to a colleague asking to move our Thursday meeting to Friday afternoon.",
    "Explain to a ten-year-old why the sky is blue, in three or four sentences.",
    "What are three practical tips for getting better sleep? Keep each tip to one sentence.",
    "Summarize the plot of Romeo and Juliet in one paragraph.",
    "I have eggs, spinach, onions and cheese. Suggest a simple dinner and explain how to cook it step by step.",
    "Compare trains and planes for a 500 km trip: list the pros and cons of each.",
    "Write a four-line poem about autumn leaves.",
    "What is the difference between weather and climate? Answer in a short paragraph.",
]
_MATH = [
    "A shop sells pencils at 3 for $1. How much do 24 pencils cost? Show your reasoning step by step.",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May? Think step by step.",
    "Solve for x: 3x + 7 = 25. Explain each step.",
    "A train travels 180 km in 2 hours and then 120 km in 1.5 hours. What is its average speed over the "
    "whole trip? Show your work.",
    "What is the sum of the integers from 1 to 100? Explain how you got it.",
    "A rectangle has a perimeter of 30 cm and its length is twice its width. Find its area, step by step.",
    "If 5 workers build a wall in 12 days, how long do 8 workers take at the same rate? Show the steps.",
    "Compute 17% of 250, then add 15 to the result. Explain each step.",
]
_CODE = [
    "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    "Write a Python function `is_palindrome(s)` that ignores case and non-alphanumeric characters.",
    "Implement binary search in Python over a sorted list; return the index or -1.",
    "Write a Python function that counts how often each word occurs in a string and returns a dict.",
    "Write a JavaScript function that removes duplicate values from an array while keeping the order.",
    "Write a SQL query that returns the five customers with the highest total order amount from tables "
    "customers(id, name) and orders(id, customer_id, amount).",
    "Write a Python class `Stack` with push, pop, peek and is_empty methods.",
    "Write a Python function that merges two sorted lists into one sorted list without using sort().",
]


@dataclass
class PromptSpec:
    """One prompt as given: exactly one of ``text``, ``messages`` or ``input_ids`` is set."""

    label: str
    text: str | None = None
    messages: list[dict[str, Any]] | None = None
    input_ids: list[int] | None = None
    where: str | None = None  # file:line, for messages


def builtin_prompts() -> list[PromptSpec]:
    """The shipped prompts: 8 chat, 8 math, 8 code, interleaved so the first N mix all three kinds."""
    kinds = [("chat", _CHAT), ("math", _MATH), ("code", _CODE)]
    out = []
    for i in range(max(len(k[1]) for k in kinds)):
        for name, texts in kinds:
            if i < len(texts):
                out.append(PromptSpec(label=f"{name}-{i + 1}", messages=[{"role": "user", "content": texts[i]}]))
    return out


def load_prompt_file(path: str | Path) -> list[PromptSpec]:
    """Read a JSONL prompt file; raise BadInput naming the file, line and key of the first bad line.

    Example::

        >>> import tempfile, os
        >>> f = tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False); _ = f.write('{"input_ids": [1, 2]}\\nnope\\n'); f.close()
        >>> load_prompt_file(f.name)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        draftguard.errors.BadInput: ...:2: not JSONL: each line must be a JSON object (Expecting value)
        >>> os.unlink(f.name)
    """
    p = Path(path)
    if not p.is_file():
        raise BadInput(f"{p}: prompt file not found (give a JSONL file or `builtin`)", file=str(p))
    if p.stat().st_size > MAX_PROMPT_FILE_BYTES:
        raise BadInput(f"{p}: over {MAX_PROMPT_FILE_BYTES >> 20} MB; refused", file=str(p))
    try:
        text = p.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{p}: not UTF-8 text (byte {exc.start})", file=str(p)) from None
    out: list[PromptSpec] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{p}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BadInput(f"{where}: not JSONL: each line must be a JSON object ({exc.msg})", file=str(p), line=n) from None
        if not isinstance(obj, dict):
            raise BadInput(f"{where}: not JSONL: each line must be a JSON object, got {type(obj).__name__}",
                           file=str(p), line=n)
        given = [k for k in ("prompt", "messages", "input_ids") if k in obj]
        if len(given) != 1:
            raise BadInput(f"{where}: give exactly one of `prompt`, `messages` or `input_ids` (got "
                           f"{', '.join(given) or 'none'})", file=str(p), line=n)
        key = given[0]
        value = obj[key]
        label = str(obj.get("label") or f"{p.stem}-{n}")
        if key == "prompt":
            if not isinstance(value, str) or not value:
                raise BadInput(f"{where}: `prompt` must be a non-empty string", file=str(p), line=n, key="prompt")
            out.append(PromptSpec(label=label, text=value, where=where))
        elif key == "messages":
            ok = isinstance(value, list) and value and all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in value)
            if not ok:
                raise BadInput(f"{where}: `messages` must be a non-empty list of {{\"role\": ..., \"content\": ...}}",
                               file=str(p), line=n, key="messages")
            out.append(PromptSpec(label=label, messages=value, where=where))
        else:
            ok = isinstance(value, list) and value and all(
                isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in value)
            if not ok:
                raise BadInput(f"{where}: `input_ids` must be a non-empty list of non-negative ints",
                               file=str(p), line=n, key="input_ids")
            out.append(PromptSpec(label=label, input_ids=list(value), where=where))
    if not out:
        raise BadInput(f"{p}: the prompt file holds no prompts", file=str(p))
    return out


def select_prompts(source: str, num_prompts: int | None = None) -> list[PromptSpec]:
    """``builtin`` or a JSONL file, cut to the first ``num_prompts``."""
    prompts = builtin_prompts() if source == "builtin" else load_prompt_file(source)
    if num_prompts is not None:
        if num_prompts < 1:
            raise BadInput(f"--num-prompts must be at least 1, got {num_prompts}", key="num_prompts")
        prompts = prompts[:num_prompts]
    return prompts


def encode(spec: PromptSpec, tokenizer: Any, vocab_size: int | None = None) -> list[int]:
    """Token ids of a prompt: ``input_ids`` as given; text tokenized; messages through the chat
    template (thinking off) when the tokenizer has one, else their contents joined as plain text."""
    where = spec.where or f"built-in prompt {spec.label}"
    if spec.input_ids is not None:
        ids = list(spec.input_ids)
        if vocab_size is not None and max(ids) >= vocab_size:
            raise BadInput(f"{where}: `input_ids` holds {max(ids)}, outside the target's vocabulary (vocab_size "
                           f"{vocab_size})", key="input_ids")
        return ids
    if tokenizer is None:
        raise BadInput(f"{where}: the target has no tokenizer, so text prompts cannot be encoded; give "
                       "--prompts FILE with {\"input_ids\": [...]} lines")
    if spec.messages is not None:
        if getattr(tokenizer, "chat_template", None):
            out = tokenizer.apply_chat_template(spec.messages, add_generation_prompt=True, tokenize=True,
                                                enable_thinking=False)
            if isinstance(out, dict) or hasattr(out, "keys"):
                out = out["input_ids"]
            return [int(t) for t in out]
        text = "\n\n".join(m["content"] for m in spec.messages)
    else:
        text = spec.text or ""
    return [int(t) for t in tokenizer(text)["input_ids"]]


def encode_all(specs: Sequence[PromptSpec], tokenizer: Any, vocab_size: int | None = None) -> list[list[int]]:
    return [encode(s, tokenizer, vocab_size) for s in specs]
