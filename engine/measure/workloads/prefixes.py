"""Shared prefixes: the workload that shows prefix caching (as `vllm bench serve --dataset-name prefix_repetition`).
`num_prefixes` distinct prefixes of `prefix_len` tokens, each followed in its requests by a suffix of its own of
`suffix_len` tokens, every answer `output_len` tokens; the requests in a seeded random order. A server with prefix
caching computes each prefix once and serves it from its cache to every later request that starts with it.
See docs/measuring.md#workloads."""
from __future__ import annotations

import random

from engine.measure.load.spec import MAX_REQUESTS, MAX_TOKENS
from engine.measure.workloads.base import Plan, WorkloadError, length_summary
from engine.measure.workloads.tokens import Tokens, estimated
from engine.messages import Message, say

DEFAULTS = {"prefix_len": 256, "suffix_len": 256, "num_prefixes": 10, "output_len": 128}  # vLLM's own


def _whole(v, low: int, high: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def check(n, prefix_len, suffix_len, num_prefixes, output_len) -> None:
    """One sentence for the first setting out of range (WorkloadError)."""
    if not _whole(n, 1, MAX_REQUESTS):
        raise WorkloadError(say("A shared-prefix workload sends from 1 to {limit:,} requests, not {n}.",
                                limit=MAX_REQUESTS, n=n))
    for what, v in ((say("prefix length"), prefix_len), (say("suffix length"), suffix_len),
                    (say("answer length"), output_len)):
        if not _whole(v, 1, MAX_TOKENS):
            raise WorkloadError(say("The {what} is a whole number of tokens from 1 to {limit:,}, not {v}.",
                                    what=what, limit=MAX_TOKENS, v=v))
    if prefix_len + suffix_len > MAX_TOKENS:
        raise WorkloadError(say("A prompt of {n:,} tokens (prefix and suffix) is longer than any model takes: keep "
                                "them to {limit:,} together.", n=prefix_len + suffix_len, limit=MAX_TOKENS))
    if not _whole(num_prefixes, 1, n):
        raise WorkloadError(say("{k} prefixes for {n} requests: give from 1 prefix to as many as there are "
                                "requests, so each prefix is sent at least once.", k=num_prefixes, n=n))


def said(prefix_len: int, suffix_len: int, num_prefixes: int) -> Message:
    return say("{k} shared prefixes of {p} tokens, each request's own suffix of {s}", k=num_prefixes, p=prefix_len,
               s=suffix_len)


def plan(n: int, prefix_len: int = DEFAULTS["prefix_len"], suffix_len: int = DEFAULTS["suffix_len"],
         num_prefixes: int = DEFAULTS["num_prefixes"], output_len: int = DEFAULTS["output_len"], seed: int = 0,
         tokens: Tokens | None = None) -> Plan:
    """`n` requests over `num_prefixes` prefixes (as evenly as `n` allows: vLLM drops the remainder, this sends
    every one asked for), made from `seed`; lengths exact with a tokenizer, estimated without."""
    check(n, prefix_len, suffix_len, num_prefixes, output_len)
    tokens = tokens or estimated()
    rng = random.Random(seed)
    heads = [tokens.text_of(prefix_len, rng.getrandbits(62)) for _ in range(num_prefixes)]
    which = [i % num_prefixes for i in range(n)]
    rng.shuffle(which)  # in vLLM's order too: shuffled, so a prefix's requests do not come one after another
    prompts = [tokens.after(heads[j], suffix_len, rng.getrandbits(62)) for j in which]
    counted = [tokens.count(p) for p in prompts]
    outs = [output_len] * n
    shared = prefix_len * (n - len(set(which)))  # every prefix's later requests: what a cache serves
    summary = {"kind": "prefix-repetition", "name": str(said(prefix_len, suffix_len, num_prefixes)), "sent": n,
               "seed": seed, "prefix_len": prefix_len, "suffix_len": suffix_len, "num_prefixes": num_prefixes,
               "output_len": output_len, "cacheable_tokens": shared,
               "input_tokens": length_summary(counted), "output_tokens": length_summary(outs),
               "counted": str(tokens.said()), "tokenizer": tokens.source}
    return Plan("prefix-repetition", prompts, summary, max_tokens_each=outs, input_tokens=counted, output_tokens=outs)

