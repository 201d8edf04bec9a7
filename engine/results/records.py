"""Typed records of requests and runs, shared by every layer, with older shapes read back.
See docs/internals.md#records."""
from __future__ import annotations

import re
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from typing import Annotated, Any, Self

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_serializer,
    model_validator,
)

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


def _whole(v: Any) -> Any:
    """A whole number stored as a float (3.0) is the int it was; 1.5 stays a float, and is refused."""
    return int(v) if isinstance(v, float) and v.is_integer() else v


# A count: an int (a bool or a fraction is no count), also when a file holds it as 3.0
Int = Annotated[int, BeforeValidator(_whole)]


class Part(BaseModel):
    """A typed part of a run's record. Loading never fails: a value of the wrong type (or a key this version does
    not know) is kept aside in `other`, where it is written back from; `to_dict()` gives the stored shape (a
    field at its default is left out). Strict: a bool is no number, "1500" no count."""

    model_config = ConfigDict(strict=True)
    other: dict[str, Any] = Field(default_factory=dict, exclude=True)

    @model_validator(mode="wrap")
    @classmethod
    def _kept_aside(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            return handler(data)  # refused: the part that holds this one keeps it aside
        data = cls._upgraded(data)
        known = {k: v for k, v in data.items() if k in cls.model_fields and k != "other"}
        other = {k: v for k, v in data.items() if k not in known}
        while True:
            try:
                part = handler(known)
            except ValidationError as e:
                wrong = {err["loc"][0] for err in e.errors() if err["loc"] and err["loc"][0] in known}
                if not wrong:
                    raise
                other.update({k: known.pop(k) for k in wrong})  # type: ignore[misc]
                continue
            part.other = other
            return part

    @model_serializer(mode="wrap")
    def _with_other(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        return {**out, **{k: v for k, v in self.other.items() if k not in out}}

    @classmethod
    def _upgraded(cls, d: dict[str, Any]) -> dict[str, Any]:
        """`d` as this version names its keys (a part read from an older shape says how)."""
        return d

    @classmethod
    def from_dict(cls, d: Any) -> Self:
        """The part from its stored shape (a dict; anything else reads as nothing said)."""
        return d if isinstance(d, cls) else cls.model_validate(d if isinstance(d, dict) else {})

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values, the fields at their defaults left out."""
        return self.model_dump(exclude_defaults=True)


def _renamed(d: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """`d` with keys it was saved under given their field's name (where that name is not there already)."""
    out = {}
    for k, v in d.items():
        name = names.get(k, k)
        out[k if name in d or name in out else name] = v
    return out


class Load(Part):
    """What a run sent: its arrival pattern and size (`RunResult.load`)."""

    shape: str = ""  # load generator: sequential | concurrency | burst | poisson; naive: sequential | static-batch
    num_requests: Int | None = None
    concurrency: Int | None = None  # the limit on requests in flight (vllm bench serve: max_concurrency)
    rate: float | None = None  # requests/s of poisson arrivals (vllm bench serve: request_rate, inf = all at once)
    max_tokens: Int | None = None
    ignore_eos: bool = False
    temperature: float | None = None
    warmup: Int = 0  # requests sent before the measured part
    endpoint: str = ""  # chat | completions
    base_url: str = ""
    backend: str = ""  # a vllm bench serve file's
    burstiness: float | None = None  # gamma arrivals' shape (1: Poisson), as vllm bench serve's --burstiness
    prompts: list = Field(default_factory=list)
    # what a workload of engine.measure.workloads sent, never its file: kind, file name, rows, sha256, lengths
    workload: dict | None = None
    # `other`: timeouts, seed, client processes, ...

    @classmethod
    def _upgraded(cls, d: dict[str, Any]) -> dict[str, Any]:
        return _renamed(d, {"mode": "shape", "requests": "num_requests", "num_prompts": "num_requests",
                            "max_concurrency": "concurrency", "request_rate": "rate"})


# -- a run's notes, one part per concept ---------------------------------------------------------------

class ServerNotes(Part):
    """The server it ran against, as it was at startup."""

    endpoint: str = ""  # the address of a server this app did not start (no key, user or query in it)
    keyed: bool = False  # an API key was sent to it (whether, never which: for the code behind the run)
    placeholder_text: bool = False  # random weights (shape-only model): the text means nothing
    kv_cache_tokens: Int | None = None  # the server's KV capacity at startup
    max_concurrency: float | None = None  # vLLM's "maximum concurrency" at startup


class ModelSize(Part):
    """What one decode step of the model reads (engine.measure.judge.ceiling.model_bytes), for its ceiling."""

    weights: Int | None = None  # bytes
    kv_per_token: Int | None = None  # bytes of KV cache per token of context


class KvCache(Part):
    """The KV cache over the measured part (engine.measure.judge.kvcache.KvWatch)."""

    blocks: Int | None = None
    block_size: Int | None = None
    preemptions: Int | None = None  # vllm:num_preemptions_total's rise
    peak_waiting: Int | None = None  # the most requests waiting
    peak_usage: float | None = None  # the fullest it got (0-1)


class Lateness(Part):
    """A rate-based run's sends against its schedule (engine.measure.judge.lateness)."""

    planned_sends: Int | None = None  # how many had a planned time
    late_sends: Int | None = None  # how many went out more than LATE_S after it
    p99_ms: float | None = None  # the 99th percentile of the lateness


class SideBySide(Part):
    """Two servers measured at once on one clock (engine.runs.Runner.side_by_side)."""

    pair: str = ""  # the pair's shared id; "" for a run on its own
    side: str = ""  # "A" (the app's server) or "B" (the one given by URL)


class RoomRound(Part):
    """A round of the room (engine.room): its id, shared by its two runs (the attendees' requests as they pressed,
    then the same requests one at a time), and each request's attendee by the request's index."""

    round: str = ""
    attendees: list = Field(default_factory=list)


class Disturbance(Part):
    """What took from the measured part (engine.observe.disturbance): its length and the machine's cores, the CPU other
    programs used and the hypervisor took (cores on average), the other processes on its GPU, the requests another
    client sent the server."""

    seconds: float | None = None
    cores: Int | None = None
    others_cores: float | None = None
    steal_cores: float | None = None
    other_requests: Int | None = None  # None: the server did not say how many it served
    # the other processes on the run's GPUs (GpuWatch): the run's GPUs, how many others computed there, the most
    # memory they held (GB), their largest share of one GPU's SM time (per cent; None: the driver does not say);
    # all None without a GPU of the run's
    gpus: list[Int] | None = None
    gpu_others: Int | None = None
    gpu_others_gb: float | None = None
    gpu_others_busy: float | None = None


class Beside(Part):
    """What else ran beside the measured part."""

    chats: Int = 0  # chat answers streamed while it measured
    disturbance: Disturbance | None = None  # None: not watched (older runs, imports)


class TokenCount(Part):
    """The server's own count of the output tokens (vllm:generation_tokens_total's rise over the measured part) and
    the client's over the same requests (engine.measure.judge.token_check)."""

    server: Int | None = None
    client: Int | None = None
    missing: str = ""  # why there is no server count: "no-metrics" | "counter-reset"


class PrefixCache(Part):
    """vLLM's prefix cache over the measured part, in prompt tokens; None: not published or reset."""

    hits: Int | None = None  # vllm:prefix_cache_hits_total's rise (found in the cache)
    queries: Int | None = None  # vllm:prefix_cache_queries_total's rise (looked up)


class EnergyReading(Part):
    """A meter's reading over the measured part (engine.observe.energy.EnergyMeter.stop)."""

    method: str = ""  # "nvml-counter" | "nvml-power" | "rapl"
    joules: float | None = None
    seconds: float | None = None
    mean_w: float | None = None
    idle_w: float | None = None  # the power drawn before the run
    samples: Int | None = None  # NVML power samples integrated ("nvml-power" only)


class Energy(Part):
    """The energy the measured part used (engine.observe.energy.EnergyMeter: NVML's counter, NVML power samples or
    RAPL, with the method and the idle power before the run), or why there is none."""

    reading: EnergyReading | None = None
    missing: str = ""  # "no-meter" (neither NVML energy nor readable RAPL here) | "elsewhere" (another machine's)


class Repeat(Part):
    """One of N repeats of the same spec (engine.runs.Runner.repeat)."""

    group: str = ""  # the group's id
    index: Int | None = None  # 1-based
    total: Int | None = None  # N
    prefix_cache_reset: bool | None = None  # emptied before it (None: not asked, or the first; False: refused)
    failed: bool = False  # it did not answer every request it planned: left out of the repeats' statistics


class SloNotes(Part):
    """The SLO a run was judged by, and a level of an SLO search (engine.runs.Runner.slo_search)."""

    search: str = ""  # the search's id
    oversaturated: bool = False  # the level was stopped early as past saturation
    # the SLO summary.request_goodput was judged by, as vllm bench serve's --goodput takes it ({"ttft": ms, ...});
    # None: no goodput was asked for (engine.measure.judge.slo)
    goodput_ms: dict | None = None


class Warmth(Part):
    """Cold or warm (engine.measure.judge.warmth); None: unknown (older runs, imports)."""

    instance: str = ""  # the server instance it ran on (its pid and start time)
    batch_size: Int | None = None  # the most requests in flight in its measured part
    warmup_batch_size: Int | None = None  # ... and in its warm-up
    cold: bool | None = None  # the measured batch was the first of its size there
    why: str = ""  # "first" | "warm-up" | "earlier-run" | "served"
    # the server's own count of requests served since it started (vllm:request_success_total) before the run and
    # after it, and how many of those before it this app's runs had not sent (why "served")
    served_before: Int | None = None
    served_after: Int | None = None
    served_elsewhere: Int | None = None


class LoadClient(Part):
    """The load generator's side (engine.measure.load)."""

    name: str = ""  # its transport
    workers: Int | None = None  # client processes
    errors: list = Field(default_factory=list)
    # the requests the run meant to send (a multi-turn chat's every turn), so its counts add up
    # (engine.measure.judge.failures.counts)
    planned_requests: Int | None = None
    # the connections it could hold at once (its open-file limit, engine.measure.load.request.connection_budget)
    # and how many measured requests waited for one
    connections: Int | None = None
    waits: Int | None = None


class MemoryAt(Part):
    """Memory at one point of the naive worker's life, in bytes: inside it (engine.measure.baseline.torch_device's
    snapshot: its RSS and the kernel's peak of it; on CUDA torch's allocated and reserved with their peaks, and the
    device's used and total), or the machine's from outside (the system RAM used; NVML's device used and total)."""

    rss: Int | None = None
    peak_rss: Int | None = None
    allocated: Int | None = None
    reserved: Int | None = None
    max_allocated: Int | None = None
    max_reserved: Int | None = None
    ram_used: Int | None = None
    device_used: Int | None = None
    device_total: Int | None = None


class WorkerMemory(Part):
    """The naive worker's memory (engine.measure.baseline.naive; read by engine.measure.judge.worker_memory)."""

    unit: str = ""  # "bytes"
    device: str | None = None  # the device's name
    inside: str = ""  # how the worker read its own memory
    outside: str = ""  # how the parent read the machine's
    after_load: MemoryAt | None = None
    after_run: MemoryAt | None = None
    after_cleanup: MemoryAt | None = None
    before: MemoryAt | None = None  # the machine's, before the worker started
    after_exit: MemoryAt | None = None  # ... and after it exited
    left_after_exit: Int | None = None  # the device's used memory after it exited less before (~0: it came back)
    worker_peak_rss: Int | None = None
    worker_peak_device: Int | None = None  # NVML per process; None where NVML can't see pids
    worker_exited: bool | None = None  # reaped: the operating system took back all it held


class NaiveWorker(Part):
    """The naive baseline's worker process (engine.measure.baseline.naive)."""

    memory: WorkerMemory | None = None
    warmup_s: float | None = None
    load_s: float | None = None
    params: Int | None = None
    dtype: str = ""
    dtype_reason: str | None = None
    device: str = ""
    device_name: str | None = None
    worker_pid: Int | None = None
    worker_exit_code: Int | None = None
    timing: str = ""  # how its request times were taken
    notes: list = Field(default_factory=list)
    error: str | None = None
    log_tail: list = Field(default_factory=list)


# The buckets of a histogram as a run keeps them: [[upper bound (None: +Inf), observations in that bucket alone], ...]
Buckets = list[list[float | None]]


class KeptHistogram(Part):
    """One of vLLM's histograms over the measured part (engine.observe.histograms.Histogram.said): its count, sum and
    exact mean, its p50 / p90 / p99 estimated from the buckets with what each is ("estimate", "below", "above") and
    the bucket it lies in ([lower, upper], upper None for +Inf), and the buckets, from which a percentile is judged
    again (engine.observe.histograms.stored)."""

    count: float | None = None
    sum: float | None = None
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    p50_kind: str | None = None
    p90_kind: str | None = None
    p99_kind: str | None = None
    p50_bucket: list[float | None] | None = None
    p90_bucket: list[float | None] | None = None
    p99_bucket: list[float | None] | None = None
    buckets: Buckets = Field(default_factory=list)


class EngineSteps(Part):
    """The server's engine steps over the measured part (vllm:iteration_tokens_total's delta)."""

    count: float | None = None
    tokens: float | None = None  # prompt and output tokens they computed
    mean_tokens: float | None = None
    buckets: Buckets = Field(default_factory=list)
    mean_batch: float | None = None  # output tokens per step: the mean batch it decoded; None without that count


class SpecDecode(Part):
    """Speculative decoding's counters over the measured part (engine.observe.engine_counters)."""

    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    accepted_at: list[float] = Field(default_factory=list)  # accepted tokens by draft position


class EstimatedWork(Part):
    """The work vLLM estimated its engine did, per GPU (--enable-mfu-metrics; engine.observe.engine_counters)."""

    flops: float | None = None
    read_bytes: float | None = None
    write_bytes: float | None = None


class ServerView(Part):
    """The server's own view of the measured part (engine.observe.histograms.view): vLLM's queue / prefill / decode /
    inference / TTFT / ITL / TPOT / E2E histograms' deltas by our key (engine.observe.histograms.HISTOGRAMS), the keys
    it did not export, its engine steps, and the counters of speculation and estimated work where it has them."""

    histograms: dict[str, KeptHistogram] = Field(default_factory=dict)
    missing: list[str] = Field(default_factory=list)
    steps: EngineSteps | None = None
    spec_decode: SpecDecode | None = None
    estimated: EstimatedWork | None = None


class Notes(Part):
    """What surrounded a run (`RunResult.extra`): a few plain facts, then one part per concept. Stored nested since
    schema 6 (the flat keys of schema 5 and of exports before it are moved into their parts where those are read:
    `from_v5`)."""

    cancelled: bool = False
    series: str = ""  # which line of a sweep chart (default: the scenario)
    sweep_level: Int | None = None
    rehearsal: str = ""  # made by a rehearsal of the guided lab (its sheet's id, engine.guide.rehearsal)
    not_restarted: bool = False  # a tuning row whose server already ran its settings: measured on it as it was
    imported_from: str = ""
    label_said: dict | None = None  # the label's wording (engine.messages.to_json): said again in the viewer's language
    server_view: ServerView | None = None  # None: no /metrics (or an older run)
    server: ServerNotes = Field(default_factory=ServerNotes)
    model_size: ModelSize = Field(default_factory=ModelSize)
    kv: KvCache = Field(default_factory=KvCache)
    lateness: Lateness = Field(default_factory=Lateness)
    side_by_side: SideBySide = Field(default_factory=SideBySide)
    room: RoomRound = Field(default_factory=RoomRound)
    beside: Beside = Field(default_factory=Beside)
    token_count: TokenCount = Field(default_factory=TokenCount)
    prefix_cache: PrefixCache = Field(default_factory=PrefixCache)
    energy: Energy = Field(default_factory=Energy)
    repeat: Repeat = Field(default_factory=Repeat)
    slo: SloNotes = Field(default_factory=SloNotes)
    warmth: Warmth = Field(default_factory=Warmth)
    load_client: LoadClient = Field(default_factory=LoadClient)
    naive: NaiveWorker = Field(default_factory=NaiveWorker)

    def add(self, given: Notes | None) -> None:
        """Set here the fields `given` was made with (an action's own notes on its run: a rehearsal's sheet id, a
        repeat's place in its group); a whole part replaces the run's own. A name Notes does not know is refused
        (TypeError): it would vanish from the record."""
        if given is None:
            return
        if given.other:
            raise TypeError(f"Notes has no field {', '.join(map(repr, given.other))}")
        for name in given.model_fields_set - {"other"}:
            setattr(self, name, getattr(given, name))



def from_v5(flat: dict[str, Any]) -> dict[str, Any]:
    """Schema 5's flat notes (a history before schema 6, an export of serving-lab-run/1) as Notes stores them now:
    each key in its part (V5_KEYS); keys it does not name as they are."""
    out: dict[str, Any] = {}
    for k, v in flat.items():
        where = V5_KEYS.get(k)
        if where is None:
            out.setdefault(k, v)
        else:
            part = out.setdefault(where[0], {})
            if isinstance(part, dict):
                part.setdefault(where[1], v)
    return out


# Schema 5's flat key -> where it lives now (a part and its field)
V5_KEYS: dict[str, tuple[str, str]] = {
    "endpoint": ("server", "endpoint"), "keyed": ("server", "keyed"),
    "placeholder_text": ("server", "placeholder_text"), "kv_cache_tokens": ("server", "kv_cache_tokens"),
    "max_concurrency_reported": ("server", "max_concurrency"),
    "weight_bytes": ("model_size", "weights"), "kv_token_bytes": ("model_size", "kv_per_token"),
    "kv_blocks": ("kv", "blocks"), "kv_block_size": ("kv", "block_size"), "preemptions": ("kv", "preemptions"),
    "peak_waiting": ("kv", "peak_waiting"), "peak_kv_usage": ("kv", "peak_usage"),
    "planned_sends": ("lateness", "planned_sends"), "late_sends": ("lateness", "late_sends"),
    "send_lateness_p99_ms": ("lateness", "p99_ms"),
    "pair": ("side_by_side", "pair"), "pair_side": ("side_by_side", "side"),
    "room_round": ("room", "round"), "attendees": ("room", "attendees"),
    "chat_requests_beside": ("beside", "chats"), "disturbance": ("beside", "disturbance"),
    "server_output_tokens": ("token_count", "server"), "client_output_tokens": ("token_count", "client"),
    "server_count_missing": ("token_count", "missing"),
    "prefix_cache_hits": ("prefix_cache", "hits"), "prefix_cache_queries": ("prefix_cache", "queries"),
    "energy": ("energy", "reading"), "energy_missing": ("energy", "missing"),
    "repeat_group": ("repeat", "group"), "repeat_index": ("repeat", "index"), "repeats": ("repeat", "total"),
    "prefix_cache_reset": ("repeat", "prefix_cache_reset"), "repeat_failed": ("repeat", "failed"),
    "slo_search": ("slo", "search"), "oversaturated": ("slo", "oversaturated"), "slo_ms": ("slo", "goodput_ms"),
    "server_instance": ("warmth", "instance"), "batch_size": ("warmth", "batch_size"),
    "warmup_batch_size": ("warmth", "warmup_batch_size"), "cold": ("warmth", "cold"), "cold_why": ("warmth", "why"),
    "served_before": ("warmth", "served_before"), "served_after": ("warmth", "served_after"),
    "served_elsewhere": ("warmth", "served_elsewhere"),
    "client": ("load_client", "name"), "client_workers": ("load_client", "workers"),
    "client_errors": ("load_client", "errors"), "planned_requests": ("load_client", "planned_requests"),
    "client_connections": ("load_client", "connections"), "client_waits": ("load_client", "waits"),
    **{k: ("naive", k) for k in ("memory", "warmup_s", "load_s", "params", "dtype", "dtype_reason", "device",
                                 "device_name", "worker_pid", "worker_exit_code", "timing", "notes", "error",
                                 "log_tail")},
}


# The latency distributions, `{stat}_{name}_ms` as vllm bench serve names them
_DIST_KEY = re.compile(r"^(?:mean|median|std|p\d+(?:\.\d+)?)_(?:ttft|tpot|itl|e2el)_ms$")


class Summary(Part):
    """A run's metrics under `vllm bench serve`'s names (engine.measure.judge.stats.summarize fills it;
    engine.metrics names them). None: not measured. `get(key)` reads any of them by name."""

    duration: float | None = None
    completed: Int | None = None
    failed: Int | None = None
    in_flight: Int | None = None  # live snapshots: neither finished nor failed yet
    total_input_tokens: Int | None = None
    total_output_tokens: Int | None = None
    request_throughput: float | None = None
    request_goodput: float | None = None
    output_throughput: float | None = None
    total_token_throughput: float | None = None
    max_output_tokens_per_s: float | None = None
    max_concurrency: float | None = None  # the observed peak in flight (vllm: max_concurrent_requests)
    mean_latency_s: float | None = None
    total_latency_s: float | None = None  # the sum of E2E latencies: the same requests one after another
    mean_cached_tokens: float | None = None  # prompt tokens from the prefix cache per request; None: not reported
    latency_ms: dict[str, float | None] = Field(default_factory=dict)  # "median_ttft_ms" -> value, ...

    @classmethod
    def _upgraded(cls, d: dict[str, Any]) -> dict[str, Any]:
        """vllm bench serve's flat `median_ttft_ms` keys into latency_ms."""
        if "latency_ms" in d:
            return d
        dists = {k: v for k, v in d.items() if isinstance(k, str) and _DIST_KEY.match(k)}
        return {**{k: v for k, v in d.items() if k not in dists}, "latency_ms": dists} if dists else d

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


_SUMMARY_FIELDS = set(Summary.model_fields) - {"latency_ms", "other"}


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
