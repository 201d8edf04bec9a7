"""Live samples for the Monitor page: memory and vLLM's /metrics, from one sampler thread per Lab.
See docs/measuring.md#telemetry."""
from __future__ import annotations

import functools
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from engine.messages import mark, say
from engine.metrics import ALIASES, ANSWER_DEADLINE_S, PROMETHEUS_PREFIX
from engine.observe import hardware, nvml

GIB = 1024**3

# vLLM's /metrics name -> our key, from the one alias table (several vLLM versions' names per key)
_WANTED = {name: key for key, names in ALIASES.items() for name in names if name.startswith(PROMETHEUS_PREFIX)}
_WANTED_LINES = tuple(_WANTED)
# vLLM's CacheConfig as a gauge whose labels carry the values (vllm:cache_config_info{block_size="128",...} 1):
# the KV cache's capacity as the engine allocated it. label -> our key; GPU and CPU builds both say num_gpu_blocks.
CACHE_INFO = "vllm:cache_config_info"
_CAPACITY = {"kv_cache_size_tokens": "kv_capacity_tokens", "num_gpu_blocks": "kv_blocks", "block_size": "kv_block_size"}


def parse_metrics(text: str) -> dict[str, float]:
    """vLLM's /metrics text (Prometheus exposition format) -> {running, waiting, kv_usage (0-1),
    generation_tokens_total, prompt_tokens_total, preemptions_total}, each summed over its label sets
    (engines, models), and the KV cache's capacity (kv_capacity_tokens, kv_blocks, kv_block_size: see
    capacity); a key takes its newest vLLM name present. Missing ones are absent; text that is not in
    the format gives what was read before it."""
    # Only the sample lines of the metrics we keep go to the parser: vLLM's page is mostly histogram
    # buckets (660 lines for these 5 values), and parsing them all cost ~40x as much a scrape.
    ours = "\n".join(line for line in text.splitlines() if line.startswith(_WANTED_LINES))
    raw: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(ours):
            for sample in family.samples:
                if sample.name in _WANTED:
                    raw[sample.name] = raw.get(sample.name, 0.0) + sample.value
    except ValueError:  # not Prometheus text (a proxy's error page, a cut-off answer)
        pass
    out: dict[str, float] = {}
    for name, key in _WANTED.items():  # in ALIASES order: the newest name first
        if name in raw and key not in out:
            out[key] = raw[name]
    return {**out, **capacity(text)}


def capacity(text: str) -> dict[str, float]:
    """The KV cache's capacity from vLLM's cache_config_info gauge in /metrics text: {kv_capacity_tokens,
    kv_blocks, kv_block_size}, those it states (summed over engines, a block's size from the first);
    {} when the text has no such gauge (an older vLLM: the startup log's "KV cache size" still says the
    tokens)."""
    out: dict[str, float] = {}
    lines = "\n".join(line for line in text.splitlines() if line.startswith(CACHE_INFO))
    try:
        for family in text_string_to_metric_families(lines):
            for sample in family.samples:
                for label, key in _CAPACITY.items():
                    try:
                        v = float(sample.labels.get(label, ""))
                    except ValueError:  # "None": not known
                        continue
                    out[key] = v if key == "kv_block_size" else out.get(key, 0.0) + v
    except ValueError:
        pass
    return out


_GENERATED = ALIASES["generation_tokens_total"]


def generation_tokens(text: str, model: str | None = None) -> float | None:
    """vLLM's count of the output tokens it generated (vllm:generation_tokens_total) from /metrics
    text: summed over engines, for `model` alone when the counter is labelled by model and one label
    is it (a server serving several models), else over all; None when the text holds no such counter."""
    return counter(text, _GENERATED[0], model)


def counter(text: str, name: str, model: str | None = None) -> float | None:
    """One counter of /metrics text (its full name, e.g. "vllm:prefix_cache_hits_total"), summed over
    engines as generation_tokens sums its own; None when the text holds no such counter."""
    ours = "\n".join(line for line in text.splitlines() if line.startswith(name))
    by_model: dict[str | None, float] = {}
    try:
        for family in text_string_to_metric_families(ours):
            for sample in family.samples:
                if sample.name == name:
                    label = sample.labels.get("model_name")
                    by_model[label] = by_model.get(label, 0.0) + sample.value
    except ValueError:  # not Prometheus text
        return None
    if not by_model:
        return None
    return by_model[model] if model in by_model else sum(by_model.values())


ANSWER_MAX_BYTES = 16 * 1024**2  # vLLM's /metrics is ~100 kB; an answer that grows past this never ends


class EndlessAnswer(httpx.ReadTimeout):
    """A server kept sending one answer past its deadline (or its size limit) without finishing it."""

    def __init__(self, url: str, seconds: float) -> None:
        super().__init__(f"still sending after {seconds:g} s")
        self.url, self.seconds = url, seconds


def get_within(client: httpx.Client, url: str, deadline_s: float = ANSWER_DEADLINE_S, **kw) -> httpx.Response:
    """GET `url` with one deadline for the whole answer. httpx's timeouts bound each wait for bytes, so a
    server that sends a byte every second would hold the caller forever; this reads the body as it comes
    and raises EndlessAnswer (an httpx.HTTPError) once `deadline_s` has passed."""
    end = time.monotonic() + deadline_s
    body = bytearray()
    with client.stream("GET", url, **kw) as resp:
        for chunk in resp.iter_bytes():
            body += chunk
            if time.monotonic() > end or len(body) > ANSWER_MAX_BYTES:
                raise EndlessAnswer(url, deadline_s)
        headers = [(k, v) for k, v in resp.headers.items() if k.lower() not in ("content-encoding", "content-length",
                                                                                  "transfer-encoding")]
        return httpx.Response(resp.status_code, headers=headers, content=bytes(body), request=resp.request)


@functools.cache
def _tls() -> ssl.SSLContext:
    """httpx's default certificate check (its CA bundle), made once per process: making it took 50-140 ms on a
    busy 2-core machine, in every /metrics read, and one of those reads comes after a run's last answer."""
    return httpx.create_ssl_context(trust_env=False)  # as the Client below, which ignores SSL_CERT_FILE


def read_metrics_text(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> str | None:
    """The server's /metrics page (next to /v1 at `base_url`); None without one (a server other than
    vLLM, a proxy that hides it, no answer)."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/metrics"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        with httpx.Client(timeout=timeout_s, trust_env=False, verify=_tls()) as client:
            r = get_within(client, url, timeout_s, headers=headers)  # the whole answer within timeout_s
    except httpx.HTTPError:
        return None
    return r.text if r.status_code == 200 else None


SERVED = "vllm:request_success_total"  # requests finished since the server started, by finish reason


def requests_served(text: str, model: str | None = None) -> int | None:
    """vLLM's count of the requests it served since it started, from /metrics text (summed over finish
    reasons and engines, for `model` when labelled so); None when the text holds no such counter."""
    v = counter(text, SERVED, model)
    return None if v is None else round(v)


def read_requests_served(base_url: str, model: str | None = None, api_key: str | None = None,
                         timeout_s: float = 5.0) -> int | None:
    """requests_served from the server's /metrics now; None when it publishes none."""
    text = read_metrics_text(base_url, api_key, timeout_s)
    return None if text is None else requests_served(text, model)


PREFIX_HITS, PREFIX_QUERIES = "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"


def read_process_start(base_url: str, api_key: str | None = None, timeout_s: float = 5.0) -> float | None:
    """When the server process at `base_url` started (epoch s), from the process_start_time_seconds its
    /metrics publishes (prometheus_client's process collector, as vLLM's API server has it): what tells
    one start of a server at a URL from the next. None when it publishes none."""
    return process_start(read_metrics_text(base_url, api_key, timeout_s) or "")


def process_start(text: str) -> float | None:
    """process_start_time_seconds (epoch s) from /metrics text; None when it holds none."""
    for line in text.splitlines():
        if line.startswith("process_start_time_seconds "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


@dataclass
class Sample:
    t: float  # epoch s
    memory: list[dict] = field(default_factory=list)  # [{series, used_gb, total_gb}]
    metrics: dict[str, float] = field(default_factory=dict)  # running, waiting, kv_usage (0-1), gen_tok_s
    power_w: float | None = None  # every GPU's power draw, summed (NVML); None without a GPU


def gpu_memory() -> list[dict]:
    """One memory series per GPU, with its processes, from NVML."""
    return [{"series": say("GPU {index}", index=g["index"]), "used_gb": g["used"] / GIB, "total_gb": g["total"] / GIB,
             "processes": [{"pid": pid, "used_gb": b / GIB} for pid, b in g["procs"].items()]}
            for g in nvml.devices()]


def resident_bytes(procs: Iterable[psutil.Process]) -> int:
    """Resident memory these processes hold together, bytes (one that has gone counts nothing)."""
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.Error:
            pass
    return total


def process_tree_rss(pid: int | None) -> float:
    """Resident memory of a process and its children, GiB (vLLM runs engine-core and workers as children)."""
    if not pid:
        return 0.0
    try:
        p = psutil.Process(pid)
        procs = [p] + p.children(recursive=True)
    except psutil.Error:
        return 0.0
    return resident_bytes(procs) / GIB


class Telemetry:
    """Samples every `interval_s` into a ring buffer. `server_pid()`, `metrics_url()` and `metrics_headers()`
    are callables so the sampler follows server restarts and a server attached by URL; `extra_pids()`
    adds e.g. the naive worker on CPU."""

    def __init__(self, server_pid: Callable[[], int | None], metrics_url: Callable[[], str | None],
                 extra_pids: Callable[[], dict[str, int]] = dict, interval_s: float = 1.0, keep: int = 3600,
                 metrics_headers: Callable[[], dict[str, str]] = dict,
                 on_scrape: Callable[[str | None, httpx.Response | None, httpx.HTTPError | None], None] | None = None):
        self.server_pid = server_pid
        # told each tick what /metrics answered (url None: none to read), so a server at a URL is watched
        # for free by the scrape that already runs (engine.serving.endpoint.Watch)
        self.on_scrape = on_scrape
        self.metrics_url = metrics_url
        self.metrics_headers = metrics_headers  # a server at a URL may want its API key on /metrics too
        self.extra_pids = extra_pids
        self.interval_s = interval_s
        self._buf: deque[Sample] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.device = hardware.default_device()  # "cuda" | "cpu": what the memory series come from
        self._prev_gen: tuple[float, float] | None = None
        self.last_scrape: tuple[str | None, httpx.Response | None, httpx.HTTPError | None] = (None, None, None)
        self._client = httpx.Client(timeout=1.0)

    def start(self) -> None:
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="telemetry")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def samples(self, since: float | None = None) -> list[Sample]:
        with self._lock:
            return [s for s in self._buf if since is None or s.t >= since]

    def latest(self) -> Sample | None:
        with self._lock:
            return self._buf[-1] if self._buf else None

    def sample_once(self) -> Sample:
        s = Sample(t=time.time())
        if self.device == "cuda":
            s.memory = gpu_memory()
            mw = nvml.power_mw()
            s.power_w = None if mw is None else mw / 1000
        else:
            vm = psutil.virtual_memory()
            s.memory = [{"series": mark("system (all processes)"), "used_gb": (vm.total - vm.available) / GIB,
                         "total_gb": vm.total / GIB},
                        {"series": mark("vLLM server"), "used_gb": process_tree_rss(self.server_pid()),
                         "total_gb": vm.total / GIB}]
            for name, pid in self.extra_pids().items():
                s.memory.append({"series": name, "used_gb": process_tree_rss(pid), "total_gb": vm.total / GIB})
        url = self.metrics_url()
        r, error = None, None
        if url:
            try:
                r = get_within(self._client, url, headers=self.metrics_headers())
                if r.status_code == 200:
                    s.metrics = parse_metrics(r.text)
            except httpx.HTTPError as e:
                error = e
        self.last_scrape = (url, r, error)
        gen = s.metrics.get("generation_tokens_total")
        if gen is not None:
            if self._prev_gen and s.t > self._prev_gen[0] and gen >= self._prev_gen[1]:
                s.metrics["gen_tok_s"] = (gen - self._prev_gen[1]) / (s.t - self._prev_gen[0])
            self._prev_gen = (s.t, gen)
        else:
            self._prev_gen = None
        return s

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                s = self.sample_once()
                with self._lock:
                    self._buf.append(s)
                if self.on_scrape is not None:
                    self.on_scrape(*self.last_scrape)
            except Exception:  # a sampler must never die; the next tick tries again
                pass
            self._stop.wait(self.interval_s)


# How a bucket of samples is shown as one point: peaks stay visible (the most requests in flight, the
# fullest KV cache, the most memory; a counter's last value), a rate is averaged.
_MEAN_METRICS = {"gen_tok_s"}


def downsample(samples: list[Sample], max_points: int) -> list[Sample]:
    """At most `max_points` samples for display: consecutive samples merged in equal buckets, each
    shown at its last time with the largest memory use and metric values in it (rates averaged)."""
    n = len(samples)
    if n <= max_points:
        return samples
    out = []
    step = -(-n // max_points)  # ceil: never more than max_points buckets
    for i in range(0, n, step):
        bucket = samples[i:i + step]
        last = bucket[-1]
        peak: dict[str, float] = {}
        for b in bucket:
            for m in b.memory:
                peak[m["series"]] = max(peak.get(m["series"], 0.0), m["used_gb"])
        memory = [{**m, "used_gb": peak[m["series"]]} for m in last.memory]
        metrics: dict[str, float] = {}
        for key in {k for b in bucket for k in b.metrics}:
            vals = [b.metrics[key] for b in bucket if key in b.metrics]
            metrics[key] = sum(vals) / len(vals) if key in _MEAN_METRICS else max(vals)
        power = [b.power_w for b in bucket if b.power_w is not None]
        out.append(Sample(t=last.t, memory=memory, metrics=metrics,
                          power_w=sum(power) / len(power) if power else None))  # power: the bucket's mean
    return out


def memory_rows(samples: list[Sample]) -> list[dict]:
    """Flatten samples into the rows figures.memory_chart draws (one per series per tick)."""
    return [{"t": s.t, **{k: v for k, v in m.items() if k != "processes"}} for s in samples for m in s.memory]


def power_rows(samples: list[Sample]) -> list[dict]:
    """The GPUs' power over time, for figures.power_chart (no rows without a GPU)."""
    return [{"t": s.t, "power_w": s.power_w} for s in samples if s.power_w is not None]


def metric_rows(samples: list[Sample]) -> list[dict]:
    return [{"t": s.t, **s.metrics} for s in samples if s.metrics]


def event_rows(events: list[tuple[float, str]], since: float | None = None) -> list[dict]:
    return [{"t": t, "label": label} for t, label in events if since is None or t >= since]
