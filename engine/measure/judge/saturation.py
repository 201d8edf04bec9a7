"""Over-saturation, as GuideLLM stops a level early: in-flight and TTFT both growing.
See docs/measuring.md#saturation."""
from __future__ import annotations

from engine.results.records import RequestRecord

MIN_DONE = 20  # finished requests before judging: fewer say nothing of a trend
GROWTH = 1.5  # the latest third's mean over the first third's, for both in flight and TTFT


def _thirds(xs: list[float]) -> tuple[float, float]:
    k = max(1, len(xs) // 3)
    return sum(xs[:k]) / k, sum(xs[-k:]) / k


def oversaturated(records: list[RequestRecord]) -> bool:
    """Whether the measured requests so far show both the in-flight count and TTFT still growing: over the
    finished ones, in the order they were sent, the last third's mean in flight at their send and mean TTFT
    both at least GROWTH times the first third's."""
    done = sorted((r for r in records if not r.warmup and r.ttft is not None), key=lambda r: r.send_time)
    if len(done) < MIN_DONE:
        return False
    everyone = [r for r in records if not r.warmup]
    in_flight = [sum(1 for o in everyone
                     if o.send_time <= r.send_time and (o.end_time is None or o.end_time > r.send_time))
                 for r in done]
    (f0, f1), (t0, t1) = _thirds([float(n) for n in in_flight]), _thirds([t for r in done if (t := r.ttft) is not None])
    return f1 >= GROWTH * f0 and t1 >= GROWTH * t0 and t1 > t0
