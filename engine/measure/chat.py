"""One streamed chat answer, sent through the `openai` SDK as the lab's own code does, timed into the
same RequestRecord a load test fills (times in seconds from the send), so the token-arrival chart and
the stats read it like any other request.

Who may chat, how much, and when is decided by the Lab (ChatLimits below); this module only talks."""
from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Iterator

import openai

from engine.errors import LabError
from engine.messages import say
from engine.results.records import RequestRecord


class ChatRefused(LabError):
    """A viewer's chat message was not sent (too long, too many, or a benchmark is measuring)."""


@dataclass(frozen=True)
class ChatLimits:
    """What a viewer (not the presenter) may send: a room of attendees shares one server."""

    max_prompt_chars: int = 2000  # the new message
    max_context_chars: int = 12000  # the whole conversation sent with it
    max_tokens: int = 512
    per_minute: int = 6

    def admit(self, recent: deque[float], messages: list[dict], max_tokens: int, now: float) -> None:
        """Raise ChatRefused with the sentence a viewer reads; on success count this message."""
        new = len(messages[-1].get("content") or "") if messages else 0
        if new > self.max_prompt_chars:
            raise ChatRefused(say("Your message is {n:,} characters; viewers may send up to "
                                  "{limit:,}: shorten it and send again.", n=new, limit=self.max_prompt_chars))
        if sum(len(m.get("content") or "") for m in messages) > self.max_context_chars:
            raise ChatRefused(say("This conversation has grown too long for a viewer's chat: press "
                                  "'Clear conversation' and start a new one."))
        if max_tokens > self.max_tokens:
            raise ChatRefused(say("Viewers may ask for up to {limit} tokens per answer: lower Max tokens.",
                                  limit=self.max_tokens))
        while recent and now - recent[0] > 60:
            recent.popleft()
        if len(recent) >= self.per_minute:
            raise ChatRefused(say("Viewers may send {limit} messages a minute: wait {s} s and send again.",
                                  limit=self.per_minute, s=max(1, round(60 - (now - recent[0])))))
        recent.append(now)


class ChatRate:
    """Recent messages per caller (thread-safe), for ChatLimits.admit."""

    def __init__(self, limits: ChatLimits | None = None) -> None:
        self.limits = limits or ChatLimits()
        self._recent: dict[str, deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    def admit(self, caller: str, messages: list[dict], max_tokens: int) -> None:
        with self._lock:
            self.limits.admit(self._recent[caller], messages, max_tokens, time.monotonic())


def stream_chat(base_url: str, model: str, messages: list[dict], record: RequestRecord, max_tokens: int = 300,
                temperature: float = 0.7, api_key: str | None = None, stop: threading.Event | None = None,
                timeout_s: float = 120) -> Iterator[str]:
    """Yield the answer's text as it arrives, filling `record` (send at 0; first token, every chunk and
    the end in seconds after it; tokens from the server's usage). A stop event ends it early."""
    client = openai.OpenAI(base_url=base_url.rstrip("/").removesuffix("/v1") + "/v1", api_key=api_key or "EMPTY",
                           timeout=openai.Timeout(timeout_s, connect=5.0), max_retries=0)
    t0 = time.perf_counter()
    try:
        stream = client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=temperature, stream=True,
            stream_options={"include_usage": True})
        with stream:
            for chunk in stream:
                if chunk.usage:
                    record.prompt_tokens = chunk.usage.prompt_tokens
                    record.output_tokens = chunk.usage.completion_tokens
                text = chunk.choices[0].delta.content if chunk.choices else None
                if text:
                    now = time.perf_counter() - t0
                    if record.first_token_time is None:
                        record.first_token_time = now
                    record.chunk_times.append(now)
                    record.output_text += text
                    yield text
                if stop is not None and stop.is_set():
                    break
    except openai.APIStatusError as e:
        record.error = say("The server refused the chat request (HTTP {code}: {detail}).", code=e.status_code,
                           detail=_detail(e))
        raise LabError(record.error) from None
    except openai.APIError as e:
        record.error = say("The server did not answer ({kind}): is it still running? See the Server page.",
                           kind=type(e).__name__)
        raise LabError(record.error) from None
    finally:
        record.end_time = time.perf_counter() - t0
        if not record.output_tokens:  # stopped before the server's usage arrived: one chunk is one token
            record.output_tokens, record.tokens_source = len(record.chunk_times), "chunks"


def _detail(e: openai.APIStatusError) -> str:
    """vLLM's own words: {"message": ...}, or {"error": {"message": ...}} in newer servers."""
    body = e.body if isinstance(e.body, dict) else {}
    inner = body.get("error")
    msg = body.get("message") or (inner.get("message") if isinstance(inner, dict) else None)
    return str(msg or e.message)[:300]
