"""Results you can repeat: a median of N runs with a 95 % interval, and differences beyond noise.
See docs/measuring.md#repeats."""
from __future__ import annotations

import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from engine.messages import Message, say

BOOTSTRAP = 2000
LEVEL = 0.95
SEED = 21
METHOD = "bootstrap"  # how the interval was made, as a record or a caption says it


def _percentile(sorted_xs: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def _medians(values: Sequence[float], rng: random.Random, n: int) -> list[float]:
    k = len(values)
    return [statistics.median(rng.choices(values, k=k)) for _ in range(n)]


@dataclass(frozen=True)
class Spread:
    """N repeats of one number: the median and a 95 % bootstrap interval of it."""

    n: int
    median: float
    low: float
    high: float
    method: str = METHOD

    @property
    def said(self) -> Message:
        return say("median {median:,.2f}, 95 % bootstrap interval {low:,.2f}–{high:,.2f} ({n} repeats)",
                   median=self.median, low=self.low, high=self.high, n=self.n)


def spread(values: Sequence[float], seed: int = SEED, resamples: int = BOOTSTRAP) -> Spread | None:
    """The median and 95 % bootstrap interval of `values` (None when there are none; one value is its own
    interval: a single run says nothing of its noise)."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return None
    if len(xs) == 1:
        return Spread(1, xs[0], xs[0], xs[0])
    meds = sorted(_medians(xs, random.Random(seed), resamples))
    tail = (1 - LEVEL) / 2
    return Spread(len(xs), statistics.median(xs), _percentile(meds, tail), _percentile(meds, 1 - tail))


@dataclass(frozen=True)
class Difference:
    """B's median minus A's, with the 95 % bootstrap interval of that difference."""

    diff: float
    low: float
    high: float

    @property
    def within_noise(self) -> bool:
        return self.low <= 0.0 <= self.high


def difference(a: Sequence[float], b: Sequence[float], seed: int = SEED,
               resamples: int = BOOTSTRAP) -> Difference | None:
    """How B's median differs from A's, or None when either has fewer than two repeats (then their noise is
    unknown and no claim is made)."""
    xa, xb = [float(v) for v in a if v is not None], [float(v) for v in b if v is not None]
    if len(xa) < 2 or len(xb) < 2:
        return None
    rng = random.Random(seed)
    diffs = sorted(mb - ma for ma, mb in zip(_medians(xa, rng, resamples), _medians(xb, rng, resamples)))
    tail = (1 - LEVEL) / 2
    return Difference(statistics.median(xb) - statistics.median(xa), _percentile(diffs, tail),
                      _percentile(diffs, 1 - tail))


def compared_said(name: str, a: Sequence[float], b: Sequence[float]) -> Message:
    """One sentence on whether B's `name` differs from A's beyond the noise of their repeats."""
    d = difference(a, b)
    if d is None:
        return say("{name}: each side needs at least two repeats to tell a difference from noise.", name=name)
    if d.within_noise:
        return say("{name}: B differs from A by {diff:+,.2f}, within noise (the 95 % bootstrap interval of the "
                   "difference, {low:+,.2f} to {high:+,.2f}, holds 0).", name=name, diff=d.diff, low=d.low, high=d.high)
    return say("{name}: B differs from A by {diff:+,.2f}, beyond noise (95 % bootstrap interval {low:+,.2f} to "
               "{high:+,.2f}).", name=name, diff=d.diff, low=d.low, high=d.high)


def of_runs(runs: Sequence, key: str) -> Spread | None:
    """The spread of a summary metric (engine.metrics.METRICS' key) over repeated runs."""
    return spread([v for r in runs if (v := r.summary.get(key)) is not None])


def reset_said(runs: Sequence) -> Message | None:
    """Whether the server's prefix cache was emptied before each repeat after the first (Notes.prefix_cache_reset;
    None when no run says, as for a single run)."""
    resets = [r.extra.prefix_cache_reset for r in runs if r.extra.prefix_cache_reset is not None]
    if not resets:
        return None
    if all(resets):
        return say("The server's prefix cache was emptied before each repeat after the first.")
    return say("The server did not empty its prefix cache between repeats (vLLM serves POST /reset_prefix_cache only "
               "with VLLM_SERVER_DEV_MODE=1), so later repeats may have found earlier prompts cached.")


def groups_compared(runs: Sequence, key: str, name: str) -> Message | None:
    """Whether the first two sets of repeats among `runs` (Runner.repeat's groups, in the order they appear, each
    of at least two runs) differ in a summary metric beyond their noise, naming each by its label; None without two
    such sets."""
    groups: dict[str, list] = {}
    for r in runs:
        if r.extra.repeat_group:
            groups.setdefault(r.extra.repeat_group, []).append(r)
    sets = [g for g in groups.values() if len(g) >= 2][:2]
    if len(sets) < 2:
        return None
    (a, b) = sets
    d = difference([r.summary.get(key) for r in a], [r.summary.get(key) for r in b])
    if d is None:
        return None
    values = dict(name=name, a=a[0].label, b=b[0].label, n_a=len(a), n_b=len(b), diff=d.diff, low=d.low, high=d.high)
    if d.within_noise:
        return say("{name}: '{b}' ({n_b} repeats) differs from '{a}' ({n_a} repeats) by {diff:+,.2f}, within noise "
                   "(the 95 % bootstrap interval of the difference, {low:+,.2f} to {high:+,.2f}, holds 0).", **values)
    return say("{name}: '{b}' ({n_b} repeats) differs from '{a}' ({n_a} repeats) by {diff:+,.2f}, beyond noise (95 % "
               "bootstrap interval {low:+,.2f} to {high:+,.2f}).", **values)
