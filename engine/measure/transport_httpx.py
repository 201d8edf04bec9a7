"""A/B ONLY (deleted after the transport measurement): the httpx transport over a lean socket layer."""
from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from engine.measure.sse import SSEDecoder, StreamParser

clock = __import__("time").perf_counter


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


class Clients:
    """httpx clients to borrow, one per request in flight, each keeping one connection alive.

    Why not one client with a large pool: on every response close, httpcore's pool re-scans all
    its connections once per idle connection (quadratic). With 128 streams ending together that was
    ~0.1-0.2 s of client CPU after the last token (tests/fakes.py), a few percent off throughput."""

    def __init__(self, spec: Any) -> None:
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

    async def __aenter__(self) -> "Clients":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(c.aclose() for c in self.all), return_exceptions=True)



async def stream(clients: Clients, url: str, body: bytes, headers: dict, st: StreamParser, http_error) -> None:
    client = clients.take()
    try:
        async with client.stream("POST", url, content=body, headers=headers) as resp:
            if resp.status_code != 200:
                st.error = http_error(resp.status_code, await resp.aread())
                return
            feed, event = SSEDecoder().feed, st.event
            async for data in resp.aiter_raw():
                t = clock()
                for payload in feed(data):
                    event(t, payload)
    finally:
        clients.give(client)


def describe(e: BaseException, spec: Any) -> str | None:
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
    return None
