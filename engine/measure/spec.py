"""What a load test sends, how hard, and to which server: `LoadSpec`, and the checks that turn a
setting that cannot run into one sentence (shared by the pages, the CLI and the scenarios).

Kept apart from the sending so that a page can build and check a spec without touching the network.
See docs/architecture.md."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ConfigError
from engine.messages import mark, say, say_n

SHAPES = ("sequential", "concurrency", "burst", "poisson")
ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
# What one load test may ask for: beyond these a typo (100000 in flight) would swamp the machine.
MAX_IN_FLIGHT = 1024
MAX_REQUESTS = 100_000
MAX_RATE = 1000.0
MAX_TOKENS = 1_000_000
MAX_WORKERS = 64


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
    timeout_s: float = 300.0  # whole request
    read_timeout_s: float = 60.0  # longest silence between bytes
    seed: int = 0  # poisson arrivals
    scenario: str = ""
    label: str = ""
    workers: int = 0  # client processes; 0 = auto (1 unless concurrency is high and cores allow)
    # Fallback token counter for servers that send no usage: text -> token count. Not serialised.
    count_tokens: Callable[[str], int] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, max_model_len: int | None = None) -> "LoadSpec":
        """Raise ConfigError with one sentence for the first setting that cannot run as asked; the
        pages and the CLI share these sentences. With the running server's `max_model_len`, a
        max_tokens it would refuse is caught before anything is sent. Returns the spec."""
        if self.shape not in SHAPES:
            raise ConfigError(say("The arrival pattern '{shape}' is unknown: pick one of {shapes}.",
                                  shape=self.shape, shapes=", ".join(SHAPES)))
        if self.endpoint not in ENDPOINTS:
            raise ConfigError(say("The endpoint '{endpoint}' is unknown: pick chat or completions.",
                                  endpoint=self.endpoint))
        if not self.prompts:
            raise ConfigError(say("A load test needs at least one prompt."))
        _whole(mark("The number of requests"), self.n, 1, MAX_REQUESTS)
        if self.shape == "concurrency":
            check_in_flight(self.concurrency)
        if self.shape == "burst" and self.n > MAX_IN_FLIGHT:
            raise ConfigError(say("Sending all requests at once is limited to {limit} requests, and {n} "
                                  "were asked for: send fewer, or keep a number of them in flight.",
                                  limit=MAX_IN_FLIGHT, n=self.n))
        if self.shape == "poisson":
            if not _number(self.rate) or not 0 < self.rate <= MAX_RATE:
                raise ConfigError(say("The Poisson rate must be above 0 and at most {limit:g} requests/s, "
                                      "not {rate}.", limit=MAX_RATE, rate=self.rate))
            check_in_flight(self.concurrency, mark("The expected requests in flight"))
        if self.max_tokens is not None:
            check_max_tokens(self.max_tokens, max_model_len)
        if not _number(self.temperature) or not 0 <= self.temperature <= 2:
            raise ConfigError(say("The temperature must be between 0 and 2, not {temperature}.",
                                  temperature=self.temperature))
        _whole(mark("The warm-up"), self.warmup, 0, MAX_REQUESTS)
        _whole(mark("The client processes"), self.workers, 0, MAX_WORKERS)
        if not _number(self.timeout_s) or self.timeout_s <= 0:
            raise ConfigError(say("The request timeout must be a positive number of seconds, not {v}.",
                                  v=self.timeout_s))
        if not _number(self.read_timeout_s) or self.read_timeout_s <= 0:
            raise ConfigError(say("The read timeout must be a positive number of seconds, not {v}.",
                                  v=self.read_timeout_s))
        return self

    def describe(self) -> str:
        """What this load does, for a run's label: '10 requests at once, 150 tokens',
        '20 requests, 4 in flight, ...', '30 requests, Poisson 2/s, ...'."""
        n = self.n
        tokens = say("natural length") if self.max_tokens is None else say("{max_tokens} tokens",
                                                                             max_tokens=self.max_tokens)
        if self.shape == "sequential":
            return say_n("{n} request one after another, {tokens}", "{n} requests one after another, {tokens}", n,
                         tokens=tokens)
        if self.shape == "burst":
            return say_n("{n} request at once, {tokens}", "{n} requests at once, {tokens}", n, tokens=tokens)
        if self.shape == "concurrency":
            return say_n("{n} request, {in_flight} in flight, {tokens}",
                         "{n} requests, {in_flight} in flight, {tokens}", n,
                         in_flight=min(self.concurrency, n), tokens=tokens)
        return say_n("{n} request, Poisson {rate:g}/s, {tokens}", "{n} requests, Poisson {rate:g}/s, {tokens}", n,
                     rate=self.rate, tokens=tokens)

    @property
    def n(self) -> int:
        return self.num_requests if self.num_requests is not None else len(self.prompts)

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/").removesuffix("/v1") + ENDPOINTS[self.endpoint]

    def in_flight(self) -> int:
        """The most requests this shape keeps in flight (poisson: the `concurrency` hint)."""
        return {"sequential": 1, "burst": self.n}.get(self.shape, max(1, self.concurrency))

    def as_dict(self) -> dict[str, Any]:
        """The spec as a run records it: never the API key (runs are shown to every viewer and exported)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
             if f.name not in ("count_tokens", "api_key")}
        d["prompts"] = list(self.prompts)
        return d


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _whole(what: str, v: Any, lo: int, hi: int) -> None:
    if not (isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi):
        raise ConfigError(say("{what} must be a whole number from {lo} to {hi}, not {v}.", what=what, lo=lo, hi=hi,
                              v=v))


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
