"""Coordinated omission: did the client send each rate-based request when its schedule said?
See docs/measuring.md#lateness."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.measure.judge.stats import peak_in_flight, percentile
from engine.messages import Message, say, say_n
from engine.results.records import Lateness as LatenessNotes
from engine.results.records import Notes, RequestRecord

# A send more than this after its planned time counts as late: an event loop's timer wakes within about a
# millisecond, so 10 ms behind means the client itself was busy (or blocked) when the request was due.
LATE_S = 0.010


@dataclass(frozen=True)
class Lateness:
    planned: int  # measured requests that had a planned send time
    late: int  # ... sent more than LATE_S after it
    p99_s: float  # the 99th percentile of send - planned (s; 0 for a send that was early or on time)
    worst_s: float


def of(records: Iterable[RequestRecord]) -> Lateness | None:
    """The measured requests' sends against their plan; None when none had a planned time (a closed loop). A wait
    for a slot under a cap on requests in flight is by design, not lateness."""
    gaps = [max(0.0, r.send_time - r.planned_time - (r.slot_wait or 0.0)) for r in records
            if not r.warmup and r.planned_time is not None]
    if not gaps:
        return None
    return Lateness(planned=len(gaps), late=sum(g > LATE_S for g in gaps), p99_s=percentile(gaps, 99) or 0.0,
                    worst_s=max(gaps))


def notes(records: Iterable[RequestRecord]) -> LatenessNotes:
    """A run's lateness as its notes keep it (nothing for a closed loop)."""
    late = of(records)
    if late is None:
        return LatenessNotes()
    return LatenessNotes(planned_sends=late.planned, late_sends=late.late, p99_ms=late.p99_s * 1000)


def said(notes: Notes) -> Message | None:
    """One sentence on whether the client kept to its schedule; None for a run without one."""
    n = notes.lateness
    if n.planned_sends is None or n.late_sends is None or n.p99_ms is None:
        return None
    if n.late_sends == 0:
        return say_n("The client sent its {n} scheduled request on time (99th percentile {p99:.1f} ms behind its "
                     "plan).", "The client sent all {n} scheduled requests on time (99th percentile {p99:.1f} ms "
                     "behind their plan).", n.planned_sends, p99=n.p99_ms)
    return say("The client fell behind its schedule: {late} of {n} requests went out more than {limit:.0f} ms late "
               "(99th percentile {p99:.0f} ms), so the server saw less load than planned and the latencies may look "
               "better than that load would give: send fewer requests per second, or use more client processes.",
               late=n.late_sends, n=n.planned_sends, limit=LATE_S * 1000, p99=n.p99_ms)


def budget_said(notes: Notes) -> Message | None:
    """One sentence when measured requests waited for a connection of the client's open-file budget
    (engine.measure.load.request.connection_budget); None when none did."""
    n = notes.load_client
    if not n.waits or n.connections is None:
        return None
    return say_n("{n} request waited for one of the {budget:,} connections this client can hold at once (set by its "
                 "open-file limit and local ports), so the server saw fewer requests at once than planned: raise the "
                 "limit (ulimit -n) to send more at once.",
                 "{n} requests waited for one of the {budget:,} connections this client can hold at once (set by its "
                 "open-file limit and local ports), so the server saw fewer requests at once than planned: raise the "
                 "limit (ulimit -n) to send more at once.", n.waits, budget=n.connections)


def in_flight_said(result: Any) -> Message | None:
    """For a run whose requests arrived on a schedule (a rate, a trace): the most that were in flight at once, as
    observed, and its cap; None for a closed loop, whose number in flight was set."""
    measured = [r for r in result.records if not r.warmup]
    if not any(r.planned_time is not None for r in measured):
        return None
    cap = result.load.other.get("max_in_flight")
    peak = peak_in_flight(result.records)
    if cap:
        waited = sum(1 for r in measured if (r.slot_wait or 0) > LATE_S)
        return say("At most {peak} requests were in flight at once (observed; capped at {cap}), and {waited} of {n} "
                   "arrivals waited for a slot.", peak=peak, cap=cap, waited=waited, n=len(measured))
    return say("At most {peak} requests were in flight at once (observed; no cap).", peak=peak)
