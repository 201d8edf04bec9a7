"""The KV cache as the scarce resource (issue #12): what one run did to it, and what its flags did.

`KvWatch` follows vLLM's /metrics through a run's measured part: the preemptions counter's rise
(vllm:num_preemptions_total, read at the start and the end, like runs.ServerCount's token count), and
the most requests waiting and the fullest cache seen meanwhile (sampled twice a second: the Monitor's
1 Hz sampler may miss a short queue). `said(run)` puts it in one sentence with the arithmetic a viewer
can check: the capacity in tokens against what the load's answers needed at once.
See docs/architecture.md.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass


from engine.messages import Message, say
from engine.observe.telemetry import parse_metrics, read_metrics_text
from engine.results.records import RunResult


def read_metrics(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> dict[str, float] | None:
    """The server's /metrics now (telemetry.parse_metrics), None without an answer."""
    text = read_metrics_text(base_url, api_key, timeout_s)
    return None if text is None else parse_metrics(text)


class KvWatch:
    """Preemptions, peak waiting and peak KV usage over one run's measured part, from /metrics.
    `start` when the warm-up is over, `finish(result)` after the last request (it also stops the
    sampler: call it in a finally). A server without /metrics leaves the notes empty."""

    INTERVAL_S = 0.5

    def __init__(self, base_url: str, api_key: str | None = None,
                 read=read_metrics) -> None:
        self.base_url, self.api_key, self.read = base_url, api_key, read
        self.before: dict[str, float] | None = None
        self.peak_waiting: float | None = None
        self.peak_kv: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _note(self, m: dict[str, float] | None) -> None:
        if not m:
            return
        if (w := m.get("waiting")) is not None:
            self.peak_waiting = max(self.peak_waiting or 0.0, w)
        if (k := m.get("kv_usage")) is not None:
            self.peak_kv = max(self.peak_kv or 0.0, k)

    def start(self) -> None:
        self.before = self.read(self.base_url, self.api_key)
        self._note(self.before)
        self._thread = threading.Thread(target=self._loop, daemon=True, name="kv-watch")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.INTERVAL_S):
            self._note(self.read(self.base_url, self.api_key, 2.0))

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def finish(self, result: RunResult) -> RunResult:
        """`result`'s notes given the preemptions, peaks and capacity (nothing when it never started)."""
        self.stop()
        if self.before is None:
            return result
        after = self.read(self.base_url, self.api_key)
        self._note(after)
        notes = result.extra
        a, b = (self.before or {}).get("preemptions_total"), (after or {}).get("preemptions_total")
        if a is not None and b is not None and b >= a:  # a counter that went down: the server restarted
            notes.preemptions = round(b - a)
        if self.peak_waiting is not None:
            notes.peak_waiting = round(self.peak_waiting)
        if self.peak_kv is not None:
            notes.peak_kv_usage = round(self.peak_kv, 4)
        cap = after or self.before
        if (tokens := cap.get("kv_capacity_tokens")) and notes.kv_cache_tokens is None:
            notes.kv_cache_tokens = round(tokens)
        if blocks := cap.get("kv_blocks"):
            notes.kv_blocks = round(blocks)
        if size := cap.get("kv_block_size"):
            notes.kv_block_size = round(size)
        return result


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
    size = run.extra.kv_block_size
    blocks = answers * math.ceil(tokens / size) if size else None
    return Need(answers, tokens, answers * tokens, blocks)


def flags(run: RunResult) -> str:
    """The settings that sized the cache, as the command line writes them (data: never translated)."""
    cfg = run.config or {}
    parts = []
    if cfg.get("device") == "cpu":
        if cfg.get("cpu_kvcache_gib") is not None:
            parts.append(f"--kv-cache-gib {float(cfg['cpu_kvcache_gib']):g}")
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
    """What the flags did to this run's cache, in one sentence, e.g. "With --kv-cache-gib 0.01
    --max-model-len 256 the cache holds 384 tokens: 8 requests of 230 tokens (prompt and answer) need 1,840, so requests
    waited (up to 5) and 12 were preempted." None when the capacity or the answers are unknown."""
    n = run.extra
    cap, wanted = n.kv_cache_tokens, need(run)
    if not cap or wanted is None:
        return None
    values = dict(flags=flags(run) or "—", capacity=cap, answers=wanted.answers, tokens=wanted.tokens,
                  need=wanted.total, waiting=n.peak_waiting or 0, preempted=n.preemptions or 0)
    if n.preemptions:
        return say("With {flags} the cache holds {capacity:,} tokens: {answers} requests of {tokens:,} tokens (prompt and answer) need "
                   "{need:,}, so requests waited (up to {waiting} at once) and {preempted} were preempted.", **values)
    if wanted.total > cap or n.peak_waiting:
        return say("With {flags} the cache holds {capacity:,} tokens: {answers} requests of {tokens:,} tokens (prompt and answer) need "
                   "{need:,}, so requests waited (up to {waiting} at once), none preempted.", **values)
    return say("With {flags} the cache holds {capacity:,} tokens: {answers} requests of {tokens:,} tokens (prompt and answer) need "
               "{need:,}, which fits: none waited and none was preempted.", **values)


def row(run: RunResult) -> dict:
    """One configuration's numbers for a comparison table (keys: data; the page names the columns)."""
    n, s, wanted = run.extra, run.summary, need(run)
    return {"config": flags(run), "capacity_tokens": n.kv_cache_tokens, "blocks": n.kv_blocks,
            "block_size": n.kv_block_size, "need_tokens": wanted.total if wanted else None,
            "peak_kv_percent": None if n.peak_kv_usage is None else round(n.peak_kv_usage * 100, 1),
            "preemptions": n.preemptions, "peak_waiting": n.peak_waiting,
            "median_ttft_ms": s.get("median_ttft_ms"), "output_throughput": s.get("output_throughput")}
