"""Results you can repeat: one number's spread over N runs (its median with the range, or an interval once there
are enough runs for one), the runs far from the others, and runs gathered into the sets they were measured in
(engine.measure.judge.verdict compares two sets). See docs/measuring.md#repeats."""
from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from engine.digits import significant
from engine.measure.judge import failures, verdict
from engine.messages import Message, say

LEVEL = verdict.LEVEL
# Below this many runs no distribution-free interval of the median reaches LEVEL (at 5 the range covers it only
# 94 % of the time): fewer runs are shown as their range, never as a "95 % interval".
INTERVAL_N = 6
RANGE, ORDER = "range", "order statistics"  # how a Spread's low and high were found
# A run at least this many times off the median (either way) is flagged: noise on a quiet machine stays
# within a few per cent, and an H100 showed one repeat of three 3.5× slower than the others, unexplained.
OUTLIER_FACTOR = 1.5


@dataclass(frozen=True)
class Spread:
    """N runs of one number: the median, and `low`/`high` — their range below INTERVAL_N runs (`method` RANGE),
    else the median's distribution-free interval at LEVEL (ORDER); `outliers` the 0-based indices of runs at least
    OUTLIER_FACTOR off the median, `values` the runs' values in their order."""

    n: int
    median: float
    low: float
    high: float
    method: str
    values: tuple[float, ...] = ()
    outliers: tuple[int, ...] = ()

    def shown(self, x: float) -> str:
        """A number of this spread with the spread's decimals (three figures of the largest)."""
        return significant(x, 3, like=(self.median, self.low, self.high))

    @property
    def said(self) -> Message:
        """The median and its spread: "median 100, range 98–104 of 3 runs"."""
        if self.n == 1:
            return say("{median} (one run: its noise is unknown)", median=self.shown(self.median))
        return say("median {median}, {spread}", median=self.shown(self.median), spread=self.spread_said)

    @property
    def spread_said(self) -> Message:
        """The spread alone, as a table's cell beside the median says it: the range of a few runs (never a "95 %
        interval" of three), the interval from INTERVAL_N runs."""
        if self.n == 1:
            return say("one run: its noise is unknown")
        if self.method == RANGE:
            return say("range {low}–{high} of {n} runs", low=self.shown(self.low), high=self.shown(self.high), n=self.n)
        return say("{level} interval {low}–{high} ({n} runs, order statistics)", level=verdict.percent(LEVEL),
                   low=self.shown(self.low), high=self.shown(self.high), n=self.n)

    @property
    def outliers_said(self) -> list[Message]:
        """One sentence per run far from the others: which repeat, its value, how far off the median and which way."""
        out = []
        for i in self.outliers:
            v = self.values[i]
            values = dict(i=i + 1, value=self.shown(v), x=significant(max(v, self.median) / min(v, self.median)))
            out.append(say("repeat {i} ({value}) is {x}× below the median: something else may have run then; repeat "
                            "the test or check the machine.", **values) if v < self.median else
                       say("repeat {i} ({value}) is {x}× above the median: something else may have run then; repeat "
                           "the test or check the machine.", **values))
        return out


def outliers(xs: Sequence[float]) -> tuple[int, ...]:
    """The runs at least OUTLIER_FACTOR off the median of all (three runs at least: of two, neither is the odd one;
    and fewer than half of them: else the runs are spread, not one odd)."""
    if len(xs) < 3:
        return ()
    med = statistics.median(xs)
    out = tuple(i for i, v in enumerate(xs) if v > 0 and med > 0 and max(v / med, med / v) >= OUTLIER_FACTOR)
    return out if len(out) < len(xs) / 2 else ()


def spread(values: Sequence[float | None]) -> Spread | None:
    """The median of `values` and their range, or the median's interval at LEVEL from INTERVAL_N values up
    (scipy's quantile test: the order statistics that hold the median with at least that probability); None
    when there are none."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return None
    med = statistics.median(xs)
    if len(xs) < INTERVAL_N:
        return Spread(len(xs), med, min(xs), max(xs), RANGE, tuple(xs), outliers(xs))
    from scipy import stats  # ~0.8 s to import: only from six repeats up

    ci = stats.quantile_test(xs, q=med, p=0.5).confidence_interval(LEVEL)
    return Spread(len(xs), med, float(ci.low), float(ci.high), ORDER, tuple(xs), outliers(xs))


def of_runs(runs: Sequence, key: str) -> Spread | None:
    """The spread of a summary metric (engine.metrics.METRICS' key, or "duration": the wall time) over repeated runs,
    those that count (failures.counted_repeats: a repeat that did not answer every request is no measurement)."""
    return spread([verdict.value(r, key) for r in failures.counted_repeats(runs)])


def median(runs: Sequence, value: str | Callable[[Any], float | None]) -> float | None:
    """The median over the repeats that count (failures.counted_repeats) of a summary metric (`value` a key, as
    of_runs) or of what `value(run)` gives (a cost, joules per token); None where none has one. History's line of a
    set of repeats says these, as the report's and the Load test's spreads (of_runs) do."""
    if isinstance(value, str):
        return None if (s := of_runs(runs, value)) is None else s.median
    values = [v for r in failures.counted_repeats(runs) if (v := value(r)) is not None]
    return statistics.median(values) if values else None


def reset_said(runs: Sequence) -> Message | None:
    """Whether the server's prefix cache was emptied before each repeat after the first
    (Notes.repeat.prefix_cache_reset; None when no run says, as for a single run)."""
    resets = [r.extra.repeat.prefix_cache_reset for r in runs if r.extra.repeat.prefix_cache_reset is not None]
    if not resets:
        return None
    if all(resets):
        return say("The server's prefix cache was emptied before each repeat after the first.")
    return say("The server did not empty its prefix cache between repeats (vLLM serves POST /reset_prefix_cache only "
               "with VLLM_SERVER_DEV_MODE=1), so later repeats may have found earlier prompts cached.")


def sets(runs: Sequence) -> list[list]:
    """`runs` as the sets they were measured in: a repeat group's runs together, any other run a set of its own,
    in the order each first appears (an overlaid run of the same label from another day stays apart)."""
    found: dict[str, list] = {}
    for r in runs:
        found.setdefault(r.extra.repeat.group or f"run:{r.id}", []).append(r)
    return list(found.values())
