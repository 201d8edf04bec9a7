"""How each kind of run is carried out — a load test, a concurrency sweep, a tuning comparison, the
naive baseline — against a `Target` server: reported to one `Progress`, stamped with what it ran on,
and handed to `save` the moment it finishes (a sweep's finished levels survive a crash or a cancel).

The one orchestration path: `Lab` runs a `Runner` inside a background job (adding who may act and
the chat marks), the CLI and the bench scripts run one in the foreground with a `Console`.
See docs/architecture.md."""
from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import psutil

from engine.errors import ConfigError, LabError, ServerBusy
from engine.measure import ceiling, loadgen
from engine.measure.kvcache import KvWatch
from engine.measure.progress import Progress
from engine.measure.request import clock
from engine.measure.slo import Slo, record_goodput
from engine.measure.spec import LoadSpec, check_max_tokens
from engine.measure.stats import client_output_tokens, peak_in_flight
from engine.measure.warmth import WarmthLedger
from engine.messages import mark, say
from engine.observe import hardware
from engine.observe.telemetry import read_generation_tokens, read_prefix_cache, read_process_start
from engine.results.records import Notes, RunResult
from engine.serving import endpoint, proctree
from engine.serving.config import ServerConfig
from engine.serving.endpoint import Endpoint
from engine.serving.server import READY, VLLMServer


@dataclass(frozen=True)
class Target:
    """The server a load goes to: one this app started (`config` set) or one at a URL it did not
    (`endpoint` set by `at`: what it said about itself). The key is sent with each request and never
    stored with a run nor shown (repr leaves it out)."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)
    max_model_len: int | None = None  # longest prompt + answer it accepts; None when it does not say
    config: ServerConfig | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # vLLM's own "maximum concurrency" at startup
    # Which start of the server this is (engine.measure.warmth): its host, pid and start time for one this
    # app started, its URL and process start time (from /metrics) for one at a URL; None: it does not say
    instance: str | None = None
    endpoint: Endpoint | None = None
    started: float | None = None  # a server at a URL: its process start (epoch s, /metrics), if it says

    @property
    def on_this_machine(self) -> bool:
        """A server this app started, or one at a loopback address: it shares this machine's CPU and GPUs."""
        return self.config is not None or (self.endpoint is not None and self.endpoint.on_this_machine)

    def same_server(self, other: "Target") -> bool:
        """Two addresses of one server (localhost and 127.0.0.1 are the same machine)."""
        if self.base_url.rstrip("/") == other.base_url.rstrip("/"):
            return True
        a, b = urlsplit(self.base_url), urlsplit(other.base_url)
        return (self.on_this_machine and other.on_this_machine and a.port == b.port
                and a.path.rstrip("/") == b.path.rstrip("/"))

    @property
    def model_name(self) -> str:
        """The name requests carry (as ServerConfig calls it)."""
        return self.model

    @classmethod
    def of(cls, server: VLLMServer) -> "Target":
        """The ready server this app started; ServerBusy when there is none."""
        snap = server.snapshot()
        cfg = snap.config
        if snap.state != READY or cfg is None:
            raise ServerBusy(say("The vLLM server is not running: start it on the Server page first."))
        return cls(cfg.base_url, cfg.model_name, cfg.api_key, cfg.max_model_len, cfg, snap.kv_cache_tokens,
                   snap.max_concurrency, instance=_instance_of(snap.pid))

    @classmethod
    def at(cls, url: str, model: str | None = None, api_key: str | None = None) -> "Target":
        """A running OpenAI-compatible server at `url` (its root, /v1 or a router's path prefix), serving
        `model` (default: the first it lists); an EndpointError says why it cannot be measured."""
        found = endpoint.discover(url, api_key)
        names = list(found.models)
        model = model or names[0]
        if model not in names and len(names) > 1:
            raise ConfigError(say("The server at {url} serves no model named '{model}': pass --model-name {first} "
                                  "(it serves {names}).", url=found.base_url, model=model, first=names[0],
                                  names=", ".join(names)))
        if model not in names:
            raise ConfigError(say("The server at {url} serves no model named '{model}': pass --model-name {first}.",
                                  url=found.base_url, model=model, first=names[0]))
        started = read_process_start(found.base_url, api_key)
        return cls(found.base_url, model, api_key, found.models[model], endpoint=found,
                   kv_cache_tokens=found.kv_capacity_tokens, started=started,
                   instance=None if started is None else f"{found.base_url.rstrip('/')} started {started:.2f}")

    def again(self, since: float | None) -> tuple["Target", str]:
        """A server at a URL that answers again after it stopped at `since` (None: it answered throughout, as a
        new process): discovered anew, since it may have restarted with another model or max-model-len, and
        the sentence that says what changed. Its model when it still serves it, else the first it lists; an
        EndpointError or ConfigError when it cannot be measured."""
        try:
            new = Target.at(self.base_url, self.model, self.api_key)
        except ConfigError:  # it serves other models now
            new = Target.at(self.base_url, None, self.api_key)
        url = self.base_url
        if since is None:
            return new, say("The server at {url} restarted at {start} (serving {model}): the first batch of each "
                            "size is cold again.", url=url, start=endpoint.clock(new.started or time.time()),
                            model=new.model)
        at = endpoint.clock(since)
        if new.model != self.model:
            return new, say("The server at {url} answers again (it stopped at {time}), now serving {model} instead "
                            "of {old}: every page measures {model} from now on.", url=url, time=at, model=new.model,
                            old=self.model)
        if new.started is None or self.started is None:
            return new, say("The server at {url} answers again (it stopped at {time}); whether it restarted is "
                            "unknown, since its /metrics do not say when its process started.", url=url, time=at)
        if new.started != self.started:
            return new, say("The server at {url} answers again: it restarted at {start} (it stopped answering at "
                            "{time}), so the first batch of each size is cold again.", url=url,
                            start=endpoint.clock(new.started), time=at)
        return new, say("The server at {url} answers again, as the same process: it was out of reach from {time}, "
                        "not restarted.", url=url, time=at)

    def aim(self, spec: LoadSpec) -> LoadSpec:
        """`spec` sent here, checked against what this server accepts (ConfigError)."""
        spec = replace(spec, base_url=self.base_url, model=self.model, api_key=self.api_key)
        spec.validate(self.max_model_len)
        return spec

    def stamp(self, result: RunResult) -> RunResult:
        """Mark a run with what it ran on, so a saved run explains itself anywhere."""
        result.model = self.model
        if self.config is None:  # a server at a URL: its address (no secrets in it, see endpoint.root_url)
            result.extra.endpoint, result.extra.keyed = self.base_url, bool(self.api_key)
        # A server at a URL on another machine: only what it says of itself (a loopback one shares this
        # machine, whose hardware is then its own: what the ceiling and the report need)
        elsewhere = not self.on_this_machine
        if self.endpoint is not None:
            version = self.endpoint.version
            result.versions = result.versions or ({"vllm": version} if version else {})
        result.hardware = result.hardware or ({} if elsewhere else hardware.describe())
        result.versions = result.versions or ({} if elsewhere else hardware.versions())
        if self.config is not None:
            result.config = self.config.to_dict()
            result.command = self.config.shell_command()
            result.extra.kv_cache_tokens = self.kv_cache_tokens
            result.extra.max_concurrency_reported = self.max_concurrency
            result.extra.placeholder_text = self.config.load_format == "dummy"
            if size := ceiling.server_model_bytes(result.config):  # what each decode step reads: its ceiling
                result.extra.weight_bytes, result.extra.kv_token_bytes = size.weights, size.kv_per_token
        return result


def _instance_of(pid: int | None) -> str | None:
    """A process this app started, told from a later one with its pid recycled (as proctree does)."""
    if pid is None:
        return None
    try:
        return f"{socket.gethostname()} pid {pid} started {proctree.since_boot(psutil.Process(pid)):.2f} s after boot"
    except psutil.Error:
        return None


class ServerCount:
    """The server's own count of the output tokens it generated during one run's measured part (issue
    #12, "numbers you can check"): vllm:generation_tokens_total read when the warm-up is over (`start`,
    the load generator's on_measure) and again after the last request (`finish`), so warm-up answers
    are left out. Chat answers streamed meanwhile count on the server too: the run says so (its
    chat_requests_beside). A server without /metrics is measured all the same, its run unchecked.
    The prefix cache's hit and query counters are read at the same two moments (the run's notes)."""

    SETTLE_S = 0.05  # between two reads that must agree: a counter that still moves has not settled
    READS = 10

    def __init__(self, target: Target) -> None:
        self.target = target
        self.started = False
        self.before: float | None = None
        self.prefix_before: tuple[float, float] | None = None  # (hits, queries): read beside the tokens

    def read(self) -> float | None:
        """The counter once it stops moving (vLLM may count a step's tokens a moment after it sent them;
        chat traffic keeps it moving: then the last read), None without /metrics."""
        t = self.target
        value = read_generation_tokens(t.base_url, t.model, t.api_key)
        for _ in range(self.READS if value is not None else 0):
            time.sleep(self.SETTLE_S)
            again = read_generation_tokens(t.base_url, t.model, t.api_key)
            if again is None or again == value:
                break
            value = again
        return value

    def start(self) -> None:
        self.started = True
        self.before = self.read()
        t = self.target
        self.prefix_before = read_prefix_cache(t.base_url, t.model, t.api_key)

    def finish(self, result: RunResult) -> RunResult:
        """`result`'s notes given both counts (or why there is no server count)."""
        if not self.started:  # the run ended before it measured: nothing to compare
            return result
        notes = result.extra
        notes.client_output_tokens = client_output_tokens(result.records)
        after = self.read() if self.before is not None else None
        if self.before is None or after is None:
            notes.server_count_missing = "no-metrics"
        elif after < self.before:
            notes.server_count_missing = "counter-reset"
        else:
            notes.server_output_tokens = round(after - self.before)
        self._prefix_cache(notes)
        return result

    def _prefix_cache(self, notes: Notes) -> None:
        """The prefix cache's hits and queries over the measured part (read after the settled token
        count: a request's lookup is counted when it is scheduled, long before its last token)."""
        t = self.target
        after = read_prefix_cache(t.base_url, t.model, t.api_key) if self.prefix_before is not None else None
        if self.prefix_before is None or after is None:
            return
        hits, queries = (a - b for a, b in zip(after, self.prefix_before))
        if hits >= 0 and queries >= 0:  # a restarted server's counters start again: no count then
            notes.prefix_cache_hits, notes.prefix_cache_queries = round(hits), round(queries)


def check_url(url: str) -> str:
    """The URL of a server to measure, or ConfigError with one sentence."""
    endpoint.root_url(url)
    return url


def server_info(url: str, api_key: str | None = None) -> tuple[list[str], int | None]:
    """The model names a running OpenAI-compatible server serves and the shortest max_model_len vLLM
    gives them (None when it does not say), from GET /v1/models."""
    found = endpoint.discover(url, api_key)
    return list(found.models), min((n for n in found.models.values() if n is not None), default=None)


def tuning_label(cfg: ServerConfig) -> str:
    """How a tuning comparison names a configuration, in the app, the CLI and History alike."""
    memory = f"KV {cfg.cpu_kvcache_gib:g} GiB" if cfg.device == "cpu" else f"{cfg.gpu_memory_utilization:g}"
    extra = [str(a) for a in cfg.extra_args]
    if "--kv-cache-memory-bytes" in extra[:-1]:  # a GPU's cache set in bytes outranks the memory fraction
        memory = f"KV {int(extra[extra.index('--kv-cache-memory-bytes') + 1]) / 2**20:,.0f} MiB"
    return f"max-model-len {cfg.max_model_len} / {memory}"


def side_label(side: str, target: Target) -> str:
    """How a side-by-side run names its server: the side, then its flags (one this app started) or its
    address (one at a URL), so a legend and History tell the two apart."""
    if target.config is not None:
        return f"{side}: {tuning_label(target.config)}"
    where = target.base_url.split("://", 1)[-1]
    return f"{side}: {where}" + (f" (max-model-len {target.max_model_len})" if target.max_model_len else "")


def sharing_said(device: str, gpus: int) -> str | None:
    """Why two servers on one machine with this `device` and this many GPUs would not be compared fairly
    side by side (they would share its CPU or its one GPU), and what to do instead; None: they need not."""
    if device == "cpu":
        return say("On CPU a second server would share this machine's cores with the first, so neither would be "
                   "measured fairly: compare configurations one after another on the Tuning page, or give the "
                   "address of a server on another machine.")
    if gpus < 2:
        return say("With one GPU a second server would share it with the first, so neither would be measured "
                   "fairly: compare configurations one after another on the Tuning page, or give the address "
                   "of a server on another machine.")
    return None


def check_tuning(configs: list[ServerConfig], spec: LoadSpec, model_max_len: int | None = None,
                 known_flags: set[str] | None = None) -> None:
    """Every configuration checked before the first restart: a ConfigError says which one is wrong."""
    if not configs:
        raise ServerBusy(say("Pick at least one configuration to compare."))
    for cfg in configs:
        cfg.validate(model_max_len=model_max_len, known_flags=known_flags)
        if spec.max_tokens is not None:
            check_max_tokens(spec.max_tokens, cfg.max_model_len or model_max_len,
                             of=mark("the max-model-len the server starts with"), fix="")


class Runner:
    """Carries out runs: each reported to `progress`, stamped, passed to `save` (which returns what to
    keep), with `mark` noting when it began and ended (the Monitor's markers). Setting `cancel` stops
    the current run, keeping what finished, and the runs after it. Given an `slo`, each load run keeps
    its goodput under it (vllm bench serve's --goodput; the app's pages judge by each viewer's own).
    `warmth` remembers the batch sizes each server instance has run, to mark a run cold or warm; the
    app's jobs share one (a Runner of its own starts with an empty memory)."""

    def __init__(self, save: Callable[[RunResult], RunResult], progress: Progress | None = None,
                 cancel: threading.Event | None = None, mark: Callable[[str], None] = lambda text: None,
                 slo: Slo | None = None, warmth: WarmthLedger | None = None):
        self.save = save
        self.progress = progress or Progress()
        self.cancel = cancel or threading.Event()
        self.mark = mark
        self.slo = slo
        self.warmth = warmth or WarmthLedger()

    def _keep(self, result: RunResult, target: Target) -> RunResult:
        """A load run finished: stamped with its server, cold or warm, its goodput under the SLO, saved."""
        if self.slo is not None:
            record_goodput(result, self.slo)
        return self.save(self._judge_warmth(target.stamp(result), target))

    def _judge_warmth(self, result: RunResult, target: Target) -> RunResult:
        """Mark the run cold when its measured batch was the first of its size on this server instance
        (engine.measure.warmth); unknown when the server does not say which start it is."""
        notes = result.extra
        notes.batch_size = peak_in_flight(result.records) or None
        notes.warmup_batch_size = peak_in_flight(result.records, warmup=True) or None
        if target.instance is not None:
            notes.server_instance = target.instance
            if (w := self.warmth.judge(target.instance, notes.batch_size or 0, notes.warmup_batch_size or 0)):
                notes.cold, notes.cold_why = w.cold, w.why
        return result

    def load(self, spec: LoadSpec, target: Target) -> RunResult:
        """One load test."""
        spec = target.aim(spec)
        self.progress.on_stage(say("sending requests"))
        self.mark(say("{scenario} start", scenario=spec.scenario))
        count = ServerCount(target)
        kv = KvWatch(target.base_url, target.api_key)  # preemptions, peak waiting and KV use while it measures
        try:
            result = loadgen.run_load(spec, observer=self.progress, cancel=self.cancel,
                                      on_measure=lambda: (count.start(), kv.start()))
        finally:
            kv.stop()
            self.mark(say("{scenario} end", scenario=spec.scenario))
        return self._keep(kv.finish(count.finish(result)), target)

    # the measured parts of a side-by-side pair start this far after both warm-ups end, on one clock
    PAIR_LEAD_S = 0.05

    def side_by_side(self, a: Target, b: Target, spec: LoadSpec) -> list[RunResult]:
        """The same load against two servers at once (issue #13 item 2): each side warms up on its own
        (not counted), then both measured parts start together on ONE clock (the same perf_counter origin,
        the same started_at), each side in its own thread through run_load, reported to
        `progress.side("A" | "B")` and saved the moment it ends, both marked with one `Notes.pair` id. A
        side that fails does not stop the other: its measured requests are saved, then the failure is
        raised (a LabError naming the side). A spec without a warm-up gets one batch of it: a cold server
        beside a warm one would be compared on its start-up work. Returns [A's run, B's run]."""
        sides = [("A", a), ("B", b)]
        spec = replace(spec, warmup=spec.warmup or min(spec.in_flight(), spec.n))
        specs = {name: t.aim(replace(spec, label=side_label(name, t))) for name, t in sides}
        pair = uuid.uuid4().hex[:12]
        origin: dict[str, float] = {}

        def start_together() -> None:  # the barrier's action: once, the moment both have warmed up
            origin["clock"] = clock() + self.PAIR_LEAD_S
            origin["epoch"] = time.time() + self.PAIR_LEAD_S
            self.progress.on_stage(say("measuring both servers"))

        barrier = threading.Barrier(len(sides), action=start_together)
        results: dict[str, RunResult] = {}
        failures: dict[str, BaseException] = {}

        def one(name: str, target: Target) -> None:
            count = ServerCount(target)
            kv = KvWatch(target.base_url, target.api_key)

            def on_measure() -> float:
                count.start()
                kv.start()
                barrier.wait()  # BrokenBarrierError when the other side failed before measuring
                return origin["clock"]

            try:
                try:
                    result = loadgen.run_load(specs[name], observer=self.progress.side(name), cancel=self.cancel,
                                              on_measure=on_measure)
                finally:
                    kv.stop()
                result.started_at = origin.get("epoch", result.started_at)
                result.extra.pair, result.extra.pair_side = pair, name
                results[name] = self._keep(kv.finish(count.finish(result)), target)
            except BaseException as e:  # noqa: BLE001 - raised below, once the other side is saved
                barrier.abort()
                failures[name] = e

        self.progress.on_stage(say("warming up both servers"))
        self.mark(say("side by side start"))
        threads = [threading.Thread(target=one, args=side, name=f"side-{side[0]}", daemon=True) for side in sides]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            self.mark(say("side by side end"))
        real = {n: e for n, e in failures.items() if not isinstance(e, threading.BrokenBarrierError)}
        if real:
            name, e = next(iter(real.items()))
            url, why = dict(sides)[name].base_url, (str(e) or type(e).__name__).rstrip(".")
            raise LabError(say("Server {side} ({url}) failed: {why}. The other server's run is saved.", side=name,
                               url=url, why=why) if results else
                           say("Server {side} ({url}) failed: {why}.", side=name, url=url, why=why)) from e
        return [results[name] for name, _ in sides]

    def sweep(self, spec: LoadSpec, levels: list[int], target: Target, rounds: int = 2) -> list[RunResult]:
        """loadgen.run_level at each level, in order; each level saved the moment it completes."""
        spec = target.aim(replace(spec, scenario="sweep"))
        out: list[RunResult] = []
        self.mark(say("sweep start"))
        try:
            for level in levels:
                if self.cancel.is_set():
                    break
                self.progress.on_step(len(out), len(levels), say("concurrency {level}", level=level))
                count = ServerCount(target)
                result = loadgen.run_level(spec, level, observer=self.progress, cancel=self.cancel, rounds=rounds,
                                           on_measure=count.start)
                out.append(self._keep(count.finish(result), target))
            self.progress.on_step(len(out), len(levels), mark("done"))
        finally:
            self.mark(say("sweep end"))
        return out

    def tuning(self, server: VLLMServer, configs: list[ServerConfig], spec: LoadSpec,
               model_max_len: int | None = None, labels: list[str] | None = None) -> list[RunResult]:
        """Restart `server` with each configuration and run the same load on it (notebook step 4);
        the server is left running with the last one. `labels` names the configurations (default:
        tuning_label); the runs keep the spec's scenario ("tuning" when it has none)."""
        out: list[RunResult] = []
        for i, cfg in enumerate(configs):
            if self.cancel.is_set():
                break
            label = labels[i] if labels else tuning_label(cfg)
            self.progress.on_step(len(out), len(configs), say("{label}: restarting vLLM", label=label))
            server.restart(cfg, model_max_len=model_max_len)
            server.wait_ready(on_stage=lambda s, label=label: self.progress.on_stage(
                say("{label}: {stage}", label=label, stage=s.stage)))
            self.progress.on_stage(say("{label}: measuring", label=label))
            out.append(self.load(replace(spec, scenario=spec.scenario or "tuning", label=label), Target.of(server)))
        self.progress.on_step(len(out), len(configs), mark("done"))
        return out

    def naive(self, spec) -> RunResult:
        """The transformers baseline (spec: engine.measure.naive.NaiveSpec) in its own worker process."""
        from engine.measure import naive

        self.mark(say("naive start"))
        try:
            result = naive.run_naive(spec, observer=self.progress, cancel=self.cancel)
        finally:
            self.mark(say("naive end (memory returned)"))
        result.hardware = result.hardware or hardware.describe()
        result.versions = result.versions or hardware.versions()
        if self.slo is not None:
            record_goodput(result, self.slo)
        return self.save(result)
