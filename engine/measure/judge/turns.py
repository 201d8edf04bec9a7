"""A multi-turn chat's requests by turn: does the 5th turn still start fast? Each record of a chat knows
its conversation and turn (RequestRecord.conversation, .turn); this reads them back per turn index (TTFT,
the prompt the history grew to, the tokens the prefix cache served). See docs/architecture.md."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from engine.measure.judge.stats import percentile
from engine.results.records import RequestRecord


@dataclass(frozen=True)
class TurnStats:
    turn: int  # 0 = each conversation's first
    requests: int  # measured requests of this turn that succeeded
    median_ttft_s: float | None
    p99_ttft_s: float | None
    mean_prompt_tokens: float | None  # the whole history the turn sent, as the server counted it
    mean_cached_tokens: float | None  # of those, taken from the prefix cache (None: the server did not say)


def by_turn(records: Iterable[RequestRecord]) -> list[TurnStats]:
    """Per turn index, the successful measured requests' TTFT and prompt; [] for a run without turns."""
    groups: dict[int, list[RequestRecord]] = {}
    for r in records:
        if not r.warmup and r.turn is not None and r.ok:
            groups.setdefault(r.turn, []).append(r)
    out = []
    for turn in sorted(groups):
        rs = groups[turn]
        ttfts = [r.ttft for r in rs if r.ttft is not None]
        cached = [r.cached_tokens for r in rs if r.cached_tokens is not None]
        out.append(TurnStats(turn=turn, requests=len(rs), median_ttft_s=percentile(ttfts, 50),
                             p99_ttft_s=percentile(ttfts, 99),
                             mean_prompt_tokens=sum(r.prompt_tokens for r in rs) / len(rs),
                             mean_cached_tokens=sum(cached) / len(cached) if cached else None))
    return out
