"""Prompt sets: the lab notebook's prompts verbatim, and deterministic synthetic prompts for sweeps."""
from __future__ import annotations

import random
from collections.abc import Sequence

# Step 1 (naive baseline) and step 2 (vLLM, sequential).
LAB_SEQUENTIAL: list[str] = [
    "What are the symptoms of diabetes?",
    "Explain how a transformer model works in 3 sentences.",
    "Write a Python function to calculate fibonacci numbers.",
    "What is the difference between TCP and UDP?",
    "Summarize the key ideas of reinforcement learning.",
]

# Step 3: ten requests at once, continuous batching.
LAB_CONCURRENT: list[str] = [
    "What causes high blood pressure?",
    "Explain quantum computing simply.",
    "Write a haiku about machine learning.",
    "What are the SOLID principles?",
    "How does photosynthesis work?",
    "What is the difference between SQL and NoSQL?",
    "Explain the attention mechanism in transformers.",
    "What are the benefits of exercise?",
    "How does HTTPS encryption work?",
    "Summarize the history of artificial intelligence.",
]

# Step 4 (tuning, max-model-len 512): the notebook shortened the last prompt.
LAB_TUNING: list[str] = LAB_CONCURRENT[:-1] + ["Summarize the history of AI."]

# Step 5: streaming and time to first token.
LAB_STREAM = "Explain PagedAttention in vLLM and why it matters for serving."

# Step 2's first smoke query.
LAB_CAPITAL = "What is the capital of Korea?"

_WORDS: tuple[str, ...] = (
    "cache", "token", "batch", "latency", "memory", "kernel", "scheduler", "queue", "prompt",
    "attention", "layer", "matrix", "vector", "gradient", "server", "request", "stream", "model",
    "context", "page", "block", "throughput", "decode", "prefill", "GPU", "tensor", "weight",
    "network", "compiler", "graph", "river", "mountain", "city", "garden", "music", "history",
    "ocean", "planet", "engine", "library", "bridge", "forest", "market", "winter", "language",
)
_TEMPLATES: tuple[str, ...] = (
    "Explain how {a} relates to {b} and {c}.",
    "Write a short story about a {a}, a {b} and a {c}.",
    "Compare {a} and {b} in terms of {c}.",
    "Give three facts about {a}, then one about {b} and {c}.",
    "Describe a day in the life of a {a} who loves {b} and {c}.",
)


def seeded_prompts(n: int, seed: int = 0, words: Sequence[str] = _WORDS, extra_words: int = 0) -> list[str]:
    """`n` varied synthetic prompts, the same for the same arguments (a private RNG, so callers'
    random state is untouched). `extra_words` appends that many random words to each prompt to
    lengthen it for prefill-heavy sweeps."""
    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(max(0, n)):
        a, b, c = rng.sample(list(words), 3) if len(words) >= 3 else (words * 3)[:3]
        text = rng.choice(_TEMPLATES).format(a=a, b=b, c=c)
        if extra_words > 0:
            text += " Context: " + " ".join(rng.choice(words) for _ in range(extra_words)) + "."
        out.append(text)
    return out


def prompt_cycle(prompts: Sequence[str], n: int) -> list[str]:
    """The first `n` prompts of `prompts` repeated cyclically (n requests from a shorter set)."""
    if not prompts:
        raise ValueError("prompt_cycle needs at least one prompt")
    return [prompts[i % len(prompts)] for i in range(max(0, n))]
