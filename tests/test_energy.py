"""Energy per run: NVML's energy counter, NVML power samples integrated, RAPL's package
counters, and the arithmetic per output token. A fake NVML and a fake powercap folder stand in for the real
ones, which this CPU machine lacks (no GPU; /sys/class/powercap absent in the container)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.observe import energy
from engine.results.records import EnergyReading
from tests.said import values


class FakeNvml:
    """pynvml's calls the meter makes, over GPUs whose counters and power the test sets."""

    def __init__(self, mj: list[float] | None, mw: list[float]):
        self.mj, self.mw = mj, mw

    def nvmlDeviceGetCount(self):
        return len(self.mw)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        if self.mj is None:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return self.mj[h]

    def nvmlDeviceGetPowerUsage(self, h):
        return self.mw[h]


def test_the_nvml_counter_gives_the_joules_between_start_and_stop_over_every_gpu():
    nv = FakeNvml(mj=[1_000_000.0, 2_000_000.0], mw=[60_000.0, 40_000.0])
    meter = energy.EnergyMeter(nv=nv, powercap=Path("/nonexistent"))
    assert meter.method == "nvml-counter"
    assert meter.idle() == pytest.approx(100.0)  # 60 W + 40 W before the run
    meter.start()
    nv.mj = [1_000_000.0 + 350_000, 2_000_000.0 + 150_000]  # 350 J and 150 J
    reading = meter.stop()
    assert reading.method == "nvml-counter" and reading.joules == pytest.approx(500.0)
    assert reading.idle_w == pytest.approx(100.0)


def test_without_the_counter_power_samples_are_integrated():
    nv = FakeNvml(mj=None, mw=[200_000.0])  # a GPU older than Volta: power only
    meter = energy.EnergyMeter(nv=nv, powercap=Path("/nonexistent"), interval_s=0.01)
    assert meter.method == "nvml-power"
    meter.start()
    time.sleep(0.1)
    reading = meter.stop()
    # constant 200 W: the trapezoids give 200 W x the measured seconds, whatever the sampler's timing
    assert reading.joules == pytest.approx(200.0 * reading.seconds, rel=1e-6)
    assert reading.samples >= 2


def test_trapezoids():
    assert energy.integrate([(0.0, 100.0), (1.0, 300.0), (3.0, 300.0)]) == pytest.approx(200 + 600)


def _rapl(root: Path, name: str, uj: float, top: float = 262_143_328_850.0) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "energy_uj").write_text(f"{uj:.0f}\n")
    (d / "max_energy_range_uj").write_text(f"{top:.0f}\n")
    return d


def test_rapl_sums_the_packages_not_their_subzones_and_survives_a_wrap(tmp_path):
    p0 = _rapl(tmp_path, "intel-rapl:0", 5_000_000)
    p1 = _rapl(tmp_path, "intel-rapl:1", 100, top=1_000_000)
    _rapl(tmp_path, "intel-rapl:0:0", 9_000_000)  # the cores inside package 0: already counted by it
    meter = energy.EnergyMeter(nv=FakeNvml(mj=None, mw=[]), powercap=tmp_path, idle_s=0.0)
    assert meter.method == "rapl" and [d.name for d in meter.domains] == ["intel-rapl:0", "intel-rapl:1"]
    meter.start()
    (p0 / "energy_uj").write_text("25000000\n")  # +20 J
    (p1 / "energy_uj").write_text("999900\n")  # +999,800 uJ
    (tmp_path / "intel-rapl:0:0" / "energy_uj").write_text("99000000\n")
    assert meter.stop().joules == pytest.approx(20.0 + 0.9998)
    meter.start()
    (p1 / "energy_uj").write_text("100\n")  # wrapped: 999,900 -> 1,000,000 -> 100
    assert meter.stop().joules == pytest.approx(200 / 1e6)


def test_an_unreadable_counter_is_no_meter_and_a_sentence(tmp_path):
    d = _rapl(tmp_path, "intel-rapl:0", 1)
    (d / "energy_uj").unlink()  # as for a user who may not read it
    meter = energy.EnergyMeter(nv=FakeNvml(mj=None, mw=[]), powercap=tmp_path)
    assert meter.method is None and meter.idle() is None
    meter.start()
    assert meter.stop() is None
    assert "not measurable here" in energy.missing_said("no-meter")


def test_per_token_arithmetic_and_the_cost_at_a_price_per_kwh():
    u = energy.use(EnergyReading(method="nvml-counter", joules=7200.0, seconds=10.0, idle_w=100.0), 3600,
                   price_per_kwh=0.30)
    assert u.j_per_token == 2.0 and u.tokens_per_j == 0.5 and u.wh == 2.0
    # 2 J/token x 1e6 tokens = 2e6 J = 0.5556 kWh, at 0.30 a kWh
    assert u.cost_per_million == pytest.approx(2e6 / 3.6e6 * 0.30)
    assert energy.use(EnergyReading(method="rapl", joules=1.0), 10).cost_per_million is None  # no price by default
    assert energy.use(None, 10) is None
    first, idle = energy.said(u)
    assert values(first) == {"j": 7200.0, "wh": 2.0, "jpt": 2.0, "tpj": 0.5, "cost": pytest.approx(2e6 / 3.6e6 * 0.30),
                             "price": 0.30, "method": "NVML's energy counter"} and values(idle) == {"idle": 100.0}


def test_each_run_keeps_its_energy_or_why_it_has_none():

    from tests.fakes import FakeOpenAIServer

    from engine.measure.load.spec import LoadSpec
    from engine.runs import Runner, Target
    from engine.serving.endpoint import Endpoint

    nv = FakeNvml(mj=[0.0], mw=[50_000.0])

    class Counting(energy.EnergyMeter):
        def start(self):
            super().start()
            nv.mj = [nv.mj[0] + 12_000.0]  # 12 J while it measures

    spec = LoadSpec(base_url="", model="", prompts=["hi"], num_requests=2, max_tokens=4)
    with FakeOpenAIServer() as srv:  # a loopback server shares this machine: its energy is this machine's
        local = Target(srv.base_url, "ok", endpoint=Endpoint(srv.base_url, {"ok": None}, vllm=False, metrics=False))
        far = Target("http://192.0.2.1:8000", "ok")  # a server elsewhere: not measured from here
        run = Runner(save=lambda r: r, energy=lambda: Counting(nv=nv)).load(spec, local)
        here = Runner(save=lambda r: r).load(spec, local)  # this machine's real meters
    assert Runner(save=lambda r: r)._meter(far) is None
    assert Runner._energy(run.__class__(kind="vllm", scenario="s", label="l", records=[], duration=1, started_at=0),
                          None).extra.energy.missing == "elsewhere"
    assert run.extra.energy.reading.joules == pytest.approx(12.0) and run.extra.energy.reading.idle_w == 50.0
    assert run.extra.energy.missing == ""
    # this container has no GPU and no readable /sys/class/powercap (check: both absent here)
    if energy.EnergyMeter().method is None:
        assert here.extra.energy.reading is None and here.extra.energy.missing == "no-meter"
    else:
        assert here.extra.energy.reading.joules >= 0


def test_a_price_per_kwh_gives_the_energy_cost_and_a_bad_one_is_a_sentence():
    from engine.errors import ConfigError
    from engine.figures import energy_cost_line
    from engine.measure.judge.cost import check_kwh_price
    from engine.results.records import Energy, Notes, RequestRecord, RunResult

    recs = [RequestRecord(index=0, prompt="q", send_time=0.0, first_token_time=0.1, end_time=1.0, output_tokens=1000)]
    run = RunResult(kind="vllm", scenario="concurrent-10", label="x", records=recs, duration=1.0, started_at=1.7e9,
                    summary={"total_output_tokens": 1000},
                    extra=Notes(energy=Energy(reading=EnergyReading(joules=3600.0, seconds=1.0,
                                                                    method="nvml-counter"))))
    # 3.6 J per token x 1e6 = 3.6e6 J = 1 kWh per million tokens; the whole run is 1 Wh
    said = energy.cost_said(energy.use(run.extra.energy.reading, 1000, 0.30))
    assert values(said) == {"price": 0.30, "wh": pytest.approx(1.0), "total": pytest.approx(0.0003),
                            "cost": pytest.approx(0.30)}
    assert energy_cost_line(run, 0.30) == said  # the line a page shows is that sentence, in the viewer's language
    assert "kWh당 0.3이면" in energy_cost_line(run, 0.30, lang="ko")
    assert energy_cost_line(run, None) is None
    assert check_kwh_price(None) is None and check_kwh_price(0.25) == 0.25
    for bad in (-1, float("nan"), 1e9):
        with pytest.raises(ConfigError, match="A price per kWh of"):
            check_kwh_price(bad)
