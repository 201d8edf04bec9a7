"""One streamed request, measured: `Requester` sends a spec's requests over one loop's aiohttp connections and
fills a RequestRecord for each. See docs/measuring.md#load-generator."""
from __future__ import annotations

import asyncio
import errno
import json
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from engine.measure.load.spec import POOLING, LoadSpec
from engine.measure.load.sse import SSEDecoder, StreamParser
from engine.results.records import RequestRecord

clock = time.perf_counter


KEEPALIVE_S = 4.0  # below the server's keep-alive (uvicorn's 5 s): the client closes an idle connection first
# Open files a loop keeps for itself beyond its connections: the event loop, the process pipes of a sharded run,
# the tokenizer's and the log's files.
FD_RESERVE = 64


def raise_fd_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit where that is allowed (as `ulimit -n`
    may without privileges), and return the soft limit in force: each streamed request holds one socket."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):  # a platform cap below the hard limit (macOS): keep what there is
            pass
    return soft


def open_files() -> int:
    """File descriptors this process holds now (Linux's /proc; elsewhere a guess of the few a Python holds)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 16


def local_ports() -> int | None:
    """How many local ports this machine hands out to outgoing connections (Linux's ip_local_port_range), or None
    where it does not say: each connection to one server holds one of them."""
    try:
        low, high = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
        return high - low + 1
    except (OSError, ValueError):
        return None


def connection_budget() -> int:
    """How many connections one client loop may hold at once: the open-file limit (raised where allowed), less
    those already open and a reserve, and no more than half the local ports (closed ones wait a while before
    their port is free again). The loop never opens more, so it never runs out of files or ports mid-run."""
    files = raise_fd_limit() - open_files() - FD_RESERVE
    ports = local_ports()
    return max(1, min(files, ports // 2) if ports else files)


# errno values of a client out of its own resources, not a server's failure: how describe() names them
_CLIENT_LIMITS = {
    errno.EMFILE: "open files", errno.ENFILE: "open files",
    errno.EADDRNOTAVAIL: "local ports", errno.EADDRINUSE: "local ports",
    errno.ENOMEM: "memory", errno.ENOBUFS: "memory",
}


def client_limit(e: BaseException) -> OSError | None:
    """The client's own resource error behind `e` (too many open files, no local port, no memory), or None."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, OSError) and x.errno in _CLIENT_LIMITS:
            return x
        todo += [getattr(x, "os_error", None), x.__cause__, x.__context__]
    return None


def describe(e: BaseException, spec: LoadSpec, deadline_s: float | None = None, tokens: int = 0,
             asked: int | None = None) -> str:
    """An exception as a plain sentence for RequestRecord.error (engine.measure.judge.failures groups them).
    `tokens`: the chunks that came before it; `asked`: the request's max_tokens."""
    detail = str(e) or type(e).__name__
    if isinstance(e, MemoryError):
        return f"this client ran out of memory ({detail})"
    if (limit := client_limit(e)) is not None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        what = _CLIENT_LIMITS[limit.errno]  # type: ignore[index]
        said = f"[Errno {limit.errno}] {limit.strerror or os.strerror(limit.errno or 0)}"
        return (f"this client ran out of {what} ({said}; its open-file limit is {soft})" if what == "open files"
                else f"this client ran out of {what} ({said})")
    if isinstance(e, TimeoutError) and asked is not None and tokens > asked:
        return (f"the server kept streaming past the {asked} tokens asked for ({tokens} so far) and had not ended "
                f"within {deadline_s or spec.deadline_s:g} s")
    if isinstance(e, aiohttp.ConnectionTimeoutError):
        return f"could not connect to {spec.base_url} in time ({detail})"
    if isinstance(e, aiohttp.ClientConnectorError):
        return f"could not connect to {spec.base_url} ({e.os_error or detail}); is the server running?"
    if isinstance(e, aiohttp.SocketTimeoutError):
        return f"the server sent nothing for {spec.read_timeout_s:g} s (read timeout)"
    if isinstance(e, TimeoutError):
        return (f"no complete answer within {deadline_s or spec.deadline_s:g} s (request timeout: 30 s + 0.5 s per "
                "token asked for)")
    if isinstance(e, (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError)):
        return f"the server closed the connection mid-answer ({detail})"
    if isinstance(e, (aiohttp.ClientError, OSError)):
        return f"the connection to the server broke ({detail})"
    return f"{type(e).__name__}: {detail}"


def http_error(status: int, body: bytes) -> str:
    """'HTTP 404: The model `x` does not exist.' from an OpenAI-style error body."""
    msg = body[:500].decode("utf-8", "replace").strip()
    try:
        obj = json.loads(body)
        err = obj.get("error", obj) if isinstance(obj, dict) else obj
        msg = str(err.get("message", err)) if isinstance(err, dict) else str(err)
    except ValueError:
        pass
    return f"HTTP {status}: {msg or 'no message'}"


def cached_tokens(usage: dict[str, Any]) -> int | None:
    """The prompt tokens the server took from its prefix cache, from an OpenAI usage object
    (prompt_tokens_details.cached_tokens); None when it does not say (vLLM says only when started
    with --enable-prompt-tokens-details)."""
    details = usage.get("prompt_tokens_details")
    n = details.get("cached_tokens") if isinstance(details, dict) else None
    return int(n) if isinstance(n, (int, float)) and not isinstance(n, bool) else None


class Requester:
    """Sends the requests of one spec from one event loop and fills their RequestRecords, times in
    seconds from `t0` (perf_counter; the driver sets it at the start of each phase). Use it as an
    async context manager: its connections live from the warm-up to the end of the measured part."""

    session: aiohttp.ClientSession  # opened on entering, closed on leaving

    def __init__(self, spec: LoadSpec) -> None:
        self.spec = spec
        self.t0 = clock()
        self.chat = spec.endpoint == "chat"
        self.headers = {"Content-Type": "application/json"}
        if spec.api_key:
            self.headers["Authorization"] = f"Bearer {spec.api_key}"
        self.headers.update(spec.headers)  # the user's own (an Authorization given replaces the key's)

    async def __aenter__(self) -> "Requester":
        s = self.spec
        # No limit on connections (the driver caps what is in flight), kept alive between requests for less
        # than the server keeps them (vLLM's uvicorn: 5 s, VLLM_HTTP_TIMEOUT_KEEP_ALIVE): a connection idle
        # through a long warm-up was otherwise reused just as the server closed it, and the measured part's
        # first request failed with "server disconnected". No proxies from the environment (trust_env=False);
        # no total timeout (asyncio.timeout in run).
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(10.0, s.deadline_s), sock_read=s.read_timeout_s)
        # At most as many connections as this process has files for (a 100,000-request trace at
        # time scale 0.001 opened one per request and every one failed with "Too many open files"): a request
        # beyond the budget waits for a connection before it goes out, and its late send is counted
        # (judge/lateness.py), not blamed on the server.
        self.budget = connection_budget()
        self.slots = asyncio.Semaphore(self.budget)
        self.waited = 0  # requests that waited for a connection of the budget
        self.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.budget, keepalive_timeout=KEEPALIVE_S),
            timeout=timeout, trust_env=False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    def body(self, prompt: str, max_tokens: int | None, history: list[dict[str, str]] | None = None,
             model: str | None = None, documents: list[str] | None = None) -> bytes:
        """The request's JSON; a chat turn after the first carries `history` (the earlier turns and the
        replies the server gave) before its new user message. `model`: a LoRA module's name (spec.model_for)."""
        s = self.spec
        if s.endpoint == "embeddings":  # as vllm bench serve's openai-embeddings: one input, never cut off
            e: dict[str, Any] = {"model": model or s.model, "input": prompt, "truncate_prompt_tokens": -1}
            return json.dumps({**e, **s.extra_body}).encode()
        if s.endpoint == "rerank":  # as vllm bench serve's vllm-rerank: the prompt the query, `documents` ranked
            r = {"model": model or s.model, "query": prompt, "documents": documents or [prompt],
                 "truncate_prompt_tokens": -1}
            return json.dumps({**r, **s.extra_body}).encode()
        b: dict[str, Any] = {"model": model or s.model, "temperature": s.temperature, "stream": True,
                             "stream_options": {"include_usage": True}}
        if self.chat:
            system = [{"role": "system", "content": s.system}] if s.system else []
            b["messages"] = [*system, *(history or ()), {"role": "user", "content": prompt}]
        else:
            b["prompt"] = s.system + "\n\n" + prompt if s.system else prompt
        if max_tokens is not None:
            b["max_tokens"] = max_tokens
        if s.ignore_eos:
            b["ignore_eos"] = True
        b.update(s.sampling)
        b.update(s.extra_body)  # last, as vllm bench serve merges --extra-body (its own fields refused: spec.py)
        return json.dumps(b).encode()

    async def run(self, rec: RequestRecord, max_tokens: int | None,
                  on_sent: Callable[[RequestRecord], None] | None = None,
                  history: list[dict[str, str]] | None = None,
                  parser: StreamParser | None = None) -> RequestRecord:
        """Send one request and fill `rec`; never raises except CancelledError (after recording it). A `parser`
        given is the one its answer is read into, for a caller that shows the answer while it streams (the room)."""
        if self.slots.locked():
            self.waited += 1
        try:
            await self.slots.acquire()  # the connection budget: sent only once a connection is free
        except asyncio.CancelledError:
            rec.send_time = rec.end_time = clock() - self.t0
            rec.error = "cancelled before it was sent"
            raise
        try:
            return await self._run(rec, max_tokens, on_sent, history, parser)
        finally:
            self.slots.release()

    async def _run(self, rec: RequestRecord, max_tokens: int | None,
                   on_sent: Callable[[RequestRecord], None] | None,
                   history: list[dict[str, str]] | None, parser: StreamParser | None) -> RequestRecord:
        st = parser or StreamParser(self.chat)
        body = self.body(rec.prompt, max_tokens, history, self.spec.model_for(rec.index, rec.conversation),
                         self.spec.documents_for(rec.index) if self.spec.endpoint == "rerank" else None)
        rec.send_time = clock() - self.t0
        if on_sent is not None:
            on_sent(rec)
        deadline = self.spec.deadline_for(max_tokens)
        if self.spec.endpoint in POOLING:
            return await self._pooled(rec, body, deadline)
        try:
            async with asyncio.timeout(deadline):
                await self._stream(body, st)
        except asyncio.CancelledError:
            self._finish(rec, st, "cancelled")
            raise
        except Exception as e:  # noqa: BLE001 - any failure becomes the record's error
            self._finish(rec, st, describe(e, self.spec, deadline, len(st.times), max_tokens))
        else:
            self._finish(rec, st, None)
        return rec

    async def _stream(self, body: bytes, st: StreamParser) -> None:
        async with self.session.post(self.spec.url, data=body, headers=self.headers) as resp:
            if resp.status != 200:
                st.error = http_error(resp.status, await resp.read())
                return
            feed, event = SSEDecoder().feed, st.event
            # Hot path: stamp the read, split events on bytes, parse each as it comes. (Deferring the
            # JSON to the stream's end was measured worse: 128 streams that end together left ~0.3 s
            # of parsing after the last token, 5% off the throughput.)
            async for data in resp.content.iter_any():
                t = clock()
                for payload in feed(data):
                    event(t, payload)

    async def _pooled(self, rec: RequestRecord, body: bytes, deadline: float) -> RequestRecord:
        """An embeddings or rerank request: one JSON answer, timed as vllm bench serve times a pooling request (its
        TTFT is its whole latency: there is no stream), its prompt tokens from the server's usage (a rerank's
        total_tokens: the query's and its documents')."""
        try:
            async with asyncio.timeout(deadline):
                async with self.session.post(self.spec.url, data=body, headers=self.headers) as resp:
                    raw = await resp.read()
                    rec.end_time = clock() - self.t0
                    if resp.status != 200:
                        rec.error = http_error(resp.status, raw)
                        return rec
                    obj = json.loads(raw)
        except asyncio.CancelledError:
            rec.end_time, rec.error = clock() - self.t0, "cancelled"
            raise
        except Exception as e:  # noqa: BLE001 - any failure becomes the record's error
            rec.end_time, rec.error = clock() - self.t0, describe(e, self.spec, deadline)
            return rec
        usage = obj.get("usage") if isinstance(obj, dict) else None
        rerank = self.spec.endpoint == "rerank"
        if not isinstance(obj, dict) or not obj.get("results" if rerank else "data"):
            rec.error = f"the server answered without {'a ranking' if rerank else 'an embedding'}"
            return rec
        rec.first_token_time = rec.end_time
        rec.prompt_tokens = int((usage or {}).get("prompt_tokens") or (usage or {}).get("total_tokens") or 0)
        rec.output_tokens, rec.tokens_source = 0, "usage"
        return rec

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
            rec.cached_tokens = cached_tokens(st.usage)
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
