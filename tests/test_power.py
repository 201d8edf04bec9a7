"""The GPUs' power on the Monitor: sampled from NVML each tick on a GPU machine, kept through
the Monitor's downsampling (a bucket's mean), drawn on the Monitor's time axis with its caption from the same
numbers; nothing at all without a GPU."""
from __future__ import annotations

import pytest

from engine import figures
from engine.figures import caption
from engine.observe import nvml, telemetry
from engine.observe.telemetry import Sample, Telemetry, downsample, power_rows


def test_a_gpu_machine_samples_its_power_and_a_cpu_one_does_not(monkeypatch):
    monkeypatch.setattr(nvml, "power_mw", lambda nv=None: 412_500.0)
    monkeypatch.setattr(telemetry, "gpu_memory", lambda: [])
    t = Telemetry(server_pid=lambda: None, metrics_url=lambda: None)
    t.device = "cuda"
    assert t.sample_once().power_w == pytest.approx(412.5)
    t.device = "cpu"
    assert t.sample_once().power_w is None


def test_power_survives_downsampling_as_the_buckets_mean_and_is_drawn_with_its_numbers():
    samples = [Sample(t=1.7e9 + i, power_w=w) for i, w in enumerate([100, 200, 300, 500])]
    merged = downsample(samples, 2)
    assert [s.power_w for s in merged] == pytest.approx([150, 400])
    fig = figures.power_chart(power_rows(samples))
    assert list(fig.data[0].y) == [100, 200, 300, 500] and list(fig.data[0].x) == [0, 1, 2, 3]
    assert "500 W now, 500 W at the peak" in caption(fig)
    assert "전력" in figures.power_chart(power_rows(samples), lang="ko").layout.title.text
    assert figures.power_chart(power_rows([Sample(t=1.7e9)])) is None  # no GPU: no chart
