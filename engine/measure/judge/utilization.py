"""The work the server estimated its engine did over a run's measured part (vLLM's --enable-mfu-metrics:
FLOPs and bytes per GPU), as rates beside the hardware's memory bandwidth. See docs/measuring.md#utilization."""
from __future__ import annotations

from dataclasses import dataclass

from engine.digits import significant
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
    est = run.extra.server_view.estimated if run.extra.server_view else None
    if est is None or not est.flops or not run.duration:
        return None
    bw = bandwidth_of(run)
    tp = run.config.get("tensor_parallel_size") if isinstance(run.config, dict) else None
    per_gpu = bw.gb_s / tp if bw and isinstance(tp, int) and tp > 1 else (bw.gb_s if bw else None)
    peak = _peak(run)
    return Utilization(est.flops / run.duration / 1e12, (est.read_bytes or 0.0) / run.duration / 1e9,
                       per_gpu, bw.said if bw else None, peak.tflop_s if peak else None,
                       peak.reference if peak else None)


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
    tflops, read = significant(u.tflop_s), significant(u.read_gb_s)
    share = significant(100 * u.read_gb_s / u.bandwidth_gb_s) + "%" if u.bandwidth_gb_s else None
    if u.bandwidth_gb_s and u.mfu is not None:
        return say("vLLM estimated its engine's work over the measured part: {tflops} TFLOP/s per GPU, an MFU of "
                   "{mfu} of its peak ({peak:,.0f} TFLOP/s, {peak_source}), and {read} GB/s read, {share} of its "
                   "memory bandwidth ({bandwidth:,.0f} GB/s, {source}). Estimates from the model's shape, not counters "
                   "of the chip.", tflops=tflops, mfu=significant(100 * u.mfu) + "%", peak=u.peak_tflop_s,
                   peak_source=u.peak_said, read=read, share=share, bandwidth=u.bandwidth_gb_s,
                   source=u.bandwidth_said)
    if u.bandwidth_gb_s:
        return say("vLLM estimated its engine's work over the measured part: {tflops} TFLOP/s and {read} GB/s read per "
                   "GPU, {share} of this hardware's memory bandwidth ({bandwidth:,.0f} GB/s, {source}). Estimates from "
                   "the model's shape, not counters of the chip.", tflops=tflops, read=read, share=share,
                   bandwidth=u.bandwidth_gb_s, source=u.bandwidth_said)
    return say("vLLM estimated its engine's work over the measured part: {tflops} TFLOP/s and {read} GB/s read per "
               "GPU. Estimates from the model's shape, not counters of the chip.", tflops=tflops, read=read)


FLAG = "--enable-mfu-metrics"


def why_absent(run) -> list[Message]:
    """Why a run that has a server view shows no MFU or no memory bandwidth used, and how to see them: the server was
    not started with --enable-mfu-metrics (or its vLLM exported no estimates), no datasheet peak for its device, a
    model not in half precision. Nothing when both are shown, or when the run has no server view at all (its own
    sentence says that)."""
    view = run.extra.server_view
    if view is None:
        return []
    config = run.config if isinstance(run.config, dict) else {}
    if view.estimated is None or not view.estimated.flops:
        if FLAG in (config.get("extra_args") or ()):
            return [say("No MFU or memory bandwidth used: the server was started with --enable-mfu-metrics but "
                       "published no estimates (vllm:estimated_flops_per_gpu_total); its vLLM may predate them.")]
        return [say("No MFU or memory bandwidth used: the server was not started with --enable-mfu-metrics, so vLLM "
                   "estimated no FLOPs or bytes. To see them, add --enable-mfu-metrics to the Server page's extra "
                   "flags (or `python -m engine serve --extra \"--enable-mfu-metrics\"`); it costs throughput under "
                   "heavy load.")]
    u = of(run)
    if u is None:
        return []
    out = []
    if u.mfu is None:
        gpus = [g for g in ((run.hardware or {}).get("gpus") or ()) if isinstance(g, dict)]
        dtype = str(config.get("dtype", "auto"))
        if config.get("device") != "cuda" or not gpus:
            out.append(say("No MFU: vLLM computed on this machine's CPU, and MFU needs a datasheet peak, which this "
                           "app lists for NVIDIA GPUs only."))
        elif dtype not in peak_flops.HALF:
            out.append(say("No MFU: the model ran in {dtype}, and the datasheet peaks this app lists are for "
                           "FP16/BF16; start the server with float16 or bfloat16 to see it.", dtype=dtype))
        else:
            out.append(say("No MFU: this app lists no datasheet peak for the {gpu}.", gpu=gpus[0].get("name", "GPU")))
    if not u.bandwidth_gb_s:
        out.append(say("No share of the memory bandwidth: neither a measurement nor a datasheet gives this device's."))
    return out
