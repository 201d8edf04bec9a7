"""The CLI's progress on the terminal (a `Progress`): stages, one line per request, a summary per run."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TextIO

from engine.digits import significant
from engine.measure.judge import failures, lateness
from engine.measure.progress import Progress, RunPlan, Totals
from engine.results.records import RequestRecord, RunResult


class Console(Progress):
    """Progress on the terminal: stages, one line per request, a summary per run (the CLI). A run of more than
    `lines` requests writes its request lines to a file in `log_dir` (the CLI's: the data home's logs) and prints
    about `lines` progress lines instead: a terminal never gets 100,000 of them."""

    LINES = 50

    def __init__(self, out: TextIO | None = None, every: int = 1, prefix: str = "", lines: int = LINES, *,
                 log_dir: Path) -> None:
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
            self.log_dir.mkdir(parents=True, exist_ok=True)
            side = "".join(c for c in self.prefix if c.isalnum())
            self.log_path = self.log_dir / f"requests-{time.strftime('%Y%m%d-%H%M%S')}{'-' + side if side else ''}.log"
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
        self._print(f"done in {significant(result.duration, 3)} s: {s.completed or 0} ok, {s.failed or 0} failed, "
                    f"{significant(s.output_throughput or 0)} output tok/s, mean TTFT "
                    + ("n/a" if ttft is None else f"{significant(ttft)} ms"))
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
