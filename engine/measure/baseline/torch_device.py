"""Which device and dtype the naive baseline's worker runs on, what it holds in memory, and how it says running out
of it; torch is passed in (only the worker imports it). See docs/measuring.md#naive-baseline."""
from __future__ import annotations

import os
import resource
import sys
from typing import Any

from engine.measure.baseline.protocol import CPU_DTYPE_BF16_REASON, CPU_DTYPE_FP32_REASON, CUDA_AUTO_DTYPE, Fail
from engine.messages import say


def resolve_device(torch: Any, want: str) -> Any:
    if want == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    dev = torch.device(want)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise Fail("setup", say("Device '{device}' was asked for but this torch sees no CUDA GPU: "
                                    "choose device auto or cpu, or install the CUDA build of torch.", device=want))
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
        if dev.index >= torch.cuda.device_count():
            raise Fail("setup", say("There is no {device} (this machine has {n} GPU(s)): pick another device.",
                                    device=str(dev), n=torch.cuda.device_count()))
    return dev


def cpu_has_native_bf16(torch: Any) -> bool:
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        fn = getattr(torch.cpu, probe, None)
        try:
            if fn is not None and fn():
                return True
        except Exception:
            pass
    return False


def resolve_dtype(torch: Any, want: str, device: Any) -> tuple[Any, str]:
    if want == "auto":
        if device.type == "cuda":
            return getattr(torch, CUDA_AUTO_DTYPE), f"{CUDA_AUTO_DTYPE}: the lab's choice on CUDA (dtype=torch.float16)"
        if cpu_has_native_bf16(torch):
            return torch.bfloat16, CPU_DTYPE_BF16_REASON
        return torch.float32, CPU_DTYPE_FP32_REASON
    return getattr(torch, want), f"{want}: chosen by the user"


def memory_snapshot(torch: Any, device: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    try:
        import psutil

        out["rss"] = int(psutil.Process().memory_info().rss)
    except Exception:
        pass
    if sys.platform.startswith("linux"):  # the kernel's own high-water mark of this process's RSS (KiB on Linux)
        out["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        out["allocated"] = int(torch.cuda.memory_allocated(device))
        out["reserved"] = int(torch.cuda.memory_reserved(device))
        out["max_allocated"] = int(torch.cuda.max_memory_allocated(device))
        out["max_reserved"] = int(torch.cuda.max_memory_reserved(device))
        free, total = torch.cuda.mem_get_info(device)  # device-wide, includes this process's CUDA context
        out["device_used"] = int(total - free)
        out["device_total"] = int(total)
    return out


def describe_device(torch: Any, device: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"type": device.type, "name": str(device)}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        d.update(index=device.index, description=props.name, total_memory=int(props.total_memory))
        uuid = getattr(props, "uuid", None)
        if uuid is not None:
            d["uuid"] = str(uuid)
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
        if not visible:
            d["nvml_index"] = device.index
        else:
            parts = [p.strip() for p in visible.split(",")]
            if device.index < len(parts) and parts[device.index].isdigit():
                d["nvml_index"] = int(parts[device.index])
    else:
        d.update(description=f"CPU ({torch.get_num_threads()} threads)", threads=torch.get_num_threads())
    return d


def is_oom(torch: Any, e: BaseException) -> bool:
    if isinstance(e, (MemoryError, getattr(torch.cuda, "OutOfMemoryError", MemoryError))):
        return True
    msg = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in msg.lower() or "can't allocate memory" in msg
                                           or "DefaultCPUAllocator" in msg)


def oom_sentence(device: Any, where: str, spec: dict) -> str:
    if device.type == "cuda":
        what = {"dtype": spec["dtype"], "prompts": len(spec["prompts"]), "new_tokens": spec["max_new_tokens"]}
        if where == "generate":
            return say("The GPU ran out of memory while generating ({dtype}, {prompts} prompts, {new_tokens} new "
                       "tokens): stop vLLM or anything else on the GPU, use fewer prompts in the batch or fewer new "
                       "tokens, or a smaller model.", **what)
        return say("The GPU ran out of memory while loading the model ({dtype}, {prompts} prompts, {new_tokens} new "
                   "tokens): stop vLLM or anything else holding the GPU, or pick a smaller model.", **what)
    if where == "generate":
        return say("The machine ran out of RAM while generating: close other programs, or use a smaller model, "
                   "fewer prompts or fewer new tokens.")
    return say("The machine ran out of RAM while loading the model: close other programs, or use a smaller model, "
               "fewer prompts or fewer new tokens.")
