"""The chat desk (engine.chat_desk.ChatDesk): a viewer's message waits while a benchmark measures and
is never sent if the viewer gives up; an answer that streamed beside a run is counted for that run only."""
from __future__ import annotations

import socket
import threading
import time
from types import SimpleNamespace

import pytest

from engine.chat_desk import ChatDesk
from tests.said import values

HELLO = [{"role": "user", "content": "Say hi."}]


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_a_viewers_message_waits_while_a_benchmark_measures_and_giving_up_sends_nothing():
    desk = ChatDesk(measuring=lambda: SimpleNamespace(label="sweep 1…4"))
    target = SimpleNamespace(base_url=_dead_url(), model="m", api_key=None)  # sending would fail at once
    stop, said = threading.Event(), []

    def on_wait(sentence: str) -> None:
        said.append(sentence)
        stop.set()  # the viewer closes the page while waiting

    record = desk.record("Say hi.")
    assert list(desk.send(target, HELLO, record, wait=True, max_tokens=8, temperature=0.0, stop=stop,
                          on_wait=on_wait)) == []
    assert [values(s) for s in said] == [{"label": "sweep 1…4"}]  # which run it waits for
    assert record.error is None and desk.beside(0, time.time() + 60) == 0


@pytest.mark.server
def test_an_answer_beside_a_run_is_counted_for_that_run_and_not_for_a_later_one(vllm_server):
    from engine.runs import Target

    desk = ChatDesk(measuring=lambda: SimpleNamespace(label="load"))
    desk.under_load = True  # the presenter allowed chat under load: the viewer's message goes at once
    record = desk.record("Say hi.")
    begun = time.time()
    text = "".join(desk.send(Target.at(vllm_server.base_url), HELLO, record, wait=True, max_tokens=8,
                             temperature=0.0))
    ended = time.time()
    assert text and record.error is None
    assert desk.beside(begun - 1, ended + 1) == 1  # a run around it
    assert desk.beside(ended + 1, ended + 60) == 0  # a run that began after it ended
