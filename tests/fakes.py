"""A tiny fault-injecting OpenAI-compatible SSE server, for the failures a real vLLM will not
produce on demand. Plain asyncio sockets in a background thread; HTTP/1.1 with keep-alive and
chunked bodies, like vLLM's uvicorn.

The request's model name picks the behaviour:
  ok          `max_tokens` content chunks (1 token each), a usage chunk, [DONE]
  no-usage    the same without the usage chunk
  u2028       one chunk whose JSON holds raw U+2028, U+2029 and U+0085 inside its string
  crlf        events end in CRLF CRLF, and the bytes are written in awkward slices
  hang        headers and one chunk, then silence forever
  trickle     a chunk every 0.2 s forever (never idle, never done)
  die         after `die_after` complete answers, the next answer stops mid-stream and the whole
              server goes away: open connections are cut and nothing listens any more
  cached      as ok, its usage saying 4 of its 5 prompt tokens came from the prefix cache
              (prompt_tokens_details.cached_tokens, as vLLM with --enable-prompt-tokens-details)
  numbered    as ok, each answer's chunks naming the request's serial number (" r3 t0", " r3 t1", ...), so
              a test can tell which answer a later request carries (multi-turn history)
  short       as ok, but a chat whose messages hold more than two turns (a third user turn and on) is refused
              with HTTP 400 as vLLM refuses a prompt longer than its max-model-len (512 here)
With models=("ok", ...) it answers GET /v1/models with those names (max_model_len 2048), so discovery
(engine.serving.endpoint, the CLI's --url) takes it for a server; without, that GET is a 404.
Every request's JSON is kept in `bodies`, in arrival order. POST /v1/rerank answers as vLLM's cross-encoder
route does: each document scored, usage.total_tokens the words of the query and documents; POST /v1/embeddings
with one embedding, usage.prompt_tokens the input's words. A completion asked for without "stream" (the openai
SDK's plain create(), as the code behind a run calls it) is one JSON answer of max_tokens words.
With slots=N it streams at most N answers at once (a paced server of known capacity, like vLLM's --max-num-seqs):
the others wait for a slot before their first chunk, so their TTFT grows once more than N are in flight and keeps
growing while requests arrive faster than N slots serve them (a queue, for the over-saturation watch). With slots=N
and wait_s=W, a request that finds all N slots taken is not queued: its first chunk comes W seconds after its
arrival by the fake's clock, the rest of its answer at once, outside the slots (only its TTFT is the fault); one
that finds a slot streams at once. The client stamps a send before the request leaves, so its TTFT for such a
request is at least W on any machine, and whether a request found a slot depends only on how many answers (each as
long as the fake's clock makes it) were streaming when it arrived. An answer's chunks keep the fake's own schedule
(chunk_delay_s apart from its first, a late wake-up not carried over), so its length and the capacity are the same
on a busy machine; only the client's own delays add to what it measures.
With endless=True it is a server that answers GET /v1/models (one model, "endless") and then never ends
any other answer: GET /metrics, GET /version and every completion stream a chunk every 0.2 s forever.
With metrics=True it also serves GET /metrics: vLLM's vllm:generation_tokens_total, every content
chunk it has sent (labelled model_name "ok"), and the prefix cache's hits and queries (5 prompt tokens
looked up per answer, 4 found for "cached"); without, /metrics is a 404, as on a server that is not vLLM.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from typing import Any

U2028_TEXT = "line\u2028sep\u2029para\u0085next"


def _chunk(payload: dict[str, Any] | str, sep: bytes = b"\n\n") -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return b"data: " + data.encode() + sep


def _content(text: str, chat: bool, finish: str | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if chat:
        choice["delta"] = {"content": text}
    else:
        choice["text"] = text
    return {"id": "fake", "object": "chat.completion.chunk" if chat else "text_completion", "choices": [choice]}


def _usage(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "fake", "choices": [], "usage": usage}


class FakeOpenAIServer:
    """Use as a context manager: `with FakeOpenAIServer() as srv: srv.base_url`."""

    def __init__(self, die_after: int = 2, chunk_delay_s: float = 0.002, metrics: bool = False,
                 endless: bool = False, slots: int | None = None, models: tuple[str, ...] = (),
                 wait_s: float | None = None) -> None:
        self.endless = endless
        self.models = models
        self.slots = slots
        self.wait_s = wait_s  # with slots: a request finding none free gets its first chunk this long after arrival
        self.waited = 0  # requests that found no free slot (wait_s)
        self._slots: asyncio.Semaphore | None = None
        self.die_after = die_after
        self.chunk_delay_s = chunk_delay_s
        self.metrics = metrics  # GET /metrics: vLLM's generation-token counter (else 404, as a non-vLLM server)
        self.generated = 0  # output tokens sent, all requests and models together: the counter /metrics shows
        self.completed = 0
        self.prefix_hits = self.prefix_queries = 0  # prompt tokens found in / looked up in the prefix cache
        self.requests = 0
        self.metrics_reads = 0  # GET /metrics answered (metrics=True)
        self.last_body: dict[str, Any] = {}  # the last request's JSON
        self.bodies: list[dict[str, Any]] = []  # every POST's JSON, in arrival order
        self.connections = 0  # accepted so far: shows whether a client reuses its warm-up's connections
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-openai", daemon=True)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._sock = sock

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "FakeOpenAIServer":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._die(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():  # closed here, not by the garbage collector in whichever test comes next
            self._loop.close()

    async def _start(self) -> None:
        # A listen backlog as deep as uvicorn's (vLLM's server): with the default 100, a client opening a few
        # hundred connections at once sees SYNs dropped and 1 s retransmits that a real server would not cause.
        self._slots = asyncio.Semaphore(self.slots) if self.slots else None
        self._server = await asyncio.start_server(self._handle, sock=self._sock, backlog=2048)

    async def _die(self) -> None:
        """The server process 'crashes': stop listening and cut every open connection."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in list(self._writers):
            w.transport.abort()
        for t in asyncio.all_tasks():
            if t is not asyncio.current_task():
                t.cancel()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        try:
            while True:  # keep-alive: several requests per connection
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = json.loads(await reader.readexactly(length)) if length else {}
                arrived = self._loop.time()
                self.requests += 1
                self.last_body = body or self.last_body  # a GET (/metrics) has none
                if body:
                    self.bodies.append(body)
                await self._answer(head, body, writer, arrived)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, head: bytes, body: dict[str, Any], writer: asyncio.StreamWriter,
                      arrived: float = 0.0) -> None:
        request_line = head.split(b"\r\n", 1)[0]
        if self.endless:
            await self._endless(request_line, writer)
            return
        if self.metrics and request_line.startswith(b"GET /metrics"):
            self.metrics_reads += 1
            text = ("# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
                    "# TYPE vllm:generation_tokens_total counter\n"
                    f'vllm:generation_tokens_total{{engine="0",model_name="ok"}} {float(self.generated)}\n'
                    f'vllm:prefix_cache_hits_total{{engine="0",model_name="ok"}} {float(self.prefix_hits)}\n'
                    f'vllm:prefix_cache_queries_total{{engine="0",model_name="ok"}} {float(self.prefix_queries)}\n'
                    ).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: "
                         + str(len(text)).encode() + b"\r\n\r\n" + text)
            await writer.drain()
            return
        if self.models and request_line.startswith(b"GET /v1/models"):
            card = json.dumps({"object": "list", "data": [{"id": m, "object": "model", "owned_by": "vllm",
                                                           "max_model_len": 2048} for m in self.models]}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(card)).encode() + b"\r\n\r\n" + card)
            await writer.drain()
            return
        if request_line.startswith(b"POST /v1/rerank"):  # vLLM's cross-encoder route: one JSON answer
            docs = body.get("documents") or []
            ranked = json.dumps({"id": "fake", "model": body.get("model", "ok"), "usage": {
                "total_tokens": sum(len(str(t).split()) for t in [body.get("query", ""), *docs])}, "results": [
                {"index": i, "document": {"text": d}, "relevance_score": 1.0 / (i + 1)} for i, d in enumerate(docs)]})
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(ranked.encode())).encode() + b"\r\n\r\n" + ranked.encode())
            await writer.drain()
            return
        if request_line.startswith(b"POST /v1/embeddings"):  # a pooling model's route: one JSON answer
            counted = len(str(body.get("input", "")).split())
            await self._json(writer, {"object": "list", "model": body.get("model", "ok"), "data": [
                {"object": "embedding", "index": 0, "embedding": [0.5] * 8}], "usage": {
                "prompt_tokens": counted, "total_tokens": counted}})
            return
        if not request_line.startswith(b"POST") or b"completions" not in request_line:
            writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 40\r\n\r\n"
                         b'{"error": {"message": "no such route"}}\n')
            await writer.drain()
            return
        chat = b"/chat/completions" in request_line
        model = body.get("model", "ok")
        n = int(body.get("max_tokens") or 8)
        if model == "short" and len(body.get("messages") or ()) > 3:
            text = json.dumps({"object": "error", "type": "BadRequestError", "code": 400, "message": (
                "This model's maximum context length is 512 tokens. However, your prompt contains 530 input tokens. "
                "Please reduce the length of the input.")}).encode()
            writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(text)).encode() + b"\r\n\r\n" + text)
            await writer.drain()
            return
        if not body.get("stream"):  # the openai SDK's plain create() (the code behind a run): one JSON answer
            text = "".join(f" t{i}" for i in range(n))
            choice = {"index": 0, "finish_reason": "length",
                      **({"message": {"role": "assistant", "content": text}} if chat else {"text": text})}
            await self._json(writer, {"id": "fake", "object": "chat.completion" if chat else "text_completion",
                                      "model": model, "choices": [choice], "usage": _usage(4, n)["usage"]})
            return
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")

        async def send(data: bytes, slices: int = 1) -> None:
            step = max(1, len(data) // slices)
            for i in range(0, len(data), step):
                part = data[i:i + step]
                writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
                await writer.drain()
                if slices > 1:
                    await asyncio.sleep(0.001)

        if model == "die" and self.completed >= self.die_after:
            await send(_chunk(_content("partial", chat)))
            await send(_chunk(_content(" answer", chat)))
            await asyncio.sleep(0.05)
            await self._die()
            return
        if model in ("hang", "trickle"):
            await send(_chunk(_content("wait", chat)))
            while True:
                await asyncio.sleep(0.2 if model == "trickle" else 3600)
                await send(_chunk(_content(".", chat)))
        if self._slots is not None and self.wait_s is not None and self._slots.locked():
            # no slot free: the first chunk wait_s after arrival (by this clock), streamed beside the slots
            self.waited += 1
            await asyncio.sleep(max(0.0, arrived + self.wait_s - self._loop.time()))
            await self._stream(model, n, chat, send, writer, paced=False)
        elif self._slots is not None:
            async with self._slots:
                await self._stream(model, n, chat, send, writer)
        else:
            await self._stream(model, n, chat, send, writer)

    @staticmethod
    async def _json(writer: asyncio.StreamWriter, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: " + str(len(data)).encode()
                     + b"\r\n\r\n" + data)
        await writer.drain()

    async def _stream(self, model: str, n: int, chat: bool, send, writer: asyncio.StreamWriter,
                      paced: bool = True) -> None:
        sep = b"\r\n\r\n" if model == "crlf" else b"\n\n"
        serial = len(self.bodies)
        texts = ([U2028_TEXT] if model == "u2028" else [f" r{serial} t{i}" for i in range(n)] if model == "numbered"
                 else [f" t{i}" for i in range(n)])
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i, text in enumerate(texts):
            self.generated += 1
            finish = "length" if i == len(texts) - 1 else None
            await send(_chunk(_content(text, chat, finish), sep), slices=7 if model == "crlf" else 1)
            # Paced by its own clock: chunk i+1 is due chunk_delay_s x (i+1) after the first, however late this
            # wake-up was, so an answer takes as long (and `slots` serve as many per second) on a busy machine.
            if paced:
                await asyncio.sleep(max(0.0, start + self.chunk_delay_s * (i + 1) - loop.time()))
        cached = 4 if model == "cached" else None
        self.prefix_queries += 5
        self.prefix_hits += cached or 0
        if model != "no-usage":
            await send(_chunk(_usage(5, len(texts), cached), sep))
        await send(_chunk("[DONE]", sep))
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        self.completed += 1


    async def _endless(self, request_line: bytes, writer: asyncio.StreamWriter) -> None:
        if request_line.startswith(b"GET /v1/models"):
            card = json.dumps({"object": "list", "data": [{"id": "endless", "object": "model", "owned_by": "vllm",
                                                           "max_model_len": 2048}]}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(card)).encode() + b"\r\n\r\n" + card)
            await writer.drain()
            return
        sse = b"completions" in request_line
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: " + (b"text/event-stream" if sse else b"text/plain")
                     + b"\r\ntransfer-encoding: chunked\r\n\r\n")
        while True:  # never idle for a read timeout, never done
            part = _chunk(_content(" more", b"/chat/" in request_line)) if sse else b"# still sending\n"
            writer.write(f"{len(part):x}\r\n".encode() + part + b"\r\n")
            await writer.drain()
            self.generated += 1
            await asyncio.sleep(0.2)


def main(argv: list[str] | None = None) -> None:
    """Serve standalone (bench/fidelity.py --synthetic): prints the port, runs until killed.
    A paced "ok" stream is a server that never slows down, to see whether a client keeps up."""
    import argparse
    import time

    p = argparse.ArgumentParser(description="fake OpenAI SSE server")
    p.add_argument("--chunk-delay", type=float, default=0.02, help="seconds between content chunks")
    p.add_argument("--endless", action="store_true", help="answer /v1/models, then never end any other answer")
    p.add_argument("--models", nargs="*", default=[], help="answer GET /v1/models with these names (the CLI's --url)")
    p.add_argument("--metrics", action="store_true", help="serve GET /metrics (the server's view of a run)")
    a = p.parse_args(argv)
    try:
        import uvloop  # type: ignore[import-not-found]

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    srv = FakeOpenAIServer(chunk_delay_s=a.chunk_delay, endless=a.endless, models=tuple(a.models), metrics=a.metrics)
    srv._loop = asyncio.new_event_loop()  # after the policy, so it is uvloop's
    srv._thread = threading.Thread(target=srv._loop.run_forever, name="fake-openai", daemon=True)
    with srv:
        print(srv.port, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()
