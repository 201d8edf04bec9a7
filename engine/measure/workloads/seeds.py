"""The seed synthetic prompts are made from, new for every run. vLLM's prefix cache keeps the prompts it has seen:
a run sending the very prompts of an earlier one finds most of its prefill done (a repeated random-512-64 took
25,600 of its 31,600 prompt tokens from the cache and reported twice `vllm bench serve`'s throughput). So every run
and every repeat draws a new seed unless one is fixed, and records it (LoadSpec.prompt_seed). See
docs/measuring.md#seeds."""
from __future__ import annotations

import secrets
from dataclasses import replace
from pathlib import Path

from engine.measure.load.spec import LoadSpec
from engine.measure.workloads import kinds, prompts
from engine.measure.workloads import tokens as toks
from engine.messages import say

SEED_LIMIT = 2**31  # a seed anyone can type back: --seed 1234567890


def fresh() -> int:
    """A new seed, from the system's randomness (not the random module's state, which a test or a caller may have
    seeded)."""
    return secrets.randbelow(SEED_LIMIT)


def seeded(spec: LoadSpec) -> bool:
    """Whether the spec's prompts were made from a seed (synthetic prompts, a length distribution's), so another
    seed makes other prompts of the same shape."""
    return spec.prompt_seed is not None


def reseed(spec: LoadSpec, seed: int, tokens: toks.Tokens | None = None, models_dir: Path | None = None) -> LoadSpec:
    """`spec` with its synthetic prompts made again from `seed`: a length distribution's drawn again (its lengths and
    prompts, counted by `tokens`, else the embedded model's tokenizer in `models_dir`: tokens.embedded; the workload's
    record says the new seed), the seeded synthetic prompts made again; a spec whose prompts were not made from a
    seed as it is. Its label follows when it was the description of what it sends."""
    if not seeded(spec) or seed == spec.prompt_seed:
        return spec
    w = spec.workload or {}
    if w.get("kind") in kinds.SEEDED:
        plan = kinds.plan_of({**kinds.described(w), "seed": seed}, tokens or toks.embedded(models_dir))
        again = plan.apply(spec, ignore_eos=spec.ignore_eos)
        if (cap := w.get("max_tokens_cap")) and again.max_tokens_each:  # a budget given caps each answer
            again = replace(again, max_tokens_each=[min(k, cap) for k in again.max_tokens_each],
                            max_tokens=min(again.max_tokens or cap, cap), workload={**(again.workload or {}),
                                                                                    "max_tokens_cap": cap})
    else:
        again = replace(spec, prompts=prompts.seeded_prompts(len(spec.prompts), seed, extra_words=spec.prompt_words))
    again = replace(again, prompt_seed=seed)
    if spec.label == described(spec):  # the label says the seed: the new one
        return replace(again, label=described(again))
    return replace(again, label=again.describe()) if spec.label == spec.describe() else again


def nth(spec: LoadSpec, i: int, models_dir: Path | None = None) -> LoadSpec:
    """`spec` for the `i`-th (0-based) level of a sweep or an SLO search: its synthetic prompts made from the spec's
    seed plus `i` (reseed, `models_dir` as there), so no level finds an earlier level's prompts in the prefix cache,
    and a seed given (--seed) makes the same levels again; a spec whose prompts were not made from a seed as it is."""
    if not seeded(spec) or not i:
        return spec
    return reseed(spec, (int(spec.prompt_seed or 0) + i) % SEED_LIMIT, models_dir=models_dir)


def described(spec: LoadSpec):
    """What the spec sends in a few words (LoadSpec.describe) with the seed of its synthetic prompts, for a run's
    label: "8 requests at once, 16 tokens, seed 7"."""
    if not seeded(spec):
        return spec.describe()
    return say("{load}, seed {seed}", load=spec.describe(), seed=spec.prompt_seed)
