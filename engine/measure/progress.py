"""How a load test reports progress: the plan it announces, running totals, and the observer hooks
(`on_start`, `on_request_sent`, `on_request_done`, `on_complete`) that a job, the console and the
bench scripts implement. A failing observer is logged, never allowed to break a measurement.
See docs/architecture.md."""
from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from engine.measure import stats
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


class Observer(Protocol):
    """Progress hooks. An observer may also define `on_request_sent(record)`: it is called (when
    present) as each request goes out, with the record still open, for live timelines."""

    def on_start(self, plan: RunPlan) -> None: ...
    def on_request_done(self, record: RequestRecord, totals: Totals) -> None: ...
    def on_complete(self, result: RunResult) -> None: ...


class NullObserver:
    """Does nothing; subclass it and override what you need. Calls arrive on the thread that called
    run_load (warm-up records too, with record.warmup set, before the measured ones); keep them short."""

    def on_start(self, plan: RunPlan) -> None:
        pass

    def on_request_sent(self, record: RequestRecord) -> None:
        pass

    def on_request_done(self, record: RequestRecord, totals: Totals) -> None:
        pass

    def on_complete(self, result: RunResult) -> None:
        pass


class ConsoleObserver(NullObserver):
    """One line per request and a summary, for the CLI."""

    def __init__(self, out: TextIO | None = None, every: int = 1) -> None:
        self.out = out or sys.stdout
        self.every = max(1, every)

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def on_start(self, plan: RunPlan) -> None:
        self._print(f"{plan.label or 'run'}: {plan.num_requests} requests, {plan.shape}, "
                    f"concurrency {plan.concurrency}, warm-up {plan.warmup}, "
                    f"{plan.workers} client process(es) -> {plan.url} [{plan.model}]")

    def on_request_done(self, record: RequestRecord, totals: Totals) -> None:
        if record.warmup or (totals.done % self.every and totals.done != totals.total):
            return
        state = (f"ok {record.e2e:6.2f} s {record.output_tokens:5d} tok" if record.ok
                 else f"FAILED: {record.error}")
        self._print(f"  [{totals.done:>4}/{totals.total}] #{record.index:<4} {state}")

    def on_complete(self, result: RunResult) -> None:
        s = result.summary
        ttft = s.get("mean_ttft_ms")
        self._print(f"done in {result.duration:.2f} s: {s.get('completed', 0)} ok, {s.get('failed', 0)} failed, "
                    f"{s.get('output_throughput', 0):.1f} output tok/s, mean TTFT "
                    + ("n/a" if ttft is None else f"{ttft:.0f} ms"))
        for _, sentence in stats.failure_causes(result.records):
            self._print(f"  {sentence}")


def sent_hook(observer: Observer) -> Callable[[RequestRecord], None] | None:
    """The observer's optional on_request_sent, wrapped like every hook."""
    fn = getattr(observer, "on_request_sent", None)
    return None if fn is None else (lambda r: notify(fn, r))


def notify(fn: Callable[..., None], *args: Any) -> None:
    """Call an observer hook; a failing observer is logged, never allowed to break the run."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - observers are user code
        log.exception("observer %s failed", getattr(fn, "__qualname__", fn))
