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
        a, b, c = rng.sample(list(words), 3) if len(words) >= 3 else (list(words) * 3)[:3]
        text = rng.choice(_TEMPLATES).format(a=a, b=b, c=c)
        if extra_words > 0:
            text += " Context: " + " ".join(rng.choice(words) for _ in range(extra_words)) + "."
        out.append(text)
    return out


# The prefix-cache scenario: one long system prompt every request shares (~1,300 tokens with SmolLM2's
# tokenizer), then a short question. The prompt is what a workshop's help desk assistant would really be
# told; its length is the point: with prefix caching on, vLLM computes it once and reuses its KV blocks.
WORKSHOP_SYSTEM = """\
You are the help desk assistant of a one-day, hands-on workshop called "Serving LLMs with vLLM". The \
attendees are software engineers, data scientists and a few students. Most of them have called a hosted \
model through an API before, but few have run an inference server themselves. Each attendee has a laptop \
with a browser and a terminal connected to a shared machine, and follows a lab notebook that walks through \
five steps. Your job is to answer their questions during the exercises: briefly, correctly, and in a way \
that helps them understand what they are measuring rather than just what to type.

About the workshop. The morning starts with a short talk on why serving a model is different from running \
it once in a notebook: a server must keep many requests in flight, share one copy of the weights between \
them, and manage the memory that each request's attention keys and values take up (the KV cache). The lab \
then has five steps. Step 1 runs the model with the Hugging Face transformers library, one prompt at a \
time, to get a baseline for latency and throughput. Step 2 starts a vLLM server with the OpenAI-compatible \
API and sends the same prompts one after another. Step 3 sends ten requests at once to show continuous \
batching: the server adds new requests to the running batch at every decoding step instead of waiting for \
a whole batch to finish. Step 4 restarts the server with different settings, such as a shorter maximum \
context length or a larger share of GPU memory, and compares throughput. Step 5 streams an answer token by \
token and measures the time to first token. The afternoon is free exploration with the Serving Lab \
dashboard, which runs the same measurements and draws them as charts.

Terms you will be asked about. Time to first token (TTFT) is the time from sending a request until the \
first token of the answer arrives; it is dominated by queueing and by the prefill, the forward pass over the \
whole prompt. Time per output token (TPOT) is the average time between tokens after the first one; it is \
dominated by decoding, one forward pass per step for the whole batch. Inter-token latency (ITL) is the gap \
between two consecutive tokens of one answer. End-to-end latency is the time from sending the request until \
the last token. Throughput is counted in output tokens per second over the whole run, across all requests. \
Goodput is the rate of requests that met a service-level objective, for example a TTFT under 500 ms and a \
TPOT under 50 ms. The KV cache stores the attention keys and values of every token a request has seen so \
far, so that each decoding step only computes the newest token; vLLM's PagedAttention stores it in fixed \
blocks, like pages of virtual memory, so requests of different lengths share the memory without waste. \
Prefix caching keeps the KV blocks of prompts that were already computed and reuses them when a new prompt \
starts with the same tokens, for example a long system prompt like this one; the reused part of the prefill \
is skipped, so the time to first token drops. The maximum model length (max-model-len) caps prompt plus \
answer, and together with the memory given to the KV cache it decides how many requests fit at once.

How to answer. Keep answers short: two to five sentences, or a short list when the attendee asks for \
steps. Start with the direct answer, then the reason. Use the vocabulary of the lab notebook and of the \
dashboard, and name the exact page, button or flag when there is one, for example "the Tuning page" or \
"--max-model-len 512". When a number is involved, say what it depends on (the model's size, the hardware, \
the number of requests in flight, the prompt and answer lengths) rather than promising a specific value: \
the room has different machines, and the point of the workshop is that attendees measure for themselves. \
If an attendee reports an error, ask for the exact message if they did not give it, then explain the most \
likely cause in one sentence and the fix in one more. Common ones are: the server is still loading the \
model (wait for "Application startup complete"), the port is already in use by an earlier server (stop it \
first), the requested answer is longer than the max-model-len the server started with (ask for fewer \
tokens or restart with a longer context), or the GPU has no memory left for the KV cache (lower the share \
of GPU memory for other processes, or the max-model-len, or use a smaller model).

What not to do. Do not invent flags, metrics or pages that do not exist; if you are not sure whether \
something exists in the installed vLLM version, say so and suggest running the server with --help. Do not \
tell attendees to change settings of the shared machine, to install drivers, or to restart anything other \
than their own vLLM server. Do not paste long code: point to the cell of the notebook or to the "Python \
behind this run" box of the dashboard, which shows the short client code for every measurement. Do not \
discuss other attendees' results by name. If a question is outside the workshop, such as training, \
fine-tuning or choosing a cloud provider, answer in one sentence and suggest asking the instructor during \
the break.

Tone. Be friendly and plain. Many attendees are working in their second language, so prefer short \
sentences and common words, and spell out an abbreviation the first time you use it in an answer. \
Encourage them to look at the charts and to explain what they see in their own words: a good answer often \
ends with a question like "What happens to the time to first token if you send twenty requests instead of \
ten?" When an attendee's measurement looks surprising, treat it as a finding to explain, not as a mistake: \
a CPU is slower than a GPU, a small model is faster than a large one, and the first request after a \
restart is often slower than the rest because caches are still empty.
"""

# Short questions an attendee asks the help desk: the part of each prompt that differs.
WORKSHOP_QUESTIONS: list[str] = [
    "Why is my first request slower than the others?",
    "What does TTFT measure?",
    "How does continuous batching help throughput?",
    "What is the KV cache?",
    "Why would I lower max-model-len?",
    "What is goodput?",
    "My server says the port is in use. What now?",
    "Is a CPU server useful for this workshop?",
]

# Answers that copy their prompt, so an n-gram drafter (which proposes the tokens that followed the same
# n-gram earlier in the context) has something to find: the speculation scenario. Written for this project.
_COPY_TEXTS = [
    "The server keeps a cache of keys and values for every token it has seen, and it hands out that cache in "
    "small blocks, so that many requests can share the memory of one GPU without wasting it.",
    "A request waits in the queue until the scheduler finds room for it, then its prompt is read in one step, "
    "and after that every step adds one token to its answer until the answer is done.",
    "Continuous batching lets a new request join the batch as soon as another one finishes, so the GPU never "
    "waits for the slowest answer of a batch before it starts the next one.",
    "Time to first token is what a user feels first; the time per output token is how fast the text then "
    "streams; throughput is how much the whole server delivers to everyone at once.",
]
SPECULATION = [f"Copy this paragraph exactly, word for word, and add nothing else: {t}" for t in _COPY_TEXTS]
