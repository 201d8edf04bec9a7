"""The guided lab's presses through Streamlit's AppTest: every step's button, the
agenda, "Next step" from two presenter tabs at once; a step ticked only once its run finished. No vLLM server:
the steps that need one say so, which is how a test sees that the press reached the engine."""
from __future__ import annotations

import dataclasses
import socket
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import guide as g
from engine.serving import models

from .conftest import MODELS, app_settings_now, app_uses, settings_for
from .said import read, shown

APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.fixture
def app_lab(tmp_path, monkeypatch, lab_settings):
    import ui

    app_uses(monkeypatch, settings_for(lab_settings, tmp_path))
    yield ui.get_lab()
    for job in ui.get_lab().jobs.active():
        ui.get_lab().jobs.cancel(job.id)
    ui.get_lab().shutdown()
    ui.get_lab.clear()


def _page(lang: str = "en") -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["lang"] = lang
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _step_button(at: AppTest, sid: str):
    return at.button(key=f"run-{sid}")


def test_every_steps_button_reaches_the_engine_after_the_session_changed_elsewhere(app_lab):
    """What was seen on an H100 through AppTest: the page was drawn, then the session's model changed (the app
    adopted the server of another model; another presenter tab chose one), and the press drew the page again
    with the old choice put back and no run. Each press here follows such a change, and reaches the engine:
    naive starts its job; the steps that need a server, a naive run or a free port say so in one sentence."""
    lab, guide = app_lab, app_lab.guide
    if len(models.catalogue(MODELS)) < 2:
        pytest.skip("needs two prepared models (scripts/setup.sh prepares the embedded and the shape-only one)")
    paths = [m.path for m in models.catalogue(MODELS)]
    taken = socket.socket()  # step 3 meets a port another program holds: a sentence, not a started server
    taken.bind(("127.0.0.1", lab.server_port))
    taken.listen()
    try:
        guide.set_scale(0.1, token=None)
        for sid in g.STEP_IDS[:-1]:
            guide.go_to(sid, token=None)
            at = _page()
            guide.set_model(paths[1] if guide.model_spec().path == paths[0] else paths[0], token=None)  # elsewhere
            chosen = guide.model_spec().path
            _step_button(at, sid).click().run()
            assert not at.exception, (sid, [e.value for e in at.exception])
            assert guide.model_spec().path == chosen, f"{sid}: the press put the page's stale model back"
            if sid == "naive":
                job = lab.latest_job("naive")
                assert job is not None and job.active, "pressing step 1 started no naive run"
                lab.jobs.cancel(job.id)
                deadline = time.time() + 120  # a liveness bound: the worker is stopped
                while lab.latest_job("naive").active and time.time() < deadline:
                    time.sleep(0.2)
            else:
                said = [e.value for e in at.error]
                assert said, f"pressing step {sid} said nothing and did nothing"
                if sid == "free":
                    assert "naive inference" in said[0]
                elif sid == "start":
                    assert str(lab.server_port) in said[0], said
                else:  # the steps that measure a server: none is running
                    assert "start vLLM" in said[0] or "Start the server" in said[0], said
    finally:
        taken.close()


def test_an_agenda_tab_moves_the_presenter_and_a_viewer_who_browses(app_lab, monkeypatch):
    guide = app_lab.guide
    at = _page()
    at.button_group(key="guide_pick").set_value("concurrent").run()
    assert guide.state().current == "concurrent"
    assert at.subheader[0].value.startswith(f"{g.step('concurrent').number}. ")
    at.button_group(key="guide_pick").set_value("free").run()
    assert guide.state().current == "free" and at.subheader[0].value.startswith("2. ")


def test_a_viewer_who_does_not_follow_browses_the_agenda_on_their_own(app_lab, monkeypatch):
    app_uses(monkeypatch, dataclasses.replace(app_settings_now(), presenter_token="secret"))
    import ui

    guide = ui.get_lab().guide
    at = _page("ko")
    at.button_group(key="guide_pick").set_value("streaming").run()
    assert at.subheader[0].value.startswith(f"{g.step('streaming').number}. ")
    assert guide.state().current == "naive"  # the room did not move
    ui.get_lab().shutdown()


def test_next_step_from_two_presenter_tabs_at_once_moves_the_room_one_step(app_lab):
    guide = app_lab.guide
    guide.go_to("free", token=None)
    one, two = _page(), _page()  # both drawn on step 2
    for at in (one, two):
        next(b for b in at.button if b.label == "Next step").click()
    one.run()
    two.run()
    assert guide.state().current == "start", "two presses of Next step on step 2 must land on step 3"
    assert two.subheader[0].value.startswith("3. ")


def test_a_step_is_ticked_only_once_its_run_finished(app_lab):
    """A step under way (a naive run going, a vLLM start asked for and not ready) carries no tick and no
    "Again: …", even when an earlier run of it is saved; the progress line has one total."""
    lab, guide = app_lab, app_lab.guide
    state = guide.state()
    state.facts["start"] = {"asked_at": time.time(), "already": False, "ready_s": None}
    assert not state.done("start"), "a start that was asked for and is not ready yet is not done"
    state.facts["start"]["ready_s"] = 42.0
    assert state.done("start")

    guide._state.runs["naive"] = ["an-earlier-run"]  # done before; now run again
    guide.set_scale(0.1, token=None)
    at = _page()
    assert any(o.startswith("✓ 1 ·") for o in at.button_group(key="guide_pick").options)
    assert _step_button(at, "naive").label.startswith("Again: Run naive inference"), _step_button(at, "naive").label
    _step_button(at, "naive").click().run()
    try:
        assert lab.latest_job("naive").active
        options = at.button_group(key="guide_pick").options
        assert not any(o.startswith("✓ 1 ·") for o in options), options
        assert not _step_button(at, "naive").label.startswith("Again"), _step_button(at, "naive").label
        line = at.get("progress")[0].proto.text
        assert read("{done} of the {steps} steps run", line) == {"done": "0", "steps": "8"}, line
    finally:
        lab.jobs.cancel(lab.latest_job("naive").id)


@pytest.mark.parametrize("scale", g.SCALES)
def test_the_token_budget_is_the_one_in_every_text_label_and_run_name(scale):
    """At a cut budget the texts said the lab's ("with 100 tokens each", "a 300-token answer") while the buttons
    sent 10 or 30, and History named a 30-token run "One streamed 300-token answer"."""
    import re

    from engine.measure.workloads import scenarios
    from engine.messages import translate

    for s in g.STEPS:
        tokens = g.tokens_for(s, scale)
        if tokens is None:
            continue
        name = scenarios.get(s.scenario).load_spec(max_tokens=tokens).label if s.scenario != "naive-5" else \
            scenarios.get("naive-5").naive_spec("m", max_new_tokens=tokens).label
        for lang in ("en", "ko"):
            said = [translate(s.told(t, scale), lang) for t in (s.narrative, s.more, s.notice)]
            said.append(translate(name, lang))
            for text in said:
                counts = {int(n) for n in re.findall(r"(\d+)[ -]?(?:tokens|token|토큰)", text)}
                counts.discard(150 if s.id == "tuning" else -1)  # the notebook's own run it compared against
                if s.id == "tuning":
                    counts.discard(100) if "sent 100 tokens" in text or "100 토큰을 보내" in text else None
                assert counts <= {tokens}, (s.id, scale, lang, text)
            assert str(tokens) in translate(name, lang), (s.id, name)


def test_viewers_are_told_what_is_true_for_them(app_lab, monkeypatch):
    """A viewer cannot press the step's button nor start a server: "press the button on the left" and "start the
    server on the Server page" were said to them."""
    app_uses(monkeypatch, dataclasses.replace(app_settings_now(), presenter_token="secret"))
    import ui

    try:
        at = _page()
        infos = [i.value for i in at.info]
        assert shown("Not run yet: the presenter runs this step, and its result appears here.", infos) == [{}], infos
        assert not any("press the button" in i for i in infos), infos
        at.switch_page("app_pages/chat.py").run()
        infos = [i.value for i in at.info]
        assert shown("No vLLM server is running: chat opens once the presenter starts one.", infos) == [{}], infos
        assert not any("Server page" in i for i in infos), infos
        at.switch_page("app_pages/load.py").run()
        infos = [i.value for i in at.info]
        assert shown("No load test yet: the presenter runs it, and its result appears here.", infos) == [{}], infos
        assert not any("Server page" in i or "Press" in i for i in infos), infos
        at.switch_page("app_pages/history.py").run()  # seen at 1920x1080: told to run a load test or import
        infos = [i.value for i in at.info]
        assert shown("No runs yet: each run the presenter measures appears here the moment it ends.", infos) == [
            {}], infos
        assert not any("run a load test" in i for i in infos), infos
    finally:
        ui.get_lab().shutdown()


def test_the_sidebars_server_state_is_never_older_than_the_page(app_lab, monkeypatch):
    """The server dies while the page draws (the guided lab reads its session: a step's run came back failed):
    the sidebar, drawn before the page, still said "ready" above the result. It is drawn after it now."""
    import dataclasses

    from engine.guide.session import Guide
    from engine.lab import Lab
    from engine.serving.states import FAILED, READY

    died = []
    real_snapshot, real_state = Lab.server_snapshot, Guide.state
    monkeypatch.setattr(Lab, "server_snapshot", lambda self: dataclasses.replace(
        real_snapshot(self), state=FAILED if died else READY))
    at = _page()  # drawn with the server ready
    assert any("ready" in m.value for m in at.sidebar.markdown)

    def state_then_die(self):
        died.append(True)  # the page's own reading comes after the server's death
        return real_state(self)

    monkeypatch.setattr(Guide, "state", state_then_die)
    at.run()
    badges = [m.value for m in at.sidebar.markdown if "badge[" in m.value]
    assert badges and all("failed" in b for b in badges), badges


def test_a_timed_redraw_carrying_the_agenda_of_the_step_before_does_not_move_the_room_back(app_lab, monkeypatch):
    """A presenter's browser sends the page's timed redraws (its watcher fragment) with every widget's value as it
    holds them. One sent before the presenter's move reached the browser still carries the agenda on the step before;
    Streamlit calls the agenda's callback for that change, and the room went back a step (a follower in the full
    suite read 'step 1 of 9' after the presenter's Next). A click on the agenda is never a fragment's rerun."""
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
    from streamlit.testing.v1 import local_script_runner

    guide = app_lab.guide
    at = _page()
    assert guide.state().current == "naive"
    stale = at._tree.get_widget_states()  # what the browser holds while the move is on its way
    watchers = list(at._fragment_storage._fragments)
    assert watchers, "the page draws a timed watcher"
    next(b for b in at.button if b.label == "Next step").click().run()
    assert guide.state().current == "free"

    monkeypatch.setattr(local_script_runner, "RerunData",
                        lambda **kw: RerunData(**kw, fragment_id=watchers[-1], is_auto_rerun=True))
    at._run(widget_state=stale)
    assert guide.state().current == "free", "the redraw moved the room back"
    monkeypatch.undo()
    at.run()
    assert guide.state().current == "free" and at.subheader[0].value.startswith("2. ")
