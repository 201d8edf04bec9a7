"""How each kind of run is carried out — a load test, a concurrency sweep, a tuning comparison, the
naive baseline — against a `Target` server: reported to one `Progress`, stamped with what it ran on,
and handed to `save` the moment it finishes (a sweep's finished levels survive a crash or a cancel).

The one orchestration path: `Lab` runs a `Runner` inside a background job (adding who may act and
the chat marks), the CLI and the bench scripts run one in the foreground with a `Console`.
See docs/architecture.md."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import httpx

from engine.errors import ConfigError, LabError, ServerBusy
from engine.measure import ceiling, loadgen
from engine.measure.kvcache import KvWatch
from engine.measure.progress import Progress
from engine.measure.slo import Slo, record_goodput
from engine.measure.spec import LoadSpec, check_max_tokens
from engine.measure.stats import client_output_tokens
from engine.messages import mark, say
from engine.observe import hardware
from engine.observe.telemetry import read_generation_tokens
from engine.results.records import RunResult
from engine.serving.config import ServerConfig
from engine.serving.server import READY, VLLMServer


@dataclass(frozen=True)
class Target:
    """The server a load goes to: one this app started (`config` set) or one at a URL it did not."""

    base_url: str
    model: str
    api_key: str | None = None
    max_model_len: int | None = None  # longest prompt + answer it accepts; None when it does not say
    config: ServerConfig | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None  # vLLM's own "maximum concurrency" at startup

    @classmethod
    def of(cls, server: VLLMServer) -> "Target":
        """The ready server this app started; ServerBusy when there is none."""
        snap = server.snapshot()
        cfg = snap.config
        if snap.state != READY or cfg is None:
            raise ServerBusy(say("The vLLM server is not running: start it on the Server page first."))
        return cls(cfg.base_url, cfg.model_name, cfg.api_key, cfg.max_model_len, cfg, snap.kv_cache_tokens,
                   snap.max_concurrency)

    @classmethod
    def at(cls, url: str, model: str | None = None, api_key: str | None = None) -> "Target":
        """A running OpenAI-compatible server at `url`, serving `model` (default: the first it lists)."""
        names, max_len = server_info(url, api_key)
        model = model or names[0]
        if model not in names and len(names) > 1:
            raise ConfigError(say("The server at {url} serves no model named '{model}': pass --model-name {first} "
                                  "(it serves {names}).", url=url, model=model, first=names[0], names=", ".join(names)))
        if model not in names:
            raise ConfigError(say("The server at {url} serves no model named '{model}': pass --model-name {first}.",
                                  url=url, model=model, first=names[0]))
        return cls(url, model, api_key, max_len)

    def aim(self, spec: LoadSpec) -> LoadSpec:
        """`spec` sent here, checked against what this server accepts (ConfigError)."""
        spec = replace(spec, base_url=self.base_url, model=self.model, api_key=self.api_key)
        spec.validate(self.max_model_len)
        return spec

    def stamp(self, result: RunResult) -> RunResult:
        """Mark a run with what it ran on, so a saved run explains itself anywhere."""
        result.model = self.model
        result.hardware = result.hardware or hardware.describe()
        result.versions = result.versions or hardware.versions()
        if self.config is not None:
            result.config = self.config.to_dict()
            result.command = self.config.shell_command()
            result.extra.kv_cache_tokens = self.kv_cache_tokens
            result.extra.max_concurrency_reported = self.max_concurrency
            result.extra.placeholder_text = self.config.load_format == "dummy"
            if size := ceiling.server_model_bytes(result.config):  # what each decode step reads: its ceiling
                result.extra.weight_bytes, result.extra.kv_token_bytes = size.weights, size.kv_per_token
        return result


class ServerCount:
    """The server's own count of the output tokens it generated during one run's measured part (issue
    #12, "numbers you can check"): vllm:generation_tokens_total read when the warm-up is over (`start`,
    the load generator's on_measure) and again after the last request (`finish`), so warm-up answers
    are left out. Chat answers streamed meanwhile count on the server too: the run says so (its
    chat_requests_beside). A server without /metrics is measured all the same, its run unchecked."""

    SETTLE_S = 0.05  # between two reads that must agree: a counter that still moves has not settled
    READS = 10

    def __init__(self, target: Target) -> None:
        self.target = target
        self.started = False
        self.before: float | None = None

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
        return result


def check_url(url: str) -> str:
    """The URL of a server to measure, or ConfigError with one sentence."""
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(say("'{url}' is not a server address: give one like http://127.0.0.1:9000.", url=url))
    return url


def server_info(url: str, api_key: str | None = None) -> tuple[list[str], int | None]:
    """The model names a running OpenAI-compatible server serves and vLLM's max_model_len (None when
    it does not say), from GET /v1/models."""
    check_url(url)
    why = ""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        resp = httpx.get(url.rstrip("/").removesuffix("/v1") + "/v1/models", headers=headers, timeout=5,
                         trust_env=False)
        if resp.status_code != 200:
            why = f"HTTP {resp.status_code}"
        else:
            data = resp.json()["data"]
            names = [m["id"] for m in data]
            if names:
                lens = [m.get("max_model_len") for m in data if isinstance(m.get("max_model_len"), int)]
                return names, min(lens, default=None)
            why = say("it serves no model")
    except httpx.HTTPError as e:
        why = str(e) or type(e).__name__
    except (KeyError, TypeError, ValueError) as e:
        why = say("its /v1/models answer is not OpenAI-style ({kind})", kind=type(e).__name__)
    raise LabError(say("No OpenAI-compatible server answered at {url} ({why}): check the URL, or leave --url out "
                       "to let the app start one.", url=url, why=why))


def tuning_label(cfg: ServerConfig) -> str:
    """How a tuning comparison names a configuration, in the app, the CLI and History alike."""
    memory = f"KV {cfg.cpu_kvcache_gib:g} GiB" if cfg.device == "cpu" else f"{cfg.gpu_memory_utilization:g}"
    return f"max-model-len {cfg.max_model_len} / {memory}"


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
    its goodput under it (vllm bench serve's --goodput; the app's pages judge by each viewer's own)."""

    def __init__(self, save: Callable[[RunResult], RunResult], progress: Progress | None = None,
                 cancel: threading.Event | None = None, mark: Callable[[str], None] = lambda text: None,
                 slo: Slo | None = None):
        self.save = save
        self.progress = progress or Progress()
        self.cancel = cancel or threading.Event()
        self.mark = mark
        self.slo = slo

    def _keep(self, result: RunResult, target: Target) -> RunResult:
        """A load run finished: stamped with its server, its goodput under the SLO, saved."""
        if self.slo is not None:
            record_goodput(result, self.slo)
        return self.save(target.stamp(result))

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
               model_max_len: int | None = None, scenario: str = "tuning") -> list[RunResult]:
        """Restart `server` with each configuration and run the same load on it (notebook step 4; the
        kv-squeeze scenario names its runs by `scenario`); the server is left running with the last one."""
        out: list[RunResult] = []
        for cfg in configs:
            if self.cancel.is_set():
                break
            label = tuning_label(cfg)
            self.progress.on_step(len(out), len(configs), say("{label}: restarting vLLM", label=label))
            server.restart(cfg, model_max_len=model_max_len)
            server.wait_ready(on_stage=lambda s, label=label: self.progress.on_stage(
                say("{label}: {stage}", label=label, stage=s.stage)))
            self.progress.on_stage(say("{label}: measuring", label=label))
            out.append(self.load(replace(spec, scenario=scenario, label=label), Target.of(server)))
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
