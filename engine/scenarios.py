"""Named workloads: the lab notebook's steps, a concurrency sweep and a sustained-rate test — one
definition used by the pages and by the headless CLI."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import httpx

from . import hardware, prompts
from .config import ServerConfig
from .errors import LabError
from .loadgen import LoadSpec, run_load, sweep
from .records import RunResult


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    kind: str  # "vllm" | "naive" | "tuning" | "sweep"
    prompts: tuple[str, ...]
    max_tokens: int
    shape: str = "sequential"
    concurrency: int = 1
    naive_mode: str = "sequential"
    ignore_eos: bool = False
    rate: float | None = None
    num_requests: int | None = None
    levels: tuple[int, ...] = ()
    configs: tuple[dict[str, Any], ...] = ()  # tuning: ServerConfig changes, one per contender
    extra: dict[str, Any] = field(default_factory=dict)

    def label(self, max_tokens: int | None = None) -> str:
        """The description with the token budget actually used, e.g. '… (48 tokens)'."""
        return re.sub(r"\(\d+ tokens\)", f"({max_tokens or self.max_tokens} tokens)", self.description)

    def load_spec(self, base_url: str = "", model: str = "", **over: Any) -> LoadSpec:
        spec = LoadSpec(
            base_url=base_url, model=model, prompts=list(self.prompts), shape=self.shape,
            concurrency=self.concurrency, rate=self.rate, num_requests=self.num_requests,
            max_tokens=self.max_tokens, ignore_eos=self.ignore_eos, scenario=self.name,
            label=self.label(over.get("max_tokens")),
        )
        return replace(spec, **{k: v for k, v in over.items() if v is not None})

    def naive_spec(self, model_path: str, random_weights: bool = False, **over: Any):
        from .naive import NaiveSpec

        spec = NaiveSpec(model_path=model_path, prompts=list(self.prompts), max_new_tokens=self.max_tokens,
                         mode=self.naive_mode, random_weights=random_weights, scenario=self.name,
                         label=self.label(over.get("max_new_tokens")))
        return replace(spec, **{k: v for k, v in over.items() if v is not None})


_SWEEP_WORDS = 24
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("naive-5", "Naive transformers, 5 sequential (200 tokens)", "naive",
             tuple(prompts.LAB_SEQUENTIAL), 200),
    Scenario("static-batch-5", "Static batching: one padded generate() over 5 prompts (200 tokens)", "naive",
             tuple(prompts.LAB_SEQUENTIAL), 200, naive_mode="static-batch"),
    Scenario("vllm-5-sequential", "vLLM, 5 sequential (200 tokens)", "vllm", tuple(prompts.LAB_SEQUENTIAL), 200),
    Scenario("concurrent-10", "vLLM, 10 concurrent (150 tokens)", "vllm", tuple(prompts.LAB_CONCURRENT), 150,
             shape="burst", concurrency=10),
    Scenario("tuning", "10 concurrent (100 tokens): max-model-len 2048 / 0.85 vs 512 / 0.90", "tuning",
             tuple(prompts.LAB_TUNING), 100, shape="burst", concurrency=10,
             configs=({"max_model_len": 2048, "gpu_memory_utilization": 0.85},
                      {"max_model_len": 512, "gpu_memory_utilization": 0.90})),
    Scenario("stream-300", "One streamed 300-token answer (TTFT)", "vllm", (prompts.LAB_STREAM,), 300),
    Scenario("sweep", "Concurrency sweep: throughput and TTFT vs requests in flight (128 tokens)", "sweep",
             tuple(prompts.seeded_prompts(64, seed=0, extra_words=_SWEEP_WORDS)), 128, shape="concurrency",
             ignore_eos=True, levels=(1, 2, 4, 8, 16, 32)),
    Scenario("sustained", "Sustained load: Poisson arrivals at 2 requests/s for 30 requests (128 tokens)", "vllm",
             tuple(prompts.seeded_prompts(30, seed=1)), 128, shape="poisson", rate=2.0, num_requests=30,
             ignore_eos=True),
)}


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise LabError(f"There is no scenario '{name}': pick one of {', '.join(SCENARIOS)}.") from None


def annotate(result: RunResult, cfg: ServerConfig, kv_tokens: int | None, max_conc: float | None) -> RunResult:
    """Stamp a vLLM run with what it ran on, so a saved run explains itself anywhere."""
    result.config = cfg.to_dict()
    result.command = cfg.shell_command()
    result.model = cfg.model
    result.hardware = result.hardware or hardware.describe()
    result.versions = result.versions or hardware.versions()
    result.extra.setdefault("kv_cache_tokens", kv_tokens)
    result.extra.setdefault("max_concurrency_reported", max_conc)
    result.extra.setdefault("placeholder_text", cfg.load_format == "dummy")
    return result


def sweep_levels(scn: Scenario, top: int | None) -> list[int]:
    if not top:
        return list(scn.levels)
    levels, n = [], 1
    while n < top:
        levels.append(n)
        n *= 2
    return levels + [top]


def served_model(url: str) -> str:
    try:
        data = httpx.get(url.rstrip("/") + "/v1/models", timeout=5).json()
        return data["data"][0]["id"]
    except (httpx.HTTPError, KeyError, IndexError, ValueError) as e:
        raise LabError(f"No OpenAI-compatible server answered at {url} ({e}): check the URL, or leave --url out "
                       "to let the app start one.") from e


def run_headless(name: str, store, url: str | None = None, model_name: str | None = None,
                 config: ServerConfig | None = None, spec: Any = None, max_tokens: int | None = None,
                 concurrency: int | None = None, levels: str | None = None,
                 log: Callable[[str], None] = print) -> list[RunResult]:
    """Run one scenario without the UI: against `url`, or a server started from `config` (for the
    models.ModelSpec `spec`) and stopped here. The naive scenario runs `spec` in its worker."""
    from .server import VLLMServer

    scn = get(name)
    over = {"max_tokens": max_tokens}
    if scn.kind == "naive":
        from .naive import run_naive

        if spec is None:
            raise LabError("The naive scenario needs a model: pass --model.")
        nspec = scn.naive_spec(spec.path, random_weights=spec.kind == "shape-only",
                               max_new_tokens=max_tokens)
        result = run_naive(nspec, observer=_Console(log))
        store.save(result)
        return [result]

    def measure(base_url: str, model: str, cfg: ServerConfig | None, snap) -> list[RunResult]:
        out = []
        if scn.kind == "sweep":
            top = concurrency
            lv = [int(x) for x in levels.split(",")] if levels else sweep_levels(scn, top)
            out += sweep(scn.load_spec(base_url, model, num_requests=8, **over), lv, observer=_Console(log))
        else:
            spec = scn.load_spec(base_url, model, concurrency=concurrency, **over)
            out.append(run_load(spec, observer=_Console(log)))
        for r in out:
            if cfg:
                annotate(r, cfg, snap.kv_cache_tokens, snap.max_concurrency)
            else:
                r.model = model
                r.hardware = r.hardware or hardware.describe()
                r.versions = r.versions or hardware.versions()
            store.save(r)
        return out

    if url:
        if scn.kind == "tuning":
            raise LabError("The tuning scenario restarts the server with each setting: leave --url out.")
        return measure(url, model_name or served_model(url), None, None)

    if config is None or spec is None:
        raise LabError("Give the scenario a server URL, or the settings to start one with.")
    configs = [config.with_changes(**c) for c in scn.configs] if scn.kind == "tuning" else [config]
    results = []
    for cfg in configs:
        srv = VLLMServer(port=cfg.port)
        try:
            snap = srv.start_and_wait(cfg, model_max_len=spec.max_len, log=log)
            for r in measure(cfg.base_url, cfg.model_name, cfg, snap):
                if scn.kind == "tuning":
                    r.label = f"max-model-len {cfg.max_model_len}" + (
                        f", {cfg.gpu_memory_utilization:.0%} GPU" if cfg.device == "cuda" else "")
                    store.save(r)
                results.append(r)
        finally:
            srv.stop()
    return results


class _Console:
    """Progress on the terminal: one line per finished request."""

    def __init__(self, log: Callable[[str], None]):
        self.log = log

    def on_start(self, plan: Any = None) -> None: ...

    def on_stage(self, text: str) -> None:
        self.log(f"  {text}")

    def on_request_done(self, record, totals=None) -> None:
        if record.warmup:
            return
        state = f"{record.e2e:.2f} s, {record.output_tokens} tokens" if record.ok else f"failed: {record.error}"
        self.log(f"  request {record.index + 1}: {state}")

    def on_complete(self, result) -> None: ...


def summary_table(r: RunResult) -> str:
    s = r.summary or {}

    def ms(key: str) -> str:
        v = s.get(key)
        return "–" if v is None else f"{v:,.0f} ms"

    lines = [
        f"== {r.label or r.scenario} [{r.kind}] ==",
        f"requests ok / failed   {s.get('completed', 0)} / {s.get('failed', 0)}",
        f"wall time              {r.duration:.2f} s",
        f"output tokens          {s.get('total_output_tokens', 0)}",
        f"output throughput      {s.get('output_throughput') or 0:,.1f} tok/s",
        f"TTFT mean / p99        {ms('mean_ttft_ms')} / {ms('p99_ttft_ms')}",
        f"TPOT mean              {ms('mean_tpot_ms')}",
        f"E2E latency mean / p99 {ms('mean_e2el_ms')} / {ms('p99_e2el_ms')}",
    ]
    return "\n".join(lines)
