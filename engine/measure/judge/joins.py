"""Continuous batching read from a run's streamed requests: who joined whose answer mid-generation (and at which of
its tokens), and how many requests were generating together when each token came out. See
docs/measuring.md#joins."""
from __future__ import annotations

import bisect
from dataclasses import dataclass

from engine.results.records import RequestRecord

# A request "joined" another's answer once that answer had streamed at least this many tokens before the
# newcomer's first: the other's 2nd token comes from a later engine step than its 1st, so the newcomer was not
# simply prefilled in the same step (two first tokens of one step reach the client a few ms apart, in any order).
MID_GENERATION = 2


@dataclass(frozen=True)
class Join:
    """Request `late`'s first token came while `early` was generating, after `early`'s `at_token`-th token."""

    late: int  # the record's index
    early: int
    at_token: int


def _last(r: RequestRecord) -> float | None:
    """When the request's generation ended: its last token (None: still generating)."""
    if r.end_time is None:
        return None
    return r.chunk_times[-1] if r.chunk_times else r.end_time


def joins(records: list[RequestRecord]) -> list[Join]:
    """Every (late, early) pair where `late`'s first token arrived after `early` had streamed MID_GENERATION or
    more tokens and before `early`'s last: continuous batching took `late` into a batch already decoding.
    Records in flight count with the tokens they have so far."""
    streamed = [(r, first) for r in records if (first := r.first_token_time) is not None and r.chunk_times]
    out = []
    for late, first in streamed:
        for early, _ in streamed:
            if early is late:
                continue
            last = _last(early)
            k = bisect.bisect_left(early.chunk_times, first)  # early's tokens before late's first
            if k >= MID_GENERATION and (last is None or first < last):
                out.append(Join(late.index, early.index, k))
    return out


def first_joins(records: list[RequestRecord]) -> dict[int, Join]:
    """For each request that joined others mid-generation, the one it joined furthest into its answer (the
    request that had been generating longest): what the timeline writes beside it."""
    best: dict[int, Join] = {}
    for j in joins(records):
        if j.late not in best or j.at_token > best[j.late].at_token:
            best[j.late] = j
    return best


@dataclass(frozen=True)
class Sharing:
    """How many requests were generating together when each token arrived (`counts`, one per token, in time
    order, with its time `times`): its peak and its mean over the tokens."""

    times: list[float]
    counts: list[int]

    @property
    def peak(self) -> int:
        return max(self.counts, default=0)

    @property
    def mean(self) -> float:
        return sum(self.counts) / len(self.counts) if self.counts else 0.0


def sharing(records: list[RequestRecord]) -> Sharing:
    """At each token's arrival, the requests between their first and last token (generating): the requests one
    decode step served together, as the client saw them."""
    spans = [(r.first_token_time, _last(r)) for r in records if r.first_token_time is not None]
    starts = sorted(a for a, _ in spans)
    ends = sorted(b for _, b in spans if b is not None)
    times = sorted(t for r in records for t in r.chunk_times)
    # begun by t, less those whose last token came before t
    return Sharing(times, [bisect.bisect_right(starts, t) - bisect.bisect_left(ends, t) for t in times])
