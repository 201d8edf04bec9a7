"""Chat: one streamed answer through the `openai` SDK, timed into a RequestRecord as a load test's are, and
the chat desk's policy (how much a viewer may send, and when) with its record of the chats beside each run."""
from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Callable, Iterator

import openai

from engine.errors import LabError
from engine.measure.load.spec import request_deadline_s
from engine.measure.workloads.prompts import LAB_STREAM
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


class ChatDesk:
    """Who may chat how much, and when, for the Lab (which checks who is the presenter): a viewer's message
    within ChatLimits, waiting while a benchmark measures, since chat traffic would distort the numbers the
    room is watching, unless the presenter allows chat under load; and when each answer streamed, so that a
    run with chat traffic beside it is marked (`beside`)."""

    example = LAB_STREAM  # the lab's streamed question

    def __init__(self, measuring: Callable[[], object | None], limits: ChatLimits | None = None) -> None:
        self.rate = ChatRate(limits)
        self.under_load = False  # viewers may chat while a benchmark measures (the presenter's choice)
        self._measuring = measuring  # the benchmark running now, if any
        self._spans: deque[list] = deque(maxlen=1000)  # [start, end or None] epoch s of recent chat answers
        self._lock = threading.Lock()

    @property
    def limits(self) -> ChatLimits:
        return self.rate.limits

    @staticmethod
    def record(prompt: str) -> RequestRecord:
        """An empty record for one chat answer; send() fills in its timings."""
        return RequestRecord(index=0, prompt=prompt, send_time=0.0)

    def admit(self, caller: str | None, messages: list[dict], max_tokens: int) -> None:
        """A viewer's message within the limits, counted; ChatRefused with the sentence otherwise."""
        self.rate.admit(caller or "anonymous", messages, max_tokens)

    def send(self, target, messages: list[dict], record: RequestRecord, *, wait: bool, max_tokens: int,
             temperature: float, stop: threading.Event | None = None,
             on_wait: Callable[[str], None] | None = None) -> Iterator[str]:
        """Stream the answer from `target` (an engine.runs.Target) into `record`; with `wait` (a viewer's
        message) not while a benchmark measures, unless chat under load is allowed: on_wait says why."""
        while wait and not self.under_load and (job := self._measuring()) is not None:
            if on_wait is not None:
                on_wait(say("'{label}' is measuring: your message is sent the moment it ends.", label=job.label))
            if (stop.wait(0.5) if stop is not None else time.sleep(0.5)):
                return
        span = [time.time(), None]
        with self._lock:
            self._spans.append(span)
        try:
            yield from stream_chat(target.base_url, target.model, messages, record, max_tokens=max_tokens,
                                   temperature=temperature, api_key=target.api_key, stop=stop)
        finally:
            span[1] = time.time()

    def beside(self, start: float, end: float) -> int:
        """How many chat answers streamed between `start` and `end` (epoch s)."""
        with self._lock:
            return sum(1 for s, e in self._spans if s <= end and (e is None or e >= start))


def stream_chat(base_url: str, model: str, messages: list[dict], record: RequestRecord, max_tokens: int = 300,
                temperature: float = 0.7, api_key: str | None = None, stop: threading.Event | None = None,
                read_timeout_s: float = 60) -> Iterator[str]:
    """Yield the answer's text as it arrives, filling `record` (send at 0; first token, every chunk and
    the end in seconds after it; tokens from the server's usage). A stop event ends it early; the whole
    answer has the load test's deadline (request_deadline_s: a server that streams without end is cut
    off there, in one sentence), each silence `read_timeout_s`."""
    client = openai.OpenAI(base_url=base_url.rstrip("/").removesuffix("/v1") + "/v1", api_key=api_key or "EMPTY",
                           timeout=openai.Timeout(read_timeout_s, connect=5.0), max_retries=0)
    deadline = request_deadline_s(max_tokens)
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
                if time.perf_counter() - t0 > deadline:
                    record.error = say("The answer had not ended after {s:.0f} s, its deadline (30 s, plus 0.5 s for "
                                       "each of its up to {n} tokens), so it was cut off there: the server kept "
                                       "sending without finishing; check it on the Server page.", s=deadline,
                                       n=max_tokens)
                    raise LabError(record.error)
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
