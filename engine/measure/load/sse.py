"""Reading an OpenAI-compatible stream: server-sent events out of raw bytes, and each event's JSON as it arrives.
See docs/measuring.md#load-generator."""
from __future__ import annotations

import json
from typing import Any


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


def _event_data(event: bytes) -> bytes | None:
    if event.startswith(b"data: ") and b"\n" not in event:  # the common case, one data line
        return event[6:]
    parts = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            v = line[5:]
            parts.append(v[1:] if v.startswith(b" ") else v)
    return b"\n".join(parts) if parts else None



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

    def event(self, t: float, payload: bytes) -> None:
        """Interpret one event: a content chunk is kept with its arrival time t."""
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            self.error = f"the server sent an event that is not JSON: {payload[:120]!r}"
            return
        if not isinstance(obj, dict):
            return
        if obj.get("error") or obj.get("object") == "error":
            err = obj.get("error", obj)
            self.error = "the server reported an error mid-stream: " + str(
                err.get("message", err) if isinstance(err, dict) else err)
            return
        if obj.get("usage"):
            self.usage = obj["usage"]
        choices = obj.get("choices")
        if not choices:
            return
        c = choices[0]
        if self.chat:
            delta = c.get("delta") or {}
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
            # vLLM's chat preamble {"role": "assistant", "content": ""} carries no token: not a chunk.
            if "role" in delta and not text and not delta.get("tool_calls") and c.get("finish_reason") is None:
                return
        else:
            text = c.get("text") or ""
        self.times.append(t)
        self.texts.append(text)
