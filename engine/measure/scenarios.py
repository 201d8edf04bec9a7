"""The catalogue of named workloads: the lab notebook's steps, a concurrency sweep and a sustained-rate
test — one definition used by the pages, the CLI and the bench scripts (engine.runs carries them out)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from engine.errors import LabError
from engine.measure import prompts
from engine.measure.spec import LoadSpec
from engine.messages import Message, say


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
    extra: dict[str, Any] = field(default_factory=dict)

    def label(self, max_tokens: int | None = None) -> str:
        """The description with the token budget actually used, e.g. '… (48 tokens)'."""
        d, tokens = self.description, max_tokens or self.max_tokens
        if isinstance(d, Message):
            return Message(d.template, values={**d.values, "tokens": tokens}) if "tokens" in d.values else d
        return re.sub(r"\(\d+ tokens\)", f"({tokens} tokens)", d)

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
    Scenario("naive-5", say("Naive transformers, 5 sequential ({tokens} tokens)", tokens=200), "naive",
             tuple(prompts.LAB_SEQUENTIAL), 200),
    Scenario("static-batch-5", say("Static batching: one padded generate() over 5 prompts ({tokens} tokens)",
                                   tokens=200), "naive",
             tuple(prompts.LAB_SEQUENTIAL), 200, naive_mode="static-batch"),
    Scenario("vllm-5-sequential", say("vLLM, 5 sequential ({tokens} tokens)", tokens=200), "vllm",
             tuple(prompts.LAB_SEQUENTIAL), 200),
    Scenario("concurrent-10", say("vLLM, 10 concurrent ({tokens} tokens)", tokens=150), "vllm",
             tuple(prompts.LAB_CONCURRENT), 150, shape="burst", concurrency=10),
    Scenario("tuning", say("10 concurrent ({tokens} tokens): max-model-len 2048 / 0.85 vs 512 / 0.90", tokens=100),
             "tuning", tuple(prompts.LAB_TUNING), 100, shape="burst", concurrency=10,
             configs=({"max_model_len": 2048, "gpu_memory_utilization": 0.85},
                      {"max_model_len": 512, "gpu_memory_utilization": 0.90})),
    # The KV cache as the scarce resource: the same 8 long answers (ignore_eos: every one runs to its
    # budget) on a cache too small for them, then on one with room. On the CPU build 0.01 GiB of a 135M
    # model's cache (23,040 bytes a token) is 3 blocks of 128 tokens: 3 requests fit, and each outgrows
    # its block within ~100 tokens, so some wait and some are preempted. On a GPU the fraction sizes the
    # cache with the weights in it: how squeezed 0.05 is depends on the GPU and the model.
    Scenario("kv-squeeze", say("KV cache squeezed vs room to spare: 8 concurrent answers of {tokens} tokens",
                               tokens=200), "tuning",
             tuple(prompts.LAB_TUNING[:8]), 200, shape="burst", concurrency=8, ignore_eos=True,
             configs=({"max_model_len": 256, "cpu_kvcache_gib": 0.01, "gpu_memory_utilization": 0.05},
                      {"max_model_len": 256, "cpu_kvcache_gib": 1, "gpu_memory_utilization": 0.85})),
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
