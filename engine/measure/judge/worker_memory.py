"""The naive worker's own memory, from its run's notes (Notes.naive.memory, engine.measure.baseline.naive): its peak,
what it held after its cleanup and whether its process is gone; on a GPU the device's used memory before the run and
after the worker exited (NVML). Never the system's RAM: other programs move that too (a CPU machine's RAM rose by
7.5 GB while a 0.9 GB worker ran, none of it the worker's)."""
from __future__ import annotations

from typing import Any

from engine.digits import significant
from engine.messages import Message, say
from engine.results.records import MemoryAt, WorkerMemory

LEFT_GB = 0.1  # more than this still used on the device after the worker exited is not "back"


def _gb(b: Any) -> float | None:
    return None if not isinstance(b, (int, float)) else b / 1e9  # GB as the notebook counts them (1e9), unrounded


def worker_memory(naive: Any) -> dict[str, Any]:
    """From a naive run: `gpu` (the device's memory was read through NVML), `worker_peak_gb` (its peak on the
    device, else its own peak resident memory), `after_cleanup_gb` (what it still held after `del model` and
    gc, inside the process), `exited` (its process is gone, so it holds nothing: `held_gb` 0), `exit_code`;
    on a GPU also the device's used memory `before_gb`, `after_gb` and the difference `left_gb`."""
    mem = naive.extra.naive.memory or WorkerMemory()
    before, after = mem.before or MemoryAt(), mem.after_exit or MemoryAt()
    gpu = before.device_used is not None and after.device_used is not None
    exited = mem.worker_exited
    if exited is None:  # a run saved before the field: an exit code means its process was reaped
        exited = naive.extra.naive.worker_exit_code is not None
    cleanup = mem.after_cleanup or MemoryAt()
    out: dict[str, Any] = {
        "gpu": gpu, "exited": bool(exited), "exit_code": naive.extra.naive.worker_exit_code,
        "worker_peak_gb": _gb(mem.worker_peak_device if gpu else mem.worker_peak_rss),
        "after_cleanup_gb": _gb(cleanup.allocated if gpu else cleanup.rss),
        "held_gb": 0.0 if exited else None,
    }
    if before.device_used is not None and after.device_used is not None:
        out.update(before_gb=_gb(before.device_used), after_gb=_gb(after.device_used),
                   left_gb=_gb(after.device_used - before.device_used))
    return out


def came_back(m: dict[str, Any]) -> bool:
    """Whether the memory is back: the worker's process is gone and, on a GPU, the device uses no more than
    before the run."""
    return bool(m.get("exited")) and (not m.get("gpu") or (m.get("left_gb") is not None and m["left_gb"] <= LEFT_GB))


def said(m: dict[str, Any]) -> Message:
    """One sentence on what came back, true to the numbers beside it (worker_memory's dict)."""
    peak = (say("{v} GB", v=significant(m["worker_peak_gb"])) if m.get("worker_peak_gb") is not None else
            say("the memory"))
    if not m.get("exited"):
        return say("The naive worker's process is still running: its memory comes back when it ends.")
    if not m.get("gpu"):
        return say("The naive worker's process has exited: the {peak} of RAM it held at its peak (its own resident "
                   "memory) went back to the operating system with it.", peak=peak)
    if came_back(m):
        return say("The naive worker's process has exited: the GPU uses {after} GB again, as before the run "
                   "({before} GB); the worker's peak was {peak}.", after=significant(m["after_gb"]),
                   before=significant(m["before_gb"]),
                   peak=peak)
    return say("The naive worker's process has exited, yet the GPU uses {left} GB more than before the run: "
               "another process took GPU memory meanwhile (the Monitor's table says whose).",
               left=significant(m["left_gb"]))
