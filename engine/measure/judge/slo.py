"""SLOs: the limits a request is judged by, attainment, goodput and a sweep's knee.
See docs/measuring.md#slo."""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigError
from engine.measure.judge import stats
from engine.messages import Message, mark, say, say_n
from engine.results.records import RunResult, Summary

ATTAINMENT = 0.90  # the share of requests that must be good for a run to meet its SLO (DistServe's)

# (field, vllm bench serve's --goodput key, how a sentence names it)
_LIMITS = (("ttft_ms", "ttft", "TTFT"), ("tpot_ms", "tpot", "TPOT"), ("e2el_ms", "e2el", mark("E2E latency")))


@dataclass(frozen=True)
class Slo:
    """Limits in milliseconds; None: not judged. At least one is set, each a number above 0."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None

    def __post_init__(self) -> None:
        given = [(name, getattr(self, f)) for f, _, name in _LIMITS if getattr(self, f) is not None]
        if not given:
            raise ConfigError(say("An SLO needs at least one limit: give a TTFT, TPOT or E2E latency limit in "
                                  "milliseconds."))
        for name, v in given:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ConfigError(say("The {name} limit must be a number of milliseconds above 0, not {value}.",
                                      name=name, value=v))

    @classmethod
    def parse(cls, items: list[str]) -> "Slo":
        """The SLO `vllm bench serve --goodput ttft:200 tpot:50 e2el:2000` names (milliseconds), each item checked:
        ConfigError with one sentence for the first that is not KEY:MS of a known key, or a key given twice."""
        limits: dict[str, float] = {}
        fields = {key: f for f, key, _ in _LIMITS}
        for item in items:
            key, colon, value = item.partition(":")
            key = key.strip().lower()
            if not colon:
                raise ConfigError(say("--goodput takes KEY:MILLISECONDS pairs such as ttft:200 tpot:50 e2el:2000, "
                                      "not '{item}'.", item=item))
            if key not in fields:
                raise ConfigError(say("--goodput judges ttft, tpot or e2el, not '{key}': e.g. --goodput ttft:200 "
                                      "e2el:2000.", key=key))
            if key in limits:
                raise ConfigError(say("--goodput names {key} twice: give each limit once.", key=key))
            try:
                limits[key] = float(value)
            except ValueError:
                raise ConfigError(say("--goodput {item} is not a number of milliseconds: e.g. {key}:200.",
                                      item=item, key=key)) from None
        return cls(**{fields[k]: v for k, v in limits.items()})

    def goodput_config(self) -> dict[str, float]:
        """vLLM's goodput_config_dict: what `--goodput ttft:X tpot:Y` parses to."""
        return {key: float(getattr(self, f)) for f, key, _ in _LIMITS if getattr(self, f) is not None}

    @classmethod
    def from_config(cls, d: Any) -> "Slo | None":
        """The SLO a stored goodput_config names (Notes.slo.goodput_ms); None when it is not one."""
        if not isinstance(d, dict) or not d or not set(d) <= {key for _, key, _ in _LIMITS}:
            return None
        try:
            return cls(**{f: d[key] for f, key, _ in _LIMITS if key in d})
        except ConfigError:
            return None

    @property
    def said(self) -> Message:
        """e.g. "TTFT ≤ 2000 ms and TPOT ≤ 100 ms"."""
        parts = [say("{name} ≤ {ms:g} ms", name=name, ms=float(getattr(self, f)))
                 for f, _, name in _LIMITS if getattr(self, f) is not None]
        if len(parts) == 1:
            return parts[0]
        if len(parts) == 2:
            return say("{first} and {second}", first=parts[0], second=parts[1])
        return say("{first}, {second} and {third}", first=parts[0], second=parts[1], third=parts[2])


# A chat user's limits, the Load test page's defaults (the viewer may set their own):
# - TTFT 2000 ms: the answer visibly starts within 2 s. Of the classic response-time limits (0.1 s feels
#   instant, 1 s keeps the flow of thought, 10 s loses attention) a reply that begins within a couple
#   of seconds still feels like a conversation; beyond it people wonder whether anything happens.
# - TPOT 100 ms: 10 tokens/s, about 7 English words/s (a token is ~0.75 words), faster than people read
#   (about 4-5 words/s), so the text never keeps the reader waiting; DistServe likewise says a
#   chatbot's decoding "only needs to match human reading speed".
DEFAULT_SLO = Slo(ttft_ms=2000.0, tpot_ms=100.0)


@dataclass(frozen=True)
class Verdict:
    """One run judged against an SLO."""

    slo: Slo
    good: int  # measured requests that completed within every limit
    requests: int  # measured requests, failed ones included
    duration: float  # the run's measured wall time, s

    @property
    def goodput(self) -> float:
        """Good requests per second (vllm bench serve's request_goodput)."""
        return self.good / self.duration if self.duration > 0 else 0.0

    @property
    def attainment(self) -> float | None:
        """The share of the measured requests that were good; None for a run without requests."""
        return self.good / self.requests if self.requests else None

    @property
    def meets(self) -> bool:
        return self.attainment is not None and self.attainment >= ATTAINMENT

    @property
    def said(self) -> Message:
        """The verdict in one sentence."""
        values = dict(good=self.good, share=whole_percent(self.attainment), slo=self.slo.said, target=ATTAINMENT,
                      goodput=self.goodput)
        if self.meets:
            return say_n("{good} of {n} request ({share:.0%}) met the SLO ({slo}), at least {target:.0%}, so it "
                         "holds: a goodput of {goodput:.2f} req/s.",
                         "{good} of {n} requests ({share:.0%}) met the SLO ({slo}), at least {target:.0%}, so it "
                         "holds: a goodput of {goodput:.2f} req/s.", self.requests, **values)
        return say_n("Only {good} of {n} request ({share:.0%}) met the SLO ({slo}), less than {target:.0%}, so it "
                     "does not hold: a goodput of {goodput:.2f} req/s.",
                     "Only {good} of {n} requests ({share:.0%}) met the SLO ({slo}), less than {target:.0%}, so it "
                     "does not hold: a goodput of {goodput:.2f} req/s.", self.requests, **values)


def whole_percent(attainment: float | None) -> float:
    """A share rounded down to a whole percent, so 89.9 % reads 89 %, short of 90 %, as it is."""
    return math.floor((attainment or 0.0) * 100 + 1e-9) / 100


def judge(run: Any, slo: Slo) -> Verdict | None:
    """`run` judged by its requests; None when it carries none to judge (a history row)."""
    records = getattr(run, "records", None)
    if records is None:
        return None
    recs = stats.measured(records)
    return Verdict(slo, stats.good_requests(recs, slo.goodput_config()), len(recs), float(run.duration or 0.0))


def record_goodput(run: RunResult, slo: Slo) -> RunResult:
    """Keep `run`'s goodput under `slo` with it: summary.request_goodput (vLLM's key, so exported as
    vllm bench serve writes it) and the SLO it was judged by (extra.slo.goodput_ms, which vLLM's file lacks)."""
    verdict = judge(run, slo)
    if verdict is not None:
        run.summary.request_goodput = verdict.goodput
        run.extra.slo.goodput_ms = slo.goodput_config()
    return run


# -- a sweep --------------------------------------------------------------------------------------

def _summary(run: Any) -> Summary:
    if not run.summary.empty or not getattr(run, "records", None):
        return run.summary
    return stats.summarize(run.records, run.duration)


def users(run: Any) -> float | None:
    """The requests in flight a run was measured at: its concurrency limit, else the most it had in
    flight (vllm bench sweep's user count: max_concurrency, else max_concurrent_requests)."""
    v = run.load.concurrency or _summary(run).max_concurrency
    return float(v) if v else None


@dataclass(frozen=True)
class Level:
    """One level of a sweep as a point of the Pareto view."""

    run: Any
    users: float  # requests in flight
    total: float  # output tok/s, all users together
    verdict: Verdict | None  # None: the run carries no requests to judge

    @property
    def per_user(self) -> float:
        """Output tok/s per user: the total shared by the requests in flight (vLLM's tokens_per_user)."""
        return self.total / self.users


def levels(runs: Iterable[Any], slo: Slo) -> list[Level]:
    """The runs that have a level and a throughput, by requests in flight."""
    out = []
    for run in runs:
        n, total = users(run), _summary(run).output_throughput
        if n and total is not None:
            out.append(Level(run, n, float(total), judge(run, slo)))
    return sorted(out, key=lambda lv: lv.users)


def knee(points: Iterable[Level]) -> Level | None:
    """The level with the most requests in flight that met the SLO; None when none did."""
    met = [lv for lv in points if lv.verdict is not None and lv.verdict.meets]
    return max(met, key=lambda lv: lv.users, default=None)


@dataclass(frozen=True)
class Knee:
    """Where a sweep's knee is, found once: the chart's mark and the sentence under it both come from here,
    so they cannot disagree. `level` is the most requests in flight that met the SLO (None: none did, or
    nothing could be judged); `reached` is True only when a higher level missed it, so `level` is the
    knee; when even the top level met it the knee lies beyond the sweep."""

    level: Level | None
    reached: bool
    said: Message

    @property
    def mark(self) -> Message | None:
        """The chart's label on `level`; None when there is none to mark."""
        if self.level is None:
            return None
        if self.reached:
            return say("knee: {users:g} in flight", users=self.level.users)
        return say("{users:g} in flight still met the SLO: the knee lies higher", users=self.level.users)


def find_knee(points: list[Level], slo: Slo) -> Knee:
    """The sweep's knee under `slo`, with the one sentence that says it (the Pareto chart's caption, the CLI)."""
    judged = [lv for lv in points if lv.verdict is not None]
    if not judged:
        return Knee(None, False, say("These runs carry no requests, so the SLO ({slo}) cannot be judged on them.",
                                     slo=slo.said))
    k = knee(judged)
    if k is None:
        return Knee(None, False, say("No level met the SLO ({slo}) for {target:.0%} of its requests, not even "
                                     "{users:g} in flight: loosen the limits or give the server less to do.",
                                     slo=slo.said, target=ATTAINMENT, users=judged[0].users))
    above = [lv for lv in judged if lv.users > k.users]
    values = dict(users=k.users, target=ATTAINMENT, slo=slo.said, total=k.total, per_user=k.per_user)
    if not above:
        return Knee(k, False, say("Even the most requests in flight, {users:g}, met the SLO ({slo}) for at least "
                                  "{target:.0%} of requests, at {total:,.0f} tok/s in total and {per_user:,.1f} tok/s "
                                  "per user: the knee lies further, so sweep higher to find it.", **values))
    nearest = above[0].verdict
    assert nearest is not None  # judged: the levels with a verdict
    share = whole_percent(nearest.attainment)
    if not share:
        return Knee(k, True, say("The knee is {users:g} requests in flight, the most at which at least {target:.0%} "
                                 "of requests met the SLO ({slo}): {total:,.0f} tok/s in total, {per_user:,.1f} tok/s "
                                 "per user; at {next:g} none did.", next=above[0].users, **values))
    return Knee(k, True, say("The knee is {users:g} requests in flight, the most at which at least {target:.0%} of "
                             "requests met the SLO ({slo}): {total:,.0f} tok/s in total, {per_user:,.1f} tok/s per "
                             "user; at {next:g} only {share:.0%} did.", next=above[0].users, share=share, **values))


def knee_said(points: list[Level], slo: Slo) -> Message:
    """Where a sweep's knee is, in one sentence (find_knee's)."""
    return find_knee(points, slo).said


def rates_said(runs: list, slo):
    """A sweep over rates judged by `slo`: the highest rate whose requests met it (judge.slo's verdict), and the
    lowest that did not, in one sentence."""
    verdicts = [(r.load.rate, judge(r, slo)) for r in runs if r.load.rate]
    met = [rate for rate, v in verdicts if v is not None and v.meets]
    missed = [rate for rate, v in verdicts if v is not None and not v.meets]
    if not met:
        return say("No rate of the sweep met the SLO ({slo}), not even {rate:g} requests/s.", slo=slo.said,
                   rate=min((rate for rate, _ in verdicts), default=0))
    best = max(met)
    above = [rate for rate in missed if rate > best]
    if not above:
        return say("The highest rate of the sweep, {best:g} requests/s, met the SLO ({slo}): sweep higher rates to "
                   "find where it stops.", best=best, slo=slo.said)
    return say("The highest rate of the sweep that met the SLO ({slo}) is {best:g} requests/s; {above:g} did not.",
               best=best, above=min(above), slo=slo.said)
