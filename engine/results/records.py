"""Typed records shared by the load generator, the naive baseline, stats, figures and the store:
one request (`RequestRecord`), one measured run (`RunResult`), and one line of the history list
(`RunRow`, a run without its requests).

Times inside a run are seconds from the run's start (`time.perf_counter()` based), so records from
different machines compare; `RunResult.started_at` anchors the run on the wall clock (epoch seconds).
See docs/architecture.md.
"""
from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

_TIME_MIN = datetime(2000, 1, 1).timestamp()


def is_sane_time(t: Any) -> bool:
    """A run's start that a person would believe: a date between 2000 and tomorrow."""
    return isinstance(t, (int, float)) and not isinstance(t, bool) and _TIME_MIN <= t <= time.time() + 86400


@dataclass
class RequestRecord:
    index: int
    prompt: str
    send_time: float  # s from run start
    end_time: float | None = None  # s from run start; None while in flight
    first_token_time: float | None = None  # s from run start, first chunk with content
    chunk_times: list[float] = field(default_factory=list)  # s from run start, every content chunk
    prompt_tokens: int = 0
    output_tokens: int = 0
    tokens_source: str = "usage"  # "usage" (server-counted) | "tokenizer" (client re-count, a fallback)
    output_text: str = ""
    error: str | None = None
    warmup: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_time is not None

    @property
    def e2e(self) -> float | None:
        return None if self.end_time is None else self.end_time - self.send_time

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.send_time

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "RequestRecord":
        return RequestRecord(**{k: v for k, v in d.items() if k in RequestRecord.__dataclass_fields__})


@dataclass
class RunResult:
    """One measured run: a vLLM load test, a naive baseline, or static batching."""

    kind: str  # "vllm" | "naive" | "static-batch"
    scenario: str  # e.g. "concurrent-10", "naive-5-sequential", "sweep"
    label: str  # what a chart legend shows, e.g. "vLLM, max-model-len 512"
    records: list[RequestRecord]
    duration: float  # wall time of the measured part (warm-up excluded), s
    started_at: float  # epoch s
    model: str = ""
    config: dict[str, Any] = field(default_factory=dict)  # server flags or naive settings
    command: str = ""  # the exact server command line, when there was a server
    load: dict[str, Any] = field(default_factory=dict)  # shape, concurrency, max_tokens, ...
    hardware: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # vllm, torch, transformers
    summary: dict[str, Any] = field(default_factory=dict)  # filled by stats.summarize
    extra: dict[str, Any] = field(default_factory=dict)  # memory before/after, KV capacity, notes
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.warmup]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunRow:
    """One line of the history list: everything but the per-request records (cheap to list). Values
    are always of their type, whatever the row held; `problem` says what was wrong with it."""

    id: str
    kind: str
    scenario: str
    label: str
    started_at: float
    duration: float
    model: str
    n_requests: int
    n_failed: int
    source: str  # "local" | "import:<file name>" | "example:<file name>"
    saved_at: float
    summary: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    load: dict[str, Any] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    problem: str = ""  # e.g. "its start time is not a date": the row is shown, kept and deletable

    @property
    def started(self) -> str:
        """Local wall-clock start, e.g. '2025-11-30 11:18:04'; 'unknown' for a time that is not one."""
        if not is_sane_time(self.started_at):
            return "unknown"
        return datetime.fromtimestamp(self.started_at).strftime("%Y-%m-%d %H:%M:%S")

    @property
    def failed(self) -> bool:
        """No measured request succeeded: kept for the record, left out of comparisons."""
        return self.n_failed >= self.n_requests
