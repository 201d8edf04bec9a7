"""Metrics from request records, defined as vLLM's `vllm bench serve` defines them.
See docs/measuring.md#stats."""
from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from engine.metrics import DISTRIBUTIONS
from engine.results.records import RequestRecord, Summary

DEFAULT_PERCENTILES: tuple[float, ...] = (50, 90, 95, 99)
_SLO_KEYS = ("ttft", "tpot", "e2el")


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile with linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100.0
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _pword(p: float) -> str:
    """vLLM's key spelling: p99, p99.9."""
    return str(int(p)) if int(p) == p else str(p)


def _distribution(name: str, seconds: Sequence[float], percentiles: Iterable[float]) -> dict[str, float | None]:
    """mean/median/std/pXX of `seconds`, in ms, under vLLM's key names; None when empty."""
    ms = [s * 1000.0 for s in seconds]
    mean = statistics.fmean(ms) if ms else None
    out: dict[str, float | None] = {
        f"mean_{name}_ms": mean,
        f"median_{name}_ms": statistics.median(ms) if ms else None,
        # numpy's std (vLLM's) in floats: statistics.pstdev sums exact fractions, most of a summary's time
        f"std_{name}_ms": math.sqrt(statistics.fmean([(x - mean) ** 2 for x in ms])) if mean is not None else None,
    }
    for p in percentiles:
        out[f"p{_pword(p)}_{name}_ms"] = percentile(ms, p)
    return out


def measured(records: Iterable[RequestRecord]) -> list[RequestRecord]:
    """The records that count: warm-up requests excluded."""
    return [r for r in records if not r.warmup]


def itls(r: RequestRecord) -> list[float]:
    """Gaps between consecutive content chunks of one request, in seconds."""
    ts = r.chunk_times
    return [b - a for a, b in zip(ts, ts[1:])]


def tpot(r: RequestRecord) -> float | None:
    """(E2E - TTFT) / (N - 1) seconds for N > 1 output tokens, else None."""
    if r.output_tokens > 1 and r.ttft is not None and r.e2e is not None:
        return (r.e2e - r.ttft) / (r.output_tokens - 1)
    return None


def is_good(r: RequestRecord, slo_ms: dict[str, float]) -> bool:
    """Whether a request completed within every given SLO (keys ttft/tpot/e2el, milliseconds), as
    `vllm bench serve --goodput` judges it: a value on the limit counts, compared in seconds as vLLM
    compares (in ms, 2.007 s * 1000 would land just over a 2007 ms limit), and a 1-token answer's TPOT
    is 0. (A completed request has a first token: the load generator fails an answer without one.)"""
    if not r.ok:
        return False
    values = {"ttft": r.ttft, "tpot": tpot(r) or 0.0, "e2el": r.e2e}
    for key, limit in slo_ms.items():
        v = values.get(key)
        if v is None or not limit / 1000.0 >= v:
            return False
    return True


def good_requests(records: Iterable[RequestRecord], slo_ms: dict[str, float]) -> int:
    """How many measured requests completed within every given SLO: goodput's numerator."""
    return sum(is_good(r, slo_ms) for r in measured(records))


def in_flight_series(records: Iterable[RequestRecord], warmup: bool = False) -> list[tuple[float, int]]:
    """Step series (t, requests in flight just after t), one point per send or end, of the measured
    requests (`warmup`: of the warm-up's instead).

    Failed requests count while they were in flight; a request still open (no end) stays in
    flight. At equal times an end is applied before a send, so back-to-back requests do not
    count as overlapping."""
    events: list[tuple[float, int]] = []
    for r in (r for r in records if r.warmup == warmup):
        events.append((r.send_time, +1))
        if r.end_time is not None:
            events.append((r.end_time, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    out: list[tuple[float, int]] = []
    n = 0
    for t, d in events:
        n += d
        if out and out[-1][0] == t:
            out[-1] = (t, n)
        else:
            out.append((t, n))
    return out


def peak_in_flight(records: Iterable[RequestRecord], warmup: bool = False) -> int:
    """The most measured requests (`warmup`: warm-up requests) that were in flight at once."""
    return max((n for _, n in in_flight_series(records, warmup)), default=0)


def token_arrivals(r: RequestRecord) -> list[tuple[float, float]]:
    """(time, tokens) for one request: its output tokens attributed to chunk arrival times.

    When the server's count differs from the number of chunks (a chunk may carry several tokens),
    the count is spread evenly over the chunks. With no chunk times, all land at the end."""
    n = r.output_tokens or len(r.chunk_times)
    if n <= 0:
        return []
    if r.chunk_times:
        share = n / len(r.chunk_times)
        return [(t, share) for t in r.chunk_times]
    return [(r.end_time, float(n))] if r.end_time is not None else []


def tokens_per_second_series(records: Iterable[RequestRecord], bucket_s: float = 1.0) -> list[tuple[float, float]]:
    """Output tokens per second over the run: (bucket start s, tok/s), every bucket from 0 up to
    the last token, zeros included, so the line is continuous. Warm-up records are skipped."""
    if bucket_s <= 0:
        raise ValueError("bucket_s must be positive")
    buckets: dict[int, float] = {}
    for r in measured(records):
        for t, n in token_arrivals(r):
            k = max(0, math.floor(t / bucket_s))
            buckets[k] = buckets.get(k, 0.0) + n
    if not buckets:
        return []
    return [(k * bucket_s, buckets.get(k, 0.0) / bucket_s) for k in range(max(buckets) + 1)]


def _vllm_peak_output(records: Sequence[RequestRecord]) -> float:
    """vLLM's `max_output_tokens_per_s`: most tokens in one 1-s bucket counted from the first
    successful send, one token per content chunk (vLLM rebuilds token times from TTFT and ITLs)."""
    if not records:
        return 0.0
    t0 = min(r.send_time for r in records)
    counts: dict[int, int] = {}
    for r in records:
        for t in r.chunk_times:
            k = int(t - t0)
            counts[k] = counts.get(k, 0) + 1
    return float(max(counts.values(), default=0))


def summarize(
    records: Iterable[RequestRecord],
    duration: float,
    goodput_slo: dict[str, float] | None = None,
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
) -> Summary:
    """`vllm bench serve`'s metrics from measured records (warm-up skipped).

    `goodput_slo` maps ttft/tpot/e2el to limits in ms (vLLM's `--goodput`); without it
    request_goodput is None. Besides vLLM's keys: in_flight (requests not finished yet, for live
    snapshots; neither completed nor failed), max_concurrency (observed peak in flight),
    mean_latency_s (mean E2E) and total_latency_s (sum of E2E: the "serial sum", the wall time
    the same requests would take one after another)."""
    recs = measured(records)
    done = [r for r in recs if r.ok]
    open_ = sum(r.error is None and r.end_time is None for r in recs)  # live snapshots: still running
    slo = {k: float(v) for k, v in (goodput_slo or {}).items() if k in _SLO_KEYS}
    dur = duration if duration and duration > 0 else 0.0

    def per_s(x: float) -> float:
        return x / dur if dur else 0.0

    total_in = sum(r.prompt_tokens for r in done)
    total_out = sum(r.output_tokens for r in done)
    e2els = [r.e2e for r in done if r.e2e is not None]
    samples = {
        "ttft": [r.ttft for r in done if r.ttft is not None],
        "tpot": [t for t in (tpot(r) for r in done) if t is not None],
        "itl": [g for r in done for g in itls(r)],
        "e2el": e2els,
    }
    out: dict[str, Any] = {
        "duration": dur,
        "completed": len(done),
        "failed": len(recs) - len(done) - open_,
        "in_flight": open_,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": per_s(len(done)),
        "request_goodput": per_s(good_requests(done, slo)) if slo else None,
        "output_throughput": per_s(total_out),
        "total_token_throughput": per_s(total_in + total_out),
        "max_output_tokens_per_s": _vllm_peak_output(done),
        "max_concurrency": peak_in_flight(recs),
        "mean_latency_s": statistics.fmean(e2els) if e2els else None,
        "total_latency_s": sum(e2els),
        "mean_cached_tokens": statistics.fmean(cached) if (cached := [r.cached_tokens for r in done
                                                                     if r.cached_tokens is not None]) else None,
    }
    for name in DISTRIBUTIONS:
        out.update(_distribution(name, samples[name], percentiles))
    # vllm bench serve's client queue: how long a request waited here before it was sent (its arrival known)
    if queued := [q for r in done if (q := r.queue_time) is not None]:
        out.update(_distribution("client_queue_time", queued, percentiles))
    return Summary.from_dict(out)


def per_request(records: Iterable[RequestRecord]) -> list[dict[str, Any]]:
    """One row per measured request (for tables and CSV): ids, outcome, latencies in ms."""
    rows = []
    for r in measured(records):
        t = tpot(r)
        rows.append({
            "index": r.index,
            "ok": r.ok,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "ttft_ms": None if r.ttft is None else r.ttft * 1000.0,
            "tpot_ms": None if t is None else t * 1000.0,
            "e2el_ms": None if r.e2e is None else r.e2e * 1000.0,
            "error": r.error,
        })
    return rows
