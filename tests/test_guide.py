"""The guided lab: the step catalogue, the shared session kept across an app restart,
the summary's arithmetic from known runs, and the page through AppTest (no server running)."""
from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine import guide as g
from engine.errors import NotPresenter
from engine.lab import Lab
from engine.measure.workloads import scenarios
from engine.measure.judge import stats, verdict
from engine.measure.judge.worker_memory import worker_memory
from engine.messages import say, translate
from engine.results.records import (Disturbance, MemoryAt, NaiveWorker, Notes, Repeat, RequestRecord, RunResult,
                                    WorkerMemory)
from engine.results.store import RunStore

from .conftest import MODELS, app_settings_now, app_uses, free_port
from .said import ids, said, tree, values

APP = str(Path(__file__).resolve().parent.parent / "app.py")


@pytest.fixture
def lab(tmp_path, lab_settings):
    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "history.sqlite"), presenter_token="secret")
    yield lab
    lab.shutdown()


def _run(scenario: str, kind: str, per_request: list[tuple[float, int]], *, at_once: bool = False,
         label: str = "", config: dict | None = None, extra: Notes | None = None) -> RunResult:
    """A run whose requests take the given (seconds, output tokens): one after another, or all at once."""
    recs, t = [], 0.0
    for i, (secs, tokens) in enumerate(per_request):
        start = 0.0 if at_once else t
        recs.append(RequestRecord(index=i, prompt=f"p{i}", send_time=start, first_token_time=start + secs / 10,
                                  chunk_times=[start + secs / 10, start + secs], end_time=start + secs,
                                  prompt_tokens=10, output_tokens=tokens))
        t = start + secs
    duration = max(r.end_time for r in recs)
    return RunResult(kind=kind, scenario=scenario, label=label or scenario, records=recs, duration=duration,
                     started_at=time.time(), config=config or {}, summary=stats.summarize(recs, duration),
                     extra=extra or Notes())


# -- the catalogue ---------------------------------------------------------------------------------
def test_the_steps_follow_the_notebook_and_name_workloads_that_exist():
    assert g.STEP_IDS == ("naive", "free", "start", "test-query", "sequential", "concurrent", "tuning", "streaming",
                          "summary")
    assert [s.number for s in g.STEPS] == list(range(1, 10))
    for s in g.STEPS:
        if s.scenario:
            scn = scenarios.get(s.scenario)  # a LabError for a workload the catalogue does not have
            assert s.tokens == scn.max_tokens, f"{s.id}: the step says {s.tokens} tokens, {s.scenario} {scn.max_tokens}"
    assert scenarios.get("test-query").prompts == ("What is the capital of Korea?",)
    assert g.tokens_for(g.step("naive"), 0.25) == 50 and g.tokens_for(g.step("free"), 0.25) is None
    # the notebook's numbers are the ones it printed, in its units
    seed = {(s.id, str(n.label)): (n.value, n.unit) for s in g.STEPS for n in s.seed}
    assert seed[("naive", "mean latency")] == (3.7, "s") and seed[("streaming", "TTFT")] == (166, "ms")
    assert translate(g.seed_text(g.step("tuning").seed[-1]), "en") == "-20 %"


def test_the_presenters_model_is_every_steps_and_survives_a_restart_and_starting_over(lab, tmp_path):
    from engine.serving import models

    embedded = models.embedded(MODELS)
    assert lab.guide.model_spec().path == embedded.path  # no choice, no server: the embedded default
    with pytest.raises(Exception) as e:
        lab.guide.set_model("/no/such/model", token="secret")
    assert tree(e.value) == {"id": "The model {name} is not prepared on this machine: pick one the list offers, or "
                                   "prepare it on the Server page.", "name": "/no/such/model"}
    lab.guide.set_model(embedded.path, token="secret")
    lab.guide.reset(token="secret")
    assert g.Guide(lab).state().model == embedded.path
    with pytest.raises(NotPresenter):
        lab.guide.set_model(embedded.path)


def test_an_unknown_step_is_one_sentence():
    with pytest.raises(Exception) as e:
        g.step("nope")
    assert said(e.value).template == "There is no guided step '{name}': pick one of {names}." and \
        values(e.value)["name"] == "nope"


# -- the shared session ------------------------------------------------------------------------------

def test_the_sessions_fingerprint_stands_still_until_the_presenter_moves(lab):
    """What a follower's page watches every second (ui.live): unchanged while nothing happens, changed by a move."""
    before = lab.guide.seen()
    assert lab.guide.seen() == before
    lab.guide.go_to("free", token="secret")
    assert lab.guide.seen() != before
    assert not lab.guide.moving("free")  # no run, no start: the step's view is drawn once and watched


def test_the_session_survives_an_app_restart(lab, tmp_path):
    lab.guide.go_to("concurrent", token="secret")
    lab.guide.set_scale(0.25, token="secret")
    assert json.loads((tmp_path / "guide.json").read_text())["current"] == "concurrent"
    again = g.Guide(lab)  # what a restarted app reads
    state = again.state()
    assert (state.current, state.scale) == ("concurrent", 0.25)
    assert state.moved_at > 0


def test_only_the_presenter_moves_the_room(lab):
    with pytest.raises(NotPresenter):
        lab.guide.go_to("tuning", token=None, caller="viewer")
    with pytest.raises(NotPresenter):
        lab.guide.run_step("naive", token="wrong", caller="viewer")
    assert lab.guide.state().current == "naive"


def test_a_damaged_state_file_starts_over_and_drops_unknown_steps(tmp_path):
    s = g.State.from_dict({"current": "gone", "scale": 7, "runs": {"naive": ["a"], "bogus": ["b"]}})
    assert (s.current, s.scale, s.runs) == ("naive", 1.0, {"naive": ["a"]})
    assert g.State.from_dict("not a dict") == g.State()


def test_a_finished_job_s_runs_become_the_step_s(lab):
    """A step's runs are the ones its own job saved, recorded once the job has ended."""
    run = _run("concurrent-10", "vllm", [(1.0, 20)] * 10, at_once=True)
    lab.store.save(run)
    job = lab.jobs.submit("load", "test", lambda job: run)
    lab.guide._jobs["concurrent"] = job.id
    deadline = time.time() + 60  # a liveness bound
    while job.active and time.time() < deadline:
        time.sleep(0.05)
    assert lab.guide.state().runs["concurrent"] == [run.id]
    assert lab.guide.latest("concurrent").id == run.id
    assert g.Guide(lab).state().runs["concurrent"] == [run.id]  # kept in guide.json
    assert lab.guide.latest("streaming") is None


def test_check_memory_needs_a_naive_run_first(lab):
    with pytest.raises(Exception) as e:
        lab.guide.run_step("free", token="secret")
    assert tree(e.value) == {"id": "Run step {n} (naive inference) first: this step reads what its worker gave back.",
                             "n": 1}


# -- the summary's arithmetic ----------------------------------------------------------------------
def _repeats(scenario: str, times: list[float], tokens: int, n: int, *, label: str = "", **kw) -> list[RunResult]:
    """One run per value of `times` (each request of a run taking that long), marked as one group of repeats."""
    out = []
    for i, secs in enumerate(times):
        run = _run(scenario, "vllm", [(secs, tokens)] * n, label=label or scenario,
                   extra=Notes(repeat=Repeat(group=f"g-{label}", index=i + 1, total=len(times))), **kw)
        out.append(run)
    return out


def test_the_six_findings_from_known_runs():
    naive = _run("naive-5", "naive", [(2.0, 50), (2.1, 50), (1.9, 50), (2.0, 50), (2.0, 50)])  # ~0.04 s a token
    vllm = _repeats("vllm-5-sequential", [0.5, 0.52, 0.48], 50, 5)
    conc = _repeats("concurrent-10", [1.5, 1.6, 1.4], 25, 10, at_once=True)  # 250 tokens in ~1.5 s
    cpu = {"device": "cpu", "cpu_kvcache_gib": 2}
    tuned = (_repeats("tuning", [2.0, 2.05, 1.95], 20, 10, at_once=True, label="max-model-len 2048", config=cpu)
             + _repeats("tuning", [1.6, 1.62, 1.58], 20, 10, at_once=True, label="max-model-len 512", config=cpu))
    stream = _repeats("stream-300", [4.0, 4.1, 3.9], 300, 1)
    found = g.findings({"naive": [naive], "sequential": vllm, "concurrent": conc, "tuning": tuned,
                        "streaming": stream})
    assert [f.number for f in found] == [1, 2, 3, 4, 5, 6]
    assert all(f.measured for f in found[:5]) and not found[5].measured
    assert found[0].text.values == {"mean": "2.0", "total": "10"}  # significant figures, as the table
    # beyond noise, each heading is the notebook's claim, with the interval and how sure
    assert [f.claim for f in found] == [None, 1, 1, 1, 1, None]
    assert found[1].title == "vLLM serves the same model faster"
    seq = values(found[1].text)
    assert (seq["mean"], seq["naive"], seq["x"], seq["interval"]["level"]) == ("0.50", "2.0", "4.00", "95 %")
    # prompt by prompt
    assert seq["how"] == {"method": verdict.PAIRED, "counts": {"n": 5}, "between": {"pct": "10"}}  # naive's one run
    assert said(found[1].text.values["how"].values["counts"]).template == "{n} requests each"
    conc_said = values(found[2].text)  # 250 tokens at naive's 0.04 s a token; the repeats' mean wall time
    assert conc_said["text"] == {"wall": "1.5", "n": 3, "would": "10", "tokens": 250.0}
    assert conc_said["x"] == "6.67" and conc_said["interval"]["level"] == "95 %"
    assert conc_said["how"] == {"method": verdict.WELCH_LOG, "a": 5, "b": 3,  # 5 naive answers and 3 runs
                                "between": {"pct": "10"}}  # naive's answers are one run's
    tuning = found[3].text
    assert tuning.values["change"] == "+25 %"  # 100 tok/s -> 125 tok/s, the repeats' means
    assert values(tuning)["verdict"]["how"]["counts"] == {"n": 3} and (values(tuning)["a"], values(tuning)["b"]) == (
        "100", "125")
    assert said(tuning.values["verdict"]).template.startswith("beyond this machine's noise")
    assert values(tuning)["why"]["gib"] == 2  # said on a CPU, where the fraction does nothing: the KV cache's size
    assert values(found[4].text)["text"] == {"ttft": "400", "tokens": 300.0, "total": "4.0"}
    # Korean says the same numbers
    assert "4.00배" in translate(found[1].text, "ko")
    # the table beside the notebook reads the same computation: one number per fact
    rows = g.numbers("sequential", {"naive": [naive], "sequential": vllm}, {})
    assert str(rows[1].here) == f"{found[1].text.values['x']}×"


# The tuning step: 36 → 129 tok/s, its own text calling it spread (the same setting gave 101 minutes before)
SPREAD = ([0.28, 0.08, 0.10], [0.11, 0.09, 0.16])  # seconds per request of 20 tokens: overlapping throughputs


def test_a_difference_within_noise_is_headed_no_measurable_difference_in_both_languages():
    tuned = (_repeats("tuning", SPREAD[0], 20, 10, at_once=True, label="max-model-len 2048")
             + _repeats("tuning", SPREAD[1], 20, 10, at_once=True, label="max-model-len 512"))
    found = g.findings({"tuning": tuned})[3]
    assert found.measured and found.claim == 0
    assert found.title == g.NO_DIFFERENCE
    assert translate(found.title, "ko") == "이 머신에서는 측정 가능한 차이가 없습니다"
    assert said(found.text.values["verdict"]).template.startswith("within this machine's noise")
    # the same numbers in the table: the second setting's mean throughput and the change between the means
    rows = g.numbers("tuning", {"tuning": tuned}, {})
    assert str(rows[2].here) == found.text.values["change"]


def test_one_value_a_side_decides_nothing():
    """One tuning run a side (a session saved before repeats): no spread, so no claim and no denial."""
    tuned = [_run("tuning", "vllm", [(2.0, 20)] * 10, at_once=True, label="max-model-len 2048"),
             _run("tuning", "vllm", [(1.6, 20)] * 10, at_once=True, label="max-model-len 512")]
    found = g.findings({"tuning": tuned})[3]
    assert found.claim is None and found.title == g.UNDECIDED
    # the heading says why nothing is decided; the sentence gives the numbers and judges neither way
    assert (values(found.text)["a"], values(found.text)["b"]) == (f"{10 * 20 / 2.0:.0f}", f"{10 * 20 / 1.6:.0f}")
    assert "verdict" not in found.text.values  # 10 answers of 20 tokens a side, and no verdict said


def test_a_disturbed_run_never_claims():
    """The same clear difference, measured while other programs used most of the machine: no verdict, and the
    sentence that says why next to the numbers."""
    busy = Disturbance(seconds=10.0, cores=2, others_cores=1.4, steal_cores=0.0)
    vllm = _repeats("vllm-5-sequential", [0.5, 0.52, 0.48], 50, 5)
    vllm[1].extra.beside.disturbance = busy
    naive = _run("naive-5", "naive", [(2.0, 50), (2.1, 50), (1.9, 50), (2.0, 50), (2.0, 50)])
    found = g.findings({"naive": [naive], "sequential": vllm})[1]
    assert found.claim is None and found.title == g.BUSY
    assert values(found.text)["busy"]["sentence"] == {"what": {"used": 1.4, "cores": 2}}  # other programs' cores
    conc = _repeats("concurrent-10", [1.5, 1.6, 1.4], 25, 10, at_once=True)
    conc[0].extra.beside.disturbance = busy
    found = g.findings({"naive": [naive], "concurrent": conc})[2]
    assert found.claim is None and found.title == g.BUSY
    assert set(found.text.values) == {"text", "busy"}  # the numbers and why they are not judged: no ratio, no claim
    # tuning: a clear difference measured beside a busy machine is neither claimed in the heading nor in its sentence
    tuned = (_repeats("tuning", [0.5, 0.52, 0.48], 20, 10, at_once=True, label="max-model-len 2048")
             + _repeats("tuning", [0.25, 0.26, 0.24], 20, 10, at_once=True, label="max-model-len 512"))
    tuned[4].extra.beside.disturbance = busy
    found = g.findings({"tuning": tuned})[3]
    assert found.claim is None and found.title == g.BUSY
    assert said(found.text.values["text"].values["verdict"]).template.startswith("not judged"), str(found.text)


def test_every_finding_reads_as_one_sentence_in_both_languages():
    """Every shape a finding takes (claimed, denied, within noise, undecided, disturbed, cold, with and without a
    naive run, each KV-cache case): no capital after a colon in English, one colon at most between clauses, and
    a slower vLLM never called faster in Korean."""
    busy = Disturbance(seconds=10.0, cores=2, others_cores=1.4, steal_cores=0.0)
    naive = _run("naive-5", "naive", [(2.0, 50), (2.1, 50), (1.9, 50), (2.0, 50), (2.0, 50)])
    fast_naive = _run("naive-5", "naive", [(0.2, 50), (0.21, 50), (0.19, 50), (0.2, 50), (0.2, 50)])
    vllm = _repeats("vllm-5-sequential", [0.5, 0.52, 0.48], 50, 5)
    disturbed = _repeats("vllm-5-sequential", [0.5, 0.52, 0.48], 50, 5)
    disturbed[1].extra.beside.disturbance = busy
    conc = _repeats("concurrent-10", [1.5, 1.6, 1.4], 25, 10, at_once=True)
    cold = _repeats("concurrent-10", [1.5, 1.6, 1.4], 25, 10, at_once=True)
    cold[0].extra.warmth.cold = True

    def tuned(config, a=(2.0, 2.05, 1.95), b=(1.6, 1.62, 1.58), waited=(0, 0)):
        runs = (_repeats("tuning", list(a), 20, 10, at_once=True, label="max-model-len 2048", config=config)
                + _repeats("tuning", list(b), 20, 10, at_once=True, label="max-model-len 512", config=config))
        for r in runs:
            r.extra.kv.peak_waiting = waited[0] if "2048" in r.label else waited[1]
        return runs

    cpu, gpu = {"device": "cpu", "cpu_kvcache_gib": 2}, {"device": "cuda"}
    stream = _repeats("stream-300", [4.0, 4.1, 3.9], 300, 1)
    cases = [{}, {"naive": [naive], "sequential": vllm, "concurrent": conc, "tuning": tuned(cpu), "streaming": stream},
             {"naive": [fast_naive], "sequential": vllm, "concurrent": cold, "tuning": tuned(gpu, waited=(1, 0))},
             {"naive": [naive], "sequential": disturbed, "tuning": tuned(cpu, *SPREAD, waited=(1, 1))},
             {"concurrent": conc, "streaming": [_run("stream-300", "vllm", [(4.0, 300)])]}]
    said = [(f, translate(f.text, lang), lang) for case in cases for f in g.findings(case) for lang in ("en", "ko")]
    for f, text, lang in said:
        if lang == "en":
            assert not re.search(r": [A-Z][a-z]", text), text
        assert text.count(": ") <= 2, text
        if f.claim == -1 and f.number == 2 and lang == "ko":
            assert "빠릅니다" not in text, text  # naive was faster here
    no_naive = next(f for f, t, lang in said if f.number == 3 and lang == "en" and "latencies one after" in t)
    found = tree(no_naive.text)  # the wall time against one after another, not naive's throughput
    assert found["id"] == "{text} One after another would have taken {x}× as long ({interval}; {how})."
    assert found["x"] == "10" and found["text"]["id"].startswith("All 10 answers in {wall} s"), found


def test_findings_without_runs_say_which_step_to_run():
    found = g.findings({})
    assert not any(f.measured for f in found[:5])
    assert "step 1" in found[0].text and "step 7" in found[3].text


def test_naive_would_take_falls_back_to_the_serial_sum():
    conc = _run("concurrent-10", "vllm", [(1.5, 25)] * 10, at_once=True)
    assert g.naive_would_take(conc, None) == (pytest.approx(15.0), "serial")


def test_the_numbers_beside_the_notebook(lab):
    naive = _run("naive-5", "naive", [(2.0, 50)] * 5)
    vllm = _run("vllm-5-sequential", "vllm", [(0.5, 50)] * 5)
    rows = g.numbers("sequential", {"naive": [naive], "sequential": [vllm]}, {})
    assert [str(r.seed) for r in rows] == ["3.2 s", "1.2×"]
    assert [str(r.here) for r in rows] == ["0.50 s", "4.00×"]  # the speed-up as the chart writes it
    assert all(r.here is None for r in g.numbers("concurrent", {}, {}))


def test_the_naive_memory_row_says_ram_where_there_is_no_gpu():
    """On a CPU the worker's peak is RAM: the row beside the notebook's GPU figure says so (on a GPU it keeps
    the notebook's label)."""
    cpu = WorkerMemory(before=MemoryAt(ram_used=4_000_000_000), after_exit=MemoryAt(ram_used=4_100_000_000),
                       worker_peak_rss=900_000_000)
    gpu = WorkerMemory(before=MemoryAt(device_used=1_000_000_000), after_exit=MemoryAt(device_used=1_000_000_000),
                       worker_peak_device=17_000_000_000)
    labels = {name: [r.label for r in g.numbers("naive", {"naive": [_run("naive-5", "naive", [(2.0, 50)] * 5,
                                                                              extra=_worker(mem))]}, {})]
              for name, mem in (("cpu", cpu), ("gpu", gpu))}
    assert ids(labels["cpu"])[3] == "memory after loading (here: the worker's RAM, no GPU)"
    assert ids(labels["gpu"])[3] == "GPU memory after loading"


# The step 2 on a CPU: other programs raised the system's RAM by 7.5 GB while the 0.9 GB worker ran and exited
MOVED_RAM = WorkerMemory(before=MemoryAt(ram_used=7_090_000_000), after_exit=MemoryAt(ram_used=14_590_000_000),
                         worker_peak_rss=900_000_000, after_cleanup=MemoryAt(rss=600_000_000), worker_exited=True)


def _worker(memory: WorkerMemory, exit_code: int | None = None) -> Notes:
    """A naive run's notes: its worker's memory and exit code."""
    return Notes(naive=NaiveWorker(memory=memory, worker_exit_code=exit_code))


def test_free_the_memory_reads_the_workers_own_memory_not_the_systems_ram(lab):
    """Without a GPU step 2 shows the worker's own memory (its peak, and nothing once its process is gone): the
    7.5 GB other programs added to the system's RAM is no number of the worker's, and the sentence says what the
    numbers say."""
    naive = _run("naive-5", "naive", [(2.0, 50)] * 5, extra=_worker(MOVED_RAM, exit_code=0))
    lab.store.save(naive)
    lab.guide._state.runs["naive"] = [naive.id]
    fact = lab.guide.run_step("free", token="secret")
    assert fact["gpu"] is False and fact["worker_peak_gb"] == 0.9 and fact["exited"] and fact["held_gb"] == 0.0
    rows = g.numbers("free", {"naive": [naive]}, fact)
    # the worker's own RAM after del + gc, as the step's metric beside the table says it (the table said 0 GB there,
    # a contradiction on one screen), then nothing once it exited: not 7.5 GB of other programs' RAM
    assert [str(r.here) for r in rows] == ["0.60 GB", "0 GB"]
    assert fact["after_cleanup_gb"] == 0.6
    assert said(rows[0].label).template == "allocated after cleanup (here: the worker's RAM after del + gc)"
    korean = translate(worker_memory_said(fact), "ko")
    assert "0.90 GB" in korean and "7.5" not in korean


def worker_memory_said(fact):
    from engine.measure.judge.worker_memory import said

    return said(fact)


def test_a_gpu_that_did_not_come_back_is_not_said_to_have():
    """On a GPU the device's memory through NVML: a device using more after the worker exited than before is
    said so, never "back"."""
    from engine.measure.judge.worker_memory import came_back, said

    def run(after_gb: float):
        return _run("naive-5", "naive", [(2.0, 50)], extra=_worker(WorkerMemory(
            worker_peak_device=17_000_000_000, worker_exited=True, before=MemoryAt(device_used=1_000_000_000),
            after_exit=MemoryAt(device_used=round(after_gb * 1e9)))))

    back, held = worker_memory(run(1.02)), worker_memory(run(9))
    assert came_back(back) and "again" in str(said(back))
    assert not came_back(held) and "8.0 GB more" in str(said(held)) and "again" not in str(said(held))


def test_the_report_starts_with_the_findings(lab):
    naive = _run("naive-5", "naive", [(2.0, 50)] * 5)
    lab.store.save(naive)
    lab.guide._state.runs["naive"] = [naive.id]
    html = lab.guide.report_html("ko")
    assert "<h2>요약</h2>" in html and "단순 추론은 구현하기 쉽지만 느리다" in html
    assert html.index("요약") < html.index("naive-5")


# -- the page ---------------------------------------------------------------------------------------

def test_the_guided_lab_is_the_first_and_default_page(app_lab):
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Guided lab"
    assert any(b.label.startswith("Run naive inference on the 5 prompts") for b in at.button)
    assert any("The lab notebook's GPU" in str(df.value.columns.tolist()) for df in at.dataframe)


def test_every_step_renders_and_next_moves_the_session(app_lab):
    import ui

    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    for sid in g.STEP_IDS:
        assert not at.exception, (sid, at.exception)
        shown = g.step(sid)
        assert ui.get_lab().guide.state().current == sid
        if sid == "summary":
            assert any("What this lab found" in s.value for s in at.subheader)
            assert len([m for m in at.markdown if m.value.startswith("**")]) >= 6
            break
        assert at.subheader[0].value == f"{shown.number}. {shown.title}"
        next(b for b in at.button if b.label == "Next step").click().run()
    # a reload (a new session) opens where the presenter is
    again = AppTest.from_file(APP, default_timeout=60)
    again.run()
    assert any("What this lab found" in s.value for s in again.subheader)


def test_the_page_in_korean(app_lab):
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["lang"] = "ko"
    at.run()
    assert not at.exception
    assert at.title[0].value == "실습 따라하기"
    assert any(b.label.startswith("프롬프트 5개로 단순 추론 실행") for b in at.button)


def test_a_step_without_a_server_says_what_to_do(app_lab):
    import ui

    ui.get_lab().guide.go_to("sequential", token=None)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    next(b for b in at.button if b.label.startswith("Run the 5 prompts through vLLM")).click().run()
    assert not at.exception
    assert any("start vLLM" in e.value for e in at.error), [e.value for e in at.error]


def test_every_step_draws_the_runs_it_made(app_lab):
    """With a run saved for every step (and the free and start steps' readings), each step's page draws its
    chart and numbers, in English and Korean."""
    import ui

    lab = ui.get_lab()
    runs = {"naive": [_run("naive-5", "naive", [(2.0, 50)] * 5, extra=_worker(MOVED_RAM))],
            "test-query": [_run("test-query", "vllm", [(0.4, 20)])],
            "sequential": [_run("vllm-5-sequential", "vllm", [(0.5, 50)] * 5)],
            "concurrent": [_run("concurrent-10", "vllm", [(1.5, 25)] * 10, at_once=True)],
            "tuning": [_run("tuning", "vllm", [(2.0, 20)] * 10, at_once=True, label="max-model-len 2048"),
                       _run("tuning", "vllm", [(1.6, 20)] * 10, at_once=True, label="max-model-len 512")],
            "streaming": [_run("stream-300", "vllm", [(4.0, 300)])]}
    runs["test-query"][0].records[0].output_text = "Seoul."
    for sid, rs in runs.items():
        for r in rs:
            lab.store.save(r)
        lab.guide._state.runs[sid] = [r.id for r in rs]
    lab.guide._state.facts["free"] = {"checked_at": time.time(), **worker_memory(runs["naive"][0])}
    lab.guide._state.facts["start"] = {"asked_at": time.time(), "already": False, "ready_s": 42.0}
    for lang in ("en", "ko"):
        for sid in g.STEP_IDS:
            lab.guide.go_to(sid, token=None)
            at = AppTest.from_file(APP, default_timeout=60)
            at.session_state["lang"] = lang
            at.run()
            assert not at.exception, (lang, sid, [e.value for e in at.exception])
            assert not at.error, (lang, sid, [e.value for e in at.error])
            if sid == "test-query":  # the answer itself, in a chat bubble
                assert any("Seoul" in m.value for m in at.markdown), [m.value for m in at.markdown]
            elif sid in runs:
                assert at.get("plotly_chart"), sid
            # the Naive page numbers its contenders ("3 · vLLM, one at a time"); on step 5 that read as step 3
            names = [t.get("name") or "" for c in at.get("plotly_chart") for t in json.loads(c.proto.spec)["data"]]
            assert not [n for n in names if re.match(r"\d+ · ", n)], (lang, sid, names)
            if g.step(sid).seed:
                here = at.dataframe[0].value.iloc[:, 2].tolist()
                assert not any(v in ("not run yet", "아직 실행 안 함") for v in here), (sid, here)


def test_the_steps_heading_and_the_summary_follow_the_verdict(app_lab):
    """The tuning step of the issue: a change within the repeats' spread is headed "no measurable difference on this
    machine" on the step, in the summary and in the report, never "max-model-len ... set the capacity"."""
    import ui

    lab = ui.get_lab()
    tuned = (_repeats("tuning", SPREAD[0], 20, 10, at_once=True, label="max-model-len 2048")
             + _repeats("tuning", SPREAD[1], 20, 10, at_once=True, label="max-model-len 512"))
    for r in tuned:
        lab.store.save(r)
    lab.guide._state.runs["tuning"] = [r.id for r in tuned]
    for lang, heading, claim in (("en", "No measurable difference on this machine", "set the capacity"),
                                 ("ko", "이 머신에서는 측정 가능한 차이가 없습니다", "처리 용량을 정한다")):
        lab.guide.go_to("tuning", token=None)
        at = AppTest.from_file(APP, default_timeout=60)
        at.session_state["lang"] = lang
        at.run()
        assert not at.exception, at.exception
        shown = [e.value for e in at.info] + [e.value for e in at.success]
        assert any(v.startswith(f"**{heading}**") for v in shown), shown
        assert not any(claim in v for v in shown) and not at.success, shown
        assert any("3" in c.value and ("times" in c.value or "번" in c.value) for c in at.caption)  # how many runs
        lab.guide.go_to("summary", token=None)
        at = AppTest.from_file(APP, default_timeout=60)
        at.session_state["lang"] = lang
        at.run()
        tuning = translate(g.step("tuning").title, lang)  # the summary heads each finding after its step too
        assert any(m.value.startswith(f"**4. {tuning} · {heading}**") for m in at.markdown), \
            [m.value for m in at.markdown]
        # no tick beside a finding: after "no measurable difference" it read as a claim approved
        assert not [m.value for m in at.markdown if m.value.startswith("**4. ") and "✓" in m.value]
        assert heading in lab.guide.report_html(lang) and claim not in lab.guide.report_html(lang)


def test_the_speed_up_is_one_number_on_the_step_and_its_chart_claims_nothing_the_heading_does_not(app_lab):
    """Step 5: the table, the finding and the chart's title say the same speed-up; beside a disturbed run the
    chart's title claims no speed-up either."""
    import json as _json

    import ui

    lab = ui.get_lab()
    naive = _run("naive-5", "naive", [(2.0, 50), (2.1, 50), (1.9, 50), (2.0, 50), (2.0, 50)])
    vllm = _repeats("vllm-5-sequential", [0.5, 0.52, 0.48], 50, 5)
    for r in [naive, *vllm]:
        lab.store.save(r)
    lab.guide._state.runs.update(naive=[naive.id], sequential=[r.id for r in vllm])
    lab.guide.go_to("sequential", token=None)

    def shown():
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        assert not at.exception, at.exception
        title = _json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]["title"]["text"]
        return at, title

    at, title = shown()
    x = g.findings({"naive": [naive], "sequential": vllm})[1].text.values["x"]
    assert f"{x}×" in title and "faster" in title
    assert at.dataframe[0].value.iloc[1, 2] == f"{x}×"
    assert any(f"{x}×" in e.value.replace("\\", "") for e in at.success)  # markdown escapes the point
    vllm[0].extra.beside.disturbance = Disturbance(seconds=10.0, cores=2, others_cores=1.4, steal_cores=0.0)
    lab.store.save(vllm[0])
    at, title = shown()
    assert "faster" not in title and not at.success
    assert any(e.value.startswith("**No verdict") for e in at.info)


def test_a_follower_elsewhere_is_brought_to_the_presenters_step_even_when_a_switch_is_lost(app_lab, monkeypatch):
    """A follower looking at another page stays there until the presenter moves, then is taken to the step; a
    switch Streamlit drops (folded into a newer rerun of the page the browser still shows) is tried again at the
    next tick: the step counts as seen only once the guided lab drew it."""
    import streamlit
    import ui

    app_uses(monkeypatch, dataclasses.replace(app_settings_now(), presenter_token="secret"))  # a viewer may follow
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/monitor.py").run()
    at.session_state["follow_presenter"] = True  # the sidebar's toggle (AppTest keeps it across a switch this way)
    at.run()
    assert at.title[0].value == "Monitor"  # the presenter has not moved since this viewer saw the step

    ui.get_lab().guide.go_to("free", token="secret", caller="test")
    real, asked = streamlit.switch_page, []
    monkeypatch.setattr(streamlit, "switch_page", lambda *a, **k: asked.append(a))  # this switch is lost
    at.run()
    assert asked and at.title[0].value == "Monitor"
    monkeypatch.setattr(streamlit, "switch_page", real)
    at.run()  # the next tick
    assert not at.exception, [e.value for e in at.exception]
    # the switch the script asks for carries no widget values, and Streamlit drops those of a page left so: the
    # toggle keeps its own (persist_state), so the step is drawn as a follower's, not a free viewer's
    assert at.title[0].value == "Guided lab" and at.session_state["guide_seen"][0] == "free"
    assert at.session_state["follow_presenter"] is True
    assert any("Following the presenter" in c.value for c in at.caption), [c.value for c in at.caption]
    asked.clear()  # and once there, no tick switches again
    monkeypatch.setattr(streamlit, "switch_page", lambda *a, **k: asked.append(a))
    at.switch_page("app_pages/guide.py").run()
    assert at.title[0].value == "Guided lab" and not asked


def test_a_findings_heading_names_the_step_it_comes_from():
    """Four findings headed "No verdict: ..." on a busy machine read the same in the summary and the report: each
    is headed after its step too; the sixth, which no step measures, keeps its own heading."""
    from engine.guide import BUSY, Finding, Guide
    from engine.messages import mark, translate

    busy = Finding(2, BUSY, mark("x"), True)
    assert translate(Guide.heading(busy), "en") == f"5 sequential via vLLM · {translate(BUSY, 'en')}"
    assert translate(Guide.heading(busy), "ko").startswith(translate(mark("5 sequential via vLLM"), "ko"))
    sixth = Finding(6, mark("The right engine for the job"), mark("x"), False)
    assert Guide.heading(sixth) == sixth.title


def test_a_repeated_steps_chart_says_it_is_the_last_run_under_its_title(app_lab):
    """Step 8's chart draws the last of its three runs beside their mean: that is said on a line of its own under
    the title, so a long Korean title running off the chart's edge cannot take it along (a screenshot lost it)."""
    import ui

    lab = ui.get_lab()
    runs = [_run("stream-300", "vllm", [(4.0 + i / 10, 300)]) for i in range(3)]
    for r in runs:
        lab.store.save(r)
    lab.guide._state.runs["streaming"] = [r.id for r in runs]
    lab.guide.go_to("streaming", token=None)
    for lang in ("en", "ko"):
        at = AppTest.from_file(APP, default_timeout=60)
        at.session_state["lang"] = lang
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        layout = json.loads(at.get("plotly_chart")[0].proto.spec)["layout"]
        note = translate(say("The last of {n} runs", n=3), lang)
        assert layout["title"]["subtitle"]["text"] == note
        assert note not in layout["title"]["text"]
