"""The physical limit of decoding: a run's decode speed against what its memory bandwidth allows.
See docs/measuring.md#ceiling."""
from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.measure.judge import stats
from engine.messages import Message, say
from engine.observe.bandwidth import Bandwidth, from_table
from engine.results.records import RequestRecord, RunResult
from engine.serving.models import shape_from_config

# Bytes per value of the dtypes vLLM and transformers serve in ("auto" is resolved from config.json first).
DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1, "int8": 1}


def decode_ceiling(bandwidth: float, weight_bytes: float, kv_token_bytes: float, context_tokens: float = 0,
                   batch: float = 1) -> float:
    """The most tokens a second ONE request can decode when `batch` requests decode together and memory
    bandwidth (`bandwidth`, bytes/s) is all that limits it.

    Every decode step makes one token for each request in the batch, and to do so reads every weight byte
    once (`weight_bytes`: parameters × bytes per dtype) plus the KV cache of every token in flight
    (`kv_token_bytes` = layers × 2 (K and V) × kv_heads × head_dim × dtype bytes, times
    `context_tokens` per request). A step cannot be shorter than those bytes over the bandwidth, so

        per request:  bandwidth / (weight bytes + B × KV bytes)   (batch 1: bandwidth / (weights + KV))
        in total:     B × bandwidth / (weight bytes + B × KV bytes)

    Llama 3 8B in fp16 (16.06e9 bytes) on an H200 (4.8e12 bytes/s), batch 1, short context:
    4.8e12 / 16.06e9 ≈ 299 tok/s. Returns the per-request figure; times `batch` is the total."""
    step_bytes = weight_bytes + batch * kv_token_bytes * context_tokens
    return bandwidth / step_bytes


# -- what a model's decode step reads ---------------------------------------------------------------

@dataclass(frozen=True)
class ModelBytes:
    weights: int  # read by every decode step
    kv_per_token: int  # of KV cache, per token of context


def _folder(model: str) -> Path | None:
    """A model folder, or a hub id's snapshot in the local Hugging Face cache (where vLLM put it)."""
    path = Path(model).expanduser()
    if (path / "config.json").is_file():
        return path
    if model.count("/") != 1 or path.exists():
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 - no huggingface_hub, a malformed id: no cached copy
        return None
    return Path(found).parent if isinstance(found, str) else None


def _config(folder: Path) -> dict | None:
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    # A multimodal model keeps its language model's shape under text_config.
    return cfg if "num_hidden_layers" in cfg or not isinstance(cfg.get("text_config"), dict) else cfg["text_config"]


def _safetensors_params(folder: Path) -> int | None:
    """The parameter count from the safetensors files' headers (exact for any architecture; the weights
    themselves are not read)."""
    files = sorted(folder.glob("*.safetensors"))
    total = 0
    try:
        for f in files:
            with open(f, "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                if n > 100_000_000:
                    return None
                header = json.loads(fh.read(n))
            total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return None
    return total or None


def _dtype_bytes(dtype: str | None, cfg: dict) -> int:
    """Bytes per weight served in `dtype`; "auto" as vLLM reads it: the checkpoint's dtype, float32
    checkpoints served in float16."""
    if not dtype or dtype == "auto":
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16").removeprefix("torch.")
        dtype = "float16" if dtype == "float32" else dtype
    return DTYPE_BYTES.get(str(dtype).removeprefix("torch."), 2)


def model_bytes(model: str, dtype: str | None = "auto", params: int | None = None,
                kv_dtype: str | None = None) -> ModelBytes | None:
    """What one decode step of `model` (a folder, or a hub id cached locally) reads when served in `dtype`:
    every weight once — the parameter count (`params` when the caller counted them, else the safetensors
    headers', else config.json's) × bytes per dtype — less the input embedding table when the output
    head is a separate matrix (a step reads one row of the table per request, not all of it); and the KV
    cache bytes per token of context (in `kv_dtype`, default the weights'). None when the model's
    config.json cannot be read or lacks the shape."""
    folder = _folder(model)
    cfg = _config(folder) if folder is not None else None
    if folder is None or cfg is None:
        return None
    try:
        h, layers, heads = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"]), int(cfg["num_attention_heads"])
        kv_heads = int(cfg.get("num_key_value_heads") or heads)
        head_dim = int(cfg.get("head_dim") or h // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    if params is None:
        params = _safetensors_params(folder)
    if params is None:
        try:
            params = shape_from_config(cfg).params
        except (KeyError, TypeError, ValueError):
            return None
    size = _dtype_bytes(dtype, cfg)
    untied_embedding = cfg.get("tie_word_embeddings") is False and isinstance(cfg.get("vocab_size"), int)
    read = params - (cfg["vocab_size"] * h if untied_embedding else 0)
    kv_size = DTYPE_BYTES.get(kv_dtype, size) if kv_dtype and kv_dtype != "auto" else size
    return ModelBytes(weights=read * size, kv_per_token=layers * 2 * kv_heads * head_dim * kv_size)


def server_model_bytes(config: dict[str, Any]) -> ModelBytes | None:
    """model_bytes of a vLLM server's settings (ServerConfig.to_dict): its model, dtype and any
    --kv-cache-dtype among the extra flags."""
    args = [str(a) for a in config.get("extra_args") or ()]
    kv_dtype = None
    for i, a in enumerate(args):
        if a.startswith("--kv-cache-dtype="):
            kv_dtype = a.split("=", 1)[1]
        elif a == "--kv-cache-dtype" and i + 1 < len(args):
            kv_dtype = args[i + 1]
    model = config.get("model")
    return model_bytes(model, config.get("dtype"), kv_dtype=kv_dtype) if isinstance(model, str) and model else None


# -- a run against its ceiling ----------------------------------------------------------------------

def decode_batch(records: Iterable[RequestRecord], static: bool = False) -> float:
    """How many requests decoded together, on average, while any did: the requests' summed decode time
    (first token to last) over the time at least one was decoding (1 when they ran one after another).
    A static batch decodes every row at each step until its longest answer ends: its size."""
    done = [(first, end) for r in stats.measured(records)
            if r.ok and (first := r.first_token_time) is not None and (end := r.end_time) is not None]
    if static:
        return float(max(len(done), 1))
    spans = sorted((first, end) for first, end in done if end > first)
    total = sum(b - a for a, b in spans)
    union, reach = 0.0, -math.inf
    for a, b in spans:
        if b > reach:
            union += b - max(a, reach)
            reach = b
    return max(total / union, 1.0) if union > 0 else 1.0


def bandwidth_of(run: RunResult) -> Bandwidth | None:
    """The memory bandwidth of what the run decoded on, from its stored hardware: the vLLM server's
    device (a GPU's bandwidth times the tensor-parallel GPUs that share the weights) or the naive worker's."""
    hw = run.hardware if isinstance(run.hardware, dict) else {}
    worker = found if isinstance(found := hw.get("naive_device"), dict) else {}
    cpu = found if isinstance(found := hw.get("cpu"), dict) else {}
    gpus = [g for g in hw.get("gpus") or () if isinstance(g, dict)]
    device = run.config.get("device") if run.kind == "vllm" else worker.get("type")
    if device != "cuda" and not (device is None and gpus):  # a run that does not say: the GPU, if there was one
        return Bandwidth.from_dict(cpu.get("memory_bandwidth"))
    if not gpus:
        return None
    g = next((g for g in gpus if g.get("index") == worker.get("nvml_index", 0)), gpus[0])
    bw = Bandwidth.from_dict(g.get("memory_bandwidth")) or from_table(str(g.get("name", "")))
    tp = run.config.get("tensor_parallel_size") if run.kind == "vllm" else 1
    if bw and isinstance(tp, int) and tp > 1:
        bw = Bandwidth(bw.gb_s * tp, bw.source, f"{tp} × {bw.reference}")
    return bw


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


@dataclass(frozen=True)
class RunCeiling:
    """A run's decode speed per request beside the most its hardware's memory bandwidth allows."""

    measured: float  # tok/s per request: 1 / mean TPOT
    ceiling: float  # tok/s per request at `batch` (decode_ceiling)
    batch: float  # requests decoding together, on average (decode_batch)
    context: float  # tokens of context per request, on average over its decode (prompt + half the answer)
    bandwidth: Bandwidth
    weight_bytes: int
    kv_token_bytes: int

    @property
    def share(self) -> float:
        return self.measured / self.ceiling

    @property
    def sentence(self) -> Message:
        """'Decoded at X tok/s per request; this hardware's memory bandwidth (Y GB/s, source) allows at most
        Z tok/s per request at this batch: X/Z of the ceiling.'"""
        values = dict(measured=_num(self.measured), bandwidth=f"{self.bandwidth.gb_s:,.0f}",
                      source=self.bandwidth.said, ceiling=_num(self.ceiling), batch=_num(self.batch),
                      share=f"{self.share:.0%}")
        if self.batch < 1.05:
            said = say("Decoded at {measured} tok/s per request; this hardware's memory bandwidth ({bandwidth} GB/s, "
                       "{source}) allows at most {ceiling} tok/s per request at batch 1: {share} of the ceiling.",
                       **values)
        else:
            said = say("Decoded at {measured} tok/s per request; this hardware's memory bandwidth ({bandwidth} GB/s, "
                       "{source}) allows at most {ceiling} tok/s per request at this batch ({batch} requests "
                       "decoding together, on average): {share} of the ceiling.", **values)
        if self.share <= 1:
            return said
        return say("{sentence} That is above the ceiling, so a figure it rests on is off: the bandwidth (a copy "
                   "benchmark on a busy machine reads low) or the model's size.", sentence=said)

    @property
    def why(self) -> Message:
        """How the ceiling was reckoned, for a caption or a hover."""
        return say("Each step reads the {weights} GB of weights once plus {kv} MB of KV cache per request "
                   "({context} tokens of context): {step} GB a step at {bandwidth} GB/s.",
                   weights=f"{self.weight_bytes / 1e9:.2f}", kv=f"{self.kv_token_bytes * self.context / 1e6:.1f}",
                   context=f"{self.context:.0f}",
                   step=f"{(self.weight_bytes + self.batch * self.kv_token_bytes * self.context) / 1e9:.2f}",
                   bandwidth=f"{self.bandwidth.gb_s:,.0f}")


def run_ceiling(run: RunResult) -> RunCeiling | None:
    """`run`'s decode speed against its ceiling, from what was stored with it: the model's bytes (its
    notes), the bandwidth (its hardware record), its requests. None when any is missing: a run from
    before these were recorded, a server this app did not start, answers of one token."""
    notes = run.extra.model_size
    bw = bandwidth_of(run)
    s = run.summary if not run.summary.empty else stats.summarize(run.records, run.duration)
    tpot_ms = s.get("mean_tpot_ms")
    if not (bw and notes.weights and notes.kv_per_token is not None and tpot_ms):
        return None
    done = [r for r in stats.measured(run.records) if r.ok]
    if not done:
        return None
    context = sum(r.prompt_tokens + r.output_tokens / 2 for r in done) / len(done)
    batch = decode_batch(run.records, static=run.kind == "static-batch")
    ceiling = decode_ceiling(bw.bytes_per_s, notes.weights, notes.kv_per_token, context, batch)
    return RunCeiling(measured=1000 / tpot_ms, ceiling=ceiling, batch=batch, context=context, bandwidth=bw,
                      weight_bytes=notes.weights, kv_token_bytes=notes.kv_per_token)
