"""Reading one stream's events (engine/measure/load/sse.py): what counts as a token chunk, its text, the usage, the
end and the errors, from the events vLLM and other OpenAI-style servers send."""
from __future__ import annotations

import json

import pytest

from engine.measure.load.sse import StreamParser


def _read(events: list, chat: bool = True) -> StreamParser:
    st = StreamParser(chat)
    for i, e in enumerate(events):
        st.event(float(i), e if isinstance(e, bytes) else json.dumps(e).encode())
    return st


def test_a_chat_stream_keeps_each_content_chunk_with_its_time_and_not_the_role_preamble():
    st = _read([
        {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"role": "assistant",
                                                                                          "content": ""}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"content": "Hel"}, "logprobs": None, "finish_reason": None}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"reasoning_content": "think"}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"reasoning": "more"}}]},
        {"id": "c", "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "stop"}]},
        {"id": "c", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4}},
        b"[DONE]",
    ])
    assert st.times == [1.0, 2.0, 3.0, 4.0] and st.texts == ["Hel", "think", "more", ""]
    assert st.usage == {"prompt_tokens": 5, "completion_tokens": 4} and st.done and st.error is None


def test_a_role_chunk_that_carries_text_or_ends_the_answer_is_a_chunk():
    st = _read([{"choices": [{"delta": {"role": "assistant", "content": "Hi"}}]},
                {"choices": [{"delta": {"role": "assistant"}, "finish_reason": "length"}]},
                {"choices": [{"delta": {"role": None}}]}])  # a role given as null is still the preamble's key
    assert st.texts == ["Hi", ""] and st.times == [0.0, 1.0]


def test_a_completions_stream_reads_each_choice_text():
    st = _read([{"object": "text_completion", "choices": [{"index": 0, "text": " a", "logprobs": None,
                                                           "finish_reason": None, "stop_reason": None}]},
                {"choices": [{"text": None}]}, b"[DONE]"], chat=False)
    assert st.texts == [" a", ""] and st.done


@pytest.mark.parametrize("event, said", [
    ({"object": "error", "message": "out of blocks", "type": "InternalServerError"}, "out of blocks"),
    ({"error": {"message": "overloaded", "code": 503}}, "overloaded"),
    ({"error": "plain words"}, "plain words"),
])
def test_an_error_event_is_the_servers_sentence(event, said):
    st = _read([{"choices": [{"delta": {"content": "a"}}]}, event])
    assert st.error == f"the server reported an error mid-stream: {said}" and st.texts == ["a"]


def test_an_event_that_is_not_json_is_said_with_its_first_bytes():
    st = _read([b"<html>busy</html>"])
    assert st.error == "the server sent an event that is not JSON: b'<html>busy</html>'" and not st.times


def test_fields_in_unexpected_types_are_read_as_plain_json():
    st = _read([{"choices": [{"delta": {"content": "x", "role": 7}, "finish_reason": 0}], "usage": None},
                {"choices": "none"}, [1, 2], 5], chat=True)
    assert st.texts == ["x"] and st.error is None
    st = _read([{"choices": [{"text": 12}]}], chat=False)  # a completions text that is a number: said as text
    assert st.texts == ["12"]
