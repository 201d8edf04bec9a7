"""Lab: the one facade the pages and the CLI hold. It owns the server, the jobs, the run store and the
telemetry sampler, and turns each user action into one call."""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace

from . import hardware, models, nvml
from .config import ServerConfig
from .errors import NotPresenter, ServerBusy
from .jobs import Job, JobManager
from .records import RunResult
from .scenarios import annotate
from .server import READY, STARTING, VLLMServer
from .store import RunStore
from .telemetry import Telemetry
from .vllm_flags import known_flags

DEFAULT_PORT = int(os.environ.get("SERVING_LAB_VLLM_PORT", "9000"))


@dataclass
class FitReport:
    """Weights + KV cache at these settings against the memory there is."""

    level: str  # "ok" | "warn" | "error"
    message: str
    weights_gb: float | None = None
    kv_gb: float | None = None
    available_gb: float | None = None


class Lab:
    def __init__(self, port: int = DEFAULT_PORT, store: RunStore | None = None, telemetry_interval_s: float = 1.0):
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
        self.presenter_token = os.environ.get("SERVING_LAB_PRESENTER_TOKEN") or None
        self._flags: set[str] | None = None
        threading.Thread(target=self._load_flags, daemon=True, name="vllm-flags").start()
        self.telemetry.start()

    # -- who may act --------------------------------------------------------------------------
    def may_act(self, token: str | None) -> bool:
        """Without a presenter token everyone may act (a laptop on localhost); with one, only its holder."""
        return self.presenter_token is None or token == self.presenter_token

    def require_presenter(self, token: str | None) -> None:
        if not self.may_act(token):
            raise NotPresenter("Only the presenter can do this: enter the presenter token in the sidebar.")

    # -- models and settings ------------------------------------------------------------------
    def models(self) -> list[models.ModelSpec]:
        return models.catalogue()

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
    def start_server(self, cfg: ServerConfig, spec: models.ModelSpec | None = None) -> None:
        if self.device == "cuda" and self.naive_pids:
            raise ServerBusy("The naive baseline still holds the GPU: wait for it to finish or cancel it, then start vLLM.")
        self.server.start(cfg, model_max_len=spec.max_len if spec else None, known_flags=self._flags)

    def stop_server(self) -> None:
        self.server.stop()

    def server_ready(self) -> ServerConfig:
        snap = self.server.snapshot()
        if snap.state != READY or snap.config is None:
            raise ServerBusy("The vLLM server is not running: start it on the Server page first.")
        return snap.config

    # -- measurements -------------------------------------------------------------------------
    def run_load(self, spec, label: str | None = None) -> Job:
        """Submit a load test against the running server (spec: loadgen.LoadSpec)."""
        from . import loadgen

        cfg = self.server_ready()
        spec = replace(spec, base_url=cfg.base_url, model=cfg.model_name, api_key=cfg.api_key)

        def work(job: Job) -> RunResult:
            job.on_stage("sending requests")
            self.server.mark(f"{spec.scenario} start")
            try:
                result = loadgen.run_load(spec, observer=job, cancel=job.cancel)
            finally:
                self.server.mark(f"{spec.scenario} end")
            return self._finish(result, cfg)

        return self.jobs.submit("load", label or spec.label or spec.scenario, work)

    def run_sweep(self, spec, levels: list[int]) -> Job:
        from . import loadgen

        cfg = self.server_ready()
        spec = replace(spec, base_url=cfg.base_url, model=cfg.model_name, api_key=cfg.api_key)

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

    def run_tuning(self, configs: list[ServerConfig], spec, labels: list[str] | None = None) -> Job:
        """Restart vLLM with each config, run the same workload, keep each run (notebook step 4)."""
        from . import loadgen

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

    def run_naive(self, spec) -> Job:
        """Submit the transformers baseline (spec: naive.NaiveSpec) in its own worker process."""
        from . import naive

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
            if result.measured:
                self.store.save(result)
            return result

        return self.jobs.submit("naive", spec.label or spec.scenario, work)

    def _finish(self, result: RunResult, cfg: ServerConfig) -> RunResult:
        snap = self.server.snapshot()
        annotate(result, cfg, snap.kv_cache_tokens, snap.max_concurrency)
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


