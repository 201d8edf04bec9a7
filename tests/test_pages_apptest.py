"""Smoke tests of every page with Streamlit's AppTest (no browser, no server running).

The app is driven through app.py and `switch_page`, exactly as `streamlit run` routes it. The run
history goes to this module's own SQLite file ($SERVING_LAB_DB), server records to the session's
temporary runtime dir (conftest's isolated_home); the converted models stay shared
($SERVING_LAB_MODELS). ui.get_lab() is a process-wide st.cache_resource: one Lab (with its telemetry
thread) serves every AppTest in this module and is shut down at the end.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.measure.workloads import scenarios
from tests.conftest import MODELS, app_settings_now, app_speaks, apps_lab, settings_for
from tests.said import read, reads, shown, values

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PAGES = {
    "app_pages/server.py": "vLLM server",
    "app_pages/monitor.py": "Monitor",
    "app_pages/naive_vs_vllm.py": "Naive vs vLLM",
    "app_pages/load.py": "Load test",  # served at /load_test
    "app_pages/tuning.py": "Tuning",
    "app_pages/chat.py": "Chat",
    "app_pages/room.py": "The room",
    "app_pages/history.py": "History",
}


@pytest.fixture(scope="module", autouse=True)
def isolated_lab(tmp_path_factory, lab_settings):
    """The app's Lab on a history of this module's and a free vLLM port (no record there, so the server is
    'stopped'), built with these settings when the first page asks for it."""
    d = tmp_path_factory.mktemp("apptest")
    with apps_lab(settings_for(lab_settings, d)):
        yield d


def _app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def _page(path: str) -> AppTest:
    at = _app()
    at.switch_page(path).run()  # the guided lab is the default page
    assert not at.exception, [e.value for e in at.exception]
    return at


def _command(at: AppTest) -> str:
    cmds = [c.value for c in at.code if "vllm.entrypoints.openai.api_server" in c.value]
    assert cmds, f"no command line among {[c.value[:60] for c in at.code]}"
    return cmds[0]


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


@pytest.mark.parametrize("path", list(PAGES))
def test_page_renders_with_server_stopped(path):
    at = _page(path)
    assert [t.value for t in at.title] == [PAGES[path]]
    assert not _errors(at), _errors(at)


def test_the_pages_timed_watcher_has_one_place_on_every_page(monkeypatch):
    """A timed fragment's run re-sends its container at the place it was first drawn. On a page change the browser
    keeps only what was drawn before the page, so a watcher below the page whose run was in flight during a switch
    landed past the new page's end ("Bad delta path index") and the app went blank: a follower taken to the
    presenter's step, in CI. Its place is therefore the same on every page, drawn before the page."""
    from streamlit.testing.v1 import local_script_runner

    sent: list = []
    real = local_script_runner.LocalScriptRunner.forward_msgs

    def recorded(self):
        msgs = real(self)
        sent.extend(msgs)
        return msgs

    monkeypatch.setattr(local_script_runner.LocalScriptRunner, "forward_msgs", recorded)
    places = {}
    at = _app()  # the guided lab
    for path in ["app_pages/guide.py", *PAGES]:
        sent.clear()  # this page's run only: the browser it switched from keeps its watcher's run in flight
        at.switch_page(path).run()
        assert not at.exception, [e.value for e in at.exception]
        fragments = [tuple(m.metadata.delta_path) for m in sent
                     if m.HasField("delta") and m.delta.fragment_id]
        assert fragments, f"{path} drew no timed watcher"
        places[path] = min(fragments, key=len)  # the fragment's own container
    assert len(set(places.values())) == 1, places


def test_server_page_command_line_and_status():
    at = _page("app_pages/server.py")
    cmd = _command(at)
    assert "--max-model-len 2048" in cmd
    assert "--host 127.0.0.1" in cmd
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["State"] == "stopped"
    assert metrics["Stage"] == "–"
    # The sidebar's status fragment says so too. (AppTest drops a fragment's output on a second run of
    # the same session, so this is checked only on a first run.)
    assert any("stopped" in m.value for m in at.sidebar.markdown), [m.value for m in at.sidebar.markdown]
    buttons = {b.label: b for b in at.button}
    assert not buttons["Start"].disabled
    assert buttons["Stop"].disabled and buttons["Restart"].disabled


def test_tuning_preset_sets_max_model_len():
    at = _page("app_pages/server.py")
    at.button(key="preset-Tuning").click().run()
    assert not at.exception
    assert at.select_slider(key="cfg_max_model_len").value == 512
    assert "--max-model-len 512" in _command(at)
    at.button(key="preset-Lab default").click().run()
    assert "--max-model-len 2048" in _command(at)


def test_slider_and_toggle_reach_the_command_line():
    at = _page("app_pages/server.py")
    at.select_slider(key="cfg_max_model_len").set_value(1024).run()
    at.toggle(key="cfg_enforce_eager").set_value(True).run()
    cmd = _command(at)
    assert "--max-model-len 1024" in cmd and "--enforce-eager" in cmd


def test_bad_extra_flag_quoting_shows_one_error_sentence():
    at = _page("app_pages/server.py")
    at.text_input(key="cfg_extra").input('--foo "unclosed').run()
    assert not at.exception
    errors = _errors(at)
    assert len(errors) == 1 and "check the quotes" in errors[0], errors
    assert not any("vllm.entrypoints" in c.value for c in at.code), "no command line for a broken config"
    assert {b.label: b for b in at.button}["Start"].disabled
    # Fixing the quotes brings the command back, with the flag in it.
    at.text_input(key="cfg_extra").input('--seed "0"').run()
    assert not _errors(at)
    assert "--seed 0" in _command(at)


def test_missing_local_model_folder_is_a_sentence_not_a_traceback(tmp_path):
    at = _page("app_pages/server.py")
    at.radio(key="model_kind").set_value("local").run()
    folder = next(t for t in at.text_input if t.label == "Folder")
    folder.input(str(tmp_path / "nope")).run()
    assert not at.exception
    errors = _errors(at)
    assert errors and "does not exist" in errors[0], errors


def test_chat_is_disabled_while_the_server_is_stopped():
    at = _page("app_pages/chat.py")
    assert at.chat_input[0].disabled
    assert any("Start the server" in i.value for i in at.info)


def test_load_test_page_without_a_server_says_what_to_do():
    at = _page("app_pages/load.py")
    assert any("Run load test" in i.value for i in at.info)
    # Pressing Run without a server is an st.error sentence, not a traceback.
    next(b for b in at.button if b.label == "Run load test").click().run()
    assert not at.exception
    errors = _errors(at)
    assert errors and "Server page" in errors[0], errors


def test_history_lists_a_saved_run():
    import ui
    from engine.measure.judge import stats
    from engine.results.records import RequestRecord, RunResult

    recs = [RequestRecord(index=i, prompt=f"p{i}", send_time=0.0, first_token_time=0.1 + i / 100,
                          chunk_times=[0.1 + i / 100, 0.2 + i / 100], end_time=0.3 + i / 100,
                          prompt_tokens=5, output_tokens=2) for i in range(3)]
    run = RunResult(kind="vllm", scenario="concurrent-3", label="apptest run", records=recs, duration=0.4,
                    started_at=time.time(), model="/m/SmolLM2", summary=stats.summarize(recs, 0.4))
    ui.get_lab().store.save(run)
    try:
        at = _page("app_pages/history.py")
        assert not at.info or not any("No runs yet" in i.value for i in at.info)
        df = at.dataframe[0].value
        assert "apptest run" in list(df["run"])
        labels = [b.label for b in at.get("download_button")]
        assert any(label.startswith("Export JSON") for label in labels), labels
    finally:
        ui.get_lab().store.delete([run.id])


def test_naive_vs_vllm_holds_each_run_to_its_memory_bandwidth_ceiling():
    """Each stored run's decode speed is said against what its hardware's memory bandwidth allows, from
    the bandwidth and model size stored with it, with the bars of measured against ceiling."""
    import ui
    from engine.measure.judge import stats
    from engine.results.records import ModelSize, Notes, RequestRecord, RunResult

    h200 = {"gpus": [{"index": 0, "name": "NVIDIA H200",
                      "memory_bandwidth": {"gb_s": 4800.0, "source": "table", "reference": "H200"}}],
            "naive_device": {"type": "cuda", "nvml_index": 0}}
    runs = []
    for kind, scenario, tok_s in (("naive", "naive-5-sequential", 41.0), ("vllm", "vllm-5-sequential", 198.0)):
        chunks = [0.05 + k / tok_s for k in range(100)]
        recs = [RequestRecord(index=0, prompt="p", send_time=0.0, first_token_time=0.05, chunk_times=chunks,
                              end_time=chunks[-1], prompt_tokens=30, output_tokens=100)]
        runs.append(RunResult(kind=kind, scenario=scenario, label=f"apptest {kind}", records=recs,
                              duration=chunks[-1], started_at=time.time(), model="llama3", config={"device": "cuda"},
                              hardware=h200, summary=stats.summarize(recs, chunks[-1]),
                              extra=Notes(model_size=ModelSize(weights=16_060_522_496, kv_per_token=131_072))))
        ui.get_lab().store.save(runs[-1])
    try:
        at = _page("app_pages/naive_vs_vllm.py")
        # said once, in the ceiling chart's caption (not a sentence per run repeating the same reasoning)
        said = [m.value.replace("\\", "") for m in at.markdown if "fastest any software could decode" in m.value]
        assert len(said) == 1 and "apptest naive 14%" in said[0] and "apptest vllm 66%" in said[0], said
        assert not [m.value for m in at.markdown if "of the ceiling" in m.value]
    finally:
        ui.get_lab().store.delete([r.id for r in runs])


def test_tuning_shows_the_last_prefix_cache_comparison_with_its_sentence():
    """The Tuning page draws the newest saved prefix-caching pair (on, off) and says what to notice."""
    import ui
    from engine.measure.judge import prefix
    from engine.results.records import RequestRecord, RunResult

    runs = []
    for k, (on, ttfts, cached) in enumerate(((True, [0.9, 0.1, 0.12], [0, 1280, 1280]),
                                             (False, [0.9, 0.8, 0.84], [0, 0, 0]))):
        recs = [RequestRecord(index=i, prompt=f"q{i}", send_time=2.0 * i, first_token_time=2.0 * i + t,
                              chunk_times=[2.0 * i + t], end_time=2.0 * i + t + 0.3, prompt_tokens=1300,
                              output_tokens=4, cached_tokens=c) for i, (t, c) in enumerate(zip(ttfts, cached))]
        runs.append(RunResult(kind="vllm", scenario="prefix-cache", label=f"prefix caching {'on' if on else 'off'}",
                              records=recs, duration=6, started_at=time.time() + k,
                              config={"enable_prefix_caching": on}))
        ui.get_lab().store.save(runs[-1])
    try:
        at = _page("app_pages/tuning.py")
        said = [m.value.replace("\\", "") for m in at.markdown if "came from the cache" in m.value]
        sentence = prefix.sentence(*runs)  # on, off: what the page must say of them
        assert said and str(sentence) in said[0], said
        # a fall said only beyond the noise of the questions after the first, with its interval
        assert "fell" in sentence.template and "interval" in values(sentence)
        assert {k: round(values(sentence)[k]) for k in ("off", "on", "cached", "prompt")} == {
            "off": 820, "on": 110, "cached": 2560, "prompt": 3900}
    finally:
        ui.get_lab().store.delete([r.id for r in runs])


def test_start_on_a_busy_port_keeps_the_error_sentence():
    """Start runs, fails with PortInUse, the page redraws: the sentence survives, nothing was started."""
    import socket as _socket

    import ui

    lab = ui.get_lab()
    with _socket.socket() as busy:
        try:
            busy.bind(("127.0.0.1", lab.server.port))
            busy.listen()
        except OSError:
            pass  # already taken by another program: just as good
        at = _page("app_pages/server.py")
        next(b for b in at.button if b.label == "Start").click().run()
        assert not at.exception
        errors = _errors(at)
        assert len(errors) == 1 and "already in use" in errors[0], errors
    assert lab.server.snapshot().state == "stopped"
    assert {m.label: m.value for m in at.metric}["State"] == "stopped"


def test_load_test_shows_only_the_controls_its_arrival_uses():
    at = _page("app_pages/load.py")
    labels = lambda: {w.label for w in [*at.slider, *at.number_input]}  # noqa: E731
    assert "Requests in flight" not in labels() and "Rate (requests/s)" not in labels()  # all at once
    at.radio(key="load_arrival").set_value("Keep N in flight").run()
    assert "Requests in flight" in labels() and "Rate (requests/s)" not in labels()
    at.radio(key="load_arrival").set_value("At a rate").run()
    assert "Rate (requests/s)" in labels() and "Requests in flight" not in labels()


def test_drawing_the_server_page_never_prepares_a_model(tmp_path, monkeypatch):
    """Selecting a model that is not prepared offers 'Prepare it'; nothing is fetched or written by drawing."""
    for kept in MODELS.glob("vllm-flags-*.json"):  # what the Lab reads beside its models, as it finds it there
        (tmp_path / kept.name).write_bytes(kept.read_bytes())
    from engine.serving import prepare

    fetched = []
    monkeypatch.setattr(prepare, "_pip_fetch", lambda *a, **k: fetched.append(a))
    with apps_lab(dataclasses.replace(app_settings_now(), models=tmp_path)):  # a machine with nothing prepared
        at = _page("app_pages/server.py")
        at.radio(key="model_kind").set_value("shape-only").run()
    assert not at.exception
    assert any("not prepared" in w.value for w in at.warning)
    assert any(b.label == "Prepare it" for b in at.button)
    assert not fetched and not [p for p in tmp_path.iterdir() if not p.name.startswith("vllm-flags-")]


def _sidebar_text(at: AppTest) -> str:
    return " ".join(m.value for m in at.sidebar.markdown)


def test_a_viewer_switches_language_and_a_room_can_fix_it(monkeypatch):
    """The sidebar's switch is this viewer's alone; SERVING_LAB_LANG picks a new viewer's first language."""
    at = _app()
    assert "vLLM server" in _sidebar_text(at) and at.session_state["lang"] == "en"
    at.session_state["lang"] = "ko"
    at.run()
    assert not at.exception and "vLLM 서버" in _sidebar_text(at) and "중지됨" in _sidebar_text(at)
    assert "vLLM server" in _sidebar_text(_app())  # another viewer still reads English
    app_speaks(monkeypatch, "ko")  # SERVING_LAB_LANG=ko
    assert "vLLM 서버" in _sidebar_text(_app())


@pytest.mark.parametrize("path", list(PAGES))
def test_every_page_renders_in_korean(path, monkeypatch):
    """A room fixed to Korean: the page's title, and every sentence in a box (errors, warnings, notes, the
    fit check, the engine's own sentences among them), are Korean; no traceback."""
    import re

    from engine.messages import catalog

    ko = catalog("ko")  # the app's own: its .po compiled where the .mo is missing or older
    app_speaks(monkeypatch, "ko")
    at = _page(path)
    assert at.title[0].value == ko.gettext(PAGES[path])
    boxes = [b.value for kind in (at.error, at.warning, at.info, at.success) for b in kind]
    english = [b for b in boxes if not re.search(r"[\uac00-\ud7a3]", b)]
    assert not english, f"sentences left in English on {path}: {english}"


def test_a_runs_token_check_is_a_caption_or_a_warning():
    """What the Load test page and History's details say under a run's numbers: the server's count of its
    output tokens against the client's, a caption when they agree and a warning when they differ by more
    than 3 %."""

    def page():
        import ui
        from engine.results.records import Notes, RunResult, TokenCount

        for server in (100, 120):
            ui.token_check(RunResult(kind="vllm", scenario="concurrent-10", label="run", records=[], duration=1.0,
                                     started_at=1.7e9, extra=Notes(token_count=TokenCount(server=server, client=100))))
        ui.token_check(RunResult(kind="naive", scenario="naive-5", label="naive", records=[], duration=1.0,
                                 started_at=1.7e9))  # never checked: nothing said

    at = AppTest.from_function(page, default_timeout=60).run()
    assert not at.exception, at.exception
    unescaped = lambda e: e.value.replace("\\", "")  # noqa: E731 - ui.plain escapes markdown
    from engine.measure.judge.token_check import token_check
    from engine.results.records import Notes, TokenCount

    said = {n: " ".join(token_check(Notes(token_count=TokenCount(server=n, client=100))).sentences)
            for n in (100, 120)}
    assert [unescaped(c) for c in at.caption] == [said[100]]  # the check's own words: agreeing, a caption
    assert [unescaped(w) for w in at.warning] == [said[120]]  # 20 % apart, a warning


def test_a_saved_vllm_run_shows_the_python_behind_it():
    """Naive vs vLLM's vLLM step: under the bars, folded away, the openai-SDK code that sends the same five
    prompts one after another (engine.measure.snippets.load; tests/test_snippets.py runs such code for real)."""
    import ui
    from engine.measure.workloads import prompts
    from engine.results.records import RequestRecord, RunResult

    lab = ui.get_lab()
    spec = scenarios.get("vllm-5-sequential").load_spec(base_url="http://127.0.0.1:9000", model="smol", max_tokens=48)
    recs = [RequestRecord(index=i, prompt=p, send_time=i, first_token_time=i + 0.1, chunk_times=[i + 0.1],
                          end_time=i + 0.5, output_tokens=1) for i, p in enumerate(spec.prompts)]
    run = RunResult(kind="vllm", scenario="vllm-5-sequential", label=spec.label, records=recs, duration=5.0,
                    started_at=time.time(), model="smol", load=spec.as_dict())
    lab.store.save(run)
    try:
        at = _page("app_pages/naive_vs_vllm.py")
        assert "The Python behind the vLLM run" in [e.label for e in at.expander]
        code = next(c.value for c in at.code if "from openai import OpenAI" in c.value)
        assert '"http://127.0.0.1:9000/v1"' in code and "max_tokens=48" in code
        assert all(f'"{p}"' in code for p in prompts.LAB_SEQUENTIAL)
    finally:
        lab.store.delete([run.id])


def test_load_test_judges_the_shown_run_and_the_sweep_by_the_viewers_slo():
    """The SLO inputs (a chat user's defaults) judge the latest load test, in a sentence with its goodput, and
    the latest sweep, whose Pareto view marks the knee; a stricter limit, this viewer's own, changes both."""
    import ui
    from engine.jobs import JobManager
    from engine.measure.judge import slo

    from .test_figures import make_slo_sweep

    lab = ui.get_lab()
    jobs, lab.jobs = lab.jobs, JobManager()  # finished jobs of this test's own, gone again afterwards
    try:
        runs = make_slo_sweep()
        shown = [lab.jobs.submit("sweep", "sweep 1…64", lambda job: runs),
                 lab.jobs.submit("load", "8 in flight", lambda job: runs[3], lane="load", scenario="concurrent-8")]
        deadline = time.time() + 30
        while any(j.active for j in shown) and time.time() < deadline:
            time.sleep(0.05)
        at = _page("app_pages/load.py")
        assert (at.number_input(key="slo_ttft_ms").value, at.number_input(key="slo_tpot_ms").value) == (2000, 100)
        said = lambda: " ".join(m.value.replace("\\", "") for m in at.markdown)  # noqa: E731 - ui.plain escapes
        held = slo.judge(runs[3], slo.Slo(ttft_ms=2000, tpot_ms=100))
        assert (held.good, held.requests, held.goodput) == (16, 16, 16 / 5.12)  # 16 answers in 5.12 s
        assert [s.value.replace("\\", "") for s in at.success] == [held.said], [s.value for s in at.success]
        assert "The knee is 32 requests in flight" in said()
        at.number_input(key="slo_tpot_ms").set_value(15).run()  # 66 tok/s per user: more than any level gave
        assert not at.exception
        missed = slo.judge(runs[3], slo.Slo(ttft_ms=2000, tpot_ms=15))
        assert missed.good == 0 and [w.value.replace("\\", "") for w in at.warning][0] == missed.said
        strict = slo.Slo(ttft_ms=2000, tpot_ms=15)
        found = slo.find_knee(slo.levels(runs, strict), strict)
        assert found.level is None and str(found.said) in said()  # no level met it: the sweep's caption says so
    finally:
        lab.jobs = jobs


def test_naive_vs_vllm_draws_the_static_batch_and_vllm_slot_by_slot():
    """A stored static batch and vLLM on the same prompts at once: the slots chart and each run's counted
    waste (tests/test_slots.py checks the counting itself)."""
    import ui
    from engine.measure.judge.slots import occupancy
    from engine.results.records import RequestRecord, RunResult

    def rec(i: int, send: float, tokens: int, end: float | None = None) -> RequestRecord:
        chunks = [send + 0.25 + 0.125 * j for j in range(tokens)]
        return RequestRecord(index=i, prompt=f"p{i}", send_time=send, first_token_time=chunks[0], chunk_times=chunks,
                             end_time=end or chunks[-1] + 0.125, output_tokens=tokens)

    static = RunResult(kind="static-batch", scenario="static-batch-5", label="apptest static",
                       records=[rec(i, 0.0, k, end=1.5) for i, k in enumerate((2, 5, 10))], duration=1.5,
                       started_at=time.time(), load={"mode": "static-batch"})
    batch = RunResult(kind="vllm", scenario="vllm-5-batch", label="apptest batch",
                      records=[rec(i, 0.0, k) for i, k in enumerate((2, 5, 10))], duration=1.5,
                      started_at=time.time(), load={"shape": "burst", "concurrency": 5})
    store = ui.get_lab().store
    store.save(batch)
    try:
        at = _page("app_pages/naive_vs_vllm.py")  # vLLM alone: drawn, beside the note to run the static batch
        assert shown("Static vs continuous batching, slot by slot", [h.value for h in at.subheader]) == [{}]
        assert shown("Run the static batch (2) and vLLM all at once (4) to see both side by side.",
                     [c.value for c in at.caption]) == [{}]
        store.save(static)
        at = _page("app_pages/naive_vs_vllm.py")
        assert shown("Static vs continuous batching, slot by slot", [h.value for h in at.subheader]) == [{}]
        said = [c.value.replace("\\", "") for c in at.caption if "were wasted" in c.value]
        grids = [occupancy(static), occupancy(batch)]
        assert [(g.used, g.wasted) for g in grids] == [(17, 13), (17, 0)]  # the same tokens; the static batch waits
        assert said[0].startswith("2 · Static batch: " + grids[0].said), said
        assert said[1].startswith("4 · vLLM, all at once: " + grids[1].said), said
    finally:
        store.delete([static.id, batch.id])


def test_load_test_warms_up_by_default_says_what_it_cost_and_prices_the_runs():
    """The warm-up toggle is on by default; a finished run says what its warm-up cost and that it was cold;
    the price per GPU-hour is blank (no cost) until this viewer types one, then prices the run and each sweep level."""
    import ui
    from engine.jobs import JobManager
    from engine.measure.judge import warmth
    from engine.results.records import RequestRecord

    from .test_figures import make_slo_sweep

    lab = ui.get_lab()
    jobs, lab.jobs = lab.jobs, JobManager()
    try:
        runs = make_slo_sweep()
        run = runs[3]  # 8 in flight: 16 answers of 128 tokens in 5.12 s
        run.records += [RequestRecord(index=i, prompt="w", send_time=-3.0, first_token_time=-1.0, end_time=-0.5,
                                      chunk_times=[-1.0], output_tokens=16, warmup=True) for i in range(8)]
        run.extra.warmth.cold, run.extra.warmth.why, run.extra.warmth.batch_size = True, "first", 8
        shown = [lab.jobs.submit("sweep", "sweep 1…64", lambda job: runs),
                 lab.jobs.submit("load", "8 in flight", lambda job: run, lane="load", scenario="concurrent-8")]
        deadline = time.time() + 30
        while any(j.active for j in shown) and time.time() < deadline:
            time.sleep(0.05)
        at = _page("app_pages/load.py")
        assert at.toggle(key="load_warmup").value is True
        text = lambda items: " ".join(m.value.replace("\\", "") for m in items)  # noqa: E731 - ui.plain escapes
        cost = warmth.warmup_cost(run.records)
        assert (cost.requests, cost.seconds, cost.ttft_s) == (8, 2.5, 2.0) and cost.said in text(at.caption)
        assert warmth.said(run.extra) in text(at.warning) and run.extra.warmth.cold
        assert at.number_input(key="gpu_price_load").value is None
        assert "per GPU-hour, a million" not in text(at.markdown)
        at.number_input(key="gpu_price_load").set_value(3.6).run()
        assert not at.exception
        # 3.6 an hour over 5.12 s for 2,048 tokens: 2.50 a million
        assert reads("At **{price}** per GPU-hour, a million output tokens cost **{cost}** ({tokens} output tokens in "
                     "{wall}).", text(at.markdown)) == [{"price": "3.60", "cost": "2.50", "tokens": "2,048",
                                                          "wall": "5.1 s"}]
        said = text(at.markdown).replace("*", "")
        assert "by requests in flight: 1: " in said and " · 8: 2.50 · " in said
    finally:
        lab.jobs = jobs


def _drawn(node) -> str:
    """Everything a page sent to the browser: each element's message, the widgets' values included."""
    own = str(getattr(node, "proto", "") or "")
    return own + "".join(_drawn(c) for c in getattr(node, "children", {}).values())


@pytest.mark.server
def test_connected_to_a_server_by_url_every_page_measures_it(vllm_server):
    """The Server page's "Connect to an existing server" attaches the session's real vLLM by URL
    (with a made-up key: vLLM without --api-key accepts any); then a load test and a chat go there, every page
    renders, and what cannot work on a server the app did not start is greyed with the reason."""
    import ui

    key = "sk-apptest-NEVER-SHOWN-91c2"
    url = vllm_server.base_url.rstrip("/")
    lab = ui.get_lab()
    try:
        at = _page("app_pages/server.py")
        form = {t.label: t for t in at.text_input}
        form["Server URL"].set_value(url + "/v1")
        form["API key (if it needs one)"].set_value(key)
        next(b for b in at.button if b.label == "Connect").click().run()
        assert not at.exception and not _errors(at), _errors(at)
        connecting = lab.latest_job("connect")  # discovery runs as a job: the page redraws once it has ended
        deadline = time.time() + 60  # a liveness bound
        while connecting.active and time.time() < deadline:
            time.sleep(0.1)
        assert connecting.status == "done", connecting.error
        at.run()
        assert any(f"Connected to {url}" in s.value.replace("\\", "") for s in at.success)
        shown = {m.label: m.value for m in at.metric}
        assert shown["Model"] == vllm_server.model and shown["Max model length"] == "2,048"
        assert shown["API key"] == "••••••••"
        buttons = {b.label: b for b in at.button}
        assert buttons["Start"].disabled and buttons["Restart"].disabled and buttons["Stop"].disabled
        assert read("Connected to {url}: the app does not start or stop a server it did not start. Disconnect above "
                    "to run a server here.", buttons["Start"].help.replace("\\", "")) == {"url": url}
        assert "connected" in _sidebar_text(at)

        at.switch_page("app_pages/load.py").run()
        assert not at.exception
        next(w for w in at.number_input if w.label == "Number of requests").set_value(2)
        next(w for w in at.slider if w.label == "Max tokens per answer").set_value(16)
        next(b for b in at.button if b.label == "Run load test").click().run()
        assert not _errors(at), _errors(at)
        job = lab.latest_job("load")
        deadline = time.time() + 300  # a liveness bound
        while job.active and time.time() < deadline:
            time.sleep(0.2)
        assert job.status == "done", job.error
        assert job.result.extra.server.endpoint == url
        at.run()
        assert not at.exception and any(m.label == "OK / failed" and m.value == "2 / 0" for m in at.metric), \
            ([(m.label, m.value) for m in at.metric], [e.value for e in at.error], [w.value for w in at.warning])

        at.switch_page("app_pages/chat.py").run()
        assert not at.chat_input[0].disabled
        at.chat_input[0].set_value("Say hi.").run()
        assert not at.exception and not _errors(at), _errors(at)
        assert any("TTFT" in c.value for c in at.caption)

        at.switch_page("app_pages/monitor.py").run()
        assert not at.exception
        assert any(f"not available for the server at {url}" in i.value.replace("\\", "") for i in at.info)
        at.switch_page("app_pages/tuning.py").run()
        tune = next(b for b in at.button if b.label == "Restart vLLM and compare")
        assert tune.disabled and "Disconnect" in tune.help
        at.switch_page("app_pages/naive_vs_vllm.py").run()
        assert not at.exception
        assert not next(b for b in at.button if b.label.startswith("3 · vLLM")).disabled
        at.switch_page("app_pages/history.py").run()
        assert not at.exception
        assert url in at.dataframe[0].value["server"].tolist()

        for page in PAGES:  # nothing anywhere shows the key
            at.switch_page(page).run()
            assert not at.exception
            drawn = _drawn(at._tree)
            assert "135M" in drawn and key not in drawn  # the sidebar names the model on every page; never the key

        at.switch_page("app_pages/server.py").run()
        next(b for b in at.button if b.label == "Disconnect").click().run()
        assert lab.attached() is None
        assert not {b.label: b for b in at.button}["Start"].disabled
    finally:
        lab.detach()


def test_tuning_shows_what_squeezing_the_kv_cache_did():
    """Two saved kv-squeeze runs (a squeezed cache, then room): the Tuning page's KV section compares
    them per configuration, with the sentence that says what the flags did."""
    import ui
    from engine.measure.judge import kvcache, stats
    from engine.results.records import KvCache, Notes, RequestRecord, RunResult, ServerNotes

    def run(gib: float, capacity: int, preempted: int, waiting: int) -> RunResult:
        recs = [RequestRecord(index=i, prompt=f"p{i}", send_time=0.0, first_token_time=1.0 + i,
                              chunk_times=[1.0 + i, 2.0 + i], end_time=3.0 + i, prompt_tokens=30, output_tokens=100)
                for i in range(8)]
        return RunResult(kind="vllm", scenario="kv-squeeze", label=f"max-model-len 256 / KV {gib:g} GiB",
                         records=recs, duration=11.0, started_at=time.time(), model="/m/SmolLM2",
                         summary=stats.summarize(recs, 11.0), load={"concurrency": 8, "max_tokens": 100},
                         config={"device": "cpu", "cpu_kvcache_gib": gib, "max_model_len": 256},
                         extra=Notes(server=ServerNotes(kv_cache_tokens=capacity),
                                     kv=KvCache(blocks=capacity // 128, block_size=128, preemptions=preempted,
                                                peak_waiting=waiting, peak_usage=1.0)))

    runs = [run(0.01, 384, 6, 7), run(1, 46_592, 0, 0)]
    for r in runs:
        ui.get_lab().store.save(r)
    try:
        at = _page("app_pages/tuning.py")
        said = " ".join(m.value for m in at.markdown).replace("\\", "")  # markdown escapes
        squeezed = kvcache.said(runs[0])  # the judge's arithmetic for the squeezed run, shown as it said it
        assert values(squeezed) == {"flags": "--kv-cache-memory-bytes 10737418 --max-model-len 256", "capacity": 384,
                                    "answers": 8, "tokens": 130, "need": 1040, "waiting": 7, "preempted": 6}
        assert str(squeezed) in said
        table = at.dataframe[-1].value  # after the tuning table's editor
        assert list(table["Preemptions"]) == [6, 0] and list(table["KV capacity (tokens)"]) == [384, 46_592]
    finally:
        ui.get_lab().store.delete([r.id for r in runs])
