"""Telemetry's display thinning: long windows drawn with at most N points, peaks kept, rates averaged."""
from engine.observe.telemetry import _MEAN_METRICS, Sample, downsample


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
