"""The names of what Serving Lab measures, in one place (a leaf: imports only engine.messages).
See docs/measuring.md#metrics."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from engine.messages import mark, say


class Metric(NamedTuple):
    label: str  # what a chart or a menu shows, e.g. "Median TTFT" (a Message: translate where shown)
    unit: str  # "tok/s", "ms", ...; "" when it has none (a Message when it has one)
    better: str  # "higher" | "lower" (data: compared, never shown as it is)


# The latency distributions `vllm bench serve` reports ({stat}_{name}_ms) and how a chart names them.
DISTRIBUTIONS: dict[str, str] = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": mark("E2E latency")}
_STATS = {"mean": mark("Mean"), "median": mark("Median"), "p90": "P90", "p95": "P95", "p99": "P99"}

# Units, as charts and menus write them.
_TOK_S, _REQ_S, _S, _MS = mark("tok/s"), mark("req/s"), mark("s"), mark("ms")

# summary key -> Metric, in the order a menu lists them
METRICS: dict[str, Metric] = {
    "output_throughput": Metric(mark("Output throughput"), _TOK_S, "higher"),
    "total_token_throughput": Metric(mark("Total token throughput"), _TOK_S, "higher"),
    "request_throughput": Metric(mark("Request throughput"), _REQ_S, "higher"),
    "request_goodput": Metric(mark("Goodput"), _REQ_S, "higher"),
    "duration": Metric(mark("Wall time"), _S, "lower"),
    "mean_latency_s": Metric(mark("Mean latency"), _S, "lower"),
    "total_output_tokens": Metric(mark("Output tokens"), mark("tokens"), "higher"),
    "max_concurrency": Metric(mark("Peak requests in flight"), mark("requests"), "higher"),
    "mean_cached_tokens": Metric(mark("Cached prompt tokens per request"), mark("tokens"), "higher"),
    # e.g. "Median TTFT": the statistic, then the distribution's name (a translator may swap them)
    **{f"{stat}_{name}_ms": Metric(say("{stat} {name}", stat=stat_label, name=label), _MS, "lower")
       for name, label in DISTRIBUTIONS.items() for stat, stat_label in _STATS.items()},
}


def metric_info(key: str) -> Metric:
    """(label, unit, "higher"|"lower" is better) for a summary key; a key not in the catalogue gets a
    label from its name and a unit from its suffix."""
    if key in METRICS:
        return METRICS[key]
    unit = _MS if key.endswith("_ms") else _S if key.endswith("_s") else ""
    return Metric(key.replace("_", " "), unit, "higher" if "throughput" in key else "lower")


# our key -> the other names it is found under, first match wins
ALIASES: dict[str, tuple[str, ...]] = {
    # vLLM's /metrics, summed over engines: V0's gpu_/cpu_cache_usage_perc became V1's kv_cache_usage_perc
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    # requests whose KV blocks were taken back to make room (they start again): a squeezed cache's mark
    "preemptions_total": ("vllm:num_preemptions_total",),
}
PROMETHEUS_PREFIX = "vllm:"
ANSWER_DEADLINE_S = 10.0  # a GET of /metrics, /v1/models or /version: the whole answer, not each wait


def lookup(values: Mapping[str, Any], key: str) -> Any:
    """`values[key]`, else the value under the first of its aliases there (a vLLM /metrics name also
    without its "vllm:" prefix); None when there is none."""
    for name in (key, *ALIASES.get(key, ())):
        for k in (name, name.removeprefix(PROMETHEUS_PREFIX)):
            if (v := values.get(k)) is not None:
                return v
    return None
