"""NVIDIA GPUs through NVML: the one place that talks to it; without a driver every function answers "no GPU".
See docs/measuring.md#hardware."""
from __future__ import annotations

import threading
from typing import Any

_lock = threading.Lock()
_nv: Any = None
_tried = False


def _lib():
    """pynvml, initialised once per process (cheap enough then for a 1 Hz sampler), or None."""
    global _nv, _tried
    with _lock:
        if not _tried:
            _tried = True
            try:
                import pynvml

                pynvml.nvmlInit()
                _nv = pynvml
            except Exception:  # no library, no driver, no device: the CPU path
                _nv = None
    return _nv


def _s(x: Any) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def available() -> bool:
    nv = _lib()
    try:
        return nv is not None and nv.nvmlDeviceGetCount() > 0
    except Exception:
        return False


def devices(nv: Any = None) -> list[dict[str, Any]]:
    """[{index, name, uuid, used, total (bytes), procs {pid: bytes}}] for every GPU; [] without one. `nv`: the
    pynvml to ask (default: this process's)."""
    nv = nv if nv is not None else _lib()
    if nv is None:
        return []
    out = []
    try:
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            mem = nv.nvmlDeviceGetMemoryInfo(h)
            procs: dict[int, int] = {}
            try:
                for p in nv.nvmlDeviceGetComputeRunningProcesses(h):
                    procs[int(p.pid)] = int(p.usedGpuMemory or 0)
            except Exception:  # some drivers refuse the process list in containers
                pass
            out.append({"index": i, "name": _s(nv.nvmlDeviceGetName(h)), "uuid": _s(nv.nvmlDeviceGetUUID(h)),
                        "used": int(mem.used), "total": int(mem.total), "procs": procs})
    except Exception:
        return out
    return out


def process_busy(index: int, since_us: int, nv: Any = None) -> dict[int, float] | None:
    """Each process's share of GPU `index`'s SM time since `since_us` (microseconds since the epoch, NVML's clock),
    in per cent, the mean of NVML's samples of it (nvmlDeviceGetProcessUtilization); {} when no process had a
    sample since then; None without a GPU or where the driver does not say (older GPUs, some containers)."""
    nv = nv if nv is not None else _lib()
    if nv is None:
        return None
    try:
        samples = nv.nvmlDeviceGetProcessUtilization(nv.nvmlDeviceGetHandleByIndex(index), since_us)
    except Exception as e:  # NVML_ERROR_NOT_FOUND: no sample since then, which is an answer; the rest is not
        return {} if getattr(e, "value", None) == getattr(nv, "NVML_ERROR_NOT_FOUND", None) else None
    seen: dict[int, list[float]] = {}
    for x in samples or ():
        if int(getattr(x, "timeStamp", since_us)) >= since_us:
            seen.setdefault(int(x.pid), []).append(float(x.smUtil))
    return {pid: sum(v) / len(v) for pid, v in seen.items()}


def memory_bus(index: int) -> tuple[int, int] | None:
    """(memory bus width in bits, highest memory clock in MHz) of GPU `index`, None where NVML does not
    say (engine.observe.bandwidth turns them into a peak bandwidth for a GPU its table lacks)."""
    nv = _lib()
    if nv is None:
        return None
    try:
        h = nv.nvmlDeviceGetHandleByIndex(index)
        return int(nv.nvmlDeviceGetMemoryBusWidth(h)), int(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM))
    except Exception:  # an old driver or library without the call, a device gone
        return None


def driver() -> str | None:
    nv = _lib()
    try:
        return _s(nv.nvmlSystemGetDriverVersion()) if nv is not None else None
    except Exception:
        return None


def total_energy_mj(nv: Any = None) -> float | None:
    """Every GPU's energy counter since its driver loaded, summed, in millijoules
    (nvmlDeviceGetTotalEnergyConsumption, Volta and later); None without a GPU or where one lacks it.
    `nv`: the pynvml to ask (default: this process's)."""
    nv = nv if nv is not None else _lib()
    if nv is None:
        return None
    try:
        n = nv.nvmlDeviceGetCount()
        return float(sum(nv.nvmlDeviceGetTotalEnergyConsumption(nv.nvmlDeviceGetHandleByIndex(i))
                         for i in range(n))) if n else None
    except Exception:  # NVML_ERROR_NOT_SUPPORTED on older GPUs, a device gone
        return None


def power_mw(nv: Any = None) -> float | None:
    """Every GPU's power draw now, summed, in milliwatts (nvmlDeviceGetPowerUsage); None without a GPU or
    where one does not say."""
    nv = nv if nv is not None else _lib()
    if nv is None:
        return None
    try:
        n = nv.nvmlDeviceGetCount()
        return float(sum(nv.nvmlDeviceGetPowerUsage(nv.nvmlDeviceGetHandleByIndex(i)) for i in range(n))) if n else None
    except Exception:
        return None


def count(nv: Any = None) -> int:
    nv = nv if nv is not None else _lib()
    try:
        return int(nv.nvmlDeviceGetCount()) if nv is not None else 0
    except Exception:
        return 0
