"""vLLM's histograms on /metrics: deltas over a measured part, exact means, bucket percentiles.
See docs/measuring.md#histograms."""
from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from engine.results.records import Buckets, EngineSteps, KeptHistogram, ServerView

# our key -> vLLM's histogram (seconds unless said): where a request's time went, and tokens per engine step
HISTOGRAMS: dict[str, str] = {
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "decode": "vllm:request_decode_time_seconds",
    "inference": "vllm:request_inference_time_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "tpot": "vllm:request_time_per_output_token_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "step_tokens": "vllm:iteration_tokens_total",  # tokens (prompt and output) one engine step computed
}
QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class Percentile:
    """A bucket-estimated percentile: `value` and what it is: "estimate" (interpolated inside its bucket), "below"
    (the percentile is at most `value`: the first bucket's top, or what the sum allows) or "above" (at least
    `value`: the highest finite bound, the +Inf bucket holding it)."""

    value: float
    kind: str

    def shown(self, text: str) -> str:
        """`text` (the value as written) marked with what it is: "< 0.30", "> 10", or as it is for an estimate."""
        return {"below": f"< {text}", "above": f"> {text}"}.get(self.kind, text)


@dataclass(frozen=True)
class Histogram:
    """One histogram summed over its label sets (engines): cumulative counts at each upper bound (the
    last +Inf), the sum and the count of what it observed."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float

    def minus(self, before: "Histogram") -> "Histogram | None":
        """What was observed between `before` and this; None when the buckets differ or a count fell
        (the server restarted between the two pages)."""
        if before.bounds != self.bounds:
            return None
        cum = tuple(a - b for a, b in zip(self.cumulative, before.cumulative))
        if self.count < before.count or any(c < 0 for c in cum):
            return None
        return Histogram(self.bounds, cum, self.sum - before.sum, self.count - before.count)

    @property
    def mean(self) -> float | None:
        """Exact: the sum over the count; None when nothing was observed."""
        return self.sum / self.count if self.count else None

    def percentile(self, q: float) -> "Percentile | None":
        """The q-quantile estimated from the buckets (Prometheus' histogram_quantile: interpolated linearly inside
        the bucket that holds rank q x count), never placed past what the data allow. In the first bucket the
        interpolation would put it at the bucket's middle whatever the values were (a 0.3 ms queue read as 150 ms),
        so it is a bound there: below the bucket's top. No observation is negative, so at most a share 1 - q of them
        lie at or above the q-quantile, and their sum is at most the histogram's: the quantile is at most
        mean / (1 - q), a bound too where the interpolation lies above it. In the +Inf bucket: above the highest
        finite bound. None when nothing was observed."""
        if not self.count:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for bound, cum in zip(self.bounds, self.cumulative):
            if cum >= rank and cum > below:
                if math.isinf(bound):
                    break
                most = max(lower, min(bound, self.sum / (self.count * (1 - q)))) if q < 1 else bound
                if not lower:
                    return Percentile(most, "below")
                estimate = lower + (bound - lower) * (rank - below) / (cum - below)
                return Percentile(most, "below") if estimate > most else Percentile(estimate, "estimate")
            lower, below = bound, cum
        return Percentile(lower, "above")

    def bucket_of(self, q: float) -> tuple[float, float | None] | None:
        """The bounds of the bucket the q-quantile lies in (its upper None for +Inf): all the estimate knows
        for sure, since a value far below its bucket's top reads as the bucket's middle."""
        if not self.count:
            return None
        lower, below = 0.0, 0.0
        for bound, cum in zip(self.bounds, self.cumulative):
            if cum >= q * self.count and cum > below:
                return lower, None if math.isinf(bound) else bound
            lower, below = bound, cum
        return lower, None

    def buckets(self) -> Buckets:
        """[[upper bound, observations in that bucket alone], ...] (+Inf written as None for JSON)."""
        out: Buckets = []
        below = 0.0
        for bound, cum in zip(self.bounds, self.cumulative):
            out.append([None if math.isinf(bound) else bound, cum - below])
            below = cum
        return out

    def said(self) -> KeptHistogram:
        """What a run keeps of it: count, exact mean and sum, bucket-estimated percentiles with the bucket each
        lies in, the buckets."""
        ps = {f"p{round(q * 100)}": self.percentile(q) for q in QUANTILES}
        buckets = {f"p{round(q * 100)}_bucket": list(b) if (b := self.bucket_of(q)) else None for q in QUANTILES}
        return KeptHistogram.model_validate({
            "count": self.count, "sum": self.sum, "mean": self.mean, **{k: p and p.value for k, p in ps.items()},
            **{f"{k}_kind": p and p.kind for k, p in ps.items()}, **buckets, "buckets": self.buckets()})


def stored(said: KeptHistogram) -> Histogram | None:
    """A Histogram again from what a run kept of it (`Histogram.said`: its buckets, sum and count), so a percentile
    is judged as today even in a run saved before; None when its buckets were not kept."""
    rows = said.buckets
    if not rows or said.count is None:
        return None
    bounds = tuple(math.inf if b is None else float(b) for b, _n in rows)
    cum, total = [], 0.0
    for _b, n in rows:
        total += n or 0.0
        cum.append(total)
    return Histogram(bounds, tuple(cum), said.sum or 0.0, said.count)


def percentile(said: KeptHistogram, q: float) -> Percentile | None:
    """The q-quantile of a histogram a run kept, as `Histogram.percentile` judges it (None without one)."""
    h = stored(said)
    return None if h is None else h.percentile(q)


def histograms(text: str, model: str | None = None) -> dict[str, Histogram]:
    """HISTOGRAMS' keys -> the Histogram on a /metrics page (summed over engines; for `model` alone when it is
    labelled by model and one label is it, as telemetry.counter does). Absent histograms are left out."""
    wanted = {name: key for key, name in HISTOGRAMS.items()}
    ours = "\n".join(line for line in text.splitlines()
                     if line.startswith(tuple(wanted)) and not line.startswith("#"))
    # name -> model label -> {"le": {bound: cum}, "sum": x, "count": n}
    raw: dict[str, dict[str | None, dict]] = {}
    try:
        for family in text_string_to_metric_families(ours):
            for s in family.samples:
                base = next((n for n in wanted if s.name in (n + "_bucket", n + "_sum", n + "_count")), None)
                if base is None:
                    continue
                h = raw.setdefault(base, {}).setdefault(s.labels.get("model_name"), {"le": {}, "sum": 0.0,
                                                                                       "count": 0.0})
                if s.name.endswith("_bucket"):
                    le = float(s.labels["le"])
                    h["le"][le] = h["le"].get(le, 0.0) + s.value
                else:
                    h[s.name.rsplit("_", 1)[1]] += s.value
    except (ValueError, KeyError):  # not Prometheus text, or a bucket without its bound
        return {}
    out: dict[str, Histogram] = {}
    for name, by_model in raw.items():
        parts = [by_model[model]] if model in by_model else list(by_model.values())
        les: dict[float, float] = {}
        for p in parts:
            for le, v in p["le"].items():
                les[le] = les.get(le, 0.0) + v
        if not les:
            continue
        bounds = tuple(sorted(les))
        out[wanted[name]] = Histogram(bounds, tuple(les[b] for b in bounds), sum(p["sum"] for p in parts),
                                      sum(p["count"] for p in parts))
    return out


def deltas(before: str, after: str, model: str | None = None) -> tuple[dict[str, Histogram], list[str]]:
    """Each histogram's delta between two /metrics pages, and the keys without one (absent from either page,
    or reset between them), in HISTOGRAMS' order."""
    a, b = histograms(before, model), histograms(after, model)
    out, missing = {}, []
    for key in HISTOGRAMS:
        d = b[key].minus(a[key]) if key in a and key in b else None
        if d is None:
            missing.append(key)
        else:
            out[key] = d
    return out, missing


def view(before: str, after: str, model: str | None = None, output_tokens: float | None = None) -> ServerView:
    """What a run keeps of the server's view of its measured part (Notes.server_view): each histogram's
    delta (`Histogram.said`), the keys the server did not export (`missing`), and its engine steps: how many,
    the tokens they computed, and the output tokens per step (the server's generated tokens over the steps:
    the mean batch it decoded; None without that count)."""
    found, missing = deltas(before, after, model)
    out = ServerView(histograms={k: h.said() for k, h in found.items() if k != "step_tokens"}, missing=missing)
    steps = found.get("step_tokens")
    if steps is not None and steps.count:
        out.steps = EngineSteps(count=steps.count, tokens=steps.sum, mean_tokens=steps.mean, buckets=steps.buckets(),
                                mean_batch=output_tokens / steps.count if output_tokens is not None else None)
    return out
