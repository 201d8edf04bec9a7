"""Telemetry: reading vLLM's /metrics page, and the display thinning (long windows drawn with at most N
points, peaks kept, rates averaged)."""
from pathlib import Path

from engine.observe.telemetry import _MEAN_METRICS, Sample, downsample, parse_metrics

DATA = Path(__file__).resolve().parent / "data"


def _samples(n: int) -> list[Sample]:
    rate = next(iter(_MEAN_METRICS))
    out = []
    for i in range(n):
        mem = [{"series": "GPU 0", "used_gb": 10.0 + (50.0 if i == 123 else 0.0), "total_gb": 80.0}]
        if i >= n // 2:  # a series that appears half-way (a naive worker starting)
            mem.append({"series": "naive worker", "used_gb": float(i), "total_gb": 80.0})
        out.append(Sample(t=1000.0 + i, memory=mem, metrics={"running": float(i % 7), rate: 2.0 if i % 2 else 4.0}))
    return out


def test_short_windows_are_left_alone():
    s = _samples(50)
    assert downsample(s, 400) is s


def test_long_windows_keep_peaks_and_average_rates():
    s = _samples(800)  # buckets of two samples
    out = downsample(s, 400)
    rate = next(iter(_MEAN_METRICS))
    assert len(out) <= 400
    assert max(m["used_gb"] for x in out for m in x.memory if m["series"] == "GPU 0") == 60.0  # the one-sample peak
    assert max(x.metrics["running"] for x in out) == 6.0
    assert all(x.metrics[rate] == 3.0 for x in out)  # 4 and 2 alternate: each pair averages to 3
    assert out[-1].t == s[-1].t and [x.t for x in out] == sorted(x.t for x in out)
    assert {m["series"] for m in out[-1].memory} == {"GPU 0", "naive worker"}


def test_parse_metrics_reads_a_captured_vllm_page():
    """/metrics of vLLM 0.32 (CPU build, SmolLM2, after some runs), as captured: HELP/TYPE lines,
    counters as _total and _created samples, histograms as _bucket/_sum/_count/_created, and names
    that only begin like ours (num_requests_waiting_by_reason, prompt_tokens_by_source_total)."""
    text = (DATA / "vllm-0.32.0-metrics.txt").read_text()
    assert parse_metrics(text) == {"running": 0.0, "waiting": 0.0, "kv_usage": 0.0,
                                   "generation_tokens_total": 9700.0, "prompt_tokens_total": 10963.0,
                                   "preemptions_total": 0.0,  # and the cache's size, from cache_config_info's labels
                                   "kv_capacity_tokens": 46592.0, "kv_blocks": 364.0, "kv_block_size": 128.0}


def test_parse_metrics_sums_engines_and_reads_older_names():
    text = "\n".join([
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0',
        'vllm:num_requests_running{engine="1",model_name="m"} 2.0',
        "# TYPE vllm:gpu_cache_usage_perc gauge",  # vLLM V0's name for the KV-cache usage
        'vllm:gpu_cache_usage_perc{model_name="m"} 0.25',
        "# TYPE vllm:generation_tokens counter",
        'vllm:generation_tokens_total{engine="0",model_name="m"} 100.0',
        'vllm:generation_tokens_created{engine="0",model_name="m"} 1.796e+09',
        'vllm:generation_tokens_total{engine="1",model_name="m"} 50.0',
        'vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="m"} 4.0',
    ])
    assert parse_metrics(text) == {"running": 5.0, "kv_usage": 0.25, "generation_tokens_total": 150.0}


def test_parse_metrics_of_a_page_that_is_not_metrics():
    assert parse_metrics("<html><body>502 Bad Gateway</body></html>") == {}
    assert parse_metrics("") == {}
