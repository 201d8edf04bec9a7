"""The work the server estimated its engine did over a run's measured part (vLLM's --enable-mfu-metrics:
FLOPs and bytes per GPU), as rates beside the hardware's memory bandwidth. See docs/measuring.md#utilization."""
from __future__ import annotations

from dataclasses import dataclass

from engine.measure.judge.ceiling import bandwidth_of
from engine.messages import Message, say
from engine.observe import peak_flops


@dataclass(frozen=True)
class Utilization:
    tflop_s: float  # estimated FLOPs per GPU / the measured wall time
    read_gb_s: float  # estimated bytes read per GPU / the measured wall time
    bandwidth_gb_s: float | None  # the hardware's (datasheet or measured), per GPU
    bandwidth_said: str | None
    peak_tflop_s: float | None = None  # the GPU's dense FP16/BF16 peak (datasheet), for MFU; None where not known
    peak_said: str | None = None

    @property
    def mfu(self) -> float | None:
        """Model FLOPs utilization: the estimated FLOP/s per GPU over the GPU's peak."""
        return self.tflop_s / self.peak_tflop_s if self.peak_tflop_s else None


def of(run) -> Utilization | None:
    """None when the server estimated nothing (the flag off, an older vLLM, a server that is not vLLM)."""
    est = ((getattr(run.extra, "server_view", None) or {}).get("estimated")) or {}
    if not est.get("flops") or not run.duration:
        return None
    bw = bandwidth_of(run)
    tp = run.config.get("tensor_parallel_size") if isinstance(run.config, dict) else None
    per_gpu = bw.gb_s / tp if bw and isinstance(tp, int) and tp > 1 else (bw.gb_s if bw else None)
    peak = _peak(run)
    return Utilization(est["flops"] / run.duration / 1e12, est.get("read_bytes", 0.0) / run.duration / 1e9,
                       per_gpu, bw.said if bw else None, peak.tflop_s if peak else None, peak.reference if peak else None)


def _peak(run) -> peak_flops.PeakFlops | None:
    """The peak of the GPU the run's server computed on, for a half-precision model only (FP32 or a quantised
    model has another peak)."""
    config = run.config if isinstance(run.config, dict) else {}
    hw = run.hardware if isinstance(run.hardware, dict) else {}
    gpus = [g for g in hw.get("gpus") or () if isinstance(g, dict)]
    if config.get("device") != "cuda" or not gpus or str(config.get("dtype", "auto")) not in peak_flops.HALF:
        return None
    return peak_flops.from_table(str(gpus[0].get("name", "")))


def said(run) -> Message | None:
    u = of(run)
    if u is None:
        return None
    if u.bandwidth_gb_s and u.mfu is not None:
        return say("vLLM estimated its engine's work over the measured part: {tflops:.2f} TFLOP/s per GPU, an MFU of "
                   "{mfu:.1%} of its peak ({peak:,.0f} TFLOP/s, {peak_source}), and {read:,.0f} GB/s read, {share:.0%} of "
                   "its memory bandwidth ({bandwidth:,.0f} GB/s, {source}). Estimates from the model's shape, not "
                   "counters of the chip.", tflops=u.tflop_s, mfu=u.mfu, peak=u.peak_tflop_s,
                   peak_source=u.peak_said, read=u.read_gb_s, share=u.read_gb_s / u.bandwidth_gb_s,
                   bandwidth=u.bandwidth_gb_s, source=u.bandwidth_said)
    if u.bandwidth_gb_s:
        return say("vLLM estimated its engine's work over the measured part: {tflops:.2f} TFLOP/s and {read:,.0f} GB/s "
                   "read per GPU, {share:.0%} of this hardware's memory bandwidth ({bandwidth:,.0f} GB/s, {source}). "
                   "Estimates from the model's shape, not counters of the chip.", tflops=u.tflop_s, read=u.read_gb_s,
                   share=u.read_gb_s / u.bandwidth_gb_s, bandwidth=u.bandwidth_gb_s, source=u.bandwidth_said)
    return say("vLLM estimated its engine's work over the measured part: {tflops:.2f} TFLOP/s and {read:,.0f} GB/s "
               "read per GPU. Estimates from the model's shape, not counters of the chip.", tflops=u.tflop_s,
               read=u.read_gb_s)
