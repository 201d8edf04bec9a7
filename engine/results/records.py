"""Typed records of requests and runs, shared by every layer, with older shapes read back.
See docs/internals.md#records."""
from __future__ import annotations

import math
import re
import time
import types
import typing
import uuid
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar

from engine.messages import Message, from_json, mark, to_json

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
    # prompt tokens the server took from its prefix cache (usage.prompt_tokens_details.cached_tokens);
    # None: it did not say (vLLM says only with --enable-prompt-tokens-details; runs saved before this field)
    cached_tokens: int | None = None
    output_text: str = ""
    error: str | None = None
    warmup: bool = False
    # A multi-turn chat's request (engine.measure.workloads.conversations): which conversation and which of its
    # turns (0 = the first); None: a single-turn request (and every run saved before these fields)
    conversation: int | None = None
    turn: int | None = None
    # A rate-based arrival's planned send time (s from run start: Poisson, gamma, a trace); send_time minus it is
    # how late the client sent it (engine.measure.judge.lateness); None: sent when a slot freed (closed loop)
    planned_time: float | None = None
    # How long an arrival waited for a slot under a cap on requests in flight (vllm bench serve's
    # client_queue_time, s): a wait by design, not the client's lateness; None: no cap
    slot_wait: float | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_time is not None

    @property
    def e2e(self) -> float | None:
        return None if self.end_time is None else self.end_time - self.send_time

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.send_time

    @property
    def queue_time(self) -> float | None:
        """How long it waited in this client before it was sent (vllm bench serve's client_queue_time): from its
        planned time (a rate's or a trace's arrival), else from the start (a closed loop's requests are all there at
        once, each waiting for a slot); None for a chat's later turn, whose arrival (the reply before it, then the
        think time) is not recorded."""
        if self.planned_time is not None:
            return self.send_time - self.planned_time
        return None if self.turn else self.send_time

    @staticmethod
    def from_dict(d: dict[str, Any]) -> "RequestRecord":
        return RequestRecord(**{k: v for k, v in d.items() if k in RequestRecord.__dataclass_fields__})


class _Typed:
    """Known fields typed, everything else in `other`; to_dict() gives back the stored shape."""

    RENAMED: ClassVar[dict[str, str]] = {}  # a key it was saved under -> the field
    other: dict[str, Any]

    @classmethod
    def from_dict(cls, d: Any) -> Any:
        if isinstance(d, cls):
            return d
        hints = typing.get_type_hints(cls)
        known: dict[str, Any] = {}
        other: dict[str, Any] = {}
        for k, v in (d or {}).items() if isinstance(d, dict) else ():
            name = cls.RENAMED.get(k, k)
            if name in hints and name != "other" and name not in known and _fits(v, hints[name]):
                known[name] = v
            else:
                other[k] = v
        return cls(**known, other=other)

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)  # type: ignore[arg-type]
               if f.name != "other" and getattr(self, f.name) != _default(f)}
        return {**out, **{k: v for k, v in self.other.items() if k not in out}}


def _default(f: Any) -> Any:
    return f.default_factory() if callable(f.default_factory) else f.default


def _fits(v: Any, hint: Any) -> bool:
    """Whether a stored value has the field's type (bool is no number, an int is a float)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return any(_fits(v, h) for h in typing.get_args(hint))
    if hint is type(None):
        return v is None
    base = typing.get_origin(hint) or hint
    if base is Any:
        return True
    if base in (int, float):
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        return number and (base is float or (math.isfinite(v) and v == int(v)))
    return isinstance(v, base)


@dataclass
class Load(_Typed):
    """What a run sent: its arrival pattern and size (`RunResult.load`)."""

    RENAMED: ClassVar[dict[str, str]] = {"mode": "shape", "requests": "num_requests", "num_prompts": "num_requests",
                                         "max_concurrency": "concurrency", "request_rate": "rate"}
    shape: str = ""  # load generator: sequential | concurrency | burst | poisson; naive: sequential | static-batch
    num_requests: int | None = None
    concurrency: int | None = None  # the limit on requests in flight (vllm bench serve: max_concurrency)
    rate: float | None = None  # requests/s of poisson arrivals (vllm bench serve: request_rate, inf = all at once)
    max_tokens: int | None = None
    ignore_eos: bool = False
    temperature: float | None = None
    warmup: int = 0  # requests sent before the measured part
    endpoint: str = ""  # chat | completions
    base_url: str = ""
    backend: str = ""  # a vllm bench serve file's
    burstiness: float | None = None  # gamma arrivals' shape (1: Poisson), as vllm bench serve's --burstiness
    prompts: list = field(default_factory=list)
    # what a workload of engine.measure.workloads sent, never its file: kind, file name, rows, sha256, lengths
    workload: dict | None = None
    other: dict[str, Any] = field(default_factory=dict)  # timeouts, seed, client processes, ...


@dataclass
class Notes(_Typed):
    """What surrounded a run: the server, the client, a cancel, chat beside it, the naive worker
    (`RunResult.extra`)."""

    cancelled: bool = False
    endpoint: str = ""  # the address of a server this app did not start (no key, user or query in it)
    keyed: bool = False  # an API key was sent to it (whether, never which: for the code behind the run)
    placeholder_text: bool = False  # random weights (shape-only model): the text means nothing
    kv_cache_tokens: int | None = None  # the server's KV capacity at startup
    max_concurrency_reported: float | None = None  # vLLM's "maximum concurrency" at startup
    # The KV cache over the measured part (engine.measure.judge.kvcache.KvWatch): its blocks, the preemptions
    # (vllm:num_preemptions_total's rise), the most requests waiting and the fullest it got (0-1)
    kv_blocks: int | None = None
    kv_block_size: int | None = None
    preemptions: int | None = None
    peak_waiting: int | None = None
    peak_kv_usage: float | None = None
    sweep_level: int | None = None
    # A rate-based run's sends against its schedule (engine.measure.judge.lateness): how many had a planned time,
    # how many went out more than LATE_S after it, and the 99th percentile of the lateness (ms)
    planned_sends: int | None = None
    late_sends: int | None = None
    send_lateness_p99_ms: float | None = None
    # Two servers measured at once on one clock (engine.runs.Runner.side_by_side): the pair's shared id and
    # this run's side, "A" (the app's server) or "B" (the one given by URL); "" for a run on its own
    pair: str = ""
    pair_side: str = ""
    series: str = ""  # which line of a sweep chart (default: the scenario)
    # A round of the room (engine.room): the round's id, shared by its two runs (the attendees' requests as they
    # pressed, then the same requests one at a time), and each request's attendee by the request's index
    room_round: str = ""
    attendees: list = field(default_factory=list)
    chat_requests_beside: int = 0  # chat answers streamed while it measured
    # What else ran beside the measured part (engine.observe.disturbance): its length and the machine's cores, the
    # CPU other programs used and the hypervisor took (cores on average), the requests another client sent the
    # server; None: not watched (a run saved before this field, an import)
    disturbance: dict | None = None
    # The server's own count of the output tokens (vllm:generation_tokens_total's rise from the measured
    # part's start to its end) and the client's over the same requests (engine.measure.judge.token_check.token_check)
    server_output_tokens: int | None = None
    client_output_tokens: int | None = None
    server_count_missing: str = ""  # why there is no server count: "no-metrics" | "counter-reset"
    # vLLM's prefix cache over the measured part, in prompt tokens: the rise of vllm:prefix_cache_hits_total
    # (found in the cache) and of vllm:prefix_cache_queries_total (looked up); None: not published or reset
    prefix_cache_hits: int | None = None
    prefix_cache_queries: int | None = None
    # The server's own view of the measured part (engine.observe.histograms.view): vLLM's queue /
    # prefill / decode / inference / TTFT / ITL / TPOT / E2E histograms' deltas (exact means, bucket-estimated
    # percentiles), its engine steps' tokens and mean batch, and the histograms it did not export; None: no
    # /metrics (or a run saved before this field)
    server_view: dict | None = None
    # The energy the measured part used (engine.observe.energy.EnergyMeter: NVML's counter, NVML power samples
    # or RAPL, with the method and the idle power before the run); energy_missing: why there is none
    energy: dict | None = None
    energy_missing: str = ""  # "no-meter" (neither NVML energy nor readable RAPL here)
    # One of N repeats of the same spec (engine.runs.Runner.repeat): the group's id, this run's 1-based index and
    # N, and whether the prefix cache was reset before it (None: not asked, or the first; False: the server refused)
    repeat_group: str = ""
    repeat_index: int | None = None
    repeats: int | None = None
    prefix_cache_reset: bool | None = None
    repeat_failed: bool = False  # it did not answer every request it planned: left out of the repeats' statistics
    # A level of an SLO search (engine.runs.Runner.slo_search): the search's id, and whether the level was
    # stopped early as past saturation (requests in flight and TTFT both still growing)
    slo_search: str = ""
    oversaturated: bool = False
    # made by a rehearsal of the guided lab (its sheet's id, engine.guide.rehearsal); "": the room's
    rehearsal: str = ""
    # the SLO summary.request_goodput was judged by, as vllm bench serve's --goodput takes it ({"ttft": ms, ...});
    # None: no goodput was asked for (engine.measure.judge.slo)
    slo_ms: dict | None = None
    # What one decode step of the model reads (engine.measure.judge.ceiling.model_bytes), for its ceiling: the
    # weights, and the KV cache per token of context
    weight_bytes: int | None = None
    kv_token_bytes: int | None = None
    # Cold or warm (engine.measure.judge.warmth): the server instance it ran on (its pid and start time), the most
    # requests in flight in its measured part and in its warm-up, and whether the measured batch was the first
    # of its size there (cold_why: "first" | "warm-up" | "earlier-run" | "served"); None: unknown (older runs, imports)
    server_instance: str = ""
    batch_size: int | None = None
    warmup_batch_size: int | None = None
    cold: bool | None = None
    cold_why: str = ""
    # a tuning row whose server already ran its settings: measured on it as it was, not restarted
    not_restarted: bool = False
    # The server's own count of requests served since it started (vllm:request_success_total) before the run
    # and after it, and how many of those before it this app's runs had not sent (cold_why "served"); None: unknown
    served_before: int | None = None
    served_after: int | None = None
    served_elsewhere: int | None = None
    imported_from: str = ""
    label_said: dict | None = None  # the label's wording (engine.messages.to_json): said again in the viewer's language
    client: str = ""  # the load generator's transport
    client_workers: int | None = None
    client_errors: list = field(default_factory=list)
    # The requests the run meant to send (a multi-turn chat's every turn), so its counts add up
    # (engine.measure.judge.failures.counts); the connections the client could hold at once (its open-file limit,
    # engine.measure.load.request.connection_budget) and how many measured requests waited for one
    planned_requests: int | None = None
    client_connections: int | None = None
    client_waits: int | None = None
    # the naive baseline's worker
    memory: dict | None = None
    warmup_s: float | None = None
    load_s: float | None = None
    params: int | None = None
    dtype: str = ""
    dtype_reason: str | None = None
    device: str = ""
    device_name: str | None = None
    worker_pid: int | None = None
    worker_exit_code: int | None = None
    timing: str = ""  # how its request times were taken
    notes: list = field(default_factory=list)
    error: str | None = None
    log_tail: list = field(default_factory=list)
    other: dict[str, Any] = field(default_factory=dict)


# The latency distributions, `{stat}_{name}_ms` as vllm bench serve names them
_DIST_KEY = re.compile(r"^(?:mean|median|std|p\d+(?:\.\d+)?)_(?:ttft|tpot|itl|e2el)_ms$")


@dataclass
class Summary(_Typed):
    """A run's metrics under `vllm bench serve`'s names (engine.measure.judge.stats.summarize fills it;
    engine.metrics names them). None: not measured. `get(key)` reads any of them by name."""

    duration: float | None = None
    completed: int | None = None
    failed: int | None = None
    in_flight: int | None = None  # live snapshots: neither finished nor failed yet
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    request_throughput: float | None = None
    request_goodput: float | None = None
    output_throughput: float | None = None
    total_token_throughput: float | None = None
    max_output_tokens_per_s: float | None = None
    max_concurrency: float | None = None  # the observed peak in flight (vllm: max_concurrent_requests)
    mean_latency_s: float | None = None
    total_latency_s: float | None = None  # the sum of E2E latencies: the same requests one after another
    mean_cached_tokens: float | None = None  # prompt tokens from the prefix cache per request; None: not reported
    latency_ms: dict[str, float | None] = field(default_factory=dict)  # "median_ttft_ms" -> value, ...
    other: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> "Summary":
        if isinstance(d, cls):
            return d
        d = d if isinstance(d, dict) else {}
        dists = {k: v for k, v in d.items() if isinstance(k, str) and _DIST_KEY.match(k)}
        out = super().from_dict({k: v for k, v in d.items() if k not in dists})
        out.latency_ms = dists
        return out

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        return {**out.pop("latency_ms", {}), **out}

    def get(self, key: str, default: Any = None) -> Any:
        """A metric by its vllm bench serve name (engine.metrics.METRICS), None when not measured."""
        if key in self.latency_ms:
            v = self.latency_ms[key]
        elif key in _SUMMARY_FIELDS:
            v = getattr(self, key)
        else:
            v = self.other.get(key)
        return default if v is None else v

    @property
    def empty(self) -> bool:
        return self.completed is None and self.duration is None and not self.latency_ms


_SUMMARY_FIELDS = {f.name for f in fields(Summary)} - {"latency_ms", "other"}


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
    load: Load = field(default_factory=Load)  # a dict is read with Load.from_dict (likewise below)
    hardware: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)  # vllm, torch, transformers
    summary: Summary = field(default_factory=Summary)  # filled by stats.summarize
    extra: Notes = field(default_factory=Notes)
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def __post_init__(self) -> None:
        _typed_metadata(self)

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.warmup]

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, the metadata in its stored shape."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["records"] = [asdict(r) for r in self.records]
        return {**d, "load": self.load.to_dict(), "summary": self.summary.to_dict(), "extra": self.extra.to_dict()}


def _typed_metadata(run: Any) -> None:
    """Read a run's metadata given as dicts (stored, imported, or written by hand in a test)."""
    run.load = Load.from_dict(run.load)
    run.summary = Summary.from_dict(run.summary)
    run.extra = Notes.from_dict(run.extra)
    if isinstance(run.label, Message):
        run.extra.label_said = to_json(run.label)
    elif run.extra.label_said is not None:
        run.label = from_json(run.extra.label_said, english=run.label) or run.label


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
    summary: Summary = field(default_factory=Summary)
    config: dict[str, Any] = field(default_factory=dict)
    load: Load = field(default_factory=Load)
    hardware: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    extra: Notes = field(default_factory=Notes)
    command: str = ""
    problem: str = ""  # e.g. "its start time is not a date": the row is shown, kept and deletable

    def __post_init__(self) -> None:
        _typed_metadata(self)

    @property
    def started(self) -> str:
        """Local wall-clock start, e.g. '2025-11-30 11:18:04'; 'unknown' for a time that is not one."""
        if not is_sane_time(self.started_at):
            return mark("unknown")
        return datetime.fromtimestamp(self.started_at).strftime("%Y-%m-%d %H:%M:%S")

    @property
    def failed(self) -> bool:
        """No measured request succeeded: kept for the record, left out of comparisons."""
        return self.n_failed >= self.n_requests
