"""The catalogue of named workloads: the lab notebook's steps, a concurrency sweep and a sustained-rate
test — one definition used by the pages, the CLI and the bench scripts (engine.runs carries them out)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from engine.errors import ConfigError, LabError
from engine.measure import ceiling, prompts
from engine.measure.spec import LoadSpec
from engine.messages import Message, say
from engine.serving.config import ServerConfig


@dataclass(frozen=True)
class Scenario:
    name: str  # an identifier (the CLI's, a run's `scenario`): never translated
    description: str  # a Message whose template has {tokens}: the token budget (see label)
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
    config_labels: tuple[str, ...] = ()  # tuning: how each contender is named (default: runs.tuning_label)
    system: str = ""  # a system prompt every request starts with
    read_timeout_s: float | None = None  # None: LoadSpec's; longer where requests queue by design (kv-squeeze)
    extra: dict[str, Any] = field(default_factory=dict)

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

    def load_spec(self, base_url: str = "", model: str = "", **over: Any) -> LoadSpec:
        spec = LoadSpec(
            base_url=base_url, model=model, prompts=list(self.prompts), system=self.system, shape=self.shape,
            concurrency=self.concurrency, rate=self.rate, num_requests=self.num_requests,
            max_tokens=self.max_tokens, ignore_eos=self.ignore_eos, scenario=self.name,
            label=self.label(over.get("max_tokens")),
        )
        if self.read_timeout_s is not None:
            spec = replace(spec, read_timeout_s=self.read_timeout_s)
        return replace(spec, **{k: v for k, v in over.items() if v is not None})

    def naive_spec(self, model_path: str, random_weights: bool = False, **over: Any):
        from engine.measure.naive import NaiveSpec

        spec = NaiveSpec(model_path=model_path, prompts=list(self.prompts), max_new_tokens=self.max_tokens,
                         mode=self.naive_mode, random_weights=random_weights, scenario=self.name,
                         label=self.label(over.get("max_new_tokens")))
        return replace(spec, **{k: v for k, v in over.items() if v is not None})


# A scenario's config key: size the KV cache to hold this many requests of the full max-model-len.
SQUEEZE = "kv_cache_requests"
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
    # (engine.measure.slots draws both).
    Scenario("vllm-5-batch", say("vLLM, the same 5 prompts at once ({tokens} tokens)", tokens=200), "vllm",
             tuple(prompts.LAB_SEQUENTIAL), 200, shape="burst", concurrency=5),
    Scenario("concurrent-10", say("vLLM, 10 concurrent ({tokens} tokens)", tokens=150), "vllm",
             tuple(prompts.LAB_CONCURRENT), 150, shape="burst", concurrency=10),
    Scenario("tuning", say("10 concurrent ({tokens} tokens): max-model-len 2048 / 0.85 vs 512 / 0.90", tokens=100),
             "tuning", tuple(prompts.LAB_TUNING), 100, shape="burst", concurrency=10,
             configs=({"max_model_len": 2048, "gpu_memory_utilization": 0.85},
                      {"max_model_len": 512, "gpu_memory_utilization": 0.90})),
    # Issue #12 item 3: the first request fills the cache, the rest reuse it; one at a time, so each TTFT is
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
    Scenario("stream-300", say("One streamed 300-token answer (TTFT)"), "vllm", (prompts.LAB_STREAM,), 300),
    Scenario("sweep", say("Concurrency sweep: throughput and TTFT vs requests in flight ({tokens} tokens)", tokens=128),
             "sweep",
             tuple(prompts.seeded_prompts(64, seed=0, extra_words=_SWEEP_WORDS)), 128, shape="concurrency",
             ignore_eos=True, levels=(1, 2, 4, 8, 16, 32)),
    Scenario("sustained", say("Sustained load: Poisson arrivals at 2 requests/s for 30 requests ({tokens} tokens)",
                              tokens=128), "vllm",
             tuple(prompts.seeded_prompts(30, seed=1)), 128, shape="poisson", rate=2.0, num_requests=30,
             ignore_eos=True),
)}


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
