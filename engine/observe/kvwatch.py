"""Follows vLLM's /metrics through a run's measured part: the preemptions counter's rise (read at the start
and the end), and the most requests waiting and the fullest KV cache seen meanwhile (sampled twice a second:
the Monitor's 1 Hz sampler may miss a short queue). engine.measure.judge.kvcache says what it noted."""
from __future__ import annotations

import threading

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

    def finish(self, result: RunResult, page: str | None = None) -> RunResult:
        """`result`'s notes given the preemptions, peaks and capacity (nothing when it never started). `page`: the
        /metrics page already read after the run (runs.ServerCount's), else it is read here."""
        self.stop()
        if self.before is None:
            return result
        after = parse_metrics(page) if page is not None else self.read(self.base_url, self.api_key)
        self._note(after)
        kv, server = result.extra.kv, result.extra.server
        a, b = (self.before or {}).get("preemptions_total"), (after or {}).get("preemptions_total")
        if a is not None and b is not None and b >= a:  # a counter that went down: the server restarted
            kv.preemptions = round(b - a)
        if self.peak_waiting is not None:
            kv.peak_waiting = round(self.peak_waiting)
        if self.peak_kv is not None:
            kv.peak_usage = round(self.peak_kv, 4)
        cap = after or self.before
        if (tokens := cap.get("kv_capacity_tokens")) and server.kv_cache_tokens is None:
            server.kv_cache_tokens = round(tokens)
        if blocks := cap.get("kv_blocks"):
            kv.blocks = round(blocks)
        if size := cap.get("kv_block_size"):
            kv.block_size = round(size)
        return result
