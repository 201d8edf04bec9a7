"""What a load test sends, how hard and to which server (`LoadSpec`), and the checks that say in one sentence
why a setting cannot run. See docs/measuring.md#load-generator."""
from __future__ import annotations

import dataclasses
import functools
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ConfigError
from engine.messages import mark, say, say_n
from engine.results.credentials import scrub

SHAPES = ("sequential", "concurrency", "burst", "poisson", "trace")
RATE_SHAPES = ("poisson", "trace")  # sent on a schedule, not when a slot frees: each send has a planned time
ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "embeddings": "/v1/embeddings",
             "rerank": "/v1/rerank"}
POOLING = ("embeddings", "rerank")  # one JSON answer, no tokens sampled: no stream, no sampling parameters
RERANK_DOCUMENTS = 4  # a rerank request ranks the prompts after its own (its query) against it
# What one load test may ask for: beyond these a typo (100000 in flight) would swamp the machine.
MAX_IN_FLIGHT = 1024
MAX_REQUESTS = 100_000
MAX_RATE = 1000.0
MAX_TOKENS = 1_000_000
MAX_WORKERS = 64
MAX_THINK_S = 3600.0
MAX_RAMP_S = 86_400.0
MAX_BURSTINESS = 100.0
ARRIVALS = ("poisson", "gamma", "constant")  # a rate's arrivals: random gaps (gamma of shape burstiness) or even
RAMP_STRATEGIES = ("linear", "exponential")
LORA_ASSIGNMENTS = ("round-robin", "random")  # vllm bench serve --lora-assignment (its default: random)
MAX_LORA_WEIGHT = 1000  # vllm bench serve --ramp-up-strategy: the rate request by request
# Every request has one deadline for its whole answer (not only for each silence): a server that streams
# without end is cut off there. It grows with the answer's length: 30 s, plus 0.5 s per token asked for
# (2 tokens/s per request: the shape-only 8B on a CPU, or a deep batch, still finishes).
DEADLINE_BASE_S = 30.0
DEADLINE_PER_TOKEN_S = 0.5
LONGEST_ANSWER = 2048  # the tokens a deadline allows for when max_tokens is left to the server


def request_deadline_s(max_tokens: int | None) -> float:
    """The deadline of one request's whole answer, in seconds (30 s + 0.5 s per token)."""
    return DEADLINE_BASE_S + DEADLINE_PER_TOKEN_S * (max_tokens or LONGEST_ANSWER)


def deadline_said(max_tokens: int | None, deadline_s: float | None = None):
    """The deadline in one sentence, as the CLI prints it before a run and the pages' captions say it."""
    return say("Each answer must end within {s:.0f} s (30 s, plus 0.5 s for each of its up to {n} tokens), or it is "
               "cut off there and counted as failed.", s=deadline_s or request_deadline_s(max_tokens),
               n=max_tokens or LONGEST_ANSWER)


@dataclass
class LoadSpec:
    """What to send, how hard, and to which server."""

    base_url: str  # e.g. "http://127.0.0.1:8000" (a trailing /v1 is tolerated)
    model: str  # served model name
    prompts: list[str]
    system: str = ""  # a system prompt every request starts with (chat; completions: put before the prompt)
    shape: str = "concurrency"  # sequential | concurrency | burst | poisson
    concurrency: int = 1  # in flight at once ("concurrency"); expected peak for poisson's auto workers
    rate: float | None = None  # requests/s ("poisson")
    num_requests: int | None = None  # default: one per prompt; prompts are cycled
    max_tokens: int | None = 200  # None: the server's limit (natural ending)
    ignore_eos: bool = False  # vLLM extension: always generate max_tokens
    temperature: float = 0.7
    warmup: int = 0  # requests sent (at the same concurrency) before the measured part
    endpoint: str = "chat"  # chat | completions
    api_key: str | None = field(default=None, repr=False)  # sent, never recorded (see as_dict)
    timeout_s: float | None = None  # whole request; None: request_deadline_s(max_tokens)
    read_timeout_s: float = 60.0  # longest silence between bytes
    seed: int = 0  # poisson arrivals
    prompt_seed: int | None = None  # the seed synthetic prompts were made from (workloads.seeds); None: not seed-made
    prompt_words: int = 0  # the random words each seed-made prompt ends with (prompts.seeded_prompts' extra_words)
    scenario: str = ""
    label: str = ""
    workers: int = 0  # client processes; 0 = auto (1 unless concurrency is high and cores allow)
    # A workload's per-request detail (engine.measure.workloads): each request's answer length (cycled like the
    # prompts; None: max_tokens for every one), a trace's planned send offsets (shape "trace", s from the start,
    # one per request), and multi-turn chats (each conversation's user turns: each turn is sent with the whole
    # history so far, the replies the server really gave; `concurrency` conversations at once)
    max_tokens_each: list[int] | None = None
    offsets: list[float] | None = None
    conversations: list[list[str]] | None = None
    think_time_s: float = 0.0  # a conversation's pause between a reply and its next turn
    burstiness: float = 1.0  # poisson: the gaps' gamma shape, as vllm bench serve --burstiness (1: Poisson)
    # A rate's arrivals: "poisson" (exponential gaps), "gamma" (gaps of shape `burstiness`; set from it: a spec
    # with burstiness 1 is "poisson", another "gamma") or "constant" (even gaps of 1/rate: vllm bench serve's
    # burstiness inf)
    arrival: str = "poisson"
    # The most requests in flight while arrivals come at a rate (vllm bench serve --max-concurrency): an arrival
    # past it waits for a request to end (its wait is recorded, not counted as the client's lateness); None: no cap
    max_in_flight: int | None = None
    # A rate ramp as vllm bench serve's --ramp-up-strategy: request i of n arrives at the rate ramp_start_rps
    # raised to `rate` (the end rate), linearly or exponentially in i / (n - 1); None: no such ramp
    ramp_strategy: str | None = None
    ramp_start_rps: float | None = None
    # Ramp-up: the requests in flight ("concurrency") or the rate ("poisson") rise linearly from ramp_from to
    # their value over ramp_up_s seconds (0: no ramp); ramp_from None: 1 in flight, or a tenth of the rate
    ramp_up_s: float = 0.0
    ramp_from: float | None = None
    workload: dict | None = None  # what the run records of its workload (engine.measure.workloads.named says it)
    # The request's shape beyond the prompt, as vllm bench serve sends it: sampling parameters (SAMPLING's keys),
    # HTTP headers (a credential's value never recorded: as_dict) and fields merged into every request's body
    sampling: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    extra_body: dict[str, Any] = field(default_factory=dict)
    # LoRA adapters the server serves by name (vllm bench serve --lora-modules): each request names one instead of
    # `model` (a conversation keeps its first turn's), in turn ("round-robin") or drawn from the spec's seed
    # ("random", vllm bench serve --lora-assignment), each adapter's share as its whole-number weight (none: equal)
    lora_modules: list[str] = field(default_factory=list)
    lora_weights: list[int] = field(default_factory=list)
    lora_assignment: str = "round-robin"
    # Fallback token counter for servers that send no usage: text -> token count. Not serialised.
    count_tokens: Callable[[str], int] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.arrival in ("poisson", "gamma"):  # one name for one draw: a burstiness other than 1 is gamma
            self.arrival = "poisson" if self.burstiness == 1 else "gamma"
        self.validate()

    def validate(self, max_model_len: int | None = None) -> "LoadSpec":
        """Raise ConfigError with one sentence for the first setting that cannot run as asked; the
        pages and the CLI share these sentences. With the running server's `max_model_len`, a
        max_tokens it would refuse is caught before anything is sent. Returns the spec."""
        if self.shape not in SHAPES:
            raise ConfigError(say("The arrival pattern '{shape}' is unknown: pick one of {shapes}.",
                                  shape=self.shape, shapes=", ".join(SHAPES)))
        if self.endpoint not in ENDPOINTS:
            raise ConfigError(say("The endpoint '{endpoint}' is unknown: pick chat, completions, embeddings or "
                                  "rerank.", endpoint=self.endpoint))
        if self.endpoint == "embeddings" and self.sampling:
            raise ConfigError(say("An embedding samples no tokens, so {key} does not apply: leave it out.",
                                  key=next(iter(self.sampling))))
        if self.endpoint == "rerank" and self.sampling:
            raise ConfigError(say("A rerank scores documents and samples no tokens, so {key} does not apply: leave it "
                                  "out.", key=next(iter(self.sampling))))
        if not self.prompts:
            raise ConfigError(say("A load test needs at least one prompt."))
        _whole(mark("The number of requests"), self.n, 1, MAX_REQUESTS)
        if self.shape == "concurrency":
            check_in_flight(self.concurrency)
        if self.shape == "burst" and self.units > MAX_IN_FLIGHT:
            raise ConfigError(say("Sending all requests at once is limited to {limit} requests, and {n} "
                                  "were asked for: send fewer, or keep a number of them in flight.",
                                  limit=MAX_IN_FLIGHT, n=self.units))
        if self.shape == "poisson":
            check_rate(self.rate, mark("The Poisson rate") if self.arrival == "poisson" else mark("The rate"))
            check_in_flight(self.concurrency, mark("The expected requests in flight"))
        self._validate_rate()
        if self.max_tokens is not None:
            check_max_tokens(self.max_tokens, max_model_len)
        self._validate_workload(max_model_len)
        if not _number(self.temperature) or not 0 <= self.temperature <= 2:
            raise ConfigError(say("The temperature must be between 0 and 2, not {temperature}.",
                                  temperature=self.temperature))
        check_request_shape(self.sampling, self.headers, self.extra_body)
        if not isinstance(self.lora_modules, list) or any(not isinstance(m, str) or not m.strip() or len(m) > 200
                                                          for m in self.lora_modules):
            raise ConfigError(say("Each LoRA module is the name the server serves it under, e.g. sql-lora: give "
                                  "names, not empty text."))
        if len(set(self.lora_modules)) != len(self.lora_modules):
            raise ConfigError(say("A LoRA module is named twice: name each once (round-robin gives each its "
                                  "share)."))
        self._validate_lora()
        _whole(mark("The warm-up"), self.warmup, 0, MAX_REQUESTS)
        _whole(mark("The client processes"), self.workers, 0, MAX_WORKERS)
        if self.timeout_s is not None and (not _number(self.timeout_s) or self.timeout_s <= 0):
            raise ConfigError(say("The request timeout must be a positive number of seconds, not {v}.",
                                  v=self.timeout_s))
        if not _number(self.read_timeout_s) or self.read_timeout_s <= 0:
            raise ConfigError(say("The read timeout must be a positive number of seconds, not {v}.",
                                  v=self.read_timeout_s))
        return self

    def _validate_lora(self) -> None:
        """The checks of how requests are shared among the LoRA modules."""
        if self.lora_assignment not in LORA_ASSIGNMENTS:
            raise ConfigError(say("The LoRA assignment '{v}' is unknown: pick round-robin or random.",
                                  v=self.lora_assignment))
        if not self.lora_weights:
            return
        if not self.lora_modules:
            raise ConfigError(say("LoRA weights share the requests among LoRA modules: name the modules too."))
        if len(self.lora_weights) != len(self.lora_modules):
            raise ConfigError(say_n("{n} LoRA weight was given for {m} LoRA modules: give one weight per module, in "
                                    "the same order.", "{n} LoRA weights were given for {m} LoRA modules: give one "
                                    "weight per module, in the same order.", len(self.lora_weights),
                                    m=len(self.lora_modules)))
        for w in self.lora_weights:
            _whole(mark("Each LoRA weight"), w, 1, MAX_LORA_WEIGHT)

    def _validate_rate(self) -> None:
        """The checks of a rate's arrivals, its cap on requests in flight and its ramp by rate."""
        if self.arrival not in ARRIVALS:
            raise ConfigError(say("The arrivals '{v}' are unknown: pick one of {names}.", v=self.arrival,
                                  names=", ".join(ARRIVALS)))
        if self.arrival == "constant" and self.burstiness != 1:
            raise ConfigError(say("Constant arrivals are evenly spaced, so a burstiness does not apply: leave it "
                                  "at 1, or pick gamma arrivals."))
        if self.max_in_flight is not None:
            if self.shape not in RATE_SHAPES:
                raise ConfigError(say("A cap on requests in flight holds back arrivals at a rate; this load keeps "
                                      "its own number in flight: set that instead."))
            check_in_flight(self.max_in_flight, mark("The most requests in flight (max concurrency)"))
        if self.ramp_strategy is None:
            if self.ramp_start_rps is not None:
                raise ConfigError(say("A ramp's starting rate needs its strategy: linear or exponential."))
            return
        if self.ramp_strategy not in RAMP_STRATEGIES:
            raise ConfigError(say("The ramp-up strategy '{v}' is unknown: pick linear or exponential.",
                                  v=self.ramp_strategy))
        if self.shape != "poisson":
            raise ConfigError(say("A ramp by rate raises the rate requests arrive at: pick arrivals at a rate."))
        if self.ramp_up_s > 0:
            raise ConfigError(say("A ramp by rate and a ramp over time both raise the rate: give only one of them."))
        start = check_rate(self.ramp_start_rps, mark("A ramp's starting rate"))
        if start > (self.rate or 0):
            raise ConfigError(say("A ramp's starting rate ({start:g} requests/s) is above its end rate ({end:g}): "
                                  "start lower, or end higher.", start=start, end=self.rate or 0))

    def _validate_workload(self, max_model_len: int | None) -> None:
        """The checks of a workload's per-request detail (its lists are the engine's, already parsed)."""
        if self.max_tokens_each is not None:
            if not self.max_tokens_each:
                raise ConfigError(say("A per-request answer length list needs at least one length."))
            check_max_tokens(max(self.max_tokens_each), max_model_len)
            check_max_tokens(min(self.max_tokens_each), max_model_len)
        if self.shape == "trace":
            if self.offsets is None or len(self.offsets) != self.n:
                raise ConfigError(say("A trace replay needs one planned send time per request."))
            if any(not _number(t) or t < 0 for t in self.offsets) or any(
                    b < a for a, b in zip(self.offsets, self.offsets[1:])):
                raise ConfigError(say("A trace's send times must be numbers from 0 on that never go backwards."))
            check_in_flight(self.concurrency, mark("The expected requests in flight"))
        if self.conversations is not None:
            if not self.conversations or any(not c for c in self.conversations):
                raise ConfigError(say("A multi-turn chat needs at least one conversation, each with a turn."))
            if self.endpoint != "chat":
                raise ConfigError(say("A multi-turn chat sends its history as chat messages: pick the chat "
                                      "endpoint."))
            if self.shape == "trace":
                raise ConfigError(say("A trace replays single requests: a multi-turn chat cannot be replayed "
                                      "as one."))
        if not _number(self.think_time_s) or not 0 <= self.think_time_s <= MAX_THINK_S:
            raise ConfigError(say("The think time must be from 0 to {limit:g} s, not {v}.", limit=MAX_THINK_S,
                                  v=self.think_time_s))
        if not _number(self.burstiness) or not 0 < self.burstiness <= MAX_BURSTINESS:
            raise ConfigError(say("The burstiness must be above 0 and at most {limit:g} (1 is Poisson; below 1 "
                                  "burstier, above 1 steadier), not {v}.", limit=MAX_BURSTINESS, v=self.burstiness))
        if not _number(self.ramp_up_s) or not 0 <= self.ramp_up_s <= MAX_RAMP_S:
            raise ConfigError(say("The ramp-up must last from 0 to {limit:g} s, not {v}.", limit=MAX_RAMP_S,
                                  v=self.ramp_up_s))
        if self.ramp_up_s > 0:
            if self.shape == "concurrency":
                start = 1 if self.ramp_from is None else self.ramp_from
                if not (isinstance(start, int) and not isinstance(start, bool) and 1 <= start <= self.concurrency):
                    raise ConfigError(say("A ramp-up starts from 1 to {top} requests in flight (its top), not "
                                          "{v}.", top=self.concurrency, v=start))
            elif self.shape == "poisson":
                start = (self.rate or 0) / 10 if self.ramp_from is None else self.ramp_from
                if not _number(start) or not 0 < start <= (self.rate or 0):
                    raise ConfigError(say("A ramp-up starts from a rate above 0 and at most its top rate "
                                          "({top:g} requests/s), not {v}.", top=self.rate or 0, v=start))
            else:
                raise ConfigError(say("A ramp-up raises the requests in flight or the Poisson rate: pick the "
                                      "concurrency or the Poisson arrival pattern."))

    @property
    def deadline_s(self) -> float:
        """One request's deadline for its whole answer (timeout_s, else from max_tokens; the longest answer
        of a per-request list)."""
        if self.timeout_s is not None:
            return self.timeout_s
        return request_deadline_s(max(self.max_tokens_each) if self.max_tokens_each else self.max_tokens)

    def deadline_for(self, max_tokens: int | None) -> float:
        """The deadline of one request asking for `max_tokens` (its own when the lengths differ per request)."""
        if self.timeout_s is None and self.max_tokens_each:
            return request_deadline_s(max_tokens)
        return self.deadline_s

    def documents_for(self, i: int) -> list[str]:
        """The documents request i's rerank ranks against its prompt (the query): the RERANK_DOCUMENTS prompts
        after its own, cycled (its own prompt when there is no other)."""
        others = len(self.prompts) - 1
        if others < 1:
            return [self.prompts[0]]
        start = i % len(self.prompts)
        return [self.prompts[(start + k) % len(self.prompts)] for k in range(1, min(RERANK_DOCUMENTS, others) + 1)]

    def tokens_for(self, i: int) -> int | None:
        """Request i's max_tokens: its own from a workload's list, else the spec's."""
        return self.max_tokens_each[i % len(self.max_tokens_each)] if self.max_tokens_each else self.max_tokens

    def model_for(self, index: int, conversation: int | None = None) -> str:
        """The model request `index` names: its LoRA module (a chat's turns keep their conversation's), else the
        served model. Round-robin with weights 3 and 1 sends a, a, b, a and again: each module's share exact over
        every cycle, spread through it; random draws each request's from the spec's seed, so a run can be sent
        again with the same assignment."""
        if not self.lora_modules:
            return self.model
        i = index if conversation is None else conversation
        weights = tuple(self.lora_weights) or (1,) * len(self.lora_modules)
        if self.lora_assignment == "random":
            return random.Random(f"{self.seed}:{i}").choices(self.lora_modules, weights)[0]
        cycle = _weighted_cycle(weights)
        return self.lora_modules[cycle[i % len(cycle)]]

    @property
    def units(self) -> int:
        """What the arrival pattern schedules: conversations of a multi-turn chat, else requests."""
        return len(self.conversations) if self.conversations else self.n

    def describe(self) -> str:
        """What this load does, for a run's label: '10 requests at once, 150 tokens',
        '20 requests, 4 in flight, ...', '30 requests, Poisson 2/s, ...'."""
        n = self.n
        tokens = say("natural length") if self.max_tokens is None else say("{max_tokens} tokens",
                                                                             max_tokens=self.max_tokens)
        if self.max_tokens_each:
            lo, hi = min(self.max_tokens_each), max(self.max_tokens_each)
            tokens = say("{lo}-{hi} tokens", lo=lo, hi=hi) if lo != hi else say("{max_tokens} tokens",
                                                                                   max_tokens=lo)
        if self.conversations:
            turns = max(len(c) for c in self.conversations)
            return say_n("{n} conversation × {turns} turns, {in_flight} at once, {tokens}",
                         "{n} conversations × {turns} turns, {in_flight} at once, {tokens}", len(self.conversations),
                         turns=turns, in_flight=min(self.in_flight(), self.units), tokens=tokens)
        if self.shape == "trace":
            return say_n("{n} request replayed from a trace, {tokens}", "{n} requests replayed from a trace, {tokens}",
                         n, tokens=tokens)
        if self.ramp_up_s > 0 and self.shape == "concurrency":
            return say_n("{n} request, {start} to {in_flight} in flight over {s:g} s, {tokens}",
                         "{n} requests, {start} to {in_flight} in flight over {s:g} s, {tokens}", n,
                         start=self.ramp_from or 1, in_flight=min(self.concurrency, n), s=self.ramp_up_s,
                         tokens=tokens)
        if self.shape == "sequential":
            return say_n("{n} request one after another, {tokens}", "{n} requests one after another, {tokens}", n,
                         tokens=tokens)
        if self.shape == "burst":
            return say_n("{n} request at once, {tokens}", "{n} requests at once, {tokens}", n, tokens=tokens)
        if self.shape == "concurrency":
            return say_n("{n} request, {in_flight} in flight, {tokens}",
                         "{n} requests, {in_flight} in flight, {tokens}", n,
                         in_flight=min(self.concurrency, n), tokens=tokens)
        if self.shape == "poisson" and (self.ramp_up_s > 0 or self.ramp_strategy or self.arrival != "poisson"
                                        or self.max_in_flight):
            return say_n("{n} request, {arrivals}, {tokens}", "{n} requests, {arrivals}, {tokens}", n,
                         arrivals=self.arrivals_said(), tokens=tokens)
        return say_n("{n} request, Poisson {rate:g}/s, {tokens}", "{n} requests, Poisson {rate:g}/s, {tokens}", n,
                     rate=self.rate, tokens=tokens)

    def arrivals_said(self):
        """How requests arrive at a rate, in a few words: 'Poisson 4/s', 'gamma arrivals 2/s, burstiness 0.25',
        'constant 4/s', a ramp ('Poisson from 1 to 8/s, linear by request') and a cap ('at most 8 in flight')."""
        rate, b = self.rate or 0, self.burstiness
        if self.ramp_strategy:
            how = (say("linear by request") if self.ramp_strategy == "linear" else say("exponential by request"))
            said = {"poisson": say("Poisson from {start:g} to {end:g}/s, {how}", start=self.ramp_start_rps, end=rate,
                                   how=how),
                    "gamma": say("gamma arrivals from {start:g} to {end:g}/s, {how}, burstiness {b:g}",
                                 start=self.ramp_start_rps, end=rate, how=how, b=b),
                    "constant": say("constant from {start:g} to {end:g}/s, {how}", start=self.ramp_start_rps,
                                    end=rate, how=how)}[self.arrival]
        elif self.ramp_up_s > 0:
            start = self.ramp_from if self.ramp_from is not None else rate / 10
            said = {"poisson": say("Poisson {rate:g}/s from {start:g}/s over {s:g} s", rate=rate, start=start,
                                   s=self.ramp_up_s),
                    "gamma": say("gamma arrivals {rate:g}/s from {start:g}/s over {s:g} s, burstiness {b:g}",
                                 rate=rate, start=start, s=self.ramp_up_s, b=b),
                    "constant": say("constant {rate:g}/s from {start:g}/s over {s:g} s", rate=rate, start=start,
                                    s=self.ramp_up_s)}[self.arrival]
        else:
            said = {"poisson": say("Poisson {rate:g}/s", rate=rate),
                    "gamma": say("gamma arrivals {rate:g}/s, burstiness {b:g}", rate=rate, b=b),
                    "constant": say("constant {rate:g}/s", rate=rate)}[self.arrival]
        if self.max_in_flight:
            return say("{arrivals}, at most {cap} in flight", arrivals=said, cap=self.max_in_flight)
        return said

    @property
    def n(self) -> int:
        if self.conversations:
            return sum(len(c) for c in self.conversations)
        return self.num_requests if self.num_requests is not None else len(self.prompts)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1") + ENDPOINTS[self.endpoint]

    def in_flight(self) -> int:
        """The most requests this shape keeps in flight (at a rate: its cap, else the `concurrency` hint)."""
        if self.shape in RATE_SHAPES and self.max_in_flight:
            return self.max_in_flight
        return {"sequential": 1, "burst": self.units}.get(self.shape, max(1, self.concurrency))

    def as_dict(self) -> dict[str, Any]:
        """The spec as a run records it: never the API key (runs are shown to every viewer and exported)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("count_tokens", "api_key", *_PER_REQUEST)}
        d["prompts"] = list(self.prompts)
        # a header by its name only: any value may be a key (X-Auth-Token, api-key), so none is ever recorded
        d["headers"] = list(self.headers)
        d["extra_body"] = scrub(self.extra_body)
        d["lora_modules"] = list(self.lora_modules)
        d["lora_weights"] = list(self.lora_weights)
        if not self.lora_modules:
            del d["lora_assignment"]
        for key in ("sampling", "headers", "extra_body", "lora_modules", "lora_weights"):  # else as it was
            if not d[key]:
                del d[key]
        return d


@functools.lru_cache(maxsize=64)
def _weighted_cycle(weights: tuple[int, ...]) -> list[int]:
    """One cycle of smooth weighted round-robin (nginx's): module k appears weights[k] times, spread out rather
    than in runs (3, 1 -> 0, 0, 1, 0)."""
    current, total, out = [0] * len(weights), sum(weights), []
    for _ in range(total):
        current = [c + w for c, w in zip(current, weights)]
        k = max(range(len(weights)), key=lambda j: current[j])
        current[k] -= total
        out.append(k)
    return out


# Per-request lists a run does not repeat in its load: each record holds its own prompt, turn and planned time,
# and `workload` says where they came from
_PER_REQUEST = ("max_tokens_each", "offsets", "conversations")


# The sampling parameters vllm bench serve sends (--top-p ... --repetition-penalty; temperature is a field of its
# own): (lowest, highest, whole number only); a bound None is open
SAMPLING: dict[str, tuple[float | None, float | None, bool]] = {
    "top_p": (0.0, 1.0, False), "top_k": (-1, None, True), "min_p": (0.0, 1.0, False),
    "frequency_penalty": (-2.0, 2.0, False), "presence_penalty": (-2.0, 2.0, False),
    "repetition_penalty": (0.0, None, False),
}
# What the load generator itself puts in every request: an extra body may not replace it (a non-streamed answer
# has no first token to time; the answer's length has its own option, which sets its deadline)
OWN_BODY = {"model": "--model-name", "messages": "--dataset", "prompt": "--dataset", "stream": "",
            "stream_options": "", "max_tokens": "--max-tokens", "max_completion_tokens": "--max-tokens",
            "temperature": "--temperature"}
# Headers the HTTP client writes itself
OWN_HEADERS = {"content-type", "content-length", "host", "transfer-encoding", "connection"}
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110's token)


def check_request_shape(sampling: Any, headers: Any, extra_body: Any) -> None:
    """ConfigError with one sentence for the first sampling parameter out of its range, header the client cannot
    send, or extra body field that would replace what every request carries."""
    if not isinstance(sampling, dict) or not isinstance(headers, dict) or not isinstance(extra_body, dict):
        raise ConfigError(say("The sampling parameters, headers and extra body must each be a set of names and "
                              "values."))
    for key, v in sampling.items():
        if key not in SAMPLING:
            raise ConfigError(say("'{key}' is no sampling parameter this load test sends: pick from {keys}, or put "
                                  "it in the extra body.", key=key, keys=", ".join(SAMPLING)))
        lo, hi, whole = SAMPLING[key]
        ok = _number(v) and (not whole or float(v) == int(v)) and (lo is None or v >= lo) and (hi is None or v <= hi)
        if key == "repetition_penalty" or key == "top_p":
            ok = ok and v > 0
        if not ok:
            bounds = (say("above 0 and at most {hi:g}", hi=hi) if key == "top_p" else say("above 0") if
                      key == "repetition_penalty" else say("a whole number from -1 on (-1: all tokens)") if whole
                      else say("from {lo:g} to {hi:g}", lo=lo, hi=hi))
            raise ConfigError(say("{key} must be {bounds}, not {v}.", key=key, bounds=bounds, v=v))
    for name, value in headers.items():
        if not isinstance(name, str) or not _TOKEN.match(name):
            raise ConfigError(say("'{name}' is not an HTTP header name: use letters, digits and dashes, e.g. "
                                  "X-Request-Source:lab.", name=str(name)[:60]))
        if name.lower() in OWN_HEADERS:
            raise ConfigError(say("The header {name} is written by the HTTP client itself: leave it out.",
                                  name=name))
        if not isinstance(value, str) or "\r" in value or "\n" in value:
            raise ConfigError(say("The header {name}'s value must be one line of text.", name=name))
    for key in extra_body:
        if key in OWN_BODY:
            flag = OWN_BODY[key]
            raise ConfigError(say("The extra body may not set {key}: every request sets it itself{how}.", key=key,
                                  how=say(" (give {flag} instead)", flag=flag) if flag else ""))
        if key in sampling:
            raise ConfigError(say("{key} is given twice, as a sampling parameter and in the extra body: give it "
                                  "once.", key=key))


def arrivals_recorded(load: Any):
    """How a recorded run's requests arrived at a rate (its `Load`, results.records), as arrivals_said says it;
    None for a closed loop, a trace, or a record too old or odd to say it."""
    if getattr(load, "shape", "") != "poisson" or not load.rate:
        return None
    o = load.other
    try:
        spec = LoadSpec(base_url="", model="", prompts=["-"], shape="poisson", rate=load.rate,
                        burstiness=load.burstiness or 1.0, arrival=o.get("arrival", "poisson"),
                        max_in_flight=o.get("max_in_flight"), ramp_strategy=o.get("ramp_strategy"),
                        ramp_start_rps=o.get("ramp_start_rps"), ramp_up_s=o.get("ramp_up_s", 0.0),
                        ramp_from=o.get("ramp_from"))
    except (ConfigError, TypeError):
        return None
    return spec.arrivals_said()


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _whole(what: str, v: Any, lo: int, hi: int) -> None:
    if not (isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi):
        raise ConfigError(say("{what} must be a whole number from {lo} to {hi}, not {v}.", what=what, lo=lo, hi=hi,
                              v=v))


def check_rate(v: Any, what: str = mark("The rate")) -> float:
    """`v`, after a ConfigError unless it is a number of requests per second above 0 and at most MAX_RATE."""
    if not _number(v) or not 0 < v <= MAX_RATE:
        raise ConfigError(say("{what} must be above 0 and at most {limit:g} requests/s, not {rate}.", what=what,
                              limit=MAX_RATE, rate=v))
    return v


def check_in_flight(n: Any, what: str = mark("Requests in flight")) -> None:
    _whole(what, n, 1, MAX_IN_FLIGHT)


def check_max_tokens(n: Any, limit: int | None = None, of: str = mark("the running server's max-model-len"),
                     fix: str = mark(", or restart the server with a longer max-model-len")) -> None:
    """ConfigError unless n is a usable answer length, at most `limit` (what `of` names) when known;
    `fix` (a phrase starting ", or ...", or "") is appended to the advice."""
    _whole(mark("Max tokens per answer"), n, 1, MAX_TOKENS)
    if limit and n > limit:
        raise ConfigError(say("Max tokens per answer ({n}) is more than {of} ({limit} tokens): ask for {limit} or "
                              "fewer{fix}.", n=n, of=of, limit=limit, fix=fix))


def parse_levels(text: str) -> list[int]:
    """A sweep's levels from text such as '1,2,4,8': ConfigError with one sentence otherwise."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        levels = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(say("The sweep levels '{text}' are not a comma-separated list of whole numbers, "
                              "e.g. 1,2,4,8.", text=text)) from None
    for level in levels:
        check_in_flight(level, mark("Each sweep level (requests in flight)"))
    return sorted(set(levels))


def parse_rates(text: str) -> list[float]:
    """A rate sweep's levels from text such as '0.5,1,2,4': ConfigError with one sentence otherwise."""
    try:
        rates = [float(p) for p in str(text).split(",")]
    except ValueError:
        raise ConfigError(say("The rates '{text}' are not a comma-separated list of numbers, e.g. 0.5,1,2,4.",
                              text=text[:40])) from None
    for r in rates:
        check_rate(r, mark("Each rate of the sweep"))
    return sorted(set(rates))
