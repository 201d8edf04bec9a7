"""Chat: one streamed answer through the `openai` SDK, timed into a RequestRecord as a load test's are (the Lab's
chat desk, engine.chat_desk, decides who may send what, and when)."""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Iterator

from engine.errors import LabError
from engine.measure.load.spec import request_deadline_s
from engine.messages import say
from engine.results.records import RequestRecord

if TYPE_CHECKING:
    import openai


def stream_chat(base_url: str, model: str, messages: list[dict], record: RequestRecord, max_tokens: int = 300,
                temperature: float = 0.7, api_key: str | None = None, stop: threading.Event | None = None,
                read_timeout_s: float = 60) -> Iterator[str]:
    """Yield the answer's text as it arrives, filling `record` (send at 0; first token, every chunk and
    the end in seconds after it; tokens from the server's usage). A stop event ends it early; the whole
    answer has the load test's deadline (request_deadline_s: a server that streams without end is cut
    off there, in one sentence), each silence `read_timeout_s`."""
    import openai  # here: its import (~3.5 s of CPU) would be paid by every process that imports the Lab

    client = openai.OpenAI(base_url=base_url.rstrip("/").removesuffix("/v1") + "/v1", api_key=api_key or "EMPTY",
                           timeout=openai.Timeout(read_timeout_s, connect=5.0), max_retries=0)
    deadline = request_deadline_s(max_tokens)
    t0 = time.perf_counter()
    try:
        stream = client.chat.completions.create(
            model=model, messages=messages, max_tokens=max_tokens, temperature=temperature, stream=True,
            stream_options={"include_usage": True})  # type: ignore[call-overload]
        # (ignored: `messages` are the pages' {role, content} dicts, which the chat desk admits; the SDK types
        # each role's message as its own TypedDict with a literal role)
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
