"""The short `openai` SDK Python behind what a page just ran, for an attendee to copy.
See docs/internals.md#snippets."""
from __future__ import annotations

from typing import Any

from engine.errors import ConfigError
from engine.measure.load.spec import SHAPES, LoadSpec
from engine.measure.snippets.python import (WIDTH, Comments, client, lit, paced_beyond_code, request_call, shape_lines,
                                            shape_of, tokens_used)
from engine.measure.snippets.workload import workload_code
from engine.messages import Message, say
from engine.serving.config import ServerConfig

MAX_LINES = 30  # and the lines a request's shape adds (headers, LoRA, an extra body: shaped_spec)


# -- the three snippets -----------------------------------------------------------------------------
def chat_code(server: "ServerConfig | Any", prompt: str, *, max_tokens: int, temperature: float,
              earlier_turns: bool = False, lang: str = "en") -> str:
    """One streamed answer to `prompt` from `server`, printed as it arrives, then its TTFT and tokens (the
    lab's step 5). `server`: our ServerConfig or a runs.Target (its base_url, model_name, api_key);
    `server.api_key` is never written, only whether there is one."""
    c = Comments(lang)
    lines = [c.line(say("One streamed answer and its time to first token, as on the Chat page (the lab's step 5).")),
             "import os, time", "from openai import OpenAI", "",
             *client("OpenAI", server.base_url, bool(server.api_key), c), "",
             "start, ttft, tokens = time.perf_counter(), None, 0",
             "stream = client.chat.completions.create(",
             f"    model={lit(server.model_name)},",
             *([c.line(say("The last question only: the Chat page also sends the conversation before it."),
                       "    ")] if earlier_turns else []),
             f'    messages=[{{"role": "user", "content": {lit(prompt)}}}],',
             f"    max_tokens={max_tokens}, temperature={temperature:g}, stream=True,",
             '    stream_options={"include_usage": True},' + c.inline(say("the last chunk carries the token count")),
             ")",
             "for chunk in stream:",
             "    if chunk.usage:",
             "        tokens = chunk.usage.completion_tokens",
             "    if chunk.choices and chunk.choices[0].delta.content:",
             "        if ttft is None:",
             "            ttft = time.perf_counter() - start",
             '        print(chunk.choices[0].delta.content, end="", flush=True)',
             "total = time.perf_counter() - start",
             'print(f"\\n\\nTTFT (time to first token): {ttft * 1000:.0f} ms")',
             'print(f"Tokens generated: {tokens} in {total:.1f} s")']
    return "\n".join(lines) + "\n"


def load_code(spec: LoadSpec, *, key_needed: bool | None = None, lang: str = "en") -> str:
    """`spec`'s requests: one after another with `OpenAI` ("sequential"), else all together with
    `AsyncOpenAI` and `asyncio.gather` ("burst"), a semaphore keeping `concurrency` in flight
    ("concurrency"), or each started after a random Poisson wait ("poisson"). `spec.api_key` is never
    written; `key_needed` (default: whether the spec carries one) only changes what the comment says."""
    c = Comments(lang)
    key_needed = bool(spec.api_key) if key_needed is None else key_needed
    head = [c.line(say("{what}: what this page just ran, with the openai SDK as in the lab.", what=spec.describe()))]
    if spec.shape == "sequential":
        return _sequential(spec, head, key_needed, c)
    return _concurrent(spec, head, key_needed, c)


def spec_of(run: Any) -> LoadSpec | None:
    """The LoadSpec a stored run sent (from its Load), aimed at the server it ran against; None for a run
    not sent through the API (the naive baseline) or one whose Load lacks what a request needs (an import)."""
    load = run.load
    if run.kind != "vllm" or not load.prompts or load.shape not in SHAPES or not load.base_url or not run.model:
        return None
    if load.other.get("system"):  # a long shared system prompt (prefix-cache): the short code would leave it out
        return None
    if (load.workload or load.burstiness not in (None, 1) or load.other.get("ramp_up_s")
            or load.other.get("think_time_s") or paced_beyond_code(load)):  # a workload's own lengths, turns or
        # schedule: likewise
        return None
    try:
        return LoadSpec(base_url=load.base_url, model=run.model, prompts=[str(p) for p in load.prompts],
                        shape=load.shape, concurrency=load.concurrency or 1, rate=load.rate,
                        num_requests=load.num_requests, max_tokens=load.max_tokens, ignore_eos=load.ignore_eos,
                        temperature=0.7 if load.temperature is None else load.temperature,
                        endpoint=load.endpoint or "chat", seed=int(load.other.get("seed") or 0),
                        **shape_of(load))
    except (ConfigError, TypeError, ValueError):
        return None


def run_code(run: Any, lang: str = "en") -> str | None:
    """load_code for a stored run (its server's key, if it had one, is recorded only as "***"); a workload
    run's own code (workload_code: the same file, lengths, turns or trace); None where neither can be written."""
    if run.load.workload:
        return workload_code(run, lang)
    spec = spec_of(run)
    keyed = bool(run.config.get("api_key")) or run.extra.server.keyed  # our server's, or one at a URL
    return None if spec is None else load_code(spec, key_needed=keyed, lang=lang)


# -- the parts ---------------------------------------------------------------------------------------
def shaped_spec(spec: LoadSpec) -> bool:
    """Whether a spec sends more than the lab's plain request (sampling parameters, headers, an extra body, LoRA)."""
    return bool(spec.sampling or spec.headers or spec.extra_body or spec.lora_modules)


def _prompts(spec: LoadSpec, room: int, c: Comments) -> list[str]:
    """PROMPTS (as many of the spec's as fit in `room` lines, at least one) and N, the number of requests."""
    used = [lit(p) for p in spec.prompts[:spec.n]]
    shown = 1
    while shown < len(used) and len(_pack(used[:shown + 1])) <= room:
        shown += 1
    why: Message | None
    if shown < len(used):
        why = say("requests, cycling through the first {shown} of the run's {total} prompts", shown=shown,
                  total=len(used))
    else:
        why = say("requests; the prompts repeat") if spec.n > shown else None
    return _pack(used[:shown]) + [f"N = {spec.n}" + (c.inline(why) if why else "")]


def _pack(items: list[str]) -> list[str]:
    """`PROMPTS = [a, b,` / `           c]`: literals packed into lines of WIDTH (a longer one on its own)."""
    opener = "PROMPTS = ["
    lines, line = [], opener
    for i, item in enumerate(items):
        piece = item + ("]" if i == len(items) - 1 else ",")
        if line == opener:
            line += piece
        elif len(line) + 1 + len(piece) > WIDTH:
            lines.append(line)
            line = " " * len(opener) + piece
        else:
            line += " " + piece
    return lines + [line]


def _assemble(top: list[str], rest: list[str], spec: LoadSpec, c: Comments) -> str:
    """`top`, then PROMPTS and N in the lines `top` and `rest` leave of MAX_LINES, then `rest`."""
    # a request's shape (headers, LoRA, an extra body) takes lines of its own: the prompts keep their room
    room = (MAX_LINES + len(shape_lines(spec, c)) + 2 * shaped_spec(spec)) - len(top) - len(rest) - 1  # N's line
    return "\n".join(top + _prompts(spec, room, c) + rest) + "\n"


def _sequential(spec: LoadSpec, head: list[str], key_needed: bool, c: Comments) -> str:
    drawn = spec.lora_modules and spec.lora_assignment == "random"
    top = head + ["import os, random, time" if drawn else "import os, time", "from openai import OpenAI", "",
                  *client("OpenAI", spec.base_url, key_needed, c), f"MODEL = {lit(spec.model)}"]
    used = tokens_used(spec)
    rest = [*shape_lines(spec, c), "", "times, tokens = [], 0",
            "for i in range(N):",
            *(["    model = model_for(i)"] if spec.lora_modules else []),
            *(["    docs = docs_for(i)"] if spec.endpoint == "rerank" else []),
            "    start = time.perf_counter()",
            *request_call(spec, "PROMPTS[i % len(PROMPTS)]", "    ", c, awaited=False),
            "    times.append(time.perf_counter() - start)",
            f"    tokens += {used}",
            f'    print(f"Request {{i + 1}}: {{times[-1]:.1f}} s ({{{used}}} tokens)")',
            'print(f"Average (vLLM): {sum(times) / N:.1f} s per request")',
            'print(f"Throughput: {tokens / sum(times):.0f} tokens/s, one request at a time")']
    return _assemble(top, rest, spec, c)


def _concurrent(spec: LoadSpec, head: list[str], key_needed: bool, c: Comments) -> str:
    poisson, limited = spec.shape == "poisson", spec.shape == "concurrency"
    drawn = spec.lora_modules and spec.lora_assignment == "random"
    imports = ("import asyncio, itertools, os, random, time" if poisson else "import asyncio, os, random, time"
               if drawn else "import asyncio, os, time")
    top = head + [imports, "from openai import AsyncOpenAI", "",
                  *client("AsyncOpenAI", spec.base_url, key_needed, c), f"MODEL = {lit(spec.model)}"]
    body = [*request_call(spec, "prompt", "    ", c, awaited=True),
            f"    return time.perf_counter() - start, {tokens_used(spec)}"]
    args, passed = "prompt", "PROMPTS[i % len(PROMPTS)]"
    if spec.lora_modules:
        args, passed = args + ", model", passed + ", model_for(i)"
    if spec.endpoint == "rerank":
        args, passed = args + ", docs", passed + ", docs_for(i)"
    if limited:
        n = min(spec.concurrency, spec.n)
        setup = [f"IN_FLIGHT = asyncio.Semaphore({n})"
                 + c.inline(say("at most {n} at a time: the next goes out as one finishes", n=n))]
        one = [f"async def one({args}):", "    async with IN_FLIGHT:", "        start = time.perf_counter()",
               *["    " + line for line in body]]
        send = f"one({passed})"
    elif poisson:
        setup = [f"RATE = {spec.rate:g}" + c.inline(say("requests/s on average, at random moments (Poisson arrivals)"))]
        one = [f"async def one({args}, at):", "    await asyncio.sleep(at)", "    start = time.perf_counter()", *body]
        send = f"one({passed}, at) for i, at in enumerate(arrivals)"
    else:
        setup = []
        one = [f"async def one({args}):", "    start = time.perf_counter()", *body]
        send = f"one({passed})"
    setup = shape_lines(spec, c) + setup
    gather = (["    arrivals = itertools.accumulate(random.expovariate(RATE) for _ in range(N))",
               f"    results = await asyncio.gather(*[{send}])"] if poisson else
              [f"    results = await asyncio.gather(*[{send} for i in range(N)])"])
    rest = [*setup, "", *one, "",
            "async def main():",
            "    start = time.perf_counter()",
            *gather,
            "    wall, tokens = time.perf_counter() - start, sum(t for _, t in results)",
            '    print(f"{N} requests in {wall:.1f} s, mean latency {sum(s for s, _ in results) / N:.1f} s")',
            '    print(f"Throughput: {tokens / wall:.0f} tokens/s ({tokens} tokens)")',
            "",
            "asyncio.run(main())" + c.inline(say("in a notebook: await main()"))]
    return _assemble(top, rest, spec, c)
