"""Prefix caching, on against off: which of two runs had it, what it changed, and the sentence that says so.
See docs/measuring.md#prefix-caching."""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.measure.judge import verdict
from engine.messages import Message, say
from engine.results.records import RequestRecord


GAIN = 0.1  # the least share of the time to first token the cache must save to be called a gain


def caching_on(run: Any) -> bool | None:
    """Whether prefix caching was on in a run's server: its setting, else (vLLM's default) whether
    the server found anything in its cache; None when neither says."""
    setting = (run.config or {}).get("enable_prefix_caching")
    if isinstance(setting, bool):
        return setting
    hits = run.extra.prefix_cache.hits
    return None if hits is None else hits > 0


def hit_rate(run: Any) -> float | None:
    """The share of looked-up prompt tokens the server found in its prefix cache during the measured
    part (vllm:prefix_cache_hits_total / queries_total); None without its counters or lookups."""
    hits, queries = run.extra.prefix_cache.hits, run.extra.prefix_cache.queries
    return hits / queries if hits is not None and queries else None


CACHED_NOTABLE = 0.1  # from this share of its prompt tokens on, a run's prefill was not that of new prompts


def cached_share(run: Any) -> float | None:
    """The share of a run's prompt tokens its server found in the prefix cache over the measured part (its counters);
    None without them or without lookups."""
    hits, queries = run.extra.prefix_cache.hits, run.extra.prefix_cache.queries
    return None if hits is None or not queries else hits / queries


def levels_said(runs: Sequence[Any]) -> Message | None:
    """A sweep's levels that took CACHED_NOTABLE or more of their prompt tokens from the cache (a sweep sends the same
    prompts at every level), in one sentence; None when none did."""
    cached = [(r, share) for r in runs if (share := cached_share(r)) is not None and share >= CACHED_NOTABLE]
    if not cached:
        return None
    shares = sorted(s for _r, s in cached)
    return say("{n} of the {total} levels took {low}–{high} of their prompt tokens from the server's prefix cache (the "
               "same prompts at every level): their prefill was partly skipped, so their throughput and TTFT are "
               "not those of new prompts.", n=len(cached), total=len(runs), low=f"{shares[0]:.0%}",
               high=f"{shares[-1]:.0%}")


def cached_said(run: Any) -> Message | None:
    """The share of a run's prompt tokens its server took from the prefix cache, said wherever its throughput or TTFT
    is (a repeated random-512-64 took 25,600 of 31,600 from it and reported twice the throughput of
    fresh prompts); None below CACHED_NOTABLE or without the server's counters (vllm:prefix_cache_hits/queries)."""
    hits, queries = run.extra.prefix_cache.hits, run.extra.prefix_cache.queries
    w = getattr(run.load, "workload", None) or {}
    if hits is not None and queries and (most := shared_most(w)) is not None:  # what the workload was made to show
        return say("{share} of this run's prompt tokens ({hits:,} of {queries:,}) came from the server's prefix cache; "
                   "its shared prefixes allowed up to {most} (in whole cache blocks, less).",
                   share=f"{hits / queries:.0%}", hits=hits, queries=queries, most=f"{most:.0%}")
    if hits is None or not queries or hits / queries < CACHED_NOTABLE:
        return None
    return say("{share} of this run's prompt tokens ({hits:,} of {queries:,}) came from the server's prefix cache, so "
               "their prefill was skipped: its throughput and TTFT are not those of new prompts. To measure new ones, "
               "send prompts the server has not seen (a new seed, other rows) or turn prefix caching off on the "
               "Server page (python -m engine serve --no-enable-prefix-caching).", share=f"{hits / queries:.0%}",
               hits=hits, queries=queries)


def shared_most(workload: dict) -> float | None:
    """The most of a shared-prefix workload's prompt tokens a prefix cache can serve (every request after the first
    of its prefix finds the prefix computed); None for a workload not made to share prefixes."""
    i, n = workload.get("input_tokens") or {}, workload.get("sent") or 0
    if not i.get("mean") or not n:
        return None
    if workload.get("kind") == "prefix-repetition":
        return workload.get("cacheable_tokens", 0) / (i["mean"] * n)
    if workload.get("kind") in ("lengths", "fixed-text") and workload.get("prefix_len"):
        return workload["prefix_len"] * (n - 1) / (i["mean"] * n)
    return None


def cacheable_said(workload: dict) -> Message | None:
    """What a prefix cache can serve of a shared-prefix workload at most, in one sentence, said before it runs (None
    for another kind)."""
    if (most := shared_most(workload)) is None:
        return None
    return say("A prefix cache can serve up to {share:.0%} of these prompts' tokens: every request after the first of "
               "its prefix finds its {p} prefix tokens computed.", share=most, p=workload["prefix_len"])


def ok_in_order(run: Any) -> list[RequestRecord]:
    """The measured requests that succeeded, in the order they were sent."""
    return sorted((r for r in run.records if not r.warmup and r.ok and r.ttft is not None),
                  key=lambda r: (r.send_time, r.index))


@dataclass(frozen=True)
class Side:
    """One run of the comparison, in numbers."""

    first_ms: float | None  # TTFT of the first request (the one that fills the cache)
    rest_ms: float | None  # median TTFT of the requests after it
    prompt_tokens: int  # over all its measured, successful requests
    cached_tokens: int | None  # of those, served from the cache (usage); None: the server did not say
    hit_rate: float | None  # the server's counters

    @classmethod
    def of(cls, run: Any) -> "Side":
        recs = ok_in_order(run)
        ttfts = [t * 1000 for r in recs if (t := r.ttft) is not None]  # each of ok_in_order has one
        cached = [r.cached_tokens for r in recs if r.cached_tokens is not None]
        return cls(first_ms=ttfts[0] if ttfts else None,
                   rest_ms=statistics.median(ttfts[1:]) if len(ttfts) > 1 else None,
                   prompt_tokens=sum(r.prompt_tokens for r in recs),
                   cached_tokens=sum(cached) if cached else None,
                   hit_rate=hit_rate(run))


def pair(runs: Sequence[Any]) -> tuple[Any, Any] | None:
    """The newest run with prefix caching on and the newest with it off, or None without both."""
    on = [r for r in runs if caching_on(r) is True]
    off = [r for r in runs if caching_on(r) is False]
    if not on or not off:
        return None
    newest = max(on, key=lambda r: r.started_at), max(off, key=lambda r: r.started_at)
    return newest


def sentence(on: Any, off: Any) -> str:
    """What to notice: TTFT after the first request with caching off and on, and how many prompt
    tokens the cache served (from the answers' usage, else from the server's counters)."""
    a, b = Side.of(on), Side.of(off)
    if a.rest_ms is None or b.rest_ms is None:
        return say("Each run needs at least two successful requests to compare the time to first token after "
                   "the first one.")
    if a.cached_tokens is not None:
        cached, prompt = a.cached_tokens, a.prompt_tokens
    elif on.extra.prefix_cache.hits is not None and on.extra.prefix_cache.queries:
        cached, prompt = on.extra.prefix_cache.hits, on.extra.prefix_cache.queries
    else:
        return say("After the first request, median TTFT was {on:,.0f} ms with prefix caching and {off:,.0f} ms "
                   "without; the server reported no cached tokens.", on=a.rest_ms, off=b.rest_ms)
    # A gain only beyond the noise of the requests after the first, question by question (the same questions in
    # the same order on both sides), and of at least GAIN: on an H200 a 1,300-token prefill takes milliseconds, and
    # both sides measured 55 ms, 0.4 % apart, a difference too small to be the cache's.
    rest_off, rest_on = ([r.ttft for r in ok_in_order(run)[1:]] for run in (off, on))
    # two runs, each with a factor of its own: the run-to-run allowance (verdict.compare's runs)
    v = verdict.beside(verdict.compare(rest_off, rest_on, paired=len(rest_off) == len(rest_on), per=verdict.REQUESTS,
                                       runs=(1, 1)),
                       (say("prefix caching off"), [off]), (say("prefix caching on"), [on]))
    if v is not None and v.disturbed is not None:  # measured, but no finding either way
        return say("With prefix caching {cached:,} of {prompt:,} prompt tokens came from the cache; median TTFT after "
                   "the first request was {on:,.0f} ms against {off:,.0f} ms without it ({interval}; {how}), but no "
                   "verdict, because the machine was disturbed. {beside} Measure both again on a quiet machine.",
                   cached=cached, prompt=prompt, on=a.rest_ms, off=b.rest_ms, interval=v.interval or "–",
                   how=v.how, beside=v.disturbed)
    if v is not None and v.beyond_noise and v.ratio is not None and v.ratio <= 1 - GAIN:
        return say("With prefix caching the shared system prompt was computed once: after the first request, median "
                   "TTFT fell from {off:,.0f} ms to {on:,.0f} ms, beyond noise ({interval}; {how}); {cached:,} of "
                   "{prompt:,} prompt tokens came from the cache.", off=b.rest_ms, on=a.rest_ms, cached=cached,
                   prompt=prompt, interval=v.interval, how=v.how)
    if v is not None and v.beyond_noise and v.ratio is not None and v.ratio > 1:
        return say("With prefix caching {cached:,} of {prompt:,} prompt tokens came from the cache, yet median TTFT "
                   "after the first request was {on:,.0f} ms against {off:,.0f} ms without it, slower beyond noise "
                   "({interval}; {how}): here the prefill it saved did not show.", cached=cached, prompt=prompt,
                   on=a.rest_ms, off=b.rest_ms, interval=v.interval, how=v.how)
    if v is not None and v.beyond_noise:  # faster, but by less than GAIN
        return say("With prefix caching {cached:,} of {prompt:,} prompt tokens came from the cache, yet median TTFT "
                   "after the first request was {on:,.0f} ms against {off:,.0f} ms without it: here the prefill it "
                   "saved did not show.", cached=cached, prompt=prompt, on=a.rest_ms, off=b.rest_ms)
    return say("With prefix caching {cached:,} of {prompt:,} prompt tokens came from the cache, yet median TTFT after "
               "the first request was {on:,.0f} ms against {off:,.0f} ms without it, no measurable difference on this "
               "machine: here the prefill it saved did not show.", cached=cached, prompt=prompt, on=a.rest_ms,
               off=b.rest_ms)
