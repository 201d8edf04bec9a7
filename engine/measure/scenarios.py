"""Named workloads: the lab notebook's steps, a concurrency sweep and a sustained-rate test — one
definition used by the pages and by the headless CLI."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable
from urllib.parse import urlsplit

import httpx

from engine.errors import ConfigError, LabError
from engine.measure import prompts, stats
from engine.measure.loadgen import run_load, sweep
from engine.measure.progress import Console
from engine.measure.spec import LoadSpec, check_in_flight, check_max_tokens, parse_levels
from engine.observe import hardware
from engine.results.records import RunResult
from engine.serving.config import ServerConfig


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
        from engine.measure.naive import NaiveSpec

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


def check_url(url: str) -> str:
    """The URL of a server to measure, or ConfigError with one sentence."""
    try:
        parts = urlsplit(url)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number in range
    except ValueError:
        ok = False
    if not ok:
        raise ConfigError(f"'{url}' is not a server address: give one like http://127.0.0.1:9000.")
    return url


def server_info(url: str) -> tuple[list[str], int | None]:
    """The model names a running OpenAI-compatible server serves and vLLM's max_model_len (None when
    it does not say), from GET /v1/models."""
    check_url(url)
    why = ""
    try:
        resp = httpx.get(url.rstrip("/").removesuffix("/v1") + "/v1/models", timeout=5, trust_env=False)
        if resp.status_code != 200:
            why = f"HTTP {resp.status_code}"
        else:
            data = resp.json()["data"]
            names = [m["id"] for m in data]
            if names:
                lens = [m.get("max_model_len") for m in data if isinstance(m.get("max_model_len"), int)]
                return names, min(lens, default=None)
            why = "it serves no model"
    except httpx.HTTPError as e:
        why = str(e) or type(e).__name__
    except (KeyError, TypeError, ValueError) as e:
        why = f"its /v1/models answer is not OpenAI-style ({type(e).__name__})"
    raise LabError(f"No OpenAI-compatible server answered at {url} ({why}): check the URL, or leave --url out "
                   "to let the app start one.")


_HOW = {"sequential": "sends its requests one after another", "burst": "sends all its requests at once",
        "poisson": "sends its requests at random times at a set rate"}


def check_options(scn: Scenario, url: str | None = None, max_tokens: int | None = None,
                  concurrency: int | None = None, levels: str | None = None) -> list[int] | None:
    """Refuse, with one sentence, an option out of bounds or one the scenario would ignore (what needs
    no server or model); return the sweep's levels (None for other scenarios)."""
    if url is not None:
        if scn.kind == "naive":
            raise ConfigError("The naive scenario runs transformers itself, with no server: leave --url out.")
        if scn.kind == "tuning":
            raise ConfigError("The tuning scenario restarts the server with each setting: leave --url out.")
        check_url(url)
    if max_tokens is not None:
        check_max_tokens(max_tokens)
    if scn.kind != "sweep":
        how = "runs transformers itself, with no server" if scn.kind == "naive" else _HOW.get(scn.shape, "")
        for flag, value in (("--concurrency", concurrency), ("--levels", levels)):
            if value is not None:
                raise ConfigError(f"The {scn.name} scenario {how}, so {flag} does not apply: leave it out, or "
                                  "run the sweep scenario to choose the requests in flight.")
        return None
    if concurrency is not None and levels is not None:
        raise ConfigError("--levels and --concurrency both choose the sweep's levels: give only one of them.")
    if levels is not None:
        return parse_levels(levels)
    if concurrency is not None:
        check_in_flight(concurrency, "The sweep's top level (requests in flight)")
    return sweep_levels(scn, concurrency)


def run_headless(name: str, store, url: str | None = None, model_name: str | None = None,
                 config: ServerConfig | None = None, spec: Any = None, max_tokens: int | None = None,
                 concurrency: int | None = None, levels: str | None = None,
                 log: Callable[[str], None] = print) -> list[RunResult]:
    """Run one scenario without the UI: against `url`, or a server started from `config` (for the
    models.ModelSpec `spec`) and stopped here. The naive scenario runs `spec` in its worker. Every
    option is checked (ConfigError, one sentence) before a server starts or a request is sent."""
    from engine.serving.server import VLLMServer

    scn = get(name)
    lv = check_options(scn, url, max_tokens, concurrency, levels)
    over = {"max_tokens": max_tokens}
    if scn.kind == "naive":
        from engine.measure.naive import run_naive

        if spec is None:
            raise LabError("The naive scenario needs a model: pass --model.")
        if max_tokens is not None:
            check_max_tokens(max_tokens, spec.max_len, of="this model's context length", fix="")
        nspec = scn.naive_spec(spec.path, random_weights=spec.kind == "shape-only",
                               max_new_tokens=max_tokens)
        result = run_naive(nspec, observer=Console())
        store.save(result)
        return [result]

    base = scn.load_spec(num_requests=8 if scn.kind == "sweep" else None, **over)  # checks max_tokens

    def measure(base_url: str, model: str, cfg: ServerConfig | None, snap) -> list[RunResult]:
        out = []
        if scn.kind == "sweep":
            out += sweep(replace(base, base_url=base_url, model=model), lv, observer=Console())
        else:
            out.append(run_load(replace(base, base_url=base_url, model=model), observer=Console()))
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
        names, max_len = server_info(url)
        model = model_name or names[0]
        if model not in names:
            raise ConfigError(f"The server at {url} serves no model named '{model}': pass --model-name "
                              f"{names[0]}" + (f" (it serves {', '.join(names)})." if len(names) > 1 else "."))
        base.validate(max_len)
        return measure(url, model, None, None)

    if config is None or spec is None:
        raise LabError("Give the scenario a server URL, or the settings to start one with.")
    configs = [config.with_changes(**c) for c in scn.configs] if scn.kind == "tuning" else [config]
    for cfg in configs:  # every setting checked before the first server starts
        cfg.validate(model_max_len=spec.max_len)
        if base.max_tokens is not None:
            check_max_tokens(base.max_tokens, cfg.max_model_len or spec.max_len,
                             of="the max-model-len the server starts with",
                             fix="" if scn.kind == "tuning" else ", or give a longer --max-model-len")
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


def summary_table(r: RunResult) -> str:
    s = r.summary or {}

    def ms(key: str) -> str:
        v = s.get(key)
        return "–" if v is None else f"{v:,.0f} ms"

    lines = [
        f"== {r.label or r.scenario} [{r.kind}] ==",
        f"requests ok / failed   {s.get('completed', 0)} / {s.get('failed', 0)}",
        *(f"  {sentence}" for _, sentence in stats.failure_causes(r.records)),
        f"wall time              {r.duration:.2f} s",
        f"output tokens          {s.get('total_output_tokens', 0)}",
        f"output throughput      {s.get('output_throughput') or 0:,.1f} tok/s",
        f"TTFT mean / p99        {ms('mean_ttft_ms')} / {ms('p99_ttft_ms')}",
        f"TPOT mean              {ms('mean_tpot_ms')}",
        f"E2E latency mean / p99 {ms('mean_e2el_ms')} / {ms('p99_e2el_ms')}",
    ]
    return "\n".join(lines)
