"""How many requests a server holds at once, and the levels a sweep or an SLO search spans to pass it: from what
the server says of itself (its KV cache, vLLM's own maximum concurrency, its --max-num-seqs), never a fixed 1..32."""
from __future__ import annotations

from dataclasses import dataclass

from engine.measure.load.spec import MAX_IN_FLIGHT
from engine.messages import Message, say


@dataclass(frozen=True)
class Capacity:
    """The requests in flight a server holds at once (`fits`; None: it does not say), the levels up to the first
    power of two past it (where requests start to wait), and why, in one sentence."""

    fits: int | None
    levels: list[int]
    said: Message


def capacity(target, per_request_tokens: int, fallback: list[int]) -> Capacity:
    """What `target` (runs.Target) holds of requests of `per_request_tokens` (prompt and answer) at once: its KV
    cache's tokens over that, else vLLM's reported maximum concurrency, at most its --max-num-seqs; the levels 1, 2,
    4, … up to the first power of two above it (at most MAX_IN_FLIGHT). `fallback`: the levels when it says
    nothing."""
    per = max(1, per_request_tokens)
    seqs = getattr(getattr(target, "config", None), "max_num_seqs", None)
    if target.kv_cache_tokens:
        fits = max(1, int(target.kv_cache_tokens // per))
        why = say("its KV cache's {tokens:,} tokens hold about {fits:,} requests of {per} tokens at once",
                  tokens=int(target.kv_cache_tokens), fits=fits, per=per)
    elif target.max_concurrency:
        fits = max(1, int(target.max_concurrency))
        why = say("vLLM reported room for about {fits:,} requests at once", fits=fits)
    else:
        return Capacity(None, list(fallback), say(
            "The server does not say how big its KV cache is, so the levels are {levels} requests in flight: give "
            "the highest to go further.", levels=", ".join(map(str, fallback))))
    if seqs and seqs < fits:
        fits = seqs
        why = say("{why}, and its --max-num-seqs lets {seqs} run at once", why=why, seqs=seqs)
    levels = [1]
    while levels[-1] <= fits and levels[-1] < MAX_IN_FLIGHT:
        levels.append(levels[-1] * 2)
    return Capacity(fits, levels, say("The levels follow the server's capacity: {why}, so they go up to {top} in "
                                      "flight.", why=why, top=levels[-1]))
