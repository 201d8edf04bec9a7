"""The names of what Serving Lab measures, in one place.

- `METRICS`, the catalogue of a run's summary metrics: each key as `vllm bench serve` writes it in its
  result file (`output_throughput`, `median_ttft_ms`, ...), with the label a chart shows, its unit and
  which way is better. `engine.measure.stats` computes these keys, the figures and the History page
  read them through `metric_info`.
- `ALIASES`, the one table of other names a value is found under: vLLM's /metrics (Prometheus) names
  across versions, which telemetry parses and the metrics chart reads. Read a value with
  `lookup(mapping, key)`. (A run's own settings have one name each: engine.results.records.Load.)

A leaf: it imports nothing from the rest of engine, so every layer may use it.
See docs/architecture.md.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class Metric(NamedTuple):
    label: str  # what a chart or a menu shows, e.g. "Median TTFT"
    unit: str  # "tok/s", "ms", ...; "" when it has none
    better: str  # "higher" | "lower"


# The latency distributions `vllm bench serve` reports ({stat}_{name}_ms) and how a chart names them.
DISTRIBUTIONS: dict[str, str] = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}
_STATS = {"mean": "Mean", "median": "Median", "p90": "P90", "p95": "P95", "p99": "P99"}

# summary key -> Metric, in the order a menu lists them
METRICS: dict[str, Metric] = {
    "output_throughput": Metric("Output throughput", "tok/s", "higher"),
    "total_token_throughput": Metric("Total token throughput", "tok/s", "higher"),
    "request_throughput": Metric("Request throughput", "req/s", "higher"),
    "request_goodput": Metric("Goodput", "req/s", "higher"),
    "duration": Metric("Wall time", "s", "lower"),
    "mean_latency_s": Metric("Mean latency", "s", "lower"),
    "total_output_tokens": Metric("Output tokens", "tokens", "higher"),
    "max_concurrency": Metric("Peak requests in flight", "requests", "higher"),
    **{f"{stat}_{name}_ms": Metric(f"{stat_label} {label}", "ms", "lower")
       for name, label in DISTRIBUTIONS.items() for stat, stat_label in _STATS.items()},
}


def metric_info(key: str) -> Metric:
    """(label, unit, "higher"|"lower" is better) for a summary key; a key not in the catalogue gets a
    label from its name and a unit from its suffix."""
    if key in METRICS:
        return METRICS[key]
    unit = "ms" if key.endswith("_ms") else "s" if key.endswith("_s") else ""
    return Metric(key.replace("_", " "), unit, "higher" if "throughput" in key else "lower")


# our key -> the other names it is found under, first match wins
ALIASES: dict[str, tuple[str, ...]] = {
    # vLLM's /metrics, summed over engines: V0's gpu_/cpu_cache_usage_perc became V1's kv_cache_usage_perc
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
}
PROMETHEUS_PREFIX = "vllm:"


def lookup(values: Mapping[str, Any], key: str) -> Any:
    """`values[key]`, else the value under the first of its aliases there (a vLLM /metrics name also
    without its "vllm:" prefix); None when there is none."""
    for name in (key, *ALIASES.get(key, ())):
        for k in (name, name.removeprefix(PROMETHEUS_PREFIX)):
            if (v := values.get(k)) is not None:
                return v
    return None
