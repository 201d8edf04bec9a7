"""How a measurement reports progress: the plan it announces, running totals, and the `Progress` protocol.
See docs/measuring.md#load-generator."""
from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from engine import paths
from engine.measure.judge import failures, lateness
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


class Console(Progress):
    """Progress on the terminal: stages, one line per request, a summary per run (the CLI). A run of more than
    `lines` requests writes its request lines to a file in `log_dir` (default: the lab's logs folder) and prints
    about `lines` progress lines instead: a terminal never gets 100,000 of them."""

    LINES = 50

    def __init__(self, out: TextIO | None = None, every: int = 1, prefix: str = "", lines: int = LINES,
                 log_dir: Path | None = None) -> None:
        self.out = out or sys.stdout
        self.every = max(1, every)
        self.prefix = prefix
        self.lines = lines
        self.log_dir = log_dir
        self.log: TextIO | None = None
        self.log_path: Path | None = None
        self._every = self.every

    def _print(self, text: str) -> None:
        print(self.prefix + text, file=self.out, flush=True)

    def side(self, name: str) -> "Console":
        """The same terminal, each line led by the side's name (two sides print between each other)."""
        return Console(self.out, self.every, prefix=f"{self.prefix}{name} | ", lines=self.lines, log_dir=self.log_dir)

    def on_start(self, plan: RunPlan) -> None:
        # arrivals at a rate have no fixed number in flight: their rate and cap are said instead
        pace = f"arrivals {plan.arrivals}" if plan.arrivals else f"{plan.shape}, concurrency {plan.concurrency}"
        self._print(f"{plan.label or 'run'}: {plan.num_requests} requests, {pace}, warm-up {plan.warmup}, "
                    f"{plan.workers} client process(es) -> {plan.url} [{plan.model}]")
        self._close()
        self._every = self.every
        if plan.num_requests > self.lines:
            folder = self.log_dir or paths.data_home() / "logs"
            folder.mkdir(parents=True, exist_ok=True)
            side = "".join(c for c in self.prefix if c.isalnum())
            self.log_path = folder / f"requests-{time.strftime('%Y%m%d-%H%M%S')}{'-' + side if side else ''}.log"
            self.log = open(self.log_path, "w")  # noqa: SIM115 - closed when the run completes
            self._every = max(self.every, -(-plan.num_requests // self.lines))
            self._print(f"  each request's line goes to {self.log_path}; here, a line every {self._every} requests")

    def _close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None

    def on_stage(self, text: str) -> None:
        self._print(f"  {text}")

    def on_step(self, done: int, total: int, text: str) -> None:
        self._print(f"[{done}/{total}] {text}")

    def on_request_done(self, record: RequestRecord, totals: Totals) -> None:
        if record.warmup:
            return
        state = (f"ok {record.e2e:6.2f} s {record.output_tokens:5d} tok" if record.ok
                 else f"FAILED: {record.error}")
        line = f"  [{totals.done:>4}/{totals.total}] #{record.index:<4} {state}"
        if self.log is not None:
            print(line, file=self.log)
        if totals.done % self._every and totals.done != totals.total:
            return
        if self.log is not None:  # the file has each request; the terminal, how far the run is
            line = f"  [{totals.done:>4}/{totals.total}] {totals.ok} ok, {totals.failed} failed"
        self._print(line)

    def on_complete(self, result: RunResult) -> None:
        s = result.summary
        ttft = s.get("mean_ttft_ms")
        self._print(f"done in {result.duration:.2f} s: {s.completed or 0} ok, {s.failed or 0} failed, "
                    f"{s.output_throughput or 0:.1f} output tok/s, mean TTFT "
                    + ("n/a" if ttft is None else f"{ttft:.0f} ms"))
        for _, sentence in failures.run_causes(result):
            self._print(f"  {sentence}")
        if (peak := lateness.in_flight_said(result)) is not None:
            self._print(f"  {peak}")
        if (late := lateness.said(result.extra)) is not None:  # a rate-based run: did the client keep its schedule
            self._print(f"  {late}")
        if (held := lateness.budget_said(result.extra)) is not None:
            self._print(f"  {held}")
        if self.log is not None:
            self._close()
            self._print(f"  each request's line: {self.log_path}")


def notify(fn: Callable[..., None], *args: Any) -> None:
    """Call an observer hook; a failing observer is logged, never allowed to break the run."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - observers are user code
        log.exception("observer %s failed", getattr(fn, "__qualname__", fn))
