"""Multi-turn chats: N conversations of K turns, each turn sent with the whole history so far.
See docs/measuring.md#workloads."""
from __future__ import annotations

import random
from collections.abc import Sequence

from engine.measure.workloads.base import Plan, WorkloadError, length_summary
from engine.measure.workloads.datasets import Dataset
from engine.measure.workloads.tokens import Tokens, estimated
from engine.messages import say

MAX_TURNS = 64
MAX_CONVERSATIONS = 10_000

# What a user says next when the source conversation has no more turns: written for this project (CC0).
FOLLOW_UPS: tuple[str, ...] = (
    "Can you give me a concrete example?",
    "Please make that shorter.",
    "Why is that so?",
    "What would change if the numbers were ten times larger?",
    "Can you put that in a short list?",
    "What is a common mistake people make here?",
    "How would you explain it to a beginner?",
    "Is there a trade-off I should know about?",
    "What should I try first?",
    "Summarize what we discussed so far in two sentences.",
)


def plan(conversations: int, turns: int, source: Dataset | Sequence[str], seed: int = 0,
         tokens: Tokens | None = None, think_time_s: float = 0.0) -> Plan:
    """`conversations` × `turns` user messages: from a dataset, its rows' human turns (in file order, rows
    cycled when there are fewer than asked), else one conversation per prompt of a list; missing turns are
    seeded follow-ups. The first turns' lengths are counted; later prompts grow with the replies."""
    if not isinstance(conversations, int) or not 1 <= conversations <= MAX_CONVERSATIONS:
        raise WorkloadError(say("A multi-turn chat has from 1 to {limit:,} conversations, not {n}.",
                                limit=MAX_CONVERSATIONS, n=conversations))
    if not isinstance(turns, int) or not 1 <= turns <= MAX_TURNS:
        raise WorkloadError(say("A conversation has from 1 to {limit} turns, not {n}.", limit=MAX_TURNS, n=turns))
    tokens = tokens or estimated()
    starts = [list(r.turns) for r in source.rows] if isinstance(source, Dataset) else [[p] for p in source]
    if not starts:
        raise WorkloadError(say("A multi-turn chat needs at least one prompt to start a conversation."))
    rng = random.Random(seed)
    chats, padded = [], 0
    for c in range(conversations):
        mine = starts[c % len(starts)][:turns]
        padded += turns - len(mine)
        chats.append(mine + [rng.choice(FOLLOW_UPS) for _ in range(turns - len(mine))])
    firsts = [tokens.count(chat[0]) for chat in chats]
    name = source.name if isinstance(source, Dataset) else str(say("{n} prompts", n=len(starts)))
    summary = {"kind": "multi-turn", "name": name, "conversations": conversations, "turns": turns,
               "sent": conversations * turns, "follow_ups_added": padded, "think_time_s": think_time_s,
               "seed": seed, "input_tokens": length_summary(firsts), "input_of": "first turns",
               "counted": str(tokens.said()), "tokenizer": tokens.source}
    if isinstance(source, Dataset):
        summary.update(rows=len(source.rows), sha256=source.sha256, size_bytes=source.size_bytes, format=source.format,
                       layout=source.layout)
    return Plan("multi-turn", [chat[0] for chat in chats], summary, conversations=chats, think_time_s=think_time_s,
                input_tokens=firsts)
