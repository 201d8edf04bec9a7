"""The energy one run's measured part used, from the best meter this machine has.
See docs/measuring.md#energy."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.messages import Message, mark, say
from engine.observe import nvml
from engine.results.records import EnergyReading

POWERCAP = Path("/sys/class/powercap")
J_PER_KWH = 3.6e6


def rapl_domains(root: Path = POWERCAP) -> list[Path]:
    """The RAPL package domains (intel-rapl:N, not their sub-zones, which the package already counts) whose
    counter this user can read."""
    out = []
    for d in sorted(root.glob("intel-rapl:*")):
        if d.name.count(":") != 1:
            continue
        try:
            float((d / "energy_uj").read_text())
        except (OSError, ValueError):  # root-only since the PLATYPUS fix, or not a counter
            continue
        out.append(d)
    return out


def _rapl_uj(domains: list[Path]) -> list[float]:
    return [float((d / "energy_uj").read_text()) for d in domains]


def _rapl_range(d: Path) -> float | None:
    try:
        return float((d / "max_energy_range_uj").read_text())
    except (OSError, ValueError):
        return None


class EnergyMeter:
    """Reads energy around one measured part: `idle()` before the warm-up, `start()` when it measures,
    `stop()` after the last request returns the record (Notes.energy.reading) or None (`method` None: no meter)."""

    def __init__(self, nv: Any = None, powercap: Path = POWERCAP, interval_s: float = 0.1,
                 idle_s: float = 0.25) -> None:
        self.nv = nv
        self.interval_s, self.idle_s = interval_s, idle_s
        self.domains: list[Path] = []
        self.method: str | None = None
        if nvml.count(nv):
            self.method = "nvml-counter" if nvml.total_energy_mj(nv) is not None else (
                "nvml-power" if nvml.power_mw(nv) is not None else None)
        if self.method is None:
            self.domains = rapl_domains(powercap)
            self.method = "rapl" if self.domains else None
        self.idle_w: float | None = None
        self._t0: float | None = None
        self._mj0: float | None = None  # NVML's counter at the start (mJ)
        self._uj0: list[float] = []  # each RAPL domain's at the start (uJ)
        self._samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _power_w(self) -> float | None:
        mw = nvml.power_mw(self.nv)
        return None if mw is None else mw / 1000

    def idle(self) -> float | None:
        """The power drawn before the run (W): NVML's reading, or RAPL's energy over `idle_s`."""
        if self.method in ("nvml-counter", "nvml-power"):
            self.idle_w = self._power_w()
        elif self.method == "rapl":
            t0, e0 = time.monotonic(), _rapl_uj(self.domains)
            time.sleep(self.idle_s)
            t1, e1 = time.monotonic(), _rapl_uj(self.domains)
            self.idle_w = self._rapl_joules(e0, e1) / (t1 - t0) if t1 > t0 else None
        return self.idle_w

    def start(self) -> None:
        if self.method is None:
            return
        self._t0 = time.monotonic()
        if self.method == "nvml-counter":
            self._mj0 = nvml.total_energy_mj(self.nv)
        elif self.method == "rapl":
            self._uj0 = _rapl_uj(self.domains)
        else:
            self._samples = [(self._t0, self._power_w() or 0.0)]
            self._stop.clear()
            self._thread = threading.Thread(target=self._sample, daemon=True, name="energy")
            self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            w = self._power_w()
            if w is not None:
                self._samples.append((time.monotonic(), w))

    def _rapl_joules(self, before: list[float], after: list[float]) -> float:
        total = 0.0
        for d, a, b in zip(self.domains, before, after):
            diff = b - a
            if diff < 0:  # the counter wrapped once (a long run wraps it at most once per range)
                diff += _rapl_range(d) or 0.0
            total += max(diff, 0.0)
        return total / 1e6

    def stop(self) -> EnergyReading | None:
        """The measured part's energy; None when there is no meter or it was never started."""
        if self.method is None or self._t0 is None:
            return None
        t1 = time.monotonic()
        seconds = t1 - self._t0
        samples = None
        if self.method == "nvml-counter":
            e1 = nvml.total_energy_mj(self.nv)
            if e1 is None or self._mj0 is None or e1 < self._mj0:
                return None
            joules = (e1 - self._mj0) / 1000
        elif self.method == "rapl":
            joules = self._rapl_joules(self._uj0, _rapl_uj(self.domains))
        else:
            self._stop.set()
            if self._thread is not None:
                self._thread.join(timeout=2)
            self._samples.append((t1, self._power_w() or self._samples[-1][1]))
            joules = integrate(self._samples)
            samples = len(self._samples)
        return EnergyReading(method=self.method, joules=joules, seconds=seconds,
                             mean_w=joules / seconds if seconds > 0 else None, idle_w=self.idle_w, samples=samples)


def integrate(samples: list[tuple[float, float]]) -> float:
    """Joules from (time s, power W) samples: the trapezoids between them."""
    return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in zip(samples, samples[1:]))


@dataclass(frozen=True)
class EnergyUse:
    """A run's energy per output token, and its cost at a price per kWh (None: no price given)."""

    joules: float
    output_tokens: int
    seconds: float
    method: str
    idle_w: float | None = None
    price_per_kwh: float | None = None

    @property
    def wh(self) -> float:
        return self.joules / 3600

    @property
    def j_per_token(self) -> float | None:
        return self.joules / self.output_tokens if self.output_tokens else None

    @property
    def tokens_per_j(self) -> float | None:
        return self.output_tokens / self.joules if self.joules > 0 else None

    @property
    def cost_per_million(self) -> float | None:
        """Cost per million output tokens at `price_per_kwh`; None without a price or tokens."""
        if self.price_per_kwh is None or self.j_per_token is None:
            return None
        return self.j_per_token * 1e6 / J_PER_KWH * self.price_per_kwh


def use(energy: EnergyReading | None, output_tokens: int | None,
        price_per_kwh: float | None = None) -> EnergyUse | None:
    """A run's EnergyUse from its Notes.energy.reading and its output tokens; None without a reading."""
    if energy is None or energy.joules is None:
        return None
    return EnergyUse(energy.joules, int(output_tokens or 0), energy.seconds or 0.0, energy.method, energy.idle_w,
                     price_per_kwh)


METHODS = {"nvml-counter": mark("NVML's energy counter"), "nvml-power": mark("NVML power samples, integrated"),
           "rapl": mark("RAPL package counters")}


def said(u: EnergyUse) -> list[Message]:
    """One run's energy in sentences: what it used and by which method (its cost when a price was given), and
    the power before the run."""
    values = dict(j=u.joules, wh=u.wh, jpt=u.j_per_token or 0.0, tpj=u.tokens_per_j or 0.0,
                  method=METHODS.get(u.method, u.method))
    if u.cost_per_million is not None:
        out = [say("The measured part used {j:,.0f} J ({wh:.3f} Wh, by {method}): {jpt:.3f} J per output token, "
                   "{tpj:.2f} output tokens per J, {cost:.4f} per million output tokens at {price:g} per kWh.",
                   cost=u.cost_per_million, price=u.price_per_kwh, **values)]
    else:
        out = [say("The measured part used {j:,.0f} J ({wh:.3f} Wh, by {method}): {jpt:.3f} J per output token, "
                   "{tpj:.2f} output tokens per J.", **values)]
    if u.idle_w is not None:
        out.append(say("The machine drew {idle:.0f} W before the run.", idle=u.idle_w))
    return out


def missing_said(why: str) -> Message:
    """Why a run has no energy reading."""
    if why == "elsewhere":
        return say("The server runs on another machine, so this app cannot measure the energy it used.")
    return say("Energy is not measurable here: this machine has no NVIDIA GPU with NVML and no RAPL counter this "
               "user can read (/sys/class/powercap).")


def cost_said(u: EnergyUse) -> Message | None:
    """What the measured part's energy costs at the viewer's price per kWh; None without a price or tokens."""
    if u.cost_per_million is None or u.price_per_kwh is None:
        return None
    return say("At {price:g} per kWh the measured part's {wh:.3f} Wh cost {total:.6f}: {cost:.4f} per million "
               "output tokens (the energy only, not the machine).", price=u.price_per_kwh, wh=u.wh,
               total=u.wh / 1000 * u.price_per_kwh, cost=u.cost_per_million)
