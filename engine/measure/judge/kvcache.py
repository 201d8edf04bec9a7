"""The KV cache as the scarce resource: what one run did to it and what its flags did, in one checkable sentence.
See docs/measuring.md#kv-cache."""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.messages import Message, say
from engine.results.records import RunResult
from engine.serving.config import cpu_kv_flag


@dataclass(frozen=True)
class Need:
    """What a run's answers needed of the cache at once: `answers` in flight together, each `tokens`
    long (its prompt and answer, the mean over the run), `total` tokens in all; `blocks` when the block
    size is known (vLLM hands out whole blocks: a request of 130 tokens in blocks of 128 takes 2)."""

    answers: int
    tokens: int
    total: int
    blocks: int | None = None


def need(run: RunResult) -> Need | None:
    """The KV cache a run's load asks for at its peak, from its own records; None without answers."""
    done = [r for r in run.measured if r.ok]
    if not done:
        return None
    answers = min(run.load.concurrency or len(run.measured), len(run.measured))
    tokens = round(sum(r.prompt_tokens + r.output_tokens for r in done) / len(done))
    size = run.extra.kv.block_size
    blocks = answers * math.ceil(tokens / size) if size else None
    return Need(answers, tokens, answers * tokens, blocks)


def flags(run: RunResult) -> str:
    """The settings that sized the cache, as the command line writes them (data: never translated)."""
    cfg = run.config or {}
    parts = []
    if cfg.get("device") == "cpu":
        if cfg.get("cpu_kvcache_gib") is not None:
            parts.append(cpu_kv_flag(cfg["cpu_kvcache_gib"]))  # what the app set; vLLM has no GiB flag
    elif cfg.get("gpu_memory_utilization") is not None:
        parts.append(f"--gpu-memory-utilization {float(cfg['gpu_memory_utilization']):g}")
    extra = [str(a) for a in cfg.get("extra_args") or ()]
    if "--kv-cache-memory-bytes" in extra[:-1]:  # a GPU's squeezed cache (scenarios.configs_for)
        parts.append(f"--kv-cache-memory-bytes {extra[extra.index('--kv-cache-memory-bytes') + 1]}")
    if cfg.get("max_model_len"):
        parts.append(f"--max-model-len {cfg['max_model_len']}")
    if cfg.get("max_num_seqs"):
        parts.append(f"--max-num-seqs {cfg['max_num_seqs']}")
    return " ".join(parts)


def said(run: RunResult) -> Message | None:
    """What the flags did to this run's cache, in one sentence, e.g. "With --kv-cache-memory-bytes 10737418
    --max-model-len 256 the cache holds 384 tokens: 8 requests of 230 tokens (prompt and answer) need 1,840, so requests
    waited (up to 5) and 12 were preempted." None when the capacity or the answers are unknown."""
    n = run.extra.kv
    cap, wanted = run.extra.server.kv_cache_tokens, need(run)
    if not cap or wanted is None:
        return None
    values = dict(flags=flags(run) or "—", capacity=cap, answers=wanted.answers, tokens=wanted.tokens,
                  need=wanted.total, waiting=n.peak_waiting or 0, preempted=n.preemptions or 0)
    if n.preemptions:
        return say("With {flags} the cache holds {capacity:,} tokens: {answers} requests of {tokens:,} tokens (prompt "
                   "and answer) need {need:,}, so requests waited (up to {waiting} at once) and {preempted} were "
                   "preempted.", **values)
    if wanted.total > cap or n.peak_waiting:
        return say("With {flags} the cache holds {capacity:,} tokens: {answers} requests of {tokens:,} tokens (prompt "
                   "and answer) need {need:,}, so requests waited (up to {waiting} at once), none preempted.", **values)
    return say("With {flags} the cache holds {capacity:,} tokens: {answers} requests of {tokens:,} tokens (prompt and "
               "answer) need {need:,}, which fits: none waited and none was preempted.", **values)


def row(run: RunResult) -> dict:
    """One configuration's numbers for a comparison table (keys: data; the page names the columns)."""
    n, s, wanted = run.extra.kv, run.summary, need(run)
    return {"config": flags(run), "capacity_tokens": run.extra.server.kv_cache_tokens, "blocks": n.blocks,
            "block_size": n.block_size, "need_tokens": wanted.total if wanted else None,
            "peak_kv_percent": None if n.peak_usage is None else round(n.peak_usage * 100, 1),
            "preemptions": n.preemptions, "peak_waiting": n.peak_waiting,
            "median_ttft_ms": s.get("median_ttft_ms"), "output_throughput": s.get("output_throughput")}
