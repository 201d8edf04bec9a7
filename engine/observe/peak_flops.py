"""A GPU's peak dense FP16/BF16 tensor throughput from NVIDIA's datasheets: the denominator of MFU (model FLOPs
utilization). See docs/measuring.md#utilization."""
from __future__ import annotations

from dataclasses import dataclass

from engine.observe.bandwidth import table_row

# Dense (without sparsity) FP16/BF16 tensor-core TFLOP/s; the datasheets print twice these "with sparsity":
#   H200 SXM 989, H200 NVL 835 — NVIDIA H200 Tensor Core GPU datasheet.
#   GH200 989 — NVIDIA GH200 Grace Hopper Superchip datasheet.
#   H100 SXM 989, H100 NVL 835, H100 PCIe 756 — NVIDIA H100 Tensor Core GPU datasheet.
#   A100 (40 and 80 GB, SXM and PCIe) 312 — NVIDIA A100 Tensor Core GPU datasheet.
#   L40S 362, L4 121 — their NVIDIA datasheets.
# Matched like bandwidth.GPU_TABLE, against the NVML name lower-cased with dashes as spaces; the specific first.
TABLE: list[tuple[str, float, str]] = [
    (r"\bgh200\b", 989, "GH200"),
    (r"\bh200\b.*\bnvl\b", 835, "H200 NVL"),
    (r"\bh200\b", 989, "H200 SXM"),
    (r"\bh100\b.*\bnvl\b", 835, "H100 NVL"),
    (r"\bh100\b.*\bpcie\b", 756, "H100 PCIe"),
    (r"\bh100\b", 989, "H100 SXM"),
    (r"\ba100\b", 312, "A100"),
    (r"\bl40s\b", 362, "L40S"),
    (r"\bl4\b", 121, "L4"),
]
HALF = {"float16", "bfloat16", "half", "fp16", "bf16", "auto"}  # "auto": the checkpoint's, a half type for Llama 3


@dataclass(frozen=True)
class PeakFlops:
    tflop_s: float
    reference: str


def from_table(name: str) -> PeakFlops | None:
    """The datasheet's dense FP16/BF16 peak for a GPU by its NVML name ("NVIDIA H200"), None for one not listed."""
    row = table_row(name, TABLE)
    return PeakFlops(float(row[0]), f"NVIDIA datasheet, dense FP16/BF16, {row[1]}") if row else None
