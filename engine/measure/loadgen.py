"""Async load generator for OpenAI-compatible servers (vLLM): one RequestRecord per request.

Every request streams (`stream_options.include_usage`), so the record holds the send time, each
content chunk's arrival and the server's token counts. Times are `time.perf_counter()` seconds from
the run's start; perf_counter is a system-wide monotonic clock on Linux, macOS and Windows, so
worker processes share the parent's time base.

Keeping up with the server (bench/fidelity.md has the measurements): uvloop when installed; SSE
split on bytes and one json.loads per event, nothing more per chunk; httpx over a lean socket layer
(`_SocketBackend`) with one connection per borrowed client (httpcore's shared pool scans all its
connections on every release); the GC heap frozen during a run. One loop then kept pace with 256
streams at 12k chunks/s on a 2-core VM (~45 us of CPU per chunk). Beyond PER_LOOP_CONCURRENCY
streams, where cores allow, requests are spread over worker processes, each with its own loop and
clients (`LoadSpec.workers`, auto by default); each warms up on the connections it measures with.

Entry points: `run_load` (blocking, safe to call from a worker thread), `sweep`, `stream_one`.
"""
from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import functools
import gc
import json
import logging
import math
import multiprocessing as mp
import os
import queue
import random
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

import httpcore
import httpx

from engine.errors import ConfigError, LabError
from engine.measure import stats
from engine.measure.lifeline import die_with_parent
from engine.results.records import RequestRecord, RunResult

log = logging.getLogger(__name__)
clock = time.perf_counter

SHAPES = ("sequential", "concurrency", "burst", "poisson")
ENDPOINTS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
# In-flight streams one client loop is trusted with before `workers="auto"` adds a process.
PER_LOOP_CONCURRENCY = 64
# What one load test may ask for: beyond these a typo (100000 in flight) would swamp the machine.
MAX_IN_FLIGHT = 1024
MAX_REQUESTS = 100_000
MAX_RATE = 1000.0
MAX_TOKENS = 1_000_000
MAX_WORKERS = 64


# ----------------------------------------------------------------------------------------------
# Spec, plan, progress, observers
# ----------------------------------------------------------------------------------------------

@dataclass
class LoadSpec:
    """What to send, how hard, and to which server."""

    base_url: str  # e.g. "http://127.0.0.1:8000" (a trailing /v1 is tolerated)
    model: str  # served model name
    prompts: list[str]
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
            raise ConfigError(f"The arrival pattern '{self.shape}' is unknown: pick one of {', '.join(SHAPES)}.")
        if self.endpoint not in ENDPOINTS:
            raise ConfigError(f"The endpoint '{self.endpoint}' is unknown: pick chat or completions.")
        if not self.prompts:
            raise ConfigError("A load test needs at least one prompt.")
        _whole("The number of requests", self.n, 1, MAX_REQUESTS)
        if self.shape == "concurrency":
            check_in_flight(self.concurrency)
        if self.shape == "burst" and self.n > MAX_IN_FLIGHT:
            raise ConfigError(f"Sending all requests at once is limited to {MAX_IN_FLIGHT} requests, and {self.n} "
                              "were asked for: send fewer, or keep a number of them in flight.")
        if self.shape == "poisson":
            if not _number(self.rate) or not 0 < self.rate <= MAX_RATE:
                raise ConfigError(f"The Poisson rate must be above 0 and at most {MAX_RATE:g} requests/s, "
                                  f"not {self.rate}.")
            check_in_flight(self.concurrency, "The expected requests in flight")
        if self.max_tokens is not None:
            check_max_tokens(self.max_tokens, max_model_len)
        if not _number(self.temperature) or not 0 <= self.temperature <= 2:
            raise ConfigError(f"The temperature must be between 0 and 2, not {self.temperature}.")
        _whole("The warm-up", self.warmup, 0, MAX_REQUESTS)
        _whole("The client processes", self.workers, 0, MAX_WORKERS)
        for name, v in (("request timeout", self.timeout_s), ("read timeout", self.read_timeout_s)):
            if not _number(v) or v <= 0:
                raise ConfigError(f"The {name} must be a positive number of seconds, not {v}.")
        return self

    def describe(self) -> str:
        """What this load does, for a run's label: '10 requests at once, 150 tokens',
        '20 requests, 4 in flight, ...', '30 requests, Poisson 2/s, ...'."""
        tokens = "natural length" if self.max_tokens is None else f"{self.max_tokens} tokens"
        how = ({"sequential": " one after another", "burst": " at once",
                "concurrency": f", {min(self.concurrency, self.n)} in flight"}.get(self.shape)
               or f", Poisson {self.rate:g}/s")
        return f"{self.n} request{'s' * (self.n != 1)}{how}, {tokens}"

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
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("count_tokens", "api_key")}
        d["prompts"] = list(self.prompts)
        return d


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _whole(what: str, v: Any, lo: int, hi: int) -> None:
    if not (isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi):
        raise ConfigError(f"{what} must be a whole number from {lo} to {hi}, not {v}.")


def check_in_flight(n: Any, what: str = "Requests in flight") -> None:
    _whole(what, n, 1, MAX_IN_FLIGHT)


def check_max_tokens(n: Any, limit: int | None = None, of: str = "the running server's max-model-len",
                     fix: str = ", or restart the server with a longer max-model-len") -> None:
    """ConfigError unless n is a usable answer length, at most `limit` (what `of` names) when known."""
    _whole("Max tokens per answer", n, 1, MAX_TOKENS)
    if limit and n > limit:
        raise ConfigError(f"Max tokens per answer ({n}) is more than {of} ({limit} tokens): ask for {limit} or "
                          f"fewer{fix}.")


def parse_levels(text: str) -> list[int]:
    """A sweep's levels from text such as '1,2,4,8': ConfigError with one sentence otherwise."""
    parts = [p.strip() for p in str(text).split(",")]
    try:
        levels = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(f"The sweep levels '{text}' are not a comma-separated list of whole numbers, "
                          "e.g. 1,2,4,8.") from None
    for level in levels:
        check_in_flight(level, "Each sweep level (requests in flight)")
    return sorted(set(levels))


@dataclass
class RunPlan:
    label: str
    shape: str
    num_requests: int
    warmup: int
    concurrency: int
    workers: int
    url: str
    model: str

    @property
    def total(self) -> int:
        return self.num_requests


@dataclass
class Totals:
    """Progress of the measured part, handed to observers after every request."""

    total: int
    done: int = 0
    ok: int = 0
    failed: int = 0
    output_tokens: int = 0
    elapsed_s: float = 0.0

    def add(self, rec: RequestRecord, elapsed_s: float) -> None:
        self.done += 1
        self.ok += rec.ok
        self.failed += not rec.ok
        self.output_tokens += rec.output_tokens
        self.elapsed_s = elapsed_s


class Observer(Protocol):
    """Progress hooks. An observer may also define `on_request_sent(record)`: it is called (when
    present) as each request goes out, with the record still open, for live timelines."""

    def on_start(self, plan: RunPlan) -> None: ...
    def on_request_done(self, record: RequestRecord, totals: Totals) -> None: ...
    def on_complete(self, result: RunResult) -> None: ...


class NullObserver:
    """Does nothing; subclass it and override what you need. Calls arrive on the thread that called
    run_load (warm-up records too, with record.warmup set, before the measured ones); keep them short."""

    def on_start(self, plan: RunPlan) -> None:
        pass

    def on_request_sent(self, record: RequestRecord) -> None:
        pass

    def on_request_done(self, record: RequestRecord, totals: Totals) -> None:
        pass

    def on_complete(self, result: RunResult) -> None:
        pass


class ConsoleObserver(NullObserver):
    """One line per request and a summary, for the CLI."""

    def __init__(self, out: TextIO | None = None, every: int = 1) -> None:
        self.out = out or sys.stdout
        self.every = max(1, every)

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def on_start(self, plan: RunPlan) -> None:
        self._print(f"{plan.label or 'run'}: {plan.num_requests} requests, {plan.shape}, "
                    f"concurrency {plan.concurrency}, warm-up {plan.warmup}, "
                    f"{plan.workers} client process(es) -> {plan.url} [{plan.model}]")

    def on_request_done(self, record: RequestRecord, totals: Totals) -> None:
        if record.warmup or (totals.done % self.every and totals.done != totals.total):
            return
        state = (f"ok {record.e2e:6.2f} s {record.output_tokens:5d} tok" if record.ok
                 else f"FAILED: {record.error}")
        self._print(f"  [{totals.done:>4}/{totals.total}] #{record.index:<4} {state}")

    def on_complete(self, result: RunResult) -> None:
        s = result.summary
        ttft = s.get("mean_ttft_ms")
        self._print(f"done in {result.duration:.2f} s: {s.get('completed', 0)} ok, {s.get('failed', 0)} failed, "
                    f"{s.get('output_throughput', 0):.1f} output tok/s, mean TTFT "
                    + ("n/a" if ttft is None else f"{ttft:.0f} ms"))
        for _, sentence in stats.failure_causes(result.records):
            self._print(f"  {sentence}")


def _sent_hook(observer: Observer) -> Callable[[RequestRecord], None] | None:
    """The observer's optional on_request_sent, wrapped like every hook."""
    fn = getattr(observer, "on_request_sent", None)
    return None if fn is None else (lambda r: _notify(fn, r))


def _notify(fn: Callable[..., None], *args: Any) -> None:
    """Call an observer hook; a failing observer is logged, never allowed to break the run."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - observers are user code
        log.exception("observer %s failed", getattr(fn, "__qualname__", fn))


# ----------------------------------------------------------------------------------------------
# SSE over raw bytes
# ----------------------------------------------------------------------------------------------

class SSEDecoder:
    """Incremental server-sent-events parser over bytes.

    Events end at a blank line (LF LF or CRLF CRLF). Only bytes are split, never text: str
    splitlines() would also break on U+2028/U+2029/U+0085, which JSON strings may hold raw (models
    emit them). A CR kept at the end of the buffer waits for the next read, so a CRLF split across
    two reads is still recognised. Returns each event's data (data: lines joined by LF)."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        *events, self._buf = buf.split(b"\n\n")
        return [d for d in map(_event_data, events) if d is not None]

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated (dropped at end of stream, as the SSE spec says)."""
        return self._buf


def _event_data(event: bytes) -> bytes | None:
    if event.startswith(b"data: ") and b"\n" not in event:  # the common case, one data line
        return event[6:]
    parts = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            v = line[5:]
            parts.append(v[1:] if v.startswith(b" ") else v)
    return b"\n".join(parts) if parts else None


# ----------------------------------------------------------------------------------------------
# One request
# ----------------------------------------------------------------------------------------------

class StreamParser:
    """What one streamed answer said: content chunk times, text, usage, end marker, error.
    Feed it each SSE event's data with its arrival time (`event`)."""

    __slots__ = ("chat", "times", "texts", "usage", "done", "error")

    def __init__(self, chat: bool) -> None:
        self.chat = chat
        self.times: list[float] = []
        self.texts: list[str] = []
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.error: str | None = None

    def event(self, t: float, payload: bytes) -> str | None:
        """Interpret one event; returns the chunk's text when it is a content chunk."""
        if payload == b"[DONE]":
            self.done = True
            return None
        try:
            obj = json.loads(payload)
        except ValueError:
            self.error = f"the server sent an event that is not JSON: {payload[:120]!r}"
            return None
        if not isinstance(obj, dict):
            return None
        if obj.get("error") or obj.get("object") == "error":
            err = obj.get("error", obj)
            self.error = "the server reported an error mid-stream: " + str(
                err.get("message", err) if isinstance(err, dict) else err)
            return None
        if obj.get("usage"):
            self.usage = obj["usage"]
        choices = obj.get("choices")
        if not choices:
            return None
        c = choices[0]
        if self.chat:
            delta = c.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
            # vLLM's chat preamble {"role": "assistant", "content": ""} carries no token: not a chunk.
            if "role" in delta and not text and not delta.get("tool_calls") and c.get("finish_reason") is None:
                return None
        else:
            text = c.get("text") or ""
        self.times.append(t)
        self.texts.append(text)
        return text


def _describe(e: BaseException, spec: LoadSpec) -> str:
    """An exception as a plain sentence for RequestRecord.error."""
    detail = str(e) or type(e).__name__
    if isinstance(e, httpx.ConnectTimeout):
        return f"could not connect to {spec.base_url} in time ({detail})"
    if isinstance(e, httpx.ConnectError):
        return f"could not connect to {spec.base_url} ({detail}); is the server running?"
    if isinstance(e, httpx.ReadTimeout):
        return f"the server sent nothing for {spec.read_timeout_s:g} s (read timeout)"
    if isinstance(e, (TimeoutError, httpx.TimeoutException)):
        return f"no complete answer within {spec.timeout_s:g} s (request timeout)"
    if isinstance(e, httpx.RemoteProtocolError):
        return f"the server closed the connection mid-answer ({detail})"
    if isinstance(e, (httpx.ReadError, httpx.WriteError, httpx.NetworkError)):
        return f"the connection to the server broke ({detail})"
    return f"{type(e).__name__}: {detail}"


def _http_error(status: int, body: bytes) -> str:
    """'HTTP 404: The model `x` does not exist.' from an OpenAI-style error body."""
    msg = body[:500].decode("utf-8", "replace").strip()
    try:
        obj = json.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        msg = str(err.get("message", err)) if isinstance(err, dict) else str(err)
    except ValueError:
        pass
    return f"HTTP {status}: {msg or 'no message'}"


class _Requester:
    """Sends requests of one spec over one client; fills RequestRecords (times relative to t0)."""

    def __init__(self, spec: LoadSpec, clients: _Clients, t0: float) -> None:
        self.spec = spec
        self.clients = clients
        self.t0 = t0
        self.chat = spec.endpoint == "chat"
        self.headers = {"Content-Type": "application/json"}
        if spec.api_key:
            self.headers["Authorization"] = f"Bearer {spec.api_key}"

    def body(self, prompt: str, max_tokens: int | None) -> bytes:
        s = self.spec
        b: dict[str, Any] = {"model": s.model, "temperature": s.temperature, "stream": True,
                             "stream_options": {"include_usage": True}}
        if self.chat:
            b["messages"] = [{"role": "user", "content": prompt}]
        else:
            b["prompt"] = prompt
        if max_tokens is not None:
            b["max_tokens"] = max_tokens
        if s.ignore_eos:
            b["ignore_eos"] = True
        return json.dumps(b).encode()

    async def run(self, rec: RequestRecord, max_tokens: int | None,
                  on_text: Callable[[str, float], None] | None = None,
                  on_sent: Callable[[RequestRecord], None] | None = None) -> RequestRecord:
        """Send one request and fill `rec`; never raises except CancelledError (after recording it)."""
        st = StreamParser(self.chat)
        body = self.body(rec.prompt, max_tokens)
        rec.send_time = clock() - self.t0
        if on_sent is not None:
            on_sent(rec)
        try:
            async with asyncio.timeout(self.spec.timeout_s):
                await self._stream(body, st, on_text)
        except asyncio.CancelledError:
            self._finish(rec, st, "cancelled")
            raise
        except Exception as e:  # noqa: BLE001 - any failure becomes the record's error
            self._finish(rec, st, _describe(e, self.spec))
        else:
            self._finish(rec, st, None)
        return rec

    async def _stream(self, body: bytes, st: StreamParser, on_text: Callable[[str, float], None] | None) -> None:
        client = self.clients.take()
        try:
            async with client.stream("POST", self.spec.url, content=body, headers=self.headers) as resp:
                if resp.status_code != 200:
                    st.error = _http_error(resp.status_code, await resp.aread())
                    return
                feed, event = SSEDecoder().feed, st.event
                # Hot path: stamp the read, split events on bytes, parse each as it comes. (Deferring
                # the JSON to the stream's end was measured worse: 128 streams that end together left
                # ~0.3 s of parsing after the last token, 5% off the throughput.)
                async for data in resp.aiter_raw():
                    t = clock()
                    for payload in feed(data):
                        text = event(t, payload)
                        if on_text is not None and text is not None:
                            on_text(text, t - self.t0)
        finally:
            self.clients.give(client)

    def _finish(self, rec: RequestRecord, st: StreamParser, error: str | None) -> None:
        t0 = self.t0
        rec.chunk_times = [t - t0 for t in st.times]
        rec.output_text = "".join(st.texts)
        if rec.chunk_times:
            rec.first_token_time = rec.chunk_times[0]
        if st.usage:
            rec.prompt_tokens = int(st.usage.get("prompt_tokens") or 0)
            rec.output_tokens = int(st.usage.get("completion_tokens") or 0)
            rec.tokens_source = "usage"
        else:
            rec.output_tokens = len(rec.chunk_times)
            rec.tokens_source = "chunks"
        error = error or st.error
        if error is None and not st.done:
            error = "the stream ended before [DONE]: the server stopped mid-answer"
        if error is None and not rec.chunk_times:
            error = "the server answered without a single token"
        rec.error = error
        # As `vllm bench serve`: a successful request ends at its last token chunk.
        rec.end_time = rec.chunk_times[-1] if error is None else clock() - t0


# ----------------------------------------------------------------------------------------------
# Driving one event loop
# ----------------------------------------------------------------------------------------------

class _SocketProtocol(asyncio.Protocol):
    """Receives bytes into a queue and wakes the one reader waiting for them."""

    def __init__(self) -> None:
        self.chunks: collections.deque[bytes] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None
        self.eof = False
        self.exc: BaseException | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        self._wake()

    def eof_received(self) -> bool:
        self.eof = True
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.eof, self.exc = True, exc
        self._wake()


def _expire(fut: asyncio.Future[None], timeout: float) -> None:
    # An exception, not fut.cancel(): a cancelled task must still read as cancelled.
    if not fut.done():
        fut.set_exception(httpcore.ReadTimeout(f"no data for {timeout:g} s"))


class _SocketStream(httpcore.AsyncNetworkStream):
    """httpcore's view of one connection, straight on an asyncio protocol."""

    def __init__(self, proto: _SocketProtocol) -> None:
        self.p = proto

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        p = self.p
        if not p.chunks and not p.eof:
            loop = asyncio.get_running_loop()
            fut = p.waiter = loop.create_future()
            timer = loop.call_later(timeout, _expire, fut, timeout) if timeout is not None else None
            try:
                await fut
            finally:
                p.waiter = None
                if timer is not None:
                    timer.cancel()
        if p.chunks:
            data = p.chunks.popleft() if len(p.chunks) == 1 else b"".join(p.chunks)
            p.chunks.clear()
            if len(data) > max_bytes:
                p.chunks.appendleft(data[max_bytes:])
                data = data[:max_bytes]
            return data
        if p.exc is not None:
            raise httpcore.ReadError(str(p.exc) or type(p.exc).__name__)
        return b""

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if self.p.eof or self.p.transport is None or self.p.transport.is_closing():
            raise httpcore.WriteError("the connection is closed")
        self.p.transport.write(buffer)  # requests are small: the transport buffers them

    async def aclose(self) -> None:
        if self.p.transport is not None:
            self.p.transport.close()

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":  # httpcore's test whether an idle keep-alive connection was closed
            return bool(self.p.chunks) or self.p.eof
        return None if self.p.transport is None else self.p.transport.get_extra_info(info)


class _SocketBackend(httpcore.AsyncNetworkBackend):
    """Plain-TCP network layer for httpcore without anyio's per-read cancel scopes: a read costs a
    future and a timer. Measured against tests/fakes.py (64 streams x 256 chunks, uvloop) the
    client's CPU per chunk fell from ~80 to ~52 us (`vllm bench serve`'s aiohttp: ~33 us)."""

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None, socket_options: Iterable[Any] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                transport, proto = await loop.create_connection(_SocketProtocol, host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"connecting to {host}:{port} took over {timeout:g} s") from None
        except OSError as e:
            raise httpcore.ConnectError(str(e) or type(e).__name__) from None
        sock = transport.get_extra_info("socket")
        with contextlib.suppress(Exception):  # small requests must not wait for Nagle
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _SocketStream(proto)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class _Clients:
    """httpx clients to borrow, one per request in flight, each keeping one connection alive.

    Why not one client with a large pool: on every response close, httpcore's pool re-scans all
    its connections once per idle connection (quadratic). With 128 streams ending together that was
    ~0.1-0.2 s of client CPU after the last token (tests/fakes.py), a few percent off throughput."""

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.free: list[httpx.AsyncClient] = []
        self.all: list[httpx.AsyncClient] = []
        self._ssl = httpx.create_ssl_context(trust_env=False)  # built once, shared (it loads certificates)

    def take(self) -> httpx.AsyncClient:
        if self.free:
            return self.free.pop()
        client = self._new()
        self.all.append(client)
        return client

    def give(self, client: httpx.AsyncClient) -> None:
        self.free.append(client)

    def _new(self) -> httpx.AsyncClient:
        """HTTP/1.1, no proxies from the environment (trust_env=False), the lean socket layer for
        plain http (https keeps httpx's own)."""
        s = self.spec
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1, keepalive_expiry=60)
        timeout = httpx.Timeout(connect=min(10.0, s.timeout_s), read=s.read_timeout_s, write=s.read_timeout_s,
                                pool=None)
        transport = httpx.AsyncHTTPTransport(verify=self._ssl, limits=limits, http1=True, http2=False,
                                             trust_env=False)
        # httpx takes no network backend argument; its pool (a private attribute, httpx pinned) is
        # rebuilt with ours. Should the attribute ever change, the default transport still works.
        if s.url.startswith("http://") and isinstance(getattr(transport, "_pool", None), httpcore.AsyncConnectionPool):
            transport._pool = httpcore.AsyncConnectionPool(
                max_connections=1, max_keepalive_connections=1, keepalive_expiry=60, http1=True, http2=False,
                network_backend=_SocketBackend())
        return httpx.AsyncClient(transport=transport, timeout=timeout, trust_env=False)

    async def __aenter__(self) -> "_Clients":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(c.aclose() for c in self.all), return_exceptions=True)


def _run_async(coro_fn: Callable[[], Any]) -> Any:
    """asyncio.run with uvloop when available, without leaking the policy to the caller's thread.
    Called from a thread that already runs a loop (a notebook, Playwright's sync API), the run gets
    a thread of its own instead of failing."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_here(coro_fn)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = _run_here(coro_fn)
        except BaseException as e:  # handed back to the caller below
            box["error"] = e

    t = threading.Thread(target=target, name="loadgen-loop")
    t.start()
    t.join()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _run_here(coro_fn: Callable[[], Any]) -> Any:
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        return asyncio.run(coro_fn())
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro_fn())


@dataclass
class _Job:
    """The part of a run one loop sends: a closed loop (`workers` pulling from `take`) or an open
    loop (`schedule` of (index, offset s))."""

    workers: int = 0
    take: Callable[[], int | None] | None = None
    schedule: list[tuple[int, float]] = field(default_factory=list)


async def _drive(req: _Requester, job: _Job, prompts: list[str], max_tokens: int | None, warmup: bool,
                 sink: Callable[[RequestRecord], None], cancelled: Callable[[], bool],
                 sent: Callable[[RequestRecord], None] | None = None) -> None:
    """Send the job's requests; `sent` sees each record as it goes out, `sink` each finished one.
    Returns when all are done or, once `cancelled()` turns true, after the in-flight ones were
    cancelled and recorded."""

    async def one(i: int) -> None:
        rec = RequestRecord(index=i, prompt=prompts[i], send_time=0.0, warmup=warmup)
        try:
            await req.run(rec, max_tokens, on_sent=sent)
        finally:
            sink(rec)

    async def worker() -> None:
        while not cancelled() and (i := job.take()) is not None:  # type: ignore[misc]
            await one(i)

    async def open_loop() -> None:
        tasks = []
        for i, offset in job.schedule:
            delay = req.t0 + offset - clock()
            if delay > 0:
                await asyncio.sleep(delay)
            if cancelled():
                break
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks, return_exceptions=True)

    if job.take is not None:
        main = [asyncio.create_task(worker()) for _ in range(job.workers)]
    else:
        main = [asyncio.create_task(open_loop())]
    watch = asyncio.create_task(_watch_cancel(cancelled, main))
    await asyncio.gather(*main, return_exceptions=True)
    watch.cancel()


async def _watch_cancel(cancelled: Callable[[], bool], tasks: list[asyncio.Task]) -> None:
    while not cancelled():
        await asyncio.sleep(0.05)
    for t in tasks:
        t.cancel()


def _counter(n: int) -> Callable[[], int | None]:
    it = iter(range(n))
    return lambda: next(it, None)


def poisson_offsets(n: int, rate: float, seed: int) -> list[float]:
    """Send offsets (s) of a seeded Poisson process, rescaled like `vllm bench serve` so the last
    request goes out at n/rate exactly (steadier throughput across seeds)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    if out and out[-1] > 0:
        k = (n / rate) / out[-1]
        out = [x * k for x in out]
    return out


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (k < extra) for k in range(parts)]


def auto_workers(spec: LoadSpec) -> int:
    """Client processes for a spec: its `workers` if set, else one loop per PER_LOOP_CONCURRENCY
    streams, capped at a quarter of the cores (the server needs the rest)."""
    if spec.shape == "sequential":
        return 1
    if spec.workers > 0:
        return max(1, min(spec.workers, spec.in_flight()))
    cap = max(1, (os.cpu_count() or 1) // 4)
    return max(1, min(cap, math.ceil(spec.in_flight() / PER_LOOP_CONCURRENCY)))


# ----------------------------------------------------------------------------------------------
# Runs
# ----------------------------------------------------------------------------------------------

def _warmup_tokens(spec: LoadSpec) -> int | None:
    # Warm-up only has to put a batch of this size through the engine once; short answers do.
    return 16 if spec.max_tokens is None else min(spec.max_tokens, 16)


async def _warm(spec: LoadSpec, clients: _Clients, observer: Observer, totals: Totals,
                cancelled: Callable[[], bool]) -> tuple[list[RequestRecord], float]:
    """Run the warm-up requests (same prompts and concurrency, short answers). Returns the records,
    timed from the warm-up's own start, and that start (to re-base them onto the run's clock)."""
    recs: list[RequestRecord] = []
    tw = clock()
    if spec.warmup <= 0:
        return recs, tw

    def keep(r: RequestRecord) -> None:
        recs.append(r)
        _notify(observer.on_request_done, r, totals)

    req = _Requester(spec, clients, tw)
    job = _Job(workers=min(spec.in_flight(), spec.warmup), take=_counter(spec.warmup))
    await _drive(req, job, _warm_prompts(spec), _warmup_tokens(spec), True, keep, cancelled, _sent_hook(observer))
    return recs, tw


def _warm_prompts(spec: LoadSpec) -> list[str]:
    # A different opening keeps the measured requests from hitting warm-up blocks in the prefix cache.
    return [f"(warm-up {i}) " + spec.prompts[i % len(spec.prompts)] for i in range(spec.warmup)]


def _shift(recs: Iterable[RequestRecord], dt: float) -> None:
    """Re-base records' times by dt seconds (warm-up records onto the measured run's clock)."""
    for r in recs:
        r.send_time += dt
        r.end_time = None if r.end_time is None else r.end_time + dt
        r.first_token_time = None if r.first_token_time is None else r.first_token_time + dt
        r.chunk_times = [t + dt for t in r.chunk_times]


def _job_for(spec: LoadSpec, take: Callable[[], int | None], workers: int, shard: int = 0, shards: int = 1) -> _Job:
    if spec.shape == "poisson":
        offsets = poisson_offsets(spec.n, float(spec.rate or 1.0), spec.seed)
        return _Job(schedule=[(i, offsets[i]) for i in range(shard, spec.n, shards)])
    return _Job(workers=workers, take=take)


@dataclass
class _Outcome:
    records: list[RequestRecord]
    t0: float  # perf_counter at the measured part's start
    end: float  # perf_counter when its last request finished
    errors: list[str] = field(default_factory=list)  # client processes that failed


def _run_single(spec: LoadSpec, observer: Observer, cancel: threading.Event, prompts: list[str],
                totals: Totals) -> _Outcome:
    """Warm-up and measured part in one event loop on this thread."""

    async def main() -> _Outcome:
        recs: list[RequestRecord] = []
        async with _Clients(spec) as clients:  # warm-up and run share connections
            warm, tw = await _warm(spec, clients, observer, totals, cancel.is_set)
            t0 = clock()
            _shift(warm, tw - t0)
            req = _Requester(spec, clients, t0)

            def sink(r: RequestRecord) -> None:
                recs.append(r)
                totals.add(r, clock() - t0)
                _notify(observer.on_request_done, r, totals)

            job = _job_for(spec, _counter(spec.n), min(spec.in_flight(), spec.n))
            await _drive(req, job, prompts, spec.max_tokens, False, sink, cancel.is_set, _sent_hook(observer))
            return _Outcome(warm + recs, t0, clock())

    with _gc_frozen():
        return _run_async(main)


@contextlib.contextmanager
def _gc_frozen() -> Iterator[None]:
    """As `vllm bench serve` does (freeze_gc_heap): what exists before the run is left out of
    garbage collections during it, so a full collection of a big host process (Streamlit) cannot
    stall the loop mid-measurement. Undone afterwards; nothing is lost, only skipped meanwhile."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


# ----------------------------------------------------------------------------------------------
# Several client processes
# ----------------------------------------------------------------------------------------------

class LoadError(LabError):
    """The load generator itself could not run (its worker processes did not start)."""


def _shard_main(spec: LoadSpec, k: int, shards: int, sync: _ShardSync) -> None:
    """Entry point of client process k: its own loop and clients. It dies with the app: a client left
    behind would keep loading the server everyone is watching."""
    die_with_parent(mp.parent_process().pid)
    try:
        with _gc_frozen():
            _run_async(lambda: _shard(spec, k, shards, sync))
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which owns the run
        sync.out_q.put(("error", k, f"client process {k} failed: {type(e).__name__}: {e}"))


def _shared_take(counter: Any, n: int) -> Callable[[], int | None]:
    """The next index below n from a counter shared by every client process."""

    def take() -> int | None:
        with counter.get_lock():
            i = counter.value
            if i >= n:
                return None
            counter.value = i + 1
            return i

    return take


async def _shard(spec: LoadSpec, k: int, shards: int, sync: _ShardSync) -> None:
    """Client process k: its share of the warm-up, then of the measured part, on the same connections
    (so the measured part never pays for opening them, as with `vllm bench serve`'s warm-ups). It
    reports "warmed" and "done" even when stopped early, so the parent never waits on a phase."""
    out_q, stop = sync.out_q, sync.stop
    prompts = [spec.prompts[i % len(spec.prompts)] for i in range(spec.n)]
    sink = lambda r: out_q.put(("rec", dataclasses.asdict(r), clock()))  # noqa: E731
    async with _Clients(spec) as clients:
        out_q.put(("ready", k, clock()))
        if (tw := await _start_signal(sync.warm, sync.tw, stop)) is not None:
            job = _Job(workers=sync.warm_shares[k], take=_shared_take(sync.warm_counter, spec.warmup))
            await _drive(_Requester(spec, clients, tw), job, _warm_prompts(spec), _warmup_tokens(spec), True,
                         sink, stop.is_set, lambda r: out_q.put(("sent", r.index, r.send_time, True)))
        out_q.put(("warmed", k, clock()))
        if (t0 := await _start_signal(sync.go, sync.t0, stop)) is not None:
            job = _job_for(spec, _shared_take(sync.counter, spec.n), sync.shares[k], k, shards)
            await _drive(_Requester(spec, clients, t0), job, prompts, spec.max_tokens, False, sink, stop.is_set,
                         lambda r: out_q.put(("sent", r.index, r.send_time, False)))
        out_q.put(("done", k, clock()))


async def _start_signal(event: Any, origin: Any, stop: Any) -> float | None:
    """Wait for the parent's `event`, then until the clock origin it set; None when stopping."""
    while not event.wait(0.05):  # nothing else runs in this loop meanwhile; blocking is fine
        pass
    if stop.is_set():
        return None
    t = origin.value
    while (wait := t - clock()) > 0:  # uvloop's timers can fire up to 1 ms early: no send before t
        await asyncio.sleep(wait)
    return t


@dataclass
class _ShardSync:
    """What the parent and its client processes share (multiprocessing objects, picklable to spawn)."""

    out_q: Any  # ("ready"|"warmed"|"done", k, t) · ("rec", record dict, t) · ("sent", index, t, warmup) · ("error", k, text)
    warm: Any  # Event: start the warm-up (its clock origin in tw)
    go: Any  # Event: start the measured part (its clock origin in t0)
    stop: Any  # Event: cancel, or the parent is leaving
    tw: Any
    t0: Any
    warm_counter: Any
    counter: Any
    warm_shares: list[int]  # requests in flight per process during the warm-up
    shares: list[int]  # ... and during the measured part


def _run_sharded(spec: LoadSpec, shards: int, observer: Observer, cancel: threading.Event,
                 prompts: list[str], totals: Totals) -> _Outcome:
    """Warm-up and measured part spread over `shards` spawned processes, each on its own connections."""
    ctx = mp.get_context("spawn")  # fork is unsafe from a threaded host such as Streamlit
    sync = _ShardSync(out_q=ctx.Queue(), warm=ctx.Event(), go=ctx.Event(), stop=ctx.Event(),
                      tw=ctx.Value("d", 0.0), t0=ctx.Value("d", 0.0), warm_counter=ctx.Value("q", 0),
                      counter=ctx.Value("q", 0), warm_shares=_split(min(spec.in_flight(), spec.warmup), shards),
                      shares=_split(min(spec.in_flight(), spec.n), shards))
    bare = dataclasses.replace(spec, count_tokens=None)  # callables need not pickle
    procs = [ctx.Process(target=_shard_main, name=f"serving-lab-loadgen-{k}", daemon=True,
                         args=(bare, k, shards, sync)) for k in range(shards)]
    with _main_hidden():
        for p in procs:
            p.start()
    try:
        _await_ready(sync.out_q, procs)
        tw = clock() + 0.02
        sync.tw.value = tw
        sync.warm.set()
        warm, _, failed = _collect(sync, procs, observer, cancel, totals, tw, _warm_prompts(spec), "warmed", {})
        t0 = clock() + 0.02
        sync.t0.value = t0
        sync.go.set()
        recs, end, failed = _collect(sync, procs, observer, cancel, totals, t0, prompts, "done", failed)
        errors = list(failed.values())
    finally:
        sync.stop.set()
        sync.warm.set()
        sync.go.set()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join(timeout=2)
    if errors:
        log.warning("load generator: %s", "; ".join(errors))
    _shift(warm, tw - t0)
    return _Outcome(warm + recs, t0, end, errors)


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Keep spawned children from re-running the caller's main script (they need nothing from it,
    and a script without an `if __name__ == "__main__"` guard would start the whole run again):
    multiprocessing only re-imports __main__ when it has a __spec__ name or a __file__."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__.pop(k) for k in ("__file__", "__spec__") if main is not None and k in main.__dict__}
    try:
        if main is not None and "__spec__" in saved:
            main.__spec__ = None  # type: ignore[assignment]
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)


def _await_ready(out_q: Any, procs: list[Any], timeout_s: float = 120.0) -> None:
    ready: set[int] = set()
    deadline = clock() + timeout_s
    while len(ready) < len(procs):
        try:
            msg = out_q.get(timeout=0.2)
        except queue.Empty:
            dead = [p for p in procs if not p.is_alive()]
            if dead or clock() > deadline:
                raise LoadError("the load generator's worker processes did not start "
                                f"({len(ready)}/{len(procs)} ready); try workers=1") from None
            continue
        if msg[0] == "error":
            raise LoadError(msg[2])
        ready.add(msg[1])


def _collect(sync: _ShardSync, procs: list[Any], observer: Observer, cancel: threading.Event, totals: Totals,
             t0: float, prompts: list[str], until: str,
             failed: dict[int, str]) -> tuple[list[RequestRecord], float, dict[int, str]]:
    """Gather records from the client processes until each reports `until` ("warmed" or "done"),
    fails or dies. Warm-up records reach the observer but not the totals. `failed` (process -> why)
    holds those already lost; the returned one adds the new."""
    sent = getattr(observer, "on_request_sent", None)
    recs: list[RequestRecord] = []
    failed = dict(failed)
    finished: set[int] = set(failed)
    gone_since: dict[int, float] = {}
    end = t0
    while len(finished) < len(procs):
        if cancel.is_set():
            sync.stop.set()
        try:
            msg = sync.out_q.get(timeout=0.1)
        except queue.Empty:
            for k, p in enumerate(procs):  # a process that died without a word: give its messages 1 s
                if k not in finished and not p.is_alive() and clock() - gone_since.setdefault(k, clock()) > 1.0:
                    failed[k] = f"client process {k} exited with code {p.exitcode}"
                    finished.add(k)
            continue
        if msg[0] == "sent" and sent is not None:
            _notify(sent, RequestRecord(index=msg[1], prompt=prompts[msg[1]], send_time=msg[2], warmup=msg[3]))
        elif msg[0] == "rec":
            r = RequestRecord.from_dict(msg[1])
            recs.append(r)
            if not r.warmup:
                totals.add(r, msg[2] - t0)
            _notify(observer.on_request_done, r, totals)
        elif msg[0] == until:
            finished.add(msg[1])
            end = max(end, msg[2])
        elif msg[0] == "error":
            failed[msg[1]] = msg[2]
            finished.add(msg[1])
    return recs, (end if end > t0 else clock()), failed


# ----------------------------------------------------------------------------------------------
# Public entry points
# ----------------------------------------------------------------------------------------------

def _count_fallback(records: Iterable[RequestRecord], count_tokens: Callable[[str], int] | None) -> None:
    """Where the server sent no usage, re-count with the tokenizer when one was given."""
    if count_tokens is None:
        return
    for r in records:
        if r.tokens_source == "chunks":
            r.output_tokens = int(count_tokens(r.output_text))
            r.prompt_tokens = r.prompt_tokens or int(count_tokens(r.prompt))
            r.tokens_source = "tokenizer"


def client_name() -> str:
    try:
        import uvloop  # type: ignore[import-not-found]  # noqa: F401
        return f"httpx {httpx.__version__} + uvloop"
    except ImportError:
        return f"httpx {httpx.__version__} + asyncio"


def run_load(spec: LoadSpec, observer: Observer | None = None, cancel: threading.Event | None = None) -> RunResult:
    """Run one load test and return its RunResult (kind "vllm", summary from stats.summarize).

    Blocking; call it from a worker thread to keep a UI responsive. Setting `cancel` stops sending,
    cancels the requests in flight (recorded with error "cancelled") and returns what completed.
    Warm-up records are kept (warmup=True, negative times) and left out of the summary."""
    observer = observer or NullObserver()
    cancel = cancel or threading.Event()
    prompts = [spec.prompts[i % len(spec.prompts)] for i in range(spec.n)]
    shards = auto_workers(spec)
    plan = RunPlan(label=spec.label, shape=spec.shape, num_requests=spec.n, warmup=spec.warmup,
                   concurrency=spec.in_flight(), workers=shards, url=spec.url, model=spec.model)
    _notify(observer.on_start, plan)
    totals = Totals(total=spec.n)
    run = _run_single if shards == 1 else functools.partial(_run_sharded, shards=shards)
    out = run(spec, observer=observer, cancel=cancel, prompts=prompts, totals=totals)
    started_at = time.time() - (clock() - out.t0)
    records = sorted(out.records, key=lambda r: (not r.warmup, r.index))
    _count_fallback(records, spec.count_tokens)
    duration = max(0.0, out.end - out.t0)
    extra: dict[str, Any] = {"cancelled": cancel.is_set(), "client_workers": shards, "client": client_name()}
    if out.errors:
        extra["client_errors"] = out.errors
    result = RunResult(
        kind="vllm", scenario=spec.scenario or spec.shape, label=spec.label or f"vLLM {spec.shape}",
        records=records, duration=duration, started_at=started_at, model=spec.model, load=spec.as_dict(),
        extra=extra,
    )
    result.summary = stats.summarize(records, duration)
    _notify(observer.on_complete, result)
    return result


def sweep(base_spec: LoadSpec, levels: Sequence[int] = (1, 2, 4, 8, 16, 32), observer: Observer | None = None,
          cancel: threading.Event | None = None, rounds: int = 2) -> list[RunResult]:
    """One concurrency run per level, each with its own warm-up of at least one full batch (a GPU
    pays a one-off cost the first time it sees a batch size). Each level sends
    max(base num_requests, level x rounds) requests. Stops early when `cancel` is set."""
    results = []
    for level in levels:
        if cancel is not None and cancel.is_set():
            break
        spec = dataclasses.replace(
            base_spec, shape="concurrency", concurrency=level,
            num_requests=max(base_spec.num_requests or 0, level * max(1, rounds)),
            warmup=max(base_spec.warmup, level), scenario=base_spec.scenario or "sweep",
            label=f"concurrency {level}")
        result = run_load(spec, observer, cancel)
        result.extra["sweep_level"] = level
        results.append(result)
    return results


def stream_one(spec: LoadSpec, prompt: str | None = None, on_text: Callable[[str, float], None] | None = None,
               cancel: threading.Event | None = None) -> RequestRecord:
    """Stream one request (the chat pane): `on_text(text, t)` gets each content chunk as it arrives,
    t in seconds since the request was sent. Blocking; returns the filled record."""
    cancel = cancel or threading.Event()

    async def main() -> RequestRecord:
        async with _Clients(spec) as clients:
            req = _Requester(spec, clients, clock())
            rec = RequestRecord(index=0, prompt=prompt if prompt is not None else spec.prompts[0], send_time=0.0)
            task = asyncio.create_task(req.run(rec, spec.max_tokens, on_text))
            watch = asyncio.create_task(_watch_cancel(cancel.is_set, [task]))
            await asyncio.gather(task, return_exceptions=True)
            watch.cancel()
            return rec

    rec = _run_async(main)
    _count_fallback([rec], spec.count_tokens)
    return rec
