"""Two samples of one metric compared: the effect as a ratio and a difference, its interval, and whether it lies
beyond the noise the samples themselves show. Every difference the app states as a finding comes from here
(docs/measuring.md#verdicts).

The test is Welch's t on the logarithms of the values: run-to-run noise on a shared machine is multiplicative
(a busy neighbour slows a run by a share, not by a fixed amount), the log makes a ratio's interval symmetric, and
Welch's t holds its stated false-call rate from two values a side up, where a bootstrap of 2-3 values only
returns their range. Where each value has its partner on the other side (the same prompt sent to both), the paired
t on the log ratios: the prompts' own spread cancels. tests/test_verdict.py runs both on A/A pairs (Gaussian,
log-normal, one repeat 3.5× slower) at 2, 3, 5 and 10 a side and checks that rate.

Runs compared here (`compare_runs`, `of_pair`, `per_prompt`) carry what disturbed them (engine.observe.disturbance):
beside a disturbed run the test's outcome is kept but stated as no finding either way, since its noise is not this
machine's (tests/test_verdict_disturbed.py). Every page, the CLI and the report follow this one rule.

Where a side's values are the requests of a single run (or of a few runs averaged per prompt), their spread cannot
see the run's own factor (a busy neighbour, a warm cache): two runs of the same workload differ as a whole too. Such
a comparison (`runs=`) adds the run-to-run variance on the log scale, sigma^2 / k for a side of k runs, with sigma
measured from a side's repeats where the comparison has them and never below BETWEEN_RUNS
(tests/test_verdict_between_runs.py, bench/results/verdict-aa-single-runs.md). Where both sides come from one run
(TTFT per turn, a streamed answer's first token against its end), that factor cancels: no allowance."""
from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TypedDict

from engine.digits import change, significant
from engine.measure.judge.stats import summarize, tpot
from engine.messages import Message, mark, say, say_n, when
from engine.metrics import metric_info
from engine.observe import disturbance

LEVEL = 0.95  # the interval's level; 1 - LEVEL is the stated rate of calling an A/A pair "beyond noise"
WELCH_LOG = mark("Welch's t on log values (a ratio of geometric means)")  # every value above 0
WELCH = mark("Welch's t (a difference of means)")  # some value at or below 0: no logarithm
PAIRED = mark("paired t on log values (the same prompts)")  # each prompt's ratio: the prompts' own spread cancels
UNKNOWN = mark("one value a side")  # no spread measured on at least one side: nothing decided

RUNS, REQUESTS = "runs", "requests"  # what each value of a sample is: a run's summary, or one request's

# The run-to-run noise allowed where a side is one run judged by its requests: the SD of a run's log value
# between repeats of the same workload, a run 10 % faster or slower. This project's own: the pooled SD of log
# throughput over its repeat sets is 0.11 on the 2-core CPU, 0.086 on the H200, 0.073 on the H100, and over those
# sets' spreads this allowance keeps one-run-a-side A/A at 3.3-4.8 % (docs/measuring.md#between-runs). Repeats
# that vary more raise it.
BETWEEN_RUNS = math.log(1.10)


def percent(level: float) -> str:
    """A level as written before "interval": "95 %" (a value, so that no template holds a "% i" that gettext
    would take for a C format)."""
    return f"{round(level * 100)} %"


def _clean(values: Sequence[float | None]) -> list[float]:
    return [float(v) for v in values if v is not None and math.isfinite(float(v))]


@dataclass(frozen=True)
class Verdict:
    """B against A for one metric. `ratio` is B's centre over A's (geometric means on the log scale, means
    otherwise), `diff` B's centre minus A's in the metric's unit; `low`/`high` bound the ratio at `level` (None
    when the values are not all positive: then `diff_low`/`diff_high` bound the difference). `beyond_noise` is
    the decision: True beyond noise, False within it, None when a side has a single value, so its noise is
    unknown and nothing is decided. `disturbed`: what ran beside the compared runs (each disturbed side's
    sentence), None when all were quiet; then `finding` is None whatever the test found."""

    name: str
    label_a: str
    label_b: str
    n_a: int
    n_b: int
    per: str  # RUNS | REQUESTS
    center_a: float
    center_b: float
    ratio: float | None
    low: float | None
    high: float | None
    diff: float
    diff_low: float | None
    diff_high: float | None
    p: float | None
    level: float
    method: str
    beyond_noise: bool | None
    unit: str = ""
    disturbed: Message | None = None
    allowance: float | None = None  # the run-to-run SD (log scale) added for single runs' requests; None: none
    allowance_runs: tuple[int, int] = (0, 0)  # how many runs each side's requests came from (0: its values are runs)
    allowance_measured: bool = False  # the allowance is the repeats' own spread (above BETWEEN_RUNS)

    @property
    def decided(self) -> bool:
        return self.beyond_noise is not None

    @property
    def finding(self) -> bool | None:
        """What a screen may state: beyond noise (True), no measurable difference (False), or nothing (None: one
        value a side, or a disturbed run, whose noise is not this machine's)."""
        return None if self.disturbed is not None else self.beyond_noise

    @property
    def percent(self) -> float | None:
        """B against A in per cent (+21 for a ratio of 1.21)."""
        return None if self.ratio is None else (self.ratio - 1) * 100

    @property
    def counts(self) -> Message:
        """How many values each side had: "3 runs each", "3 and 5 runs", "48 and 50 requests"."""
        if self.n_a == self.n_b:
            return (say_n("{n} run each", "{n} runs each", self.n_a) if self.per == RUNS else  # not "1 runs"
                    say("{n} requests each", n=self.n_a))
        return (say("{a} and {b} runs", a=self.n_a, b=self.n_b) if self.per == RUNS else
                say("{a} and {b} requests", a=self.n_a, b=self.n_b))

    @property
    def interval(self) -> Message | None:
        """The effect's interval as shown: "95 % interval 1.12× to 1.31×" (or of the difference)."""
        level = percent(self.level)
        if self.low is not None and self.high is not None:
            return say("{level} interval {low}× to {high}×", level=level, low=significant(self.low, 3),
                       high=significant(self.high, 3))
        if self.diff_low is not None and self.diff_high is not None:
            return say("{level} interval {low} to {high} {unit}", level=level, low=f"{self.diff_low:+,.4g}",
                       high=f"{self.diff_high:+,.4g}", unit=self.unit)
        return None

    @property
    def between(self) -> Message | None:
        """The run-to-run allowance as said after the method: "one run a side: its requests' spread plus ±10 %
        allowed between runs"; None where the comparison needs none."""
        if self.allowance is None:
            return None
        pct = f"{round((math.exp(self.allowance) - 1) * 100)}"  # one SD as the share a run may be slower
        if self.allowance_measured:
            return say("the requests' spread plus ±{pct} % between runs, as the repeats measured", pct=pct)
        if self.allowance_runs == (1, 1):
            return say("one run a side: its requests' spread plus ±{pct} % allowed between runs", pct=pct)
        return say("the requests' spread plus ±{pct} % allowed between runs", pct=pct)

    @property
    def how(self) -> Message:
        """The method and the sample sizes, as said after a verdict: "Welch's t on log values, 3 runs each", and
        the run-to-run allowance where one was added."""
        if (between := self.between) is not None:
            return say("{method}, {counts}; {between}", method=self.method, counts=self.counts, between=between)
        return say("{method}, {counts}", method=self.method, counts=self.counts)

    @property
    def effect(self) -> Message:
        """The measured effect in a few characters: "1.21× (+21 %)", or the difference when there is no ratio."""
        if self.ratio is None:
            diff = f"{self.diff:+,.4g}"
            return say("{diff} {unit}", diff=diff, unit=self.unit) if self.unit else say("{diff}", diff=diff)
        return say("{ratio}× ({change} %)", ratio=significant(self.ratio, 3), change=change(self.ratio))

    @property
    def said(self) -> Message:
        """The sentence to show. Within noise it claims nothing; beyond it, the claim and how sure."""
        values = dict(name=self.name, a=self.label_a, b=self.label_b, effect=self.effect, how=self.how)
        if self.disturbed is not None:  # how sure it would be, and why it is no finding
            interval = self.interval
            sure = say("{interval}; {how}", interval=interval, how=self.how) if interval is not None else self.how
            return say("{name}: no verdict, because the machine was disturbed: {b} measured {effect} against {a} "
                       "({sure}). {beside} Measure both again on a quiet machine.", sure=sure,
                       beside=self.disturbed, **{k: v for k, v in values.items() if k != "how"})
        if self.beyond_noise is None:
            return say("{name}: {b} measured {effect} against {a}, but with one value a side the noise is unknown, "
                       "so this decides nothing: repeat each at least twice.", **values)
        interval = self.interval
        if not self.beyond_noise:
            return say("{name}: no measurable difference on this machine between {a} and {b} (measured {effect}; "
                       "{interval}, which holds no change; {how}).", interval=interval, **values)
        if self.ratio is not None and self.ratio < 1:
            return say("{name}: {b} is lower than {a}, {effect}, beyond noise ({interval}; {how}).",
                       interval=interval, **values)
        return say("{name}: {b} is higher than {a}, {effect}, beyond noise ({interval}; {how}).",
                   interval=interval, **values)

    @property
    def short(self) -> Message:
        """A few words for a list or a table's cell: "1.21× (+21 %), beyond noise", "no measurable difference (1.02×
        (+2 %) measured)", "1.21× (+21 %), noise unknown", "1.21× (+21 %), no verdict: the machine was disturbed"."""
        if self.disturbed is not None:
            return say("{effect}, no verdict: the machine was disturbed", effect=self.effect)
        if self.beyond_noise is None:
            return say("{effect}, noise unknown", effect=self.effect)
        if not self.beyond_noise:
            return say("no measurable difference ({effect} measured)", effect=self.effect)
        return say("{effect}, beyond noise", effect=self.effect)


class _Sides(TypedDict):
    """What a verdict says of its two samples whatever the test found."""

    name: str
    label_a: str
    label_b: str
    n_a: int
    n_b: int
    per: str
    level: float
    unit: str


class _Allowance(TypedDict, total=False):
    """The run-to-run allowance a verdict was judged with; empty where none was added."""

    allowance: float
    allowance_runs: tuple[int, int]
    allowance_measured: bool


def compare(a: Sequence[float | None], b: Sequence[float | None], *, name: str = "", label_a: str = "A",
            label_b: str = "B", per: str = RUNS, unit: str = "", level: float = LEVEL,
            paired: bool = False, runs: tuple[int, int] | None = None,
            spread: float | None = None) -> Verdict | None:
    """B against A. `a` and `b` are samples of one metric: the summary values of each side's repeats (`per`
    RUNS), or, for a metric measured per request from a single run a side, its requests' values (REQUESTS).
    `paired`: a[i] and b[i] measured the same thing (the same prompt on both sides), compared by their ratios
    (a pair with a value missing is left out). None when a side has no value at all.
    `runs`: how many runs each side's values are the requests of (1: one run; k: each value the mean of k runs'
    answers; 0: the side's values are runs themselves, whose spread already holds the run-to-run noise): the
    run-to-run allowance is added for each side of k >= 1. Left None where both sides come from the same run(s).
    `spread`: the run-to-run SD on the log scale that repeats measured; a side of runs (0) measures its own."""
    if paired:
        both = [(x, y) for x, y in zip(_clean_keep(a), _clean_keep(b)) if x is not None and y is not None]
        xa, xb = [x for x, _y in both], [y for _x, y in both]
    else:
        xa, xb = _clean(a), _clean(b)
    if not xa or not xb:
        return None
    base = _Sides(name=name, label_a=label_a, label_b=label_b, n_a=len(xa), n_b=len(xb), per=per, level=level,
                  unit=unit)
    positive = min(xa + xb) > 0
    if positive:
        la, lb = [math.log(x) for x in xa], [math.log(x) for x in xb]
        ca, cb = centre(xa), centre(xb)
    else:
        la, lb, ca, cb = xa, xb, _mean(xa), _mean(xb)
    ratio = cb / ca if ca > 0 else None
    if len(xa) < 2 or len(xb) < 2:  # one value has no spread: the noise is unknown
        return Verdict(center_a=ca, center_b=cb, ratio=ratio, low=None, high=None, diff=cb - ca, diff_low=None,
                       diff_high=None, p=None, method=UNKNOWN, beyond_noise=None, **base)
    allowed: _Allowance = {}
    extra = 0.0
    if runs is not None and any(runs):
        if spread is None and (side := next((x for x, k in zip((xa, xb), runs) if k == 0 and len(x) >= 2 and
                                             min(x) > 0), None)) is not None:
            spread = spread_of_runs([[math.log(v)] for v in side])
        sigma = max(BETWEEN_RUNS, spread or 0.0)
        allowed = _Allowance(allowance=sigma, allowance_runs=runs, allowance_measured=sigma > BETWEEN_RUNS)
        # on the log scale a run's factor adds sigma^2 / k to a side's mean; on the raw scale, that share of it
        scale = (1.0, 1.0) if positive else (ca, cb)
        extra = sum(sigma ** 2 * c ** 2 / k for k, c in zip(runs, scale) if k)
    if paired:
        lo, hi, p = _paired(la, lb, level) if not extra else _t_with(
            [y - x for x, y in zip(la, lb)], [], level, extra)
    else:
        lo, hi, p = _welch(la, lb, level) if not extra else _t_with(la, lb, level, extra)
    method = PAIRED if paired else WELCH_LOG if positive else WELCH
    if positive:
        return Verdict(center_a=ca, center_b=cb, ratio=ratio, low=math.exp(lo), high=math.exp(hi), diff=cb - ca,
                       diff_low=None, diff_high=None, p=p, method=method, beyond_noise=not lo <= 0 <= hi, **base,
                       **allowed)
    return Verdict(center_a=ca, center_b=cb, ratio=ratio, low=None, high=None, diff=cb - ca, diff_low=lo,
                   diff_high=hi, p=p, method=method, beyond_noise=not lo <= 0 <= hi, **base, **allowed)


def spread_of_runs(runs: Sequence[Sequence[float]]) -> float | None:
    """The run-to-run SD on the log scale of repeats of one workload: each run's log values (its prompts' answers,
    the same prompts in each; or its one summary value) averaged, the SD of those means. None below 2 runs."""
    means = [_mean(r) for r in runs if r]
    if len(means) < 2:
        return None
    m = _mean(means)
    return math.sqrt(sum((x - m) ** 2 for x in means) / (len(means) - 1))


def _var_of_mean(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1) / len(xs)


def _t_with(a: Sequence[float], b: Sequence[float], level: float, extra: float) -> tuple[float, float, float]:
    """The interval of mean(b) - mean(a) (of mean(a) alone when `b` is empty: a paired test's differences) at
    `level` and its two-sided p, with `extra` added to the variance of that difference: the run-to-run variance the
    samples cannot see, a stated constant. The two parts' half-widths add in quadrature, each at its own critical
    value (the samples' t at Welch-Satterthwaite's degrees of freedom, the allowance's normal one), so the interval
    is never narrower than the samples' own nor than the allowance's alone."""
    from scipy import stats  # ~0.8 s to import: only when a comparison is judged

    va, vb = _var_of_mean(a), _var_of_mean(b) if b else 0.0
    d = (_mean(b) - _mean(a)) if b else _mean(a)
    parts = [(v, len(x) - 1) for v, x in ((va, a), (vb, b)) if x and v > 0]
    z = float(stats.norm.ppf(0.5 + level / 2))
    half2 = z ** 2 * extra
    if parts:
        v = sum(v for v, _k in parts)
        df = v ** 2 / sum(v ** 2 / k for v, k in parts)
        half2 += float(stats.t.ppf(0.5 + level / 2, df)) ** 2 * v
    half = math.sqrt(half2)
    # p on the same scale: at the interval's edge it is 1 - level
    return d - half, d + half, float(2 * stats.norm.sf(abs(d) * z / half))


def _clean_keep(values: Sequence[float | None]) -> list[float | None]:
    """`values` with what is not a finite number as None, in place (a pair keeps its partner's position)."""
    return [float(v) if v is not None and math.isfinite(float(v)) else None for v in values]


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def centre(values: Sequence[float]) -> float:
    """One side's centre as compare() judges it: the geometric mean of values above 0, else the mean. A chart
    that draws a side's bar at it states the number its caption's ratio was made from."""
    xs = _clean(values)
    if not xs:
        return 0.0
    return math.exp(_mean([math.log(x) for x in xs])) if min(xs) > 0 else _mean(xs)


def _paired(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float, float]:
    """The interval of mean(b - a) at `level` and the two-sided p, by the paired t test (scipy); differences that
    do not vary at all are the difference itself."""
    d = [y - x for x, y in zip(a, b)]
    if max(d) == min(d):
        return d[0], d[0], (1.0 if d[0] == 0 else 0.0)
    from scipy import stats  # ~0.8 s to import: only when a comparison is judged

    r = stats.ttest_rel(b, a)
    ci = r.confidence_interval(level)
    return float(ci.low), float(ci.high), float(r.pvalue)


def _welch(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float, float]:
    """The interval of mean(b) - mean(a) at `level` and the two-sided p, by Welch's t (scipy). Two samples that
    do not vary at all have no noise to measure against: equal, they are the same; unequal, the difference
    stands (a count, not a timing)."""
    if max(a) == min(a) and max(b) == min(b):
        d = _mean(b) - _mean(a)
        return d, d, (1.0 if d == 0 else 0.0)
    from scipy import stats  # imported on first use: a page that compares nothing never pays for it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # one side without spread: Welch still holds on the other's
        r = stats.ttest_ind(b, a, equal_var=False)
        ci = r.confidence_interval(level)
    return float(ci.low), float(ci.high), float(r.pvalue)


# -- which values stand for a metric --------------------------------------------------------------------

def per_request_values(run, key: str) -> list[float] | None:
    """A run's per-request values of a summary metric that is a typical request's (the mean or median of
    TTFT, TPOT, E2E latency, in the summary's unit), or None for a metric of the whole run (throughput, a
    percentile): then only repeats tell its noise."""
    stat, _, rest = key.partition("_")
    done = [r for r in getattr(run, "measured", ()) if r.ok]
    if key == "mean_latency_s":
        return [r.e2e for r in done if r.e2e is not None]
    if stat not in ("mean", "median") or not rest.endswith("_ms"):
        return None
    dist = rest.removesuffix("_ms")
    take = {"ttft": lambda r: r.ttft, "tpot": tpot, "e2el": lambda r: r.e2e}.get(dist)
    if take is None:
        return None
    return [v * 1000.0 for r in done if (v := take(r)) is not None]


def value(run, key: str) -> float | None:
    """A run's summary value of `key` (its wall time for "duration"; a run without a summary yet, as a live one,
    summarised from its requests); None for a repeat that did not answer every request (Notes.repeat.failed)."""
    if run.extra.repeat.failed:  # a repeat cut short (its server gone) is no measurement
        return None
    if key == "duration":
        return float(run.duration) if run.duration else None
    summary = run.summary
    if getattr(summary, "empty", False) and getattr(run, "records", None):
            summary = summarize(run.records, run.duration)
    v = summary.get(key) if hasattr(summary, "get") else None
    return None if v is None else float(v)


def compare_runs(runs_a: Sequence, runs_b: Sequence, key: str, *, name: str, label_a: str, label_b: str,
                 unit: str = "") -> Verdict | None:
    """Two sets of runs compared on a summary metric: their runs' values when a side has repeats, else, for a
    single run a side and a metric measured per request, those runs' requests with the run-to-run allowance;
    else the undecided verdict of one value a side. None when a side has no value of it. Beside a disturbed run,
    no finding (`beside`)."""
    v = None
    if len(runs_a) == 1 and len(runs_b) == 1:
        pa, pb = per_request_values(runs_a[0], key), per_request_values(runs_b[0], key)
        if pa is not None and pb is not None and len(pa) >= 2 and len(pb) >= 2:
            v = compare(pa, pb, name=name, label_a=label_a, label_b=label_b, per=REQUESTS, unit=unit,
                        runs=(1, 1))  # two runs: each its own factor, which its requests cannot see
    if v is None:
        v = compare([value(r, key) for r in runs_a], [value(r, key) for r in runs_b], name=name, label_a=label_a,
                    label_b=label_b, per=RUNS, unit=unit)
    return beside(v, (label_a, runs_a), (label_b, runs_b))


def beside(v: Verdict | None, *sides: tuple[str, Sequence]) -> Verdict | None:
    """`v` with what disturbed the runs of `sides` ((label, runs) each): each disturbed side's sentence, as
    engine.observe.disturbance.said_each says it ("B: Measured while … (1 of 3 runs.)", or both sides in one sentence);
    `v` as it is when all were quiet."""
    said = disturbance.said_each(sides)
    return v if v is None or said is None else replace(v, disturbed=said)


# The numbers a pair of runs is judged on, in the order they are said: the whole job's throughput (one run a side:
# only repeats tell its noise), then a typical request's first token and decode step (decided from the requests).
HEADLINE = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")


def of_pair(runs_a: Sequence, runs_b: Sequence, label_a: str, label_b: str,
            keys: Sequence[str] = HEADLINE) -> list[Verdict]:
    """B's runs against A's on each of `keys` (engine.metrics' summary keys) that both sides measured."""
    out = []
    for key in keys:
        info = metric_info(key)
        v = compare_runs(runs_a, runs_b, key, name=info.label, label_a=label_a, label_b=label_b, unit=info.unit)
        if v is not None:
            out.append(v)
    return out


def labels_apart(run_a, run_b, label_a: str, label_b: str, lang: str | None = None) -> tuple[str, str]:
    """Two runs' labels as a verdict names them: as they are, or, when they are the same, each with its start time
    ("X from 16:02:11"; with `lang`, as that language's pages write a time, engine.messages.when), so a sentence
    never compares 'X' with 'X'."""
    if label_a != label_b:
        return label_a, label_b
    times = [when(r.started_at, lang, "time") if lang else f"{datetime.fromtimestamp(r.started_at):%H:%M:%S}"
             for r in (run_a, run_b)]
    if times[0] == times[1]:
        times = [getattr(r, "id", "")[:8] or t for r, t in zip((run_a, run_b), times)]
    return (say("{name} from {time}", name=label_a, time=times[0]),
            say("{name} from {time}", name=label_b, time=times[1]))


def _runs(x) -> list:
    """A run or a set of runs (a step's repeats) as a list."""
    return [r for r in (x if isinstance(x, (list, tuple)) else [x]) if r is not None]


def _log_latencies(runs: Sequence) -> list[dict[int, float]]:
    """Each run's answered prompts' log end-to-end latency, by prompt index."""
    return [{r.index: math.log(r.e2e) for r in getattr(run, "measured", ()) if r.ok and r.e2e} for run in runs]


def _per_prompt_latency(runs: Sequence) -> dict[int, float]:
    """Each prompt's end-to-end latency over `runs`: the geometric mean of its answers in the repeats (the paired
    test's own scale, so that the stated ratio is exactly the two sides' centres' ratio)."""
    seen: dict[int, list[float]] = {}
    for run in _log_latencies(runs):
        for i, x in run.items():
            seen.setdefault(i, []).append(x)
    return {i: math.exp(_mean(logs)) for i, logs in seen.items()}


def _prompts_spread(runs: Sequence) -> float | None:
    """The run-to-run SD of repeats of the same prompts: each run's mean log latency over the prompts every one of
    them answered (spread_of_runs); None below 2 runs."""
    logs = [run for run in _log_latencies(runs) if run]
    common = set.intersection(*(set(run) for run in logs)) if len(logs) >= 2 else set()
    return spread_of_runs([[run[i] for i in sorted(common)] for run in logs]) if common else None


def per_prompt(run_a, run_b, *, name: str, label_a: str, label_b: str) -> Verdict | None:
    """Two runs of the same prompts (the Naive page's contenders, the guided lab's naive and sequential steps: one
    request per prompt, by index), each a run or its repeats, compared on each prompt's end-to-end latency, paired:
    B's latency over A's, so a ratio above 1 means B is slower. None when no prompt was answered on both sides.
    Two runs (or sets of repeats) of their own: the run-to-run allowance is added."""
    runs_a, runs_b = _runs(run_a), _runs(run_b)
    lat_a, lat_b = _per_prompt_latency(runs_a), _per_prompt_latency(runs_b)
    both = sorted(lat_a.keys() & lat_b.keys())
    # each side's runs carry a factor of their own that pairing cannot cancel: sigma^2 / k for a side of k runs,
    # sigma measured where a side has repeats
    spreads = [s for s in (_prompts_spread(runs_a), _prompts_spread(runs_b)) if s is not None]
    v = compare([lat_a[i] for i in both], [lat_b[i] for i in both], name=name, label_a=label_a, label_b=label_b,
                per=REQUESTS, unit="s", paired=True, runs=(max(len(runs_a), 1), max(len(runs_b), 1)),
                spread=max(spreads, default=None))
    return beside(v, (label_a, runs_a), (label_b, runs_b))


def of_values(a: Sequence[float | None], b: Sequence[float | None], runs_a, runs_b, *, name: str, label_a: str,
              label_b: str, per: str = RUNS, unit: str = "", runs: tuple[int, int] | None = None) -> Verdict | None:
    """Two samples that runs gave otherwise than a summary metric (the guided lab's naive answers' pace against
    vLLM's runs; a streamed answer's first token against its end), compared by the same test and withheld beside
    a disturbed run of either side, as compare_runs does. `runs` as compare() takes it: where a side's values are
    the requests of a run of its own (naive's answers), the run-to-run allowance; None where both sides come from
    the same runs."""
    v = compare(a, b, name=name, label_a=label_a, label_b=label_b, per=per, unit=unit, runs=runs)
    return beside(v, (label_a, _runs(runs_a)), (label_b, _runs(runs_b)))
