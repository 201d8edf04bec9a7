"""Cold or warm: whether a run's measured part was its server's first batch of that size.
See docs/measuring.md#warmth."""
from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.measure.judge.stats import measured
from engine.messages import say, say_n
from engine.results.records import Notes, RequestRecord

# Why a run is cold or warm (Warmth.why): stored codes, said by `said`
FIRST, WARMED_UP, EARLIER_RUN, SERVED = "first", "warm-up", "earlier-run", "served"


def recall_from(notes: Iterable[Notes], instance: str) -> set[int]:
    """The batch sizes the runs with these notes put through `instance` (for runs.ledger.WarmthLedger's recall)."""
    return {n for x in notes if x.warmth.instance == instance
            for n in (x.warmth.batch_size, x.warmth.warmup_batch_size) if isinstance(n, int)}


def served_from(notes: Iterable[Notes], instance: str) -> int | None:
    """The server's served count after the latest saved run on `instance` (for WarmthLedger's recall_served)."""
    counts = [x.warmth.served_after for x in notes
              if x.warmth.instance == instance and isinstance(x.warmth.served_after, int)]
    return max(counts, default=None)


def said(run_notes: Notes) -> str | None:
    """Why a run is cold or warm, one sentence; None when unknown (an older run, an import)."""
    notes = run_notes.warmth
    n = notes.batch_size
    if notes.cold is None or n is None:
        return None
    if notes.cold:
        return say("Cold: the first batch of {n} in flight since the server started. vLLM may do one-off work the "
                   "first time it runs a batch of a size, so these numbers can include start-up cost; run it again, "
                   "or warm up first, to measure serving.", n=n)
    if notes.why == SERVED:
        return say_n("Warm: before this run the server had served {n} request this app's runs did not send (its "
                     "own count on /metrics), no fewer than this batch of {batch}, so its start-up work is most likely "
                     "done.",
                     "Warm: before this run the server had served {n} requests this app's runs did not send (its "
                     "own count on /metrics), no fewer than this batch of {batch}, so its start-up work is most likely "
                     "done.", notes.served_elsewhere or 0, batch=n)
    if notes.why == WARMED_UP:
        return say("Warm: the warm-up put a batch of {n} through the server first.", n=n)
    return say("Warm: this server had already run a batch of {n} in flight since it started.", n=n)


@dataclass(frozen=True)
class WarmupCost:
    """What a run's warm-up took (its requests are kept with the run, not counted): how many, how long
    from its first send to its last answer, and its mean TTFT against the measured part's."""

    requests: int
    seconds: float
    ttft_s: float | None  # mean over the warm-up's answered requests
    measured_ttft_s: float | None
    said: str


def warmup_cost(records: Sequence[RequestRecord]) -> WarmupCost | None:
    """The warm-up's cost from its records (warmup=True, on the measured part's clock); None without one."""
    warm = [r for r in records if r.warmup]
    if not warm:
        return None
    ends = [r.end_time for r in warm if r.end_time is not None]
    seconds = max(0.0, max(ends, default=0.0) - min(r.send_time for r in warm))

    def mean_ttft(recs: Iterable[RequestRecord]) -> float | None:
        ttfts = [r.ttft for r in recs if r.ok and r.ttft is not None]
        return statistics.fmean(ttfts) if ttfts else None

    ttft, measured_ttft = mean_ttft(warm), mean_ttft(measured(records))
    said = (say_n("The warm-up ({n} request, {seconds:.1f} s, TTFT {ttft:.2f} s) was not counted; the measured "
                  "batch's TTFT was {measured:.2f} s.",
                  "The warm-up ({n} requests, {seconds:.1f} s, TTFT {ttft:.2f} s) was not counted; the measured "
                  "batch's TTFT was {measured:.2f} s.", len(warm), seconds=seconds, ttft=ttft,
                  measured=measured_ttft)
            if ttft is not None and measured_ttft is not None else
            say_n("The warm-up ({n} request, {seconds:.1f} s) was not counted.",
                  "The warm-up ({n} requests, {seconds:.1f} s) was not counted.", len(warm), seconds=seconds))
    return WarmupCost(len(warm), seconds, ttft, measured_ttft, said)
