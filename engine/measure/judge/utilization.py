"""The work the server estimated its engine did over a run's measured part (vLLM's --enable-mfu-metrics:
FLOPs and bytes per GPU), as rates beside the hardware's memory bandwidth. See docs/measuring.md#utilization."""
from __future__ import annotations

from dataclasses import dataclass

from engine.measure.judge.ceiling import bandwidth_of
from engine.messages import Message, say


@dataclass(frozen=True)
class Utilization:
    tflop_s: float  # estimated FLOPs per GPU / the measured wall time
    read_gb_s: float  # estimated bytes read per GPU / the measured wall time
    bandwidth_gb_s: float | None  # the hardware's (datasheet or measured), per GPU
    bandwidth_said: str | None


def of(run) -> Utilization | None:
    """None when the server estimated nothing (the flag off, an older vLLM, a server that is not vLLM)."""
    est = ((getattr(run.extra, "server_view", None) or {}).get("estimated")) or {}
    if not est.get("flops") or not run.duration:
        return None
    bw = bandwidth_of(run)
    tp = run.config.get("tensor_parallel_size") if isinstance(run.config, dict) else None
    per_gpu = bw.gb_s / tp if bw and isinstance(tp, int) and tp > 1 else (bw.gb_s if bw else None)
    return Utilization(est["flops"] / run.duration / 1e12, est.get("read_bytes", 0.0) / run.duration / 1e9,
                       per_gpu, bw.said if bw else None)


def said(run) -> Message | None:
    u = of(run)
    if u is None:
        return None
    if u.bandwidth_gb_s:
        return say("vLLM estimated its engine's work over the measured part: {tflops:.2f} TFLOP/s and {read:,.0f} GB/s "
                   "read per GPU, {share:.0%} of this hardware's memory bandwidth ({bandwidth:,.0f} GB/s, {source}). "
                   "Estimates from the model's shape, not counters of the chip.", tflops=u.tflop_s, read=u.read_gb_s,
                   share=u.read_gb_s / u.bandwidth_gb_s, bandwidth=u.bandwidth_gb_s, source=u.bandwidth_said)
    return say("vLLM estimated its engine's work over the measured part: {tflops:.2f} TFLOP/s and {read:,.0f} GB/s "
               "read per GPU. Estimates from the model's shape, not counters of the chip.", tflops=u.tflop_s,
               read=u.read_gb_s)
