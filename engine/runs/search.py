"""The SLO search's result (`SloSearch`) and the watch that stops an over-saturated level early."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field

from engine.measure.progress import Progress
from engine.measure.judge import saturation
from engine.measure.judge.slo import Slo, judge
from engine.messages import say, say_n
from engine.results.records import RunResult


class SaturationWatch(Progress):
    """A level's progress passed on to the search's, watching its measured requests for over-saturation
    (engine.measure.judge.saturation): once seen, `stop` is set and the level ends early."""

    def __init__(self, inner: Progress, stop: threading.Event, level: int) -> None:
        self.inner, self.stop, self.level = inner, stop, level
        self.records: list = []
        self.saturated = False

    def on_start(self, plan) -> None:
        self.inner.on_start(plan)

    def on_stage(self, text: str) -> None:
        self.inner.on_stage(text)

    def on_clock(self, started_at: float) -> None:
        self.inner.on_clock(started_at)

    def on_request_sent(self, record) -> None:
        if not record.warmup:
            self.records.append(record)
        self.inner.on_request_sent(record)

    def on_request_done(self, record, totals) -> None:
        self.inner.on_request_done(record, totals)
        # judged every few answers: the check walks every request
        if not record.warmup and not self.saturated and totals.done % max(5, self.level // 4) == 0:
            if saturation.oversaturated(self.records):
                self.saturated = True
                self.stop.set()

    def on_complete(self, result) -> None:
        self.inner.on_complete(result)


@dataclass(frozen=True)
class Tried:
    """One level the search ran, as its table shows it: whether the SLO held there, the share of its measured
    requests that met the SLO and its goodput (req/s) under the search's SLO (None: no requests to judge), and
    whether it was stopped early past saturation (then it counts as missed whatever its share)."""

    level: float
    held: bool
    attainment: float | None
    goodput: float | None
    saturated: bool
    run: RunResult


@dataclass
class SloSearch:
    """What an SLO search found: the most requests in flight at which the SLO held (`best`, None: not even
    `low`), the lowest level that missed it (`above`, None: even `high` held), every level tried in order
    with whether it held and its run, and whether the time cap ended it before the levels were `tolerance`
    apart."""

    slo: Slo
    low: float
    high: float
    tolerance: float
    time_cap_s: float
    id: str
    by: str = "concurrency"  # "concurrency": requests in flight; "rate": requests per second
    doubled: bool = False  # no top was given: the levels doubled from `low` until the SLO missed
    tried: list = field(default_factory=list)  # [(level, held, RunResult)]
    best: float | None = None
    above: float | None = None
    capped: bool = False
    cancelled: bool = False  # stopped by the viewer before it settled

    @property
    def levels(self) -> list[int]:
        return [lv for lv, _, _ in self.tried]

    @property
    def runs(self) -> list[RunResult]:
        return [r for _, _, r in self.tried]

    @property
    def best_run(self) -> RunResult | None:
        """The run of the level the search answers with (`best`); None when not even `low` held."""
        return next((r for lv, held, r in reversed(self.tried) if held and lv == self.best), None)

    def rows(self) -> list[Tried]:
        """Every level tried, in the order tried, judged by the search's own SLO (as the search judged it)."""
        out = []
        for level, held, run in self.tried:
            verdict = judge(run, self.slo)
            out.append(Tried(level, held, verdict.attainment if verdict else None, verdict.goodput if verdict else None,
                             bool(run.extra.slo.oversaturated), run))
        return out

    @property
    def said(self):
        """The answer in one sentence."""
        if self.cancelled:
            if self.best is None:
                return say("The search was cancelled after {n} levels, before any met the SLO ({slo}).",
                           n=len(self.tried), slo=self.slo.said)
            best = (say("{rate:g} requests/s", rate=self.best) if self.by == "rate" else
                    say("{n} requests in flight", n=self.best))
            return say("The search was cancelled after {n} levels: {best} met the SLO ({slo}), but where the limit "
                       "lies was not settled.", n=len(self.tried), best=best, slo=self.slo.said)
        if self.by == "rate":
            return self._rate_said()
        values = dict(slo=self.slo.said, best=self.best, above=self.above, tol=self.tolerance, n=len(self.tried),
                      high=self.high, low=self.low, cap=self.time_cap_s)
        if self.best is None:
            return say_n("Not even {low} request in flight met the SLO ({slo}): loosen the limits or give the "
                         "server less to do.", "Not even {low} requests in flight met the SLO ({slo}): loosen the "
                         "limits or give the server less to do.", self.low, low=self.low, slo=self.slo.said)
        if self.capped and self.above is None:
            return say("The time cap ({cap:g} s) ended the search after {n} levels: {best} requests in flight met "
                       "the SLO ({slo}); levels up to {high} were not all tried.", **values)
        if self.capped:
            return say("The time cap ({cap:g} s) ended the search after {n} levels: {best} requests in flight met "
                       "the SLO ({slo}) and {above} did not, so the limit lies between them.", **values)
        if self.above is None:
            return say("Even {high} requests in flight, the highest level searched, met the SLO ({slo}): the "
                       "limit lies higher, so search higher.", **values)
        return say("The most requests in flight that meet the SLO ({slo}) is {best}: {above} did not, found by "
                   "bisection in {n} levels to within {tol}.", **values)

    def _rate_said(self):
        values = dict(slo=self.slo.said, best=self.best, above=self.above, tol=self.tolerance, n=len(self.tried),
                      high=self.high, low=self.low, cap=self.time_cap_s)
        if self.best is None:
            return say("Not even {low:g} requests/s met the SLO ({slo}): loosen the limits or give the server less "
                       "to do.", **values)
        if self.capped:
            return say("The time cap ({cap:g} s) ended the search after {n} levels: {best:g} requests/s met the SLO "
                       "({slo}); the limit lies above it.", **values)
        if self.above is None:
            return say("Even {high:g} requests/s, the highest rate searched, met the SLO ({slo}): the limit lies "
                       "higher, so search higher.", **values)
        return say("The highest rate that meets the SLO ({slo}) is {best:g} requests/s: {above:g} did not, found by "
                   "bisection in {n} levels to within {tol:g}.", **values)
