"""How a measurement reports progress: the plan it announces, running totals, and the `Progress` protocol.
See docs/measuring.md#load-generator."""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.results.records import RequestRecord, RunResult

log = logging.getLogger(__name__)


@dataclass
class RunPlan:
    label: str
    shape: str
    num_requests: int
    warmup: int
    concurrency: int
    workers: int
    url: str
    model: str
    arrivals: str = ""  # how requests arriving at a rate come (LoadSpec.arrivals_said); "": a closed loop

    @property
    def total(self) -> int:
        return self.num_requests


@dataclass
class Totals:
    """Progress of the measured part, handed to observers after every request."""

    total: int
    done: int = 0
    ok: int = 0
    failed: int = 0
    output_tokens: int = 0
    elapsed_s: float = 0.0

    def add(self, rec: RequestRecord, elapsed_s: float) -> None:
        self.done += 1
        self.ok += rec.ok
        self.failed += not rec.ok
        self.output_tokens += rec.output_tokens
        self.elapsed_s = elapsed_s


class Progress:
    """The one progress protocol of every measurement (a load test, a sweep, the naive baseline).
    Implemented once each: the app's Job, the CLI's Console, the bench scripts. This base does nothing;
    subclass it and override what you need. Calls arrive on the thread that runs the measurement
    (warm-up records too, with record.warmup set, before the measured ones): keep them short."""

    def on_start(self, plan: RunPlan) -> None:
        """The measured part begins."""

    def on_stage(self, text: str) -> None:
        """What is happening now: "loading model", "concurrency 8", "request 3/5", ..."""

    def on_clock(self, started_at: float) -> None:
        """The measured part's clock starts at this epoch second (after the warm-up): records' times count
        from it."""

    def on_step(self, done: int, total: int, text: str) -> None:
        """A run of several (a sweep's levels, a tuning comparison's configurations): `done` of `total`
        finished, `text` is what comes next (or "done")."""

    def on_worker(self, pid: int) -> None:
        """A worker process exists (the naive baseline's), for the memory charts."""

    def on_request_sent(self, record: RequestRecord) -> None:
        """A request went out; the record is still open (live timelines)."""

    def on_request_done(self, record: RequestRecord, totals: Totals) -> None:
        """A request finished (or failed)."""

    def on_complete(self, result: RunResult) -> None:
        """The run is over (also after a cancel); a sweep reports each level."""

    def side(self, name: str) -> "Progress":
        """The progress of one side ("A", "B") of two runs measured at once (Runner.side_by_side): each
        side's calls arrive on its own thread. This base ignores them."""
        return Progress()


def notify(fn: Callable[..., None], *args: Any) -> None:
    """Call an observer hook; a failing observer is logged, never allowed to break the run."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - observers are user code
        log.exception("observer %s failed", getattr(fn, "__qualname__", fn))
