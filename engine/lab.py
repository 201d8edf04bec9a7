"""Lab: the one facade the pages and the CLI hold. It owns the server, the jobs, the run store and the
telemetry sampler, and turns each user action into one call.

Every action that changes state or costs compute is a `@presenter_only` method: it takes the caller's
`token` (and `caller`, an IP or session id, for throttling wrong tokens) and is refused here, in the
engine, whatever a page drew (see access.py). Reading (snapshots, jobs, the store's lists) is open."""
from __future__ import annotations

import functools
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Iterator

from engine.access import Access
from engine.errors import LabError, NotPresenter, ServerBusy
from engine.jobs import Job, JobManager
from engine.measure.chat import ChatRate, stream_chat
from engine.measure.scenarios import annotate
from engine.observe import hardware, nvml
from engine.observe.telemetry import Telemetry
from engine.results.records import RequestRecord, RunResult
from engine.results.store import RunStore
from engine.serving import models
from engine.serving import server as server_mod
from engine.serving.config import ServerConfig
from engine.serving.flags import known_flags
from engine.serving.server import READY, STARTING, VLLMServer

DEFAULT_PORT = int(os.environ.get("SERVING_LAB_VLLM_PORT", "9000"))


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
        self.jobs = JobManager()
        self.store = store or RunStore()
        self.naive_pids: dict[str, int] = {}
        self.telemetry = Telemetry(
            server_pid=lambda: self.server.snapshot().pid,
            metrics_url=self._metrics_url,
            extra_pids=lambda: dict(self.naive_pids),
            interval_s=telemetry_interval_s,
        )
        self.device = self.telemetry.device
        self.access = Access(presenter_token or os.environ.get("SERVING_LAB_PRESENTER_TOKEN"), listen_host)
        self._flags: set[str] | None = None
        self.chat_rate = ChatRate()
        self._foreign: tuple[float, str | None] = (-1e9, None)
        self.chat_under_load = False
        self._chats: deque[list] = deque(maxlen=1000)  # [start, end or None] epoch s of recent chat answers
        self._chat_lock = threading.Lock()
        threading.Thread(target=self._load_flags, daemon=True, name="vllm-flags").start()
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
        return self.jobs.submit("prepare", f"preparing the {kind} model", work, lane="prepare")

    def default_config(self, spec: models.ModelSpec, port: int | None = None) -> ServerConfig:
        return ServerConfig.for_model(spec, self.device, port=port or self.server.port)

    def fit_check(self, cfg: ServerConfig, spec: models.ModelSpec) -> FitReport:
        shape = spec.shape
        if shape is None:
            return FitReport("ok", "The model's size is unknown here; vLLM will report what fits when it starts.")
        dtype_bytes = 4 if cfg.dtype == "float32" else 2
        weights = shape.weight_bytes(dtype_bytes) / 1024**3
        per_seq = shape.kv_bytes_per_token(dtype_bytes) * (cfg.max_model_len or shape.max_len) / 1024**3
        if self.device == "cuda":
            gpus = nvml.devices()
            total = gpus[0]["total"] / 1024**3 * cfg.tensor_parallel_size if gpus else 0
            budget = total * cfg.gpu_memory_utilization
            weights_per = weights
            kv_room = budget - weights_per - 1.0  # ~1 GiB for activations and CUDA graphs
            where = f"{cfg.gpu_memory_utilization:.0%} of {total:.0f} GiB GPU memory"
        else:
            import psutil

            total = psutil.virtual_memory().available / 1024**3
            budget = total
            kv_room = cfg.cpu_kvcache_gib
            where = f"{cfg.cpu_kvcache_gib:g} GiB CPU KV cache ({total:.0f} GiB RAM free)"
            if weights + kv_room + 1 > total:
                return FitReport("error", f"Weights ({weights:.1f} GiB) plus the KV cache ({kv_room:g} GiB) exceed the "
                                 f"{total:.0f} GiB of free RAM: lower the KV cache size or pick a smaller model.",
                                 weights, per_seq, total)
        if kv_room <= 0:
            return FitReport("error", f"The weights alone ({weights:.1f} GiB) do not fit in {where}: raise "
                             "gpu-memory-utilization, use more GPUs, or pick a smaller model.", weights, per_seq, budget)
        seqs = kv_room / per_seq if per_seq else float("inf")
        if seqs < 1:
            return FitReport("error", f"One full {cfg.max_model_len}-token sequence needs {per_seq:.2f} GiB of KV cache "
                             f"but only {kv_room:.2f} GiB is left in {where}: lower max-model-len or give vLLM more memory.",
                             weights, per_seq, budget)
        level = "warn" if seqs < 4 else "ok"
        return FitReport(level, f"Weights {weights:.1f} GiB; KV cache room for about {seqs:,.0f} full "
                         f"{cfg.max_model_len}-token sequences in {where}.", weights, per_seq, budget)

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
        if self.device == "cuda" and self.naive_pids:
            raise ServerBusy("The naive baseline still holds the GPU: wait for it to finish or cancel it, then start vLLM.")
        self.server.start(cfg, model_max_len=spec.max_len if spec else None, known_flags=self._flags)

    def leftovers(self) -> str | None:
        """The sentence about an earlier server's processes still holding memory, if there are any."""
        left = server_mod.leftovers()
        return server_mod.leftovers_sentence(left) if left else None

    @presenter_only
    def clear_leftovers(self) -> str | None:
        return server_mod.clear_leftovers()

    def foreign_holders(self) -> str | None:
        """Processes this app did not start that hold the memory vLLM needs (named, never touched);
        looked up at most every few seconds, since every viewer's Server page asks."""
        now = time.monotonic()
        if now - self._foreign[0] > 5:
            self._foreign = (now, server_mod.foreign_holders())
        return self._foreign[1]

    def server_ready(self) -> ServerConfig:
        snap = self.server.snapshot()
        if snap.state != READY or snap.config is None:
            raise ServerBusy("The vLLM server is not running: start it on the Server page first.")
        return snap.config

    # -- measurements -------------------------------------------------------------------------
    @presenter_only
    def run_load(self, spec, label: str | None = None) -> Job:
        """Submit a load test against the running server (spec: engine.measure.spec.LoadSpec)."""
        from engine.measure import loadgen

        cfg = self.server_ready()
        spec = replace(spec, base_url=cfg.base_url, model=cfg.model_name, api_key=cfg.api_key)
        spec.validate(cfg.max_model_len)  # what this server accepts, whichever page or script asked

        def work(job: Job) -> RunResult:
            job.on_stage("sending requests")
            self.server.mark(f"{spec.scenario} start")
            try:
                result = loadgen.run_load(spec, observer=job, cancel=job.cancel)
            finally:
                self.server.mark(f"{spec.scenario} end")
            return self._finish(result, cfg)

        return self.jobs.submit("load", label or spec.label or spec.scenario, work)

    @presenter_only
    def run_sweep(self, spec, levels: list[int]) -> Job:
        from engine.measure import loadgen

        cfg = self.server_ready()
        spec = replace(spec, base_url=cfg.base_url, model=cfg.model_name, api_key=cfg.api_key)
        spec.validate(cfg.max_model_len)

        def work(job: Job) -> list[RunResult]:
            job.total = len(levels)
            out: list[RunResult] = []
            job.result = out  # finished levels show while the sweep goes on
            self.server.mark("sweep start")
            loadgen.sweep(replace(spec, scenario="sweep"), levels, cancel=job.cancel,
                          observer=_SweepLevels(job, out, lambda r: self._finish(r, cfg)))
            self.server.mark("sweep end")
            return out

        return self.jobs.submit("sweep", f"sweep {levels[0]}…{levels[-1]}", work)

    @presenter_only
    def run_tuning(self, configs: list[ServerConfig], spec, labels: list[str] | None = None) -> Job:
        """Restart vLLM with each config, run the same workload, keep each run (notebook step 4)."""
        from engine.measure import loadgen

        if not configs:
            raise ServerBusy("Pick at least one configuration to compare.")
        for c in configs:
            c.validate(known_flags=self._flags)

        def work(job: Job) -> list[RunResult]:
            job.total = len(configs)
            out: list[RunResult] = []
            job.result = out  # finished configurations show while the next one starts
            for i, cfg in enumerate(configs):
                if job.cancel.is_set():
                    break
                label = (labels[i] if labels else None) or f"max-model-len {cfg.max_model_len}"
                job.on_stage(f"{label}: restarting vLLM")
                self.server.restart(cfg)
                self.server.wait_ready()
                job.on_stage(f"{label}: measuring")
                one = replace(spec, base_url=cfg.base_url, model=cfg.model_name, api_key=cfg.api_key,
                              scenario="tuning", label=label)
                out.append(self._finish(loadgen.run_load(one, cancel=job.cancel), cfg))
                job.done = len(out)
            return out

        return self.jobs.submit("tuning", "tuning comparison", work)

    @presenter_only
    def run_naive(self, spec) -> Job:
        """Submit the transformers baseline (spec: naive.NaiveSpec) in its own worker process."""
        from engine.measure import naive

        if self.device == "cuda" and self.server.snapshot().state in (READY, STARTING):
            raise ServerBusy("vLLM holds most of the GPU memory: stop the server first, run the naive baseline, "
                             "then start vLLM again (the lab's order).")

        def work(job: Job) -> RunResult:
            self.server.mark("naive start")
            try:
                result = naive.run_naive(spec, observer=_PidTracking(job, self.naive_pids), cancel=job.cancel)
            finally:
                self.naive_pids.pop("naive worker", None)
                self.server.mark("naive end (memory returned)")
            result.hardware = result.hardware or hardware.describe()
            result.versions = result.versions or hardware.versions()
            return self._save(result)

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
            raise LabError(f"'{name}' is not a text file (not UTF-8): pick the JSON file Serving Lab or "
                           "vllm bench serve wrote.") from None
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
        cfg = self.server_ready()
        while not presenter and not self.chat_under_load and (job := self.measuring()) is not None:
            if on_wait is not None:
                on_wait(f"'{job.label}' is measuring: your message is sent the moment it ends.")
            if (stop.wait(0.5) if stop is not None else time.sleep(0.5)):
                return
        span = [time.time(), None]
        with self._chat_lock:
            self._chats.append(span)
        try:
            yield from stream_chat(cfg.base_url, cfg.model_name, messages, record, max_tokens=max_tokens,
                                   temperature=temperature, api_key=cfg.api_key, stop=stop)
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
    def _finish(self, result: RunResult, cfg: ServerConfig) -> RunResult:
        snap = self.server.snapshot()
        annotate(result, cfg, snap.kv_cache_tokens, snap.max_concurrency)
        return self._save(result)

    def _save(self, result: RunResult) -> RunResult:
        """Keep a run that measured anything, marked when chat traffic ran beside it."""
        if n := self._chats_beside(result.started_at, result.started_at + result.duration):
            result.extra["chat_requests_beside"] = n
        if result.measured:
            self.store.save(result)
        return result

    # -- internals ----------------------------------------------------------------------------
    def _metrics_url(self) -> str | None:
        snap = self.server.snapshot()
        return snap.config.base_url + "/metrics" if snap.state == READY and snap.config else None

    def _load_flags(self) -> None:
        self._flags = known_flags()

    def shutdown(self) -> None:
        self.telemetry.stop()


class _SweepLevels:
    """Sweep progress for the job; each level is saved the moment it completes."""

    def __init__(self, job: Job, out: list[RunResult], finish):
        self.job, self.out, self.finish = job, out, finish

    def on_start(self, plan) -> None:
        self.job.on_stage(f"concurrency {plan.concurrency}")

    def on_request_done(self, record, totals) -> None:
        pass

    def on_complete(self, result: RunResult) -> None:
        self.out.append(self.finish(result))
        self.job.done = len(self.out)


class _PidTracking:
    """Forwards naive-runner events to the job, and records the worker pid for the memory chart."""

    def __init__(self, job: Job, pids: dict[str, int]):
        self.job, self.pids = job, pids

    def __getattr__(self, name):
        return getattr(self.job, name)

    def on_worker(self, pid: int) -> None:
        self.pids["naive worker"] = pid


