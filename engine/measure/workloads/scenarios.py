"""The catalogue of named workloads: the lab notebook's steps, a concurrency sweep and a sustained-rate
test — one definition used by the pages, the CLI and the bench scripts (engine.runs carries them out)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, LabError
from engine.measure.baseline.protocol import NaiveSpec
from engine.measure.judge import ceiling
from engine.measure.workloads import prompts
from engine.measure.workloads import kinds, seeds
from engine.measure.workloads import tokens as toks
from engine.measure.load.spec import LoadSpec, request_deadline_s
from engine.messages import Message, say
from engine.serving.config import ServerConfig, tuning_base


@dataclass(frozen=True)
class Scenario:
    name: str  # an identifier (the CLI's, a run's `scenario`): never translated
    description: str  # a Message whose template has {tokens}: the token budget (see label)
    kind: str  # "vllm" | "naive" | "tuning" | "sweep" | "slo-search"
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
    config_labels: tuple[str, ...] = ()  # tuning: how each contender is named (default: runs.tuning_label)
    system: str = ""  # a system prompt every request starts with
    warmup: int = 0  # requests sent first, not counted (LoadSpec.warmup)
    read_timeout_s: float | None = None  # None: LoadSpec's; longer where requests queue by design (kv-squeeze)
    extra: dict[str, Any] = field(default_factory=dict)
    # What to send beyond a prompt list (engine.measure.workloads.kinds.plan_of: a dataset, lengths, a multi-turn
    # chat, a trace), built when a spec is made; LoadSpec fields it sets too (think time, burstiness, ramp-up)
    workload: dict[str, Any] = field(default_factory=dict)
    pattern: dict[str, Any] = field(default_factory=dict)
    # Its prompts are synthetic, made from a seed (prompts.seeded_prompts, with this many extra words each; `prompts`
    # the seed-0 ones, for sizing): each spec draws a new seed unless one is given, so no run finds another's prompts
    # in vLLM's prefix cache (workloads.seeds)
    seeded: bool = False
    prompt_words: int = 0

    def label(self, max_tokens: int | None = None) -> str:
        """The description with the token budget actually used, e.g. '… (48 tokens)'."""
        d, tokens = self.description, max_tokens or self.max_tokens
        if isinstance(d, Message):
            return Message(d.template, values={**d.values, "tokens": tokens}) if "tokens" in d.values else d
        return re.sub(r"\(\d+ tokens\)", f"({tokens} tokens)", d)

    @property
    def prompt_tokens_guess(self) -> int:
        """About how many tokens its longest prompt takes, chat template included (about 4 characters a token
        in English): for sizing defaults before any request has said the real count."""
        return (max(len(p) for p in self.prompts) + len(self.system)) // 4 + 16 if self.prompts else 16

    def load_spec(self, base_url: str = "", model: str = "", tokens: Any = None, data: bytes | None = None,
                  report: Any = None, seed: int | None = None, models_dir: Path | None = None,
                  **over: Any) -> LoadSpec:
        """The spec this scenario sends. A workload scenario builds its plan here: `tokens` counts and makes its
        tokens (engine.measure.workloads.tokens; default: the embedded model's tokenizer when prepared in
        `models_dir`, Settings.models, else the estimate), `data` replaces its shipped file with an uploaded one,
        `report` hears how far a large file is read (kinds.plan_of). A `seeded` scenario's prompts are made from
        `seed`, a new one when None (recorded as LoadSpec.prompt_seed)."""
        spec = LoadSpec(
            base_url=base_url, model=model, prompts=list(self.prompts) or ["(workload)"], system=self.system,
            # a trace's schedule comes with its plan: until then the spec is a plain one
            shape="concurrency" if self.shape == "trace" else self.shape, concurrency=self.concurrency, rate=self.rate,
            num_requests=self.num_requests,
            max_tokens=self.max_tokens, ignore_eos=self.ignore_eos, scenario=self.name, warmup=self.warmup,
            label=self.label(over.get("max_tokens")), **self.pattern,
        )
        if self.seeded and over.get("prompts") is None:
            seed = seeds.fresh() if seed is None else seed
            spec = replace(spec, prompts=prompts.seeded_prompts(len(self.prompts), seed, extra_words=self.prompt_words),
                           prompt_seed=seed, prompt_words=self.prompt_words)
        if self.workload:
            spec = kinds.plan_of(self.workload, tokens or toks.embedded(models_dir), data, report).apply(spec)
            if over.get("max_tokens") is not None and spec.max_tokens_each:  # a budget given caps each answer
                spec = replace(spec, max_tokens_each=[min(k, over["max_tokens"]) for k in spec.max_tokens_each],
                               workload={**(spec.workload or {}), "max_tokens_cap": over["max_tokens"]})
        if self.read_timeout_s is not None:  # the wait for room comes on top of the answer's own deadline
            spec = replace(spec, read_timeout_s=self.read_timeout_s,
                           timeout_s=self.read_timeout_s + request_deadline_s(spec.max_tokens))
        return replace(spec, **{k: v for k, v in over.items() if v is not None})

    def naive_spec(self, model_path: str, random_weights: bool = False, **over: Any):
        spec = NaiveSpec(model_path=model_path, prompts=list(self.prompts), max_new_tokens=self.max_tokens,
                         mode=self.naive_mode, random_weights=random_weights, scenario=self.name,
                         label=self.label(over.get("max_new_tokens")))
        return replace(spec, **{k: v for k, v in over.items() if v is not None})


# A scenario's config key: size the KV cache to hold this many requests of the full max-model-len.
SQUEEZE = "kv_cache_requests"
NGRAM = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}'  # vLLM's --speculative-config
GIB = 1024**3


def configs_for(scn: Scenario, base: ServerConfig) -> list[ServerConfig]:
    """A comparison scenario's configurations as `base` with each one's changes. A SQUEEZE change becomes
    a KV cache of that many full-length requests, from the model's KV bytes per token (ceiling.model_bytes):
    on the CPU build the KV cache in GiB (a fraction: --kv-cache-memory-bytes), on a GPU vLLM's
    --kv-cache-memory-bytes among the extra flags (a memory fraction cannot make a small cache on a big
    GPU: it sizes weights, activations and cache together). ConfigError when the model's size is unknown."""
    out = []
    for changes in scn.configs:
        changes = dict(changes)
        if (requests := changes.pop(SQUEEZE, None)) is not None:
            cfg = base.with_changes(**changes)
            size = ceiling.model_bytes(cfg.model, cfg.dtype)
            if size is None:
                raise ConfigError(say("The {name} scenario sizes the KV cache from the model's shape, and {model} "
                                      "has no readable config.json: pick a model folder that has one.",
                                      name=scn.name, model=cfg.model))
            wanted = requests * (cfg.max_model_len or 2048) * size.kv_per_token
            # rounded up (to 1e-6 GiB, ~1 KB): a byte short of a block would leave vLLM a block short
            changes = ({"cpu_kvcache_gib": math.ceil(wanted / GIB * 1e6) / 1e6} if cfg.device == "cpu" else
                       {"extra_args": (*cfg.extra_args, "--kv-cache-memory-bytes", str(math.ceil(wanted)))})
            out.append(cfg.with_changes(**changes))
        else:
            out.append(base.with_changes(**changes))
    return out


_SWEEP_WORDS = 24
SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("naive-5", say("Naive transformers, 5 sequential ({tokens} tokens)", tokens=200), "naive",
             tuple(prompts.LAB_SEQUENTIAL), 200),
    Scenario("static-batch-5", say("Static batching: one padded generate() over 5 prompts ({tokens} tokens)",
                                   tokens=200), "naive",
             tuple(prompts.LAB_SEQUENTIAL), 200, naive_mode="static-batch"),
    Scenario("vllm-5-sequential", say("vLLM, 5 sequential ({tokens} tokens)", tokens=200), "vllm",
             tuple(prompts.LAB_SEQUENTIAL), 200),
    # The static batch's prompts through vLLM all at once: the same slots, refilled as each answer ends
    # (engine.measure.judge.slots draws both).
    Scenario("vllm-5-batch", say("vLLM, the same 5 prompts at once ({tokens} tokens)", tokens=200), "vllm",
             tuple(prompts.LAB_SEQUENTIAL), 200, shape="burst", concurrency=5),
    Scenario("test-query", say("vLLM, one test query ({tokens} tokens)", tokens=200), "vllm", (prompts.LAB_CAPITAL,),
             200),
    Scenario("concurrent-10", say("vLLM, 10 concurrent ({tokens} tokens)", tokens=150), "vllm",
             tuple(prompts.LAB_CONCURRENT), 150, shape="burst", concurrency=10),
    Scenario("tuning", say("10 concurrent ({tokens} tokens): max-model-len 2048 / 0.85 vs 512 / 0.90", tokens=100),
             "tuning", tuple(prompts.LAB_TUNING), 100, shape="burst", concurrency=10,
             # one batch first on each freshly started server: the rows are compared on their settings, not
             # on a new server's first-batch start-up work
             warmup=10,
             configs=({"max_model_len": 2048, "gpu_memory_utilization": 0.85},
                      {"max_model_len": 512, "gpu_memory_utilization": 0.90})),
    # Prefix caching: the first request fills the cache, the rest reuse it; one at a time, so each TTFT is
    # its prefill alone. Both servers report cached tokens in their answers' usage.
    Scenario("prefix-cache", say("{n} questions after one long shared system prompt, one at a time ({tokens} tokens): "
                                 "prefix caching on vs off", n=len(prompts.WORKSHOP_QUESTIONS), tokens=32),
             "tuning", tuple(prompts.WORKSHOP_QUESTIONS), 32, system=prompts.WORKSHOP_SYSTEM,
             configs=({"enable_prefix_caching": True, "enable_prompt_tokens_details": True},
                      {"enable_prefix_caching": False, "enable_prompt_tokens_details": True}),
             config_labels=(say("prefix caching on"), say("prefix caching off"))),
    # The KV cache as the scarce resource: the same 8 long answers (ignore_eos: every one runs to its
    # budget) on a cache too small for them, then on one with room. The squeezed cache holds 1.5
    # full-length requests (SQUEEZE_REQUESTS, sized from the model's KV bytes per token: configs_for), the
    # least vLLM starts with; for SmolLM2-135M on the CPU build (23,040 bytes a token) that is 3 blocks
    # of 128 tokens: 3 requests fit, each outgrows its block within ~100 tokens, so the rest wait and the
    # running ones preempt each other.
    Scenario("kv-squeeze", say("KV cache squeezed vs room to spare: 8 concurrent answers of {tokens} tokens",
                               tokens=200), "tuning",
             tuple(prompts.LAB_TUNING[:8]), 200, shape="burst", concurrency=8, ignore_eos=True,
             read_timeout_s=600,  # a request waits for room without a byte sent: minutes on 2 CPU cores
             configs=({"max_model_len": 256, SQUEEZE: 1.5},
                      {"max_model_len": 256, "cpu_kvcache_gib": 1, "gpu_memory_utilization": 0.85}),
             # named by what they are, not by a size such as "KV 0.00824 GiB" (the flags are in the caption)
             config_labels=(say("KV cache squeezed"), say("KV cache with room to spare"))),
    # Speculative decoding: n-gram speculation (the drafter needs no second model, and the CPU build runs it) on
    # answers that copy their prompt, against the same server without it; the server counts what it accepted.
    Scenario("speculation", say("n-gram speculative decoding on vs off: {n} answers that copy their prompt "
                                "({tokens} tokens)", n=len(prompts.SPECULATION), tokens=96), "tuning",
             tuple(prompts.SPECULATION), 96, shape="burst", concurrency=len(prompts.SPECULATION), warmup=4,
             configs=({"extra_args": ("--speculative-config", NGRAM)}, {}),
             config_labels=(say("n-gram speculation on"), say("speculation off"))),
    Scenario("stream-300", say("One streamed answer, TTFT ({tokens} tokens)", tokens=300), "vllm",
             (prompts.LAB_STREAM,), 300),
    Scenario("sweep", say("Concurrency sweep: throughput and TTFT vs requests in flight ({tokens} tokens)", tokens=128),
             "sweep",
             tuple(prompts.seeded_prompts(64, seed=0, extra_words=_SWEEP_WORDS)), 128, shape="concurrency",
             ignore_eos=True, levels=(1, 2, 4, 8, 16, 32), seeded=True, prompt_words=_SWEEP_WORDS),
    # The SLO search: the sweep's workload at levels found by bisection (Runner.slo_search), to the most requests in
    # flight that meet the SLO given (the CLI's --slo-ttft-ms / --slo-tpot-ms), from levels[0] up to the server's
    # capacity (runs.capacity; levels[-1] where the server does not say)
    Scenario("slo-search", say("SLO search: the most requests in flight (or with --search-by rate, the highest "
                               "arrival rate) that meet the SLO, up to the server's capacity ({tokens} tokens)",
                               tokens=128), "slo-search",
             tuple(prompts.seeded_prompts(64, seed=0, extra_words=_SWEEP_WORDS)), 128, shape="concurrency",
             ignore_eos=True, levels=(1, 32), seeded=True, prompt_words=_SWEEP_WORDS),
    Scenario("sustained", say("Sustained load: Poisson arrivals at 2 requests/s for 30 requests ({tokens} tokens)",
                              tokens=128), "vllm",
             tuple(prompts.seeded_prompts(30, seed=1)), 128, shape="poisson", rate=2.0, num_requests=30,
             ignore_eos=True, seeded=True),
    # Real traffic (datasets, lengths, chats, traces, ramps, bursts). Each runs offline on the files shipped in
    # examples/workloads/ (README there).
    Scenario("dataset-chat", say("Your own dataset: 40 of the shipped chat prompts at random, 4 in flight ({tokens} "
                                 "tokens)", tokens=64), "vllm", (), 64, shape="concurrency", concurrency=4,
             workload={"kind": "dataset", "file": "chat-prompts.jsonl", "n": 40, "how": "random", "seed": 0}),
    Scenario("lengths-chat-like", say("Chat-like lengths: 32 requests, inputs and answers from the shipped long-tailed "
                                      "shape, 4 in flight (up to {tokens} tokens)", tokens=256), "vllm", (), 256,
             shape="concurrency", concurrency=4,
             workload={"kind": "lengths", "n": 32, "input": {"kind": "chat-like"},
                       "output": {"kind": "chat-like", "high": 256}}),
    Scenario("random-512-64", say("Fixed lengths: 32 prompts of exactly 512 tokens, answers of exactly {tokens}, 8 in "
                                  "flight", tokens=64), "vllm", (), 64, shape="concurrency", concurrency=8,
             workload={"kind": "lengths", "n": 32, "input": {"kind": "fixed", "mean": 512},
                       "output": {"kind": "fixed", "mean": 64}}),
    # Shared prefixes (vllm bench serve's prefix_repetition): the workload that shows prefix caching, run with the
    # prefix cache on (vLLM's default) and off to see what it saves; smaller than vLLM's defaults for a CPU
    Scenario("prefix-repetition", say("Shared prefixes: 24 requests over 4 prefixes of 256 tokens, each its own suffix "
                                      "of 32, 4 in flight (answers of {tokens} tokens)", tokens=32), "vllm", (), 32,
             shape="concurrency", concurrency=4,
             workload={"kind": "prefix-repetition", "n": 24, "prefix_len": 256, "suffix_len": 32, "num_prefixes": 4,
                       "output_len": 32}),
    # A fixed text (vllm bench serve's sonnet, without its copied poems): real sentences of chosen lengths
    Scenario("fixed-text", say("Fixed text: 24 prompts of 256 tokens cut from the shipped text, the first 128 shared, "
                               "4 in flight (answers of {tokens} tokens)", tokens=32), "vllm", (), 32,
             shape="concurrency", concurrency=4,
             workload={"kind": "fixed-text", "n": 24, "input_len": 256, "prefix_len": 128, "output_len": 32}),
    Scenario("multi-turn", say("Multi-turn chats: 8 conversations × 3 turns, each turn with the whole history, 4 at "
                               "once ({tokens} tokens)", tokens=64), "vllm", (), 64, shape="concurrency",
             concurrency=4, workload={"kind": "multi-turn", "file": "conversations.json", "conversations": 8,
                                      "turns": 3}),
    Scenario("trace-tiny",
             say("Trace replay: the shipped tiny trace (40 requests over 15.5 s, a shared prefix in a third "
                               "of them) on its own clock"), "vllm", (), 64, shape="trace",
             workload={"kind": "trace", "file": "tiny-trace.jsonl", "time_scale": 1.0}),
    Scenario("ramp-up", say("Ramp-up: 1 to 16 requests in flight over 20 s, 64 requests ({tokens} tokens)", tokens=64),
             "vllm", tuple(prompts.seeded_prompts(64, seed=2)), 64, shape="concurrency", concurrency=16,
             num_requests=64, ignore_eos=True, pattern={"ramp_up_s": 20.0, "ramp_from": 1}, seeded=True),
    Scenario("bursty", say("Bursty arrivals: gamma, 2 requests/s on average, burstiness 0.25, 30 requests ({tokens} "
                           "tokens)", tokens=64), "vllm", tuple(prompts.seeded_prompts(30, seed=3)), 64,
                           shape="poisson",
             rate=2.0, num_requests=30, ignore_eos=True, pattern={"burstiness": 0.25}, seeded=True),
)}


def configs_after(name: str, started: ServerConfig | None) -> list[ServerConfig]:
    """A comparison scenario's configurations as the last `started` server's settings with its changes
    (ServerBusy before any server started)."""
    return configs_for(get(name), tuning_base(started))


def get(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise LabError(say("There is no scenario '{name}': pick one of {names}.", name=name,
                           names=", ".join(SCENARIOS))) from None


def sweep_levels(scn: Scenario, top: int | None) -> list[int]:
    if not top:
        return list(scn.levels)
    levels, n = [], 1
    while n < top:
        levels.append(n)
        n *= 2
    return levels + [top]
