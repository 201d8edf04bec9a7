"""One streamed chat answer for the Chat page: yields text as it arrives and records, as it goes, the
timings the page shows (TTFT, tokens, tok/s, every chunk's arrival). Uses the load generator's SSE
parser, so it splits events exactly the same way."""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Iterator

import httpx

from .errors import LabError
from .loadgen import SSEDecoder, StreamParser
from .records import RequestRecord, RunResult


@dataclass
class ChatTiming:
    sent_at: float = field(default_factory=time.perf_counter)
    first_at: float | None = None
    chunk_times: list[float] = field(default_factory=list)  # s since send
    end_at: float | None = None
    output_tokens: int | None = None  # from the server's usage
    prompt_tokens: int | None = None
    stopped: bool = False
    error: str | None = None

    @property
    def ttft(self) -> float | None:
        return None if self.first_at is None else self.first_at - self.sent_at

    @property
    def total(self) -> float | None:
        return None if self.end_at is None else self.end_at - self.sent_at

    @property
    def tokens(self) -> int:
        return self.output_tokens if self.output_tokens is not None else len(self.chunk_times)

    @property
    def tok_per_s(self) -> float | None:
        """Decode speed after the first token, as the lab prints it."""
        if self.ttft is None or self.total is None or self.total <= self.ttft or self.tokens < 2:
            return None
        return (self.tokens - 1) / (self.total - self.ttft)

    def as_run(self, prompt: str, text: str, model: str, placeholder: bool = False) -> RunResult:
        """The answer as a one-request run, so figures.token_timeline draws it like any other."""
        rec = RequestRecord(index=0, prompt=prompt, send_time=0.0, end_time=self.total,
                            first_token_time=self.ttft, chunk_times=list(self.chunk_times),
                            prompt_tokens=self.prompt_tokens or 0, output_tokens=self.tokens,
                            output_text=text, error=self.error)
        return RunResult(kind="vllm", scenario="chat", label="Chat answer", records=[rec],
                         duration=self.total or 0.0, started_at=time.time(), model=model,
                         extra={"placeholder_text": placeholder})


def stream_chat(base_url: str, model: str, messages: list[dict], timing: ChatTiming, max_tokens: int = 300,
                temperature: float = 0.7, api_key: str | None = None, stop: threading.Event | None = None,
                timeout_s: float = 120) -> Iterator[str]:
    """Yield the answer's text chunks; fill `timing` as they arrive. A stop event ends it early."""
    body = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature,
            "stream": True, "stream_options": {"include_usage": True}}
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    dec, st = SSEDecoder(), StreamParser(chat=True)
    timing.sent_at = time.perf_counter()
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout_s, connect=5)) as client:
            with client.stream("POST", base_url.rstrip("/") + "/v1/chat/completions", content=json.dumps(body),
                               headers={"Content-Type": "application/json", **headers}) as r:
                if r.status_code != 200:
                    detail = r.read().decode("utf-8", "replace")[:300]
                    raise LabError(f"The server refused the chat request (HTTP {r.status_code}: {detail}).")
                for data in r.iter_raw():
                    now = time.perf_counter()
                    for payload in dec.feed(data):
                        text = st.event(now, payload)
                        if text is None:
                            continue
                        if timing.first_at is None:
                            timing.first_at = now
                        timing.chunk_times.append(now - timing.sent_at)
                        if text:
                            yield text
                    if st.error:
                        raise LabError(f"The answer broke off: {st.error}.")
                    if stop is not None and stop.is_set():
                        timing.stopped = True
                        break
    except httpx.HTTPError as e:
        timing.error = f"The server did not answer ({type(e).__name__}): is it still running? See the Server page."
        raise LabError(timing.error) from e
    finally:
        timing.end_at = time.perf_counter()
        if st.usage:
            timing.output_tokens = st.usage.get("completion_tokens")
            timing.prompt_tokens = st.usage.get("prompt_tokens")
