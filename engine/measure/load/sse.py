"""Reading an OpenAI-compatible stream: server-sent events out of raw bytes, and each event's JSON as it arrives.
See docs/measuring.md#load-generator."""
from __future__ import annotations

from typing import Any

import msgspec


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



class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    role: Any = msgspec.UNSET  # told apart from null: the preamble is an event that has the key
    tool_calls: Any = None


class _Choice(msgspec.Struct):
    text: str | None = None
    delta: _Delta | None = None
    finish_reason: Any = None


class _Event(msgspec.Struct):
    """The fields of an OpenAI stream event that a measurement reads; the rest (id, model, logprobs, ...) is
    skipped unbuilt, and one a server sends in an unexpected type falls back to the generic reading."""

    choices: list[_Choice] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None
    object: Any = None


_decode_event = msgspec.json.Decoder(_Event).decode


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
        """Interpret one event: a content chunk is kept with its arrival time t. Hot path (one call per token of
        every stream): msgspec decodes only the fields read, into slotted objects, several times faster than
        json.loads building every dict."""
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            ev = _decode_event(payload)
        except msgspec.ValidationError:  # JSON, but not shaped as expected: read it as plain objects
            self._generic(t, payload)
            return
        except msgspec.DecodeError:
            self.error = f"the server sent an event that is not JSON: {payload[:120]!r}"
            return
        if ev.error or ev.object == "error":
            self._generic(t, payload)
            return
        if ev.usage:
            self.usage = ev.usage
        if not ev.choices:
            return
        c = ev.choices[0]
        if self.chat:
            d = c.delta
            if d is None:
                text = ""
            else:
                text = d.content or d.reasoning_content or d.reasoning or ""
                # vLLM's chat preamble {"role": "assistant", "content": ""} carries no token: not a chunk.
                if d.role is not msgspec.UNSET and not text and not d.tool_calls and c.finish_reason is None:
                    return
        else:
            text = c.text or ""
        self.times.append(t)
        self.texts.append(text)

    def _generic(self, t: float, payload: bytes) -> None:
        """An event read as plain JSON objects: an error, or fields in types the typed reading does not take."""
        obj = msgspec.json.decode(payload)
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
        if not choices or not isinstance(choices, list):
            return
        c = choices[0] if isinstance(choices[0], dict) else {}
        if self.chat:
            delta: dict[str, Any] = d if isinstance(d := c.get("delta"), dict) else {}
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
            if "role" in delta and not text and not delta.get("tool_calls") and c.get("finish_reason") is None:
                return
        else:
            text = c.get("text") or ""
        self.times.append(t)
        self.texts.append(text if isinstance(text, str) else str(text))
