"""Lab: the one facade the pages and the CLI hold. It owns the server, the jobs, the run store and the
telemetry sampler, and turns each user action into one call.

Every action that changes state or costs compute is a `@presenter_only` method: it takes the caller's
`token` (and `caller`, an IP or session id, for throttling wrong tokens) and is refused here, in the
engine, whatever a page drew (see access.py). Reading (snapshots, jobs, the store's lists) is open."""
from __future__ import annotations

import functools
import os
import shlex
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from engine.access import Access
from engine.errors import ConfigError, LabError, NotPresenter, ServerBusy
from engine.jobs import Job, JobManager
from engine.measure.chat import ChatRate, stream_chat
from engine.measure.warmth import WarmthLedger, recall_from
from engine.messages import mark, say
from engine.observe import hardware, nvml
from engine.observe.telemetry import Telemetry
from engine.results.records import RequestRecord, RunResult
from engine.results.store import RunStore
from engine.runs import Runner, Target, check_tuning
from engine.serving import leftovers as orphans
from engine.serving import models, vllm_log
from engine.serving import server as server_mod
from engine.serving.config import ServerConfig
from engine.serving.endpoint import Watch, masked
from engine.serving.flags import known_flags
from engine.serving.server import READY, STARTING, VLLMServer

DEFAULT_PORT = int(os.environ.get("SERVING_LAB_VLLM_PORT", "9000"))


@dataclass(frozen=True)
class Attached:
    """The server at a URL the app measures instead of its own, as the pages show it: never its key."""

    url: str  # its root (no /v1, no secrets)
    model: str
    models: tuple[str, ...]  # every model it serves
    max_model_len: int | None
    vllm: bool  # it says it is vLLM (model cards or /metrics)
    metrics: bool  # vLLM's /metrics readable: the Monitor's counters and each run's server token count
    metrics_said: str  # why not, when not (a Message)
    version: str | None
    key: str  # masked: "" without one
    kv_capacity_tokens: int | None = None  # its KV cache, as its /metrics state it
    answering: bool = True  # it answered the last checks (engine.serving.endpoint.Watch)
    said: str = ""  # the sentence about it: why it stopped answering, or (for a while) that it answers again


FULL_LEVELS = (1, 4, 16, 64, 128, 256)  # a GPU's sweep: up to where its batch fills
NEUTRAL_LEVELS = (1, 4, 16, 64)  # a server that does not say what it holds


@dataclass(frozen=True)
class LoadDefaults:
    """What the Load test page offers first, following the server it measures."""

    in_flight_max: int  # the end of the "requests in flight" slider
    sweep_levels: tuple[int, ...]  # the sweep's levels, selected at first
    sweep_max_tokens: int  # tokens a sweep request asks for
    said: str = ""  # why these, for a server at a URL (a Message)


@dataclass
class FitReport:
    """Weights + KV cache at these settings against the memory there is."""

    level: str  # "ok" | "warn" | "error"
    message: str
    weights_gb: float | None = None
    kv_gb: float | None = None
    available_gb: float | None = None


def presenter_only(fn):
    """Make a Lab method an action: `token=` and `caller=` are checked before it runs."""

    @functools.wraps(fn)
    def action(self: "Lab", *args, token: str | None = None, caller: str | None = None, **kw):
        self.access.check(token, caller)
        return fn(self, *args, **kw)

    action.presenter_only = True
    return action


class Lab:
    def __init__(self, port: int = DEFAULT_PORT, store: RunStore | None = None, telemetry_interval_s: float = 1.0,
                 listen_host: str = "127.0.0.1", presenter_token: str | None = None):
        self.server = VLLMServer(port=port)
        self.remote: Target | None = None  # a server at a URL, measured instead of our own (attach)
        self._watch: Watch | None = None  # whether it still answers, checked for every viewer at once
        self._back: tuple[float, str] | None = None  # when it answered again, and the sentence that says so
        self._remote_lock = threading.Lock()  # attach/detach against the watch's re-discovery
        self.jobs = JobManager()
        self.store = store or RunStore()
        self.telemetry = Telemetry(
            server_pid=lambda: self.server.snapshot().pid,
            metrics_url=self._metrics_url,
            metrics_headers=self._metrics_headers,
            extra_pids=self._worker_pids,
            interval_s=telemetry_interval_s,
            on_scrape=self._scraped,
        )
        self.device = self.telemetry.device
        self.access = Access(presenter_token or os.environ.get("SERVING_LAB_PRESENTER_TOKEN"), listen_host)
        self._flags: set[str] | None = None
        self.chat_rate = ChatRate()
        # The batch sizes each server instance has run, shared by every job (cold or warm runs); an
        # instance first met here (an adopted server) is recalled from the history
        self.warmth = WarmthLedger(lambda instance: recall_from((r.extra for r in self.store.list(kind="vllm")),
                                                               instance))
        self._foreign: tuple[float, str | None] = (-1e9, None)
        self._other_ports: tuple[float, str | None] = (-1e9, None)
        self.chat_under_load = False
        self._chats: deque[list] = deque(maxlen=1000)  # [start, end or None] epoch s of recent chat answers
        self._chat_lock = threading.Lock()
        threading.Thread(target=self._warm_up, daemon=True, name="lab-warm-up").start()
        self.telemetry.start()

    # -- who may act --------------------------------------------------------------------------
    def may_act(self, token: str | None) -> bool:
        """For drawing buttons; the actions themselves check again (access.Access.check)."""
        return self.access.may_act(token)

    # -- models and settings ------------------------------------------------------------------
    def models(self) -> list[models.ModelSpec]:
        return models.catalogue()

    @presenter_only
    def prepare_model(self, kind: str) -> Job:
        """Fetch and convert one of the app's own models ("embedded" | "shape-only") in the background:
        a download, so only on the presenter's request, never as a side effect of drawing a page."""
        work = {"embedded": lambda job: models.prepare_embedded(log=job.on_stage),
                "shape-only": lambda job: models.prepare_shape_only()}[kind]
        return self.jobs.submit("prepare", say("preparing the {kind} model", kind=kind), work, lane="prepare")

    def default_config(self, spec: models.ModelSpec, port: int | None = None) -> ServerConfig:
        return ServerConfig.for_model(spec, self.device, port=port or self.server.port)

    def fit_check(self, cfg: ServerConfig, spec: models.ModelSpec) -> FitReport:
        shape = spec.shape
        if shape is None:
            return FitReport("ok", say("The model's size is unknown here; vLLM will report what fits when it starts."))
        dtype_bytes = 4 if cfg.dtype == "float32" else 2
        weights = shape.weight_bytes(dtype_bytes) / 1024**3
        per_seq = shape.kv_bytes_per_token(dtype_bytes) * (cfg.max_model_len or shape.max_len) / 1024**3
        if self.device == "cuda":
            # Per GPU: a copy of the model is split tensor x pipeline ways (weights and KV cache alike), and
            # the smallest GPU picked sets the room every slice gets. Data-parallel copies each hold the lot.
            split = cfg.tensor_parallel_size * cfg.pipeline_parallel_size
            gpus = [g for g in nvml.devices() if not cfg.gpus or g["index"] in cfg.gpus]
            total = min(g["total"] for g in gpus) / 1024**3 if gpus else 0
            budget = total * cfg.gpu_memory_utilization
            weights, per_seq = weights / split, per_seq / split
            kv_room = budget - weights - 1.0  # ~1 GiB for activations and CUDA graphs
            where = say("{fraction:.0%} of {total:.0f} GiB GPU memory", fraction=cfg.gpu_memory_utilization,
                        total=total) if split * cfg.data_parallel_size == 1 else \
                say("{fraction:.0%} of {total:.0f} GiB on each of {gpus} GPUs", fraction=cfg.gpu_memory_utilization,
                    total=total, gpus=cfg.gpus_needed)
        else:
            import psutil

            total = psutil.virtual_memory().available / 1024**3
            budget = total
            kv_room = cfg.cpu_kvcache_gib
            where = say("{kv:g} GiB CPU KV cache ({total:.0f} GiB RAM free)", kv=cfg.cpu_kvcache_gib, total=total)
            if weights + kv_room + 1 > total:
                return FitReport("error", say("Weights ({weights:.1f} GiB) plus the KV cache ({kv:g} GiB) exceed the "
                                              "{total:.0f} GiB of free RAM: lower the KV cache size or pick a smaller "
                                              "model.", weights=weights, kv=kv_room, total=total),
                                 weights, per_seq, total)
        if kv_room <= 0:
            return FitReport("error", say("The weights alone ({weights:.1f} GiB) do not fit in {where}: raise "
                                          "gpu-memory-utilization, use more GPUs, or pick a smaller model.",
                                          weights=weights, where=where), weights, per_seq, budget)
        seqs = kv_room / per_seq * (cfg.data_parallel_size if self.device == "cuda" else 1) if per_seq else float("inf")
        if seqs < 1:
            return FitReport("error", say("One full {max_len}-token sequence needs {per_seq:.2f} GiB of KV cache "
                                          "but only {kv:.2f} GiB is left in {where}: lower max-model-len or give vLLM "
                                          "more memory.", max_len=cfg.max_model_len, per_seq=per_seq, kv=kv_room,
                                          where=where),
                             weights, per_seq, budget)
        level = "warn" if seqs < 4 else "ok"
        if self.device == "cuda" and cfg.gpus_needed > 1:
            return FitReport(level, say("Weights {weights:.1f} GiB per GPU; KV cache room for about {seqs:,.0f} full "
                                        "{max_len}-token sequences in all, in {where}.", weights=weights, seqs=seqs,
                                        max_len=cfg.max_model_len, where=where), weights, per_seq, budget)
        return FitReport(level, say("Weights {weights:.1f} GiB; KV cache room for about {seqs:,.0f} full "
                                    "{max_len}-token sequences in {where}.", weights=weights, seqs=seqs,
                                    max_len=cfg.max_model_len, where=where), weights, per_seq, budget)

    # -- server -------------------------------------------------------------------------------
    @presenter_only
    def start_server(self, cfg: ServerConfig, spec: models.ModelSpec | None = None) -> None:
        self._start(cfg, spec)

    @presenter_only
    def stop_server(self) -> None:
        self.server.stop()

    @presenter_only
    def restart_server(self, cfg: ServerConfig, spec: models.ModelSpec | None = None) -> None:
        self.server.stop()
        self._start(cfg, spec)

    def _start(self, cfg: ServerConfig, spec: models.ModelSpec | None) -> None:
        if self.remote is not None:
            raise ServerBusy(say("The app is connected to {url}: disconnect on the Server page first, then start a "
                                 "server here.", url=self.remote.base_url))
        if self.device == "cuda" and self._worker_pids():
            raise ServerBusy(say("The naive baseline still holds the GPU: wait for it to finish or cancel it, then "
                                 "start vLLM."))
        self.server.start(cfg, model_max_len=spec.max_len if spec else None, known_flags=self._flags)

    # -- a server this app did not start ---------------------------------------------------------
    @presenter_only
    def attach(self, url: str, api_key: str | None = None, model: str | None = None) -> Attached:
        """Measure the OpenAI-compatible server at `url` instead of our own, for every page and viewer,
        until detach(). The key stays in this process's memory: sent with each request, never stored,
        logged or shown. An EndpointError (one sentence) when it cannot be measured."""
        if self.server.snapshot().state in (READY, STARTING):
            raise ServerBusy(say("This app's own vLLM server is running: stop it first, then connect (the app "
                                 "measures one server at a time)."))
        if (job := self.measuring()) is not None:
            raise ServerBusy(say("'{label}' is measuring: wait for it to end or cancel it, then connect.",
                                 label=job.label))
        target = Target.at(url, model or None, api_key or None)
        with self._remote_lock:
            self.remote, self._back = target, None
            self._watch = Watch(target.base_url, target.api_key, target.started)
        self.server.mark(say("connected to {url}", url=target.base_url))
        return self.attached()

    @presenter_only
    def detach(self) -> None:
        """Forget the attached server (and its key); the app's own server can be started again."""
        with self._remote_lock:
            if self.remote is not None:
                self.server.mark(say("disconnected from {url}", url=self.remote.base_url))
            self.remote, self._watch, self._back = None, None, None

    # Is the attached server still there: the telemetry's /metrics scrape (or, without /metrics, a GET
    # /v1/models every few seconds) tells the Watch each tick; an action checks once more before it starts.
    BACK_SHOWN_S = 120.0  # how long "it answers again" stays on the pages

    def _scraped(self, url: str | None, resp, error) -> None:
        """The telemetry's tick: what the attached server's /metrics answered, or a check of our own."""
        watch, target = self._watch, self.remote
        if watch is None or target is None:
            return
        if url is not None and url.startswith(target.base_url + "/"):
            self._heard(watch, watch.heard(time.time(), resp, error))
        else:
            self._heard(watch, watch.probe(time.time(), metrics=False))

    def _heard(self, watch: Watch, event: str | None) -> None:
        """Act on what the watch saw: stop the runs a dead server would only fail, or discover the server
        anew once it answers again (it may have restarted with another model)."""
        if event == "down":
            self.server.mark(say("{url} stopped answering", url=watch.base_url))
            for job in self.jobs.active():
                if job.kind in ("load", "sweep"):  # what finished is kept; the rest could only fail
                    job.error = watch.said()
                    job.cancel.set()
        elif event in ("back", "restarted"):
            old = self.remote
            if old is None:
                return
            try:
                new, said = old.again(watch.down_since if event == "back" else None)
            except LabError as e:  # it answers, but cannot be measured (yet): still down, in its words
                watch.failed(e.args[0] if e.args else str(e))
                return
            with self._remote_lock:
                if self._watch is not watch:
                    return  # disconnected (or connected elsewhere) meanwhile
                self.remote, self._back = new, (time.time(), said)
                watch.recovered(new.started)
            self.server.mark(say("{url} answers again", url=watch.base_url))

    def _watched(self, work: Callable[[Job], object]) -> Callable[[Job], object]:
        """A run at a server at a URL whose requests failed because it went away ends in the one sentence
        (what finished before is saved as ever), even before the watch's next tick has seen it go."""
        def run(job: Job):
            result = work(job)
            runs = result if isinstance(result, list) else [result]
            if self._watch is not None and job.error is None and any(
                    r.error for run in runs for r in run.measured):
                try:
                    self._answering()
                except ServerBusy as e:
                    job.error = e.args[0]
            return result
        return run

    def _answering(self) -> None:
        """Before an action aimed at the attached server: ServerBusy with the one sentence when it does not
        answer, checked now (one request per action, never per page drawn)."""
        if (watch := self._watch) is None:
            return
        self._heard(watch, watch.probe(time.time(), metrics=False, force=True))
        if not watch.answering:
            raise ServerBusy(watch.said())

    def _target(self) -> Target:
        """What runs and chat aim at: the attached server, else our own ready one (ServerBusy)."""
        return self.remote or Target.of(self.server)

    def _aim(self) -> Target:
        """What a run aims at, checked to answer when it is a server at a URL (ServerBusy: the sentence)."""
        self._answering()
        return self._target()

    def leftovers(self) -> str | None:
        """The sentence about an earlier server's processes still holding memory, if there are any."""
        left = orphans.leftovers()
        return orphans.leftovers_sentence(left) if left else None

    @presenter_only
    def clear_leftovers(self) -> str | None:
        return orphans.clear_leftovers()

    def servers_on_other_ports(self) -> str | None:
        """The sentence about this app's servers still running on another port (not managed here), if any;
        looked up at most every few seconds, like the foreign holders."""
        now = time.monotonic()
        if now - self._other_ports[0] > 5:
            self._other_ports = (now, orphans.on_other_ports(self.server.port))
        return self._other_ports[1]

    def foreign_holders(self) -> str | None:
        """Processes this app did not start that hold the memory vLLM needs (named, never touched);
        looked up at most every few seconds, since every viewer's Server page asks."""
        now = time.monotonic()
        if now - self._foreign[0] > 5:
            self._foreign = (now, orphans.foreign_holders())
        return self._foreign[1]

    def server_ready(self) -> ServerConfig:
        """The settings of our own ready server (ServerBusy when it is not ready)."""
        cfg = Target.of(self.server).config
        assert cfg is not None
        return cfg

    # -- measurements -------------------------------------------------------------------------
    # Each is a job running an engine.runs.Runner: the orchestration the CLI shares. The spec is
    # checked against the server before the job is queued, so a page hears a ConfigError at once.
    def _runner(self, job: Job) -> Runner:
        return Runner(self._save, progress=job, cancel=job.cancel, mark=self.server.mark, warmth=self.warmth)

    @presenter_only
    def run_load(self, spec, label: str | None = None) -> Job:
        """Submit a load test against the running server (spec: engine.measure.spec.LoadSpec)."""
        target = self._aim()
        spec = target.aim(spec)
        return self.jobs.submit("load", label or spec.label or spec.scenario,
                                self._watched(lambda job: self._runner(job).load(spec, target)))

    @presenter_only
    def run_sweep(self, spec, levels: list[int]) -> Job:
        target = self._aim()
        spec = target.aim(spec)
        return self.jobs.submit("sweep", say("sweep {first}…{last}", first=levels[0], last=levels[-1]),
                                self._watched(lambda job: self._runner(job).sweep(spec, levels, target)))

    @presenter_only
    def run_tuning(self, configs: list[ServerConfig], spec, labels: list | None = None) -> Job:
        """Restart vLLM with each config, run the same workload, keep each run (notebook step 4); `labels`
        names the configurations (a scenario's config_labels; default: their flags)."""
        if self.remote is not None:
            raise ServerBusy(say("Tuning restarts a server this app started, and {url} is not one: disconnect on "
                                 "the Server page to tune a server here.", url=self.remote.base_url))
        check_tuning(configs, spec, known_flags=self._flags)
        return self.jobs.submit("tuning", say("tuning comparison"),
                                lambda job: self._runner(job).tuning(self.server, configs, spec, labels=labels))

    @presenter_only
    def run_prefix_cache(self, spec) -> Job:
        """The prefix-cache scenario (issue #12 item 3): restart vLLM with prefix caching on, then off,
        each otherwise as the last started server, and send `spec` (the scenario's) to each."""
        scn = self.scenario("prefix-cache")
        base = self.server.snapshot().config
        if base is None:
            raise ServerBusy(say("Start the server once on the Server page: tuning reuses its model and other "
                                 "settings."))
        configs = [base.with_changes(**c) for c in scn.configs]
        check_tuning(configs, spec, known_flags=self._flags)
        return self.jobs.submit("prefix-cache", say("prefix caching on vs off"),
                                lambda job: self._runner(job).tuning(self.server, configs, spec,
                                                                     labels=list(scn.config_labels)))

    @presenter_only
    def run_side_by_side(self, url_b: str, spec, api_key_b: str | None = None, shared_ok: bool = False) -> Job:
        """The same load against the server the app measures (A: its own or the attached one) and the one at
        `url_b` (B) at once, on one clock (Runner.side_by_side; issue #13 item 2). B is discovered first: a
        dead address, an answer that is not an OpenAI-style server or a refused key is one sentence and
        nothing runs. Two servers sharing this machine's CPU or its one GPU are refused with
        side_by_side_here()'s sentence unless `shared_ok` (the numbers then show the sharing too)."""
        a = self._aim()  # an attached server that stopped answering: its sentence, before B is asked
        b = Target.at(url_b, None, api_key_b or None)
        if a.same_server(b):
            raise ConfigError(say("{url} is the server the app already measures: give the address of a second "
                                  "one.", url=b.base_url))
        if not shared_ok and (why := self._sharing(a, b)):
            raise ServerBusy(why)
        a.aim(spec)
        b.aim(spec)
        return self.jobs.submit("side-by-side", say("two servers side by side"),
                                lambda job: self._runner(job).side_by_side(a, b, spec))

    @presenter_only
    def run_naive(self, spec) -> Job:
        """Submit the transformers baseline (spec: naive.NaiveSpec) in its own worker process."""
        if self.device == "cuda" and self.server.snapshot().state in (READY, STARTING):
            raise ServerBusy(say("vLLM holds most of the GPU memory: stop the server first, run the naive baseline, "
                                 "then start vLLM again (the lab's order)."))

        def work(job: Job) -> RunResult:
            try:
                return self._runner(job).naive(spec)
            finally:
                job.worker_pid = None

        return self.jobs.submit("naive", spec.label or spec.scenario, work)

    @presenter_only
    def cancel_job(self, job_id: str) -> None:
        self.jobs.cancel(job_id)

    # -- history ------------------------------------------------------------------------------
    @presenter_only
    def import_runs(self, data: bytes, name: str) -> list[str]:
        """Runs from an uploaded export: its bytes are parsed, never taken as a path on this machine."""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise LabError(say("'{name}' is not a text file (not UTF-8): pick the JSON file Serving Lab or "
                               "vllm bench serve wrote.", name=name)) from None
        return self.store.import_text(text, source=f"import:{name}")

    @presenter_only
    def delete_runs(self, ids: list[str]) -> int:
        return self.store.delete(ids)

    @presenter_only
    def import_examples(self) -> list[str]:
        return self.store.import_examples()

    # -- chat ---------------------------------------------------------------------------------
    def chat(self, messages: list[dict], record: RequestRecord, *, max_tokens: int = 300, temperature: float = 0.7,
             stop: threading.Event | None = None, on_wait: Callable[[str], None] | None = None,
             token: str | None = None, caller: str | None = None) -> Iterator[str]:
        """Stream an answer from the running server into `record`. The presenter may always chat. A viewer
        may within ChatLimits, and not while a benchmark measures, since chat traffic would distort the
        numbers the room is watching: the message waits (on_wait says why) unless the presenter allowed
        chat under load. Runs that had chat traffic beside them are marked (see _save)."""
        presenter = self.access.may_act(token)
        if not presenter:
            if self.access.locked:
                raise NotPresenter(self.access.why_not())
            self.chat_rate.admit(caller or "anonymous", messages, max_tokens)
        target = self._target()
        if (watch := self._watch) is not None and not watch.answering:
            raise ServerBusy(watch.said())
        while not presenter and not self.chat_under_load and (job := self.measuring()) is not None:
            if on_wait is not None:
                on_wait(say("'{label}' is measuring: your message is sent the moment it ends.", label=job.label))
            if (stop.wait(0.5) if stop is not None else time.sleep(0.5)):
                return
        span = [time.time(), None]
        with self._chat_lock:
            self._chats.append(span)
        try:
            yield from stream_chat(target.base_url, target.model, messages, record, max_tokens=max_tokens,
                                   temperature=temperature, api_key=target.api_key, stop=stop)
        except LabError:
            if watch is not None:  # a server at a URL that went away says so in the one sentence
                self._answering()
            raise
        finally:
            span[1] = time.time()

    @presenter_only
    def allow_chat_under_load(self, allow: bool) -> None:
        """Chatting during a load test is a fair demo of TTFT under load; the presenter decides."""
        self.chat_under_load = allow

    def measuring(self) -> Job | None:
        """The benchmark running now, if any."""
        return next(iter(self.jobs.active()), None)

    def _chats_beside(self, start: float, end: float) -> int:
        with self._chat_lock:
            return sum(1 for s, e in self._chats if s <= end and (e is None or e >= start))

    # -- saving -------------------------------------------------------------------------------
    def _save(self, result: RunResult) -> RunResult:
        """Keep a run that measured anything, marked when chat traffic ran beside it."""
        if n := self._chats_beside(result.started_at, result.started_at + result.duration):
            result.extra.chat_requests_beside = n
        if result.measured:
            self.store.save(result)
        return result

    # -- internals ----------------------------------------------------------------------------
    def _worker_pids(self) -> dict[str, int]:
        """The naive baseline's worker while it lives, for the memory charts (and the GPU's owner)."""
        return {mark("naive worker"): j.worker_pid for j in self.jobs.active() if j.worker_pid}

    def _metrics_url(self) -> str | None:
        if (remote := self.remote) is not None:
            return remote.base_url + "/metrics" if remote.endpoint and remote.endpoint.metrics else None
        snap = self.server.snapshot()
        return snap.config.base_url + "/metrics" if snap.state == READY and snap.config else None

    def _metrics_headers(self) -> dict[str, str]:
        key = self.remote.api_key if self.remote is not None else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _warm_up(self) -> None:
        """While the app starts: the flags this vLLM knows, then the machine's description, whose CPU memory
        bandwidth (a second of copying, once per process) is best measured before a run competes for it."""
        self._flags = known_flags()
        hardware.describe()

    def shutdown(self) -> None:
        self.telemetry.stop()

    # -- for the pages ------------------------------------------------------------------------
    # What the pages read, so that a page imports only `ui`, this module (Lab, LabError) and
    # engine.figures (tests/test_layering.py), and never reaches into the server, jobs, store or
    # telemetry Lab owns. Reading only: each action a page takes is one of the methods above.
    STOPPED, STARTING, READY, STOPPING, FAILED = (server_mod.STOPPED, server_mod.STARTING, server_mod.READY,
                                                  server_mod.STOPPING, server_mod.FAILED)
    # SHAPE_ONLY_NOTE says a shape-only model's text is noise; ModelNotPrepared (a LabError): one of the
    # app's own models is not fetched yet. (Imported here: in this class body `models` is the method.)
    from engine.serving.models import SHAPE_ONLY_NOTE, ModelNotPrepared

    # server
    def server_snapshot(self) -> server_mod.Snapshot:
        """The server's state, stage, config, events and log tail, read at once (a copy)."""
        return self.server.snapshot()

    @property
    def server_port(self) -> int:
        return self.server.port

    def serving_max_len(self) -> int | None:
        """The ready server's max-model-len (it refuses longer answers); None while none is ready, or
        when the attached server does not say."""
        if self.remote is not None:
            return self.remote.max_model_len
        snap = self.server.snapshot()
        return snap.config.max_model_len if snap.state == READY and snap.config else None

    def ready(self) -> bool:
        """A server to measure and chat with: an attached one, or our own once ready."""
        return self.remote is not None or self.server.snapshot().state == READY

    def side_by_side_here(self) -> str | None:
        """Why two servers on this machine cannot be compared fairly side by side (its CPU, or its one GPU,
        would be shared), with what to do instead; None with two GPUs or more."""
        from engine.runs import sharing_said

        return sharing_said(self.device, len(nvml.devices()))

    def _sharing(self, a: Target, b: Target) -> str | None:
        """side_by_side_here()'s sentence when both servers run on this machine, else None."""
        return self.side_by_side_here() if a.on_this_machine and b.on_this_machine else None

    def second_server_command(self, port: int | None = None) -> str | None:
        """The command that starts a second server like the running one on another GPU (then connected
        side by side by URL; the app itself runs one server), None without two GPUs or a started server."""
        cfg = self.server.snapshot().config
        gpus = sorted(nvml.devices(), key=lambda g: g["index"])
        if cfg is None or self.device != "cuda" or len(gpus) < 2:
            return None
        used = set(cfg.gpus) or set(range(cfg.gpus_needed))
        free = [g["index"] for g in gpus if g["index"] not in used] or [gpus[-1]["index"]]
        model = ("embedded" if cfg.model == str(models.embedded_dir()) else
                 cfg.model if os.path.isdir(cfg.model) else f"hub:{cfg.model}")
        argv = ["python", "-m", "engine", "serve", "--model", model, "--port", str(port or cfg.port + 1),
                "--gpus", str(free[0]), "--max-model-len", str(cfg.max_model_len),
                "--gpu-memory-utilization", f"{cfg.gpu_memory_utilization:g}", "--detach"]
        return " ".join(shlex.quote(x) for x in argv)

    def live_pair(self, job_id: str) -> tuple[list[RunResult], float]:
        """A side-by-side job's two sides so far (finished and in-flight requests, or each side's run once
        it ended) as runs for the charts, A first, and the seconds since their shared clock started."""
        job = self.jobs.get(job_id)
        runs = []
        for name, side in sorted(job.sides.items()) if job else ():
            runs.append(side.result if isinstance(side.result, RunResult) else
                        RunResult(kind="vllm", scenario="live", label=side.label, records=side.live_records(),
                                  duration=0, started_at=side.run_start or job.started_at))
        start = min((s.run_start for s in job.sides.values() if s.run_start), default=None) if job else None
        return runs, max(0.0, time.time() - start) if start else 0.0

    def pair_of(self, run_id: str) -> list[RunResult]:
        """A saved side-by-side run and its partner, A first ([] for a run not measured in a pair)."""
        run = self.run(run_id)
        if not run.extra.pair:
            return []
        rows = [r for r in self.runs() if r.extra.pair == run.extra.pair and not r.problem]
        return [self.run(r.id) for r in sorted(rows, key=lambda r: r.extra.pair_side)]

    def attached(self) -> Attached | None:
        """The server at a URL the app measures now, as the pages show it (its key masked); None: our own."""
        t = self.remote
        if t is None or t.endpoint is None:
            return None
        e, watch, back = t.endpoint, self._watch, self._back
        answering = watch is None or watch.answering
        said = watch.said() if not answering else back[1] if back and time.time() - back[0] < self.BACK_SHOWN_S else ""
        return Attached(t.base_url, t.model, tuple(e.models), t.max_model_len, e.vllm, e.metrics, e.metrics_said,
                        e.version, masked(t.api_key), t.kv_cache_tokens, answering, said)

    def startup_fraction(self, stage: str) -> float:
        """How far a starting server has come, by the startup stage its log shows (for a progress bar)."""
        names = [name for name, _ in vllm_log.STAGES]
        return (names.index(stage) + 1) / len(names) if stage in names else 0.05

    def busy(self) -> bool:
        """Anything moving: the server starting or stopping, a job running, or requests inside vLLM."""
        newest = self.telemetry.latest()
        return (self.server.snapshot().state in (STARTING, server_mod.STOPPING) or self.measuring() is not None
                or bool(newest and (newest.metrics.get("running") or newest.metrics.get("waiting"))))

    # models and settings
    def model(self, kind: str, where: str = "") -> models.ModelSpec:
        """A model as the Server page offers it: "embedded" or "shape-only" (ModelNotPrepared until
        prepare_model fetched it; drawing never fetches), "local" (`where`: a folder) or "hub" (`where`: an id)."""
        if kind == "embedded":
            return models.embedded()
        if kind == "shape-only":
            return models.shape_only_llama3_8b()
        return models.local(where) if kind == "local" else models.hub(where)

    @property
    def presets(self) -> tuple:
        """The lab's server settings (engine.serving.config.Preset: name, description, changes)."""
        from engine.serving.config import PRESETS

        return PRESETS

    @property
    def max_num_seqs_limit(self) -> int:
        from engine.serving.config import MAX_NUM_SEQS

        return MAX_NUM_SEQS

    def gpu_choices(self) -> dict[int, str]:
        """{index: "0 · NVIDIA H200, 141 GB"} for the GPU picker; {} without an NVIDIA GPU."""
        return {g["index"]: f"{g['index']} · {g['name']}, {g['total'] / 1e9:,.0f} GB" for g in nvml.devices()}

    def cluster_commands(self, cfg: ServerConfig, head: str, nodes: int, gpus_per_node: int,
                         port: int = 8000) -> list:
        """What to run on each machine to serve `cfg`'s model from a Ray cluster (serving/cluster.py);
        a ConfigError says what is wrong with the inputs."""
        from engine.serving.cluster import ray_commands

        return ray_commands(cfg, head, nodes, gpus_per_node, port)

    def server_config(self, spec: models.ModelSpec, extra_flags: str = "", **settings) -> ServerConfig:
        """`spec`'s default settings with the page's `settings` and the extra flags as typed, checked:
        a ConfigError says what is wrong."""
        from engine.serving.config import parse_extra_args

        cfg = self.default_config(spec).with_changes(extra_args=parse_extra_args(extra_flags), **settings)
        cfg.validate(model_max_len=spec.max_len)
        return cfg

    def tuning_configs(self, rows: list[tuple[int, float]]) -> list[ServerConfig]:
        """The Tuning table's rows, (max-model-len, GPU memory fraction; on CPU the KV cache GiB), as
        the last started server's settings with those changes."""
        base = self.server.snapshot().config
        if base is None:
            raise ServerBusy(say("Start the server once on the Server page: tuning reuses its model and other "
                                 "settings."))
        cpu = self.device == "cpu"
        return [base.with_changes(max_model_len=int(n), **({"cpu_kvcache_gib": float(mem)} if cpu else
                                                           {"gpu_memory_utilization": mem})) for n, mem in rows]

    # workloads
    def scenario_configs(self, name: str) -> list[ServerConfig]:
        """A comparison scenario's configurations (kv-squeeze: a squeezed cache, then room to spare) as
        the last started server's settings with its changes."""
        base = self.server.snapshot().config
        if base is None:
            raise ServerBusy(say("Start the server once on the Server page: tuning reuses its model and other "
                                 "settings."))
        from engine.measure import scenarios

        return scenarios.configs_for(self.scenario(name), base)

    @staticmethod
    def kv_rows(runs: list[RunResult]) -> list[dict]:
        """Per configuration: KV capacity, tokens needed, peak use, preemptions, peak waiting, median
        TTFT, throughput (engine.measure.kvcache.row: numbers, keyed by data names)."""
        from engine.measure import kvcache

        return [kvcache.row(r) for r in runs]

    def scenario(self, name: str):
        """A named workload of the catalogue (engine.measure.scenarios.Scenario)."""
        from engine.measure import scenarios

        return scenarios.get(name)

    def load_spec(self, scenario: str, **over):
        """The load spec of a named workload with the page's changes (None keeps the workload's own)."""
        return self.scenario(scenario).load_spec(**over)

    def naive_spec(self, scenario: str, model: models.ModelSpec, **over):
        """The naive baseline's spec of a named workload on `model`."""
        return self.scenario(scenario).naive_spec(model.path, model.placeholder_text, **over)

    def load_defaults(self) -> LoadDefaults:
        """What the Load test page offers first: for our own server, what this machine's device runs in
        reasonable time; for a server at a URL, what it said about itself (its max-model-len, its KV
        cache's capacity from /metrics), since this machine's cores or GPUs say nothing about it."""
        limit = self.serving_max_len() or 128
        remote = self.remote
        if remote is None:
            cpu = self.device == "cpu"
            return LoadDefaults(64 if cpu else 256, (1, 2, 4, 8, 16) if cpu else FULL_LEVELS,
                                min(64 if cpu else 128, limit))
        tokens = min(128, limit)
        capacity = remote.kv_cache_tokens  # its /metrics' cache_config_info, read when it was discovered
        if not capacity:
            return LoadDefaults(256, NEUTRAL_LEVELS, tokens, say(
                "{url} does not say how big its KV cache is (no vLLM /metrics): the sweep offers {levels} requests in "
                "flight; add levels to go further.", url=remote.base_url,
                levels=", ".join(map(str, NEUTRAL_LEVELS))))
        per_request = tokens + self.scenario("sweep").prompt_tokens_guess
        fits = max(1, int(capacity // per_request))
        # every level that fits in its KV cache at once, and the next one up: where requests start to wait
        levels = tuple(n for i, n in enumerate(FULL_LEVELS) if i == 0 or FULL_LEVELS[i - 1] <= fits)
        return LoadDefaults(256, levels, tokens, say(
            "The sweep's levels follow the KV cache of {url}: its {capacity:,} tokens hold about {fits:,} of the "
            "sweep's requests ({per} tokens each) at once, so the sweep goes to {top} in flight.",
            url=remote.base_url, capacity=int(capacity), fits=fits, per=per_request, top=levels[-1]))

    def sweep_spec(self):
        """The sweep's workload (load_defaults: its tokens per request follow the server)."""
        return self.load_spec("sweep", max_tokens=self.load_defaults().sweep_max_tokens)

    def load_test_spec(self, shape: str, num_requests: int, max_tokens: int, *, ignore_eos: bool = False,
                       rate: float | None = None, concurrency: int | None = None, synthetic: bool = False,
                       warmup: bool = True):
        """The Load test page's workload: the lab's 10 prompts (or seeded synthetic ones) sent `shape`-wise,
        checked against the ready server (ConfigError), and named by what happens: how many requests were
        really in flight, or the arrival rate. With `warmup`, one batch as big as the measured part's is
        sent first and not counted (engine.measure.warmth: the first batch of a size pays start-up work)."""
        from engine.measure import prompts

        plist = prompts.seeded_prompts(num_requests) if synthetic else prompts.LAB_CONCURRENT
        spec = self.load_spec("concurrent-10", prompts=list(plist), shape=shape, num_requests=num_requests,
                              max_tokens=max_tokens, ignore_eos=ignore_eos, rate=rate,
                              concurrency=concurrency if shape == "concurrency" else None)
        spec.validate(self.serving_max_len())
        return replace(spec, label=spec.describe(), warmup=min(spec.in_flight(), spec.n) if warmup else 0,
                       scenario="poisson" if shape == "poisson" else f"concurrent-{min(spec.in_flight(), spec.n)}")

    # jobs
    def job(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def latest_job(self, kind: str) -> Job | None:
        """The newest job of `kind` ("load", "sweep", "naive", "tuning", "prepare"), running or ended."""
        return self.jobs.latest(kind)

    def live_run(self, job_id: str) -> tuple[RunResult, float]:
        """A running load test's requests so far (finished and in flight) as a run for the charts, and
        the seconds since it began sending (where the timeline's in-flight bars end)."""
        job = self.jobs.get(job_id)
        partial = RunResult(kind="vllm", scenario="live", label=job.label, records=job.live_records(),
                            duration=0, started_at=job.started_at)
        return partial, time.time() - (job.run_start or job.started_at)

    @staticmethod
    def failure_causes(records) -> list[tuple[int, str]]:
        """Why requests failed: (how many, one sentence) per cause."""
        from engine.measure import stats

        return stats.failure_causes(records)

    @staticmethod
    def peak_in_flight(records) -> int:
        """The most requests of a run that were in flight at once (1: it ran one after another)."""
        from engine.measure import stats

        return stats.peak_in_flight(records)

    @staticmethod
    def warmup_cost(run):
        """What the run's warm-up took (engine.measure.stats.WarmupCost: requests, seconds, its TTFT and the
        measured part's, `said`); None for a run without one."""
        from engine.measure import stats

        return stats.warmup_cost(run.records)

    @staticmethod
    def warmth_said(run) -> str | None:
        """Why the run is cold (the first batch of its size since its server started) or warm; None when
        unknown (older runs, imports, a server that does not say when it started)."""
        from engine.measure import warmth

        return warmth.said(run.extra)

    @staticmethod
    def cost_per_million(run, price_per_gpu_hour: float | None) -> float | None:
        """What a million of the run's output tokens cost at this price per GPU-hour, over its measured
        wall time (engine.measure.stats.cost_per_million_output_tokens); None without a price."""
        from engine.measure import stats

        return stats.cost_per_million_output_tokens(price_per_gpu_hour, run.duration,
                                                    run.summary.get("total_output_tokens"))

    @staticmethod
    def token_check(run):
        """The run's output tokens as the server counted them against the client's count
        (engine.measure.stats.TokenCheck: ratio, level "ok" | "warn" | "unchecked", sentences), None
        when the run has no such check (older runs, the naive baseline, imports)."""
        from engine.measure import stats

        return stats.token_check(run.extra)

    # the code behind a run: the openai-SDK Python an attendee copies into a notebook
    @staticmethod
    def code_for_run(run, lang: str = "en") -> str | None:
        """The short Python that sends `run`'s requests again to the server it ran against, as the lab's
        code does (engine.measure.snippets); None for a run not sent through the API (the naive baseline)."""
        from engine.measure import snippets

        return snippets.run_code(run, lang)

    def code_for_chat(self, prompt: str, *, max_tokens: int, temperature: float, earlier_turns: bool = False,
                      lang: str = "en") -> str | None:
        """The short Python that streams `prompt`'s answer from the ready server as the Chat page does;
        None while no server is ready."""
        from engine.measure import snippets

        try:
            target = self._target()
        except ServerBusy:
            return None
        return snippets.chat_code(target.config or target, prompt, max_tokens=max_tokens, temperature=temperature,
                                  earlier_turns=earlier_turns, lang=lang)

    # service-level objectives: each viewer's own limits (Slo(ttft_ms=..., tpot_ms=...); DEFAULT_SLO, a chat
    # user's), judged on a run's requests (engine.measure.slo)
    from engine.measure.slo import ATTAINMENT, DEFAULT_SLO, Slo

    @staticmethod
    def judge_slo(run, slo):
        """How many of `run`'s requests met `slo`, its goodput, and whether it holds (engine.measure.slo.Verdict,
        whose `said` is the sentence); None when the run carries no requests."""
        from engine.measure.slo import judge

        return judge(run, slo)

    @staticmethod
    def decode_ceiling(run):
        """The run's decode speed per request against the most its hardware's memory bandwidth allows
        (engine.measure.ceiling.RunCeiling: measured, ceiling, share, sentence), from what was stored with
        it; None when it lacks the model's size or the bandwidth (older runs, a server this app did not start)."""
        from engine.measure import ceiling

        return ceiling.run_ceiling(run)

    @staticmethod
    def slots(run):
        """The run's batch slots step by step (engine.measure.slots.SlotGrid: cells, used, wasted,
        useful_share, `how` its steps were taken), or the sentence that says why it has none."""
        from engine.measure.slots import occupancy

        return occupancy(run)

    # history
    def runs(self, limit: int | None = None, kind: str | None = None) -> list:
        """Saved runs (engine.results.records.RunRow), newest first, without their requests: read once per
        change of the history and shared by every viewer. Do not modify them."""
        return self.store.list_cached(limit, kind)

    def run(self, run_id: str) -> RunResult:
        """One saved run with its requests, shared like runs(); a LabError says why a stored one is damaged."""
        return self.store.load_cached(run_id)

    def latest_pair(self, scenario: str) -> list[RunResult]:
        """The newest two readable saved runs of a two-configuration scenario (kv-squeeze, prefix-cache),
        oldest first, as the comparison ran them; a LabError says why a stored one cannot be read."""
        saved = [r for r in self.runs(limit=100) if r.scenario == scenario and not r.problem][:2]
        return [self.run(r.id) for r in sorted(saved, key=lambda r: r.started_at)]

    def latest_run(self, kind: str, scenario_prefix: str = "") -> RunResult | None:
        """The newest readable run of `kind` whose scenario starts so, among the latest 50 (a damaged one
        is passed over: History shows why)."""
        for row in self.runs(limit=50, kind=kind):
            if row.scenario.startswith(scenario_prefix) and not row.problem:
                try:
                    return self.run(row.id)
                except LabError:
                    continue
        return None

    def export_json(self, ids: list[str] | None = None) -> str:
        """The runs (None: all) as `vllm bench serve`-style JSON, damaged ones and secrets left out."""
        return self.store.export_json(ids)

    def export_csv(self, ids: list[str] | None = None) -> str:
        """One CSV row per request of the runs (None: all)."""
        return self.store.export_csv(ids)

    def report_html(self, ids: list[str], lang: str = "en") -> str:
        """One self-contained HTML report of the runs `ids` (engine.figures.report: their machine, flags,
        numbers and charts, secrets left out), its text in `lang`; a LabError says which run cannot be read."""
        from engine.figures.report import build_report

        runs, gone = [], []
        for run_id in ids:  # a run deleted since the page was drawn is named, not a failed download
            try:
                runs.append(self.run(run_id))
            except LabError:
                gone.append(run_id)
        return build_report(runs, lang, gone=gone)

    # monitor
    def latest_sample(self):
        """The newest telemetry sample (engine.observe.telemetry.Sample), None before the first."""
        return self.telemetry.latest()

    def gpu_workers(self) -> list[dict]:
        """Who holds memory on each GPU now, from the newest sample: [{gpu, pid, process, owner, used_gb}].
        With tensor, pipeline or data parallelism the server runs one worker per GPU: this shows each."""
        import psutil

        newest = self.telemetry.latest()
        owners = {pid: name for name, pid in self._worker_pids().items()}
        if pid := self.server.snapshot().pid:
            try:
                server = psutil.Process(pid)
                owners.update({q.pid: mark("vLLM server") for q in [server, *server.children(recursive=True)]})
            except psutil.Error:
                pass
        rows = []
        for gpu in newest.memory if newest else ():
            for p in gpu.get("processes", ()):
                try:
                    name = psutil.Process(p["pid"]).name()
                except psutil.Error:
                    name = "?"
                rows.append({"gpu": gpu["series"], "pid": p["pid"], "process": name,
                             "owner": owners.get(p["pid"], mark("another program")), "used_gb": p["used_gb"]})
        return rows

    def monitor_rows(self, seconds: float, max_points: int) -> tuple[list[dict], list[dict], list[dict]]:
        """For the Monitor's charts, over the `seconds` up to the newest sample: memory rows and /metrics
        rows, at most `max_points` a series (peaks kept), and the server's events."""
        from engine.observe.telemetry import downsample, event_rows, memory_rows, metric_rows

        newest = self.telemetry.latest()
        since = (newest.t if newest else 0.0) - seconds
        samples = downsample(self.telemetry.samples(since=since), max_points)
        return memory_rows(samples), metric_rows(samples), event_rows(self.server.snapshot().events, since=since)

    # chat
    @property
    def chat_limits(self):
        """What a viewer may send (engine.measure.chat.ChatLimits: per_minute, max_tokens, max_prompt_chars)."""
        return self.chat_rate.limits

    @property
    def chat_example(self) -> str:
        """The lab's streamed question."""
        from engine.measure.prompts import LAB_STREAM

        return LAB_STREAM

    @staticmethod
    def chat_record(prompt: str) -> RequestRecord:
        """An empty record for one chat answer; chat() fills in its timings."""
        return RequestRecord(index=0, prompt=prompt, send_time=0.0)
