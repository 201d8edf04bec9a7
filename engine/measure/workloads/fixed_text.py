"""Prompts cut from one fixed text (as `vllm bench serve --dataset-name sonnet`, without its copied poems): every
prompt opens with the text's first `prefix_len` tokens, shared, then lines of the text drawn at random (seeded) up
to exactly `input_len` tokens; every answer `output_len` tokens. Real sentences, not random words, of lengths one
chooses. The shipped text (examples/workloads/fixed-text.txt) was written for this project: no copied text.
See docs/measuring.md#workloads."""
from __future__ import annotations

import hashlib
import random

from engine.measure.load.spec import MAX_REQUESTS, MAX_TOKENS
from engine.measure.workloads.base import MAX_FILE_BYTES, Plan, WorkloadError, length_summary, uploaded_text
from engine.measure.workloads.tokens import Tokens, estimated
from engine.messages import Message, say

SHIPPED = "fixed-text.txt"
DEFAULTS = {"input_len": 256, "prefix_len": 128, "output_len": 32}


def _whole(v, low: int, high: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def check(n, input_len, prefix_len, output_len) -> None:
    """One sentence for the first setting out of range (WorkloadError)."""
    if not _whole(n, 1, MAX_REQUESTS):
        raise WorkloadError(say("A fixed-text workload sends from 1 to {limit:,} requests, not {n}.",
                                limit=MAX_REQUESTS, n=n))
    for what, v in ((say("prompt length"), input_len), (say("answer length"), output_len)):
        if not _whole(v, 1, MAX_TOKENS):
            raise WorkloadError(say("The {what} is a whole number of tokens from 1 to {limit:,}, not {v}.",
                                    what=what, limit=MAX_TOKENS, v=v))
    if not isinstance(prefix_len, int) or isinstance(prefix_len, bool) or not 0 <= prefix_len < input_len:
        raise WorkloadError(say("The shared opening is a whole number of tokens from 0 to one less than the prompt's "
                                "{n}, not {v}: the rest of each prompt is its own.", n=input_len, v=prefix_len))


# The texts planned from lately, by sha256: another seed's prompts (a repeat, a sweep's level) are cut from the same
# text the run was given, which a run records only by name and hash (never its content)
_KEPT: dict[str, bytes] = {}
KEPT = 8


def kept(sha256: str, name: str) -> bytes:
    """A text planned from in this process, by its hash (WorkloadError when it is no longer held)."""
    if sha256 not in _KEPT:
        raise WorkloadError(say("The text {name} is no longer held here: choose it again to send it.", name=name))
    return _KEPT[sha256]


def said(input_len: int, prefix_len: int) -> Message:
    return say("prompts of {n} tokens from a fixed text, the first {p} shared", n=input_len, p=prefix_len)


def plan(text: bytes, name: str, n: int, input_len: int = DEFAULTS["input_len"],
         prefix_len: int = DEFAULTS["prefix_len"], output_len: int = DEFAULTS["output_len"], seed: int = 0,
         tokens: Tokens | None = None) -> Plan:
    """`n` prompts of exactly `input_len` tokens (with a tokenizer; about that with the estimate) cut from `text`."""
    check(n, input_len, prefix_len, output_len)
    tokens = tokens or estimated()
    content = uploaded_text(text, name, too_big=say(
        "{name} is {mb:.0f} MB; a fixed text is read up to {limit} MB: give a part of it.", name=name,
        mb=len(text) / 2**20, limit=MAX_FILE_BYTES // 2**20), binary=say(
        "{name} is a binary file, not text: give a plain text file (.txt) of lines of prose.", name=name))
    lines = [line.strip() for line in content.splitlines() if line.strip()]
    if not lines:
        raise WorkloadError(say("{name} holds no text: give a file of lines of text.", name=name))
    if prefix_len and (held := tokens.count("\n".join(lines))) <= prefix_len:
        raise WorkloadError(say("{name} holds {n:,} tokens, no more than the shared opening's {p:,}: give a longer "
                                "text, or a shorter opening.", name=name, n=held, p=prefix_len))
    head = tokens.cut("\n".join(lines), prefix_len) + "\n" if prefix_len else ""
    rng = random.Random(seed)
    per_line = max(1, tokens.count("\n".join(lines)) // len(lines))
    prompts = []
    for _ in range(n):
        body = [rng.choice(lines) for _ in range(input_len // per_line + 2)]
        while tokens.count(head + "\n".join(body)) < input_len:  # a text of short lines: more of them
            body += [rng.choice(lines) for _ in range(8)]
        prompts.append(tokens.cut(head + "\n".join(body), input_len))
    counted = [tokens.count(p) for p in prompts]
    outs = [output_len] * n
    sha = hashlib.sha256(text).hexdigest()
    _KEPT[sha] = text
    while len(_KEPT) > KEPT:
        del _KEPT[next(iter(_KEPT))]
    summary = {"kind": "fixed-text", "name": str(said(input_len, prefix_len)), "file": name, "lines": len(lines),
               "sha256": sha, "sent": n, "seed": seed, "input_len": input_len,
               "prefix_len": prefix_len, "output_len": output_len, "input_tokens": length_summary(counted),
               "output_tokens": length_summary(outs), "counted": str(tokens.said()), "tokenizer": tokens.source}
    return Plan("fixed-text", prompts, summary, max_tokens_each=outs, input_tokens=counted, output_tokens=outs)
