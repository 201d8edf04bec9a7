"""The chat desk the Lab keeps for the room: how much a viewer may send, and when (not while a benchmark measures),
with its record of the chats beside each run. The answer itself streams through measure.load.chat."""
from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from engine.errors import LabError
from engine.measure.load.chat import stream_chat
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

    def __init__(self, measuring: Callable[[], Any], limits: ChatLimits | None = None) -> None:
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
            if stop is None:
                time.sleep(0.5)
            elif stop.wait(0.5):
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
