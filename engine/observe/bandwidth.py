"""Memory bandwidth: how many bytes a second the chip a model runs on can read from its memory.
See docs/measuring.md#bandwidth."""
from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from engine.messages import Message, mark
from engine.observe import nvml

# How a figure was found, as a run's ceiling sentence names it.
SOURCES = {"table": mark("table: NVIDIA datasheet"),
           "nvml": mark("computed: NVML bus width × memory clock"),
           "measured": mark("measured: copy benchmark")}


@dataclass(frozen=True)
class Bandwidth:
    gb_s: float  # 1e9 bytes a second, as datasheets count
    source: str  # "table" | "nvml" | "measured" (SOURCES)
    reference: str  # which datasheet figure, or how it was measured (data: shown as it is)

    @property
    def bytes_per_s(self) -> float:
        return self.gb_s * 1e9

    @property
    def said(self) -> Message:
        return SOURCES[self.source]

    def to_dict(self) -> dict[str, Any]:
        return {"gb_s": round(self.gb_s, 1), "source": self.source, "reference": self.reference}

    @classmethod
    def from_dict(cls, d: Any) -> Bandwidth | None:
        """A stored record's figure; None when it is not one (a run from before it was recorded, an
        imported file's own idea of it)."""
        if not isinstance(d, dict):
            return None
        gb_s, source, ref = d.get("gb_s"), d.get("source"), d.get("reference", "")
        if (not isinstance(gb_s, (int, float)) or isinstance(gb_s, bool) or not math.isfinite(gb_s) or gb_s <= 0
                or source not in SOURCES):
            return None
        return cls(float(gb_s), source, ref if isinstance(ref, str) else "")


# -- GPUs: the vendor's datasheet figure ----------------------------------------------------------
# Peak memory bandwidth in GB/s (1e9 bytes/s), from NVIDIA's datasheets:
#   H200 (SXM and NVL): 4.8 TB/s — NVIDIA H200 Tensor Core GPU datasheet.
#   GH200: 4 TB/s (96 GB HBM3), 4.9 TB/s (144 GB HBM3e) — NVIDIA GH200 Grace Hopper Superchip datasheet.
#   H100 SXM 3.35 TB/s, H100 NVL 3.9 TB/s, H100 PCIe 2 TB/s — NVIDIA H100 Tensor Core GPU datasheet
#     (the PCIe card's product brief, PB-11133-001, says "greater than 2,000 GB/s").
#   A100 80GB SXM 2,039 GB/s, A100 80GB PCIe 1,935 GB/s, A100 40GB (SXM and PCIe) 1,555 GB/s — NVIDIA A100
#     Tensor Core GPU datasheet.
#   L40S and L40 864 GB/s, A10 (and AWS's A10G) 600 GB/s, L4 300 GB/s, T4 320 GB/s, V100 900 GB/s — their
#     NVIDIA datasheets; GeForce RTX 4090 1,008 GB/s — NVIDIA's RTX 4090 specifications (21 Gbps × 384 bit).
# Matched in order against the NVML name lower-cased with dashes as spaces ("NVIDIA H200" -> "nvidia h200",
# "NVIDIA A100-SXM4-80GB" -> "nvidia a100 sxm4 80gb", "Tesla T4" -> "tesla t4"): the specific before the general.
GPU_TABLE: list[tuple[str, float, str]] = [
    (r"\bgh200\b.*\b(144g|hbm3e)\b", 4900, "GH200 144 GB HBM3e: 4.9 TB/s"),
    (r"\bgh200\b", 4000, "GH200 96 GB HBM3: 4 TB/s"),
    (r"\bh200\b", 4800, "H200: 4.8 TB/s"),
    (r"\bh100\b.*\bnvl\b", 3900, "H100 NVL: 3.9 TB/s"),
    (r"\bh100\b.*\bpcie\b", 2000, "H100 PCIe: 2 TB/s"),
    (r"\bh100\b", 3350, "H100 SXM: 3.35 TB/s"),
    (r"\ba100\b(?=.*\b80gb\b)(?=.*\bpcie\b)", 1935, "A100 80GB PCIe: 1,935 GB/s"),
    (r"\ba100\b.*\b80gb\b", 2039, "A100 80GB SXM: 2,039 GB/s"),
    (r"\ba100\b", 1555, "A100 40GB: 1,555 GB/s"),
    (r"\bl40s?\b", 864, "L40S / L40: 864 GB/s"),
    (r"\ba10g?\b", 600, "A10 / A10G: 600 GB/s"),
    (r"\bl4\b", 300, "L4: 300 GB/s"),
    (r"\brtx 4090\b", 1008, "GeForce RTX 4090: 1,008 GB/s"),
    (r"\bt4\b", 320, "T4: 320 GB/s"),
    (r"\bv100\b", 900, "V100: 900 GB/s"),
]


def table_row(name: str, table: list[tuple[str, float, str]]) -> tuple[float, str] | None:
    """The (figure, reference) of the first row of `table` whose pattern matches a GPU's NVML name."""
    key = " ".join(str(name).lower().replace("-", " ").split())
    return next(((figure, ref) for pattern, figure, ref in table if re.search(pattern, key)), None)


def from_table(name: str) -> Bandwidth | None:
    """The datasheet figure for a GPU by its NVML name ("NVIDIA H200"), None for one the table lacks."""
    row = table_row(name, GPU_TABLE)
    return Bandwidth(float(row[0]), "table", f"NVIDIA datasheet, {row[1]}") if row else None


def from_nvml(index: int) -> Bandwidth | None:
    """GPU `index`'s peak from NVML: bus width (bits) / 8 × highest memory clock × 2 (memory moves data
    on both clock edges; an H200 says 6016 bit × 3201 MHz: 4.8 TB/s, its datasheet figure)."""
    bus = nvml.memory_bus(index)
    if not bus or bus[0] <= 0 or bus[1] <= 0:
        return None
    bits, mhz = bus
    return Bandwidth(bits / 8 * mhz * 1e6 * 2 / 1e9, "nvml", f"NVML: {bits}-bit bus × {mhz} MHz × 2")


def gpu(name: str, index: int | None = None) -> Bandwidth | None:
    """A GPU's peak memory bandwidth: the table's by name, else NVML's for the GPU at `index`."""
    return from_table(name) or (from_nvml(index) if index is not None else None)


# -- the CPU: measured ------------------------------------------------------------------------------
COPY_MB = 256  # each of the two arrays: far past any CPU's cache, and a second or two on a small machine
COPY_BUDGET_S = 1.0  # copies are repeated this long (3 at least, 200 at most); the fastest counts


def copy_benchmark(mb: int = COPY_MB, threads: int | None = None, budget_s: float = COPY_BUDGET_S) -> Bandwidth:
    """The CPU's memory bandwidth as STREAM's Copy counts it: numpy copies an `mb` MB array into another,
    split over `threads` threads (default: the cores this process may use, as vLLM's CPU backend uses
    them all; numpy lets go of the GIL while it copies), again and again for about `budget_s`; the
    fastest copy's bytes read plus bytes written, divided by its time. Both arrays are written first, so
    no copy pays for the first touch of its pages. On a machine shared with other work it reads low:
    the best of many copies is the one least disturbed."""
    import numpy as np  # numpy is a dependency of pandas and transformers; only this function needs it

    threads = threads or min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else
                             (os.cpu_count() or 1), 64)
    n = mb * 1_000_000 // 8
    src, dst = np.ones(n), np.zeros(n)
    dst[:] = 2.0  # touch every page before timing
    step = -(-n // threads)
    parts = [(i, min(i + step, n)) for i in range(0, n, step)]

    def copy(part: tuple[int, int]) -> None:
        np.copyto(dst[part[0]:part[1]], src[part[0]:part[1]])

    times: list[float] = []
    began = time.perf_counter()
    with ThreadPoolExecutor(len(parts)) as pool:
        while len(times) < 200 and (len(times) < 3 or time.perf_counter() - began < budget_s):
            t = time.perf_counter()
            list(pool.map(copy, parts))
            times.append(time.perf_counter() - t)
    gb_s = 2 * src.nbytes / min(times) / 1e9
    return Bandwidth(gb_s, "measured", f"copy benchmark: numpy, {mb} MB, {len(parts)} thread"
                                       f"{'s' if len(parts) > 1 else ''}, best of {len(times)} copies")


_measuring = threading.Lock()  # two first callers at once would each measure half the bandwidth


_this_process: list[Bandwidth | None] = []  # the one measurement of this process, once made


def cpu(kept_in: Path | None = None) -> Bandwidth | None:
    """This machine's CPU memory bandwidth, measured once per boot (a second or two, and 2 × COPY_MB of memory)
    and kept in `kept_in` (a runtime folder: the Lab and the CLI's run ask first, with their Settings'), then once
    per process; None when the benchmark's arrays do not fit in memory. Measured in every process it cost each
    `python -m engine run` those seconds after its run had ended, and its arrays were the command's peak memory."""
    with _measuring:
        if not _this_process:
            _this_process.append(_measured(kept_in))
        return _this_process[0]


def _machine() -> dict[str, Any]:
    """What a kept measurement holds for: this boot of this machine, with the cores this process may use."""
    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    except OSError:  # not Linux: the machine's name and the boot time psutil reads
        boot = f"{platform.node()} {psutil.boot_time():.0f}"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"boot": boot, "cores": cores}


def _measured(kept_in: Path | None) -> Bandwidth | None:
    if kept_in is None:  # nowhere to keep it: measured for this process alone
        return _benchmark()
    path, machine = kept_in / "cpu-bandwidth.json", _machine()
    with contextlib.suppress(OSError, ValueError):
        kept = json.loads(path.read_text())
        if isinstance(kept, dict) and kept.get("machine") == machine and (
                bw := Bandwidth.from_dict(kept.get("bandwidth"))) is not None:
            return bw
    if (measured := _benchmark()) is None:
        return None
    with contextlib.suppress(OSError):  # a read-only runtime folder: measured again next time
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"machine": machine, "bandwidth": measured.to_dict()}))
        tmp.replace(path)
    return measured


def _benchmark() -> Bandwidth | None:
    try:
        return copy_benchmark()
    except MemoryError:
        return None
