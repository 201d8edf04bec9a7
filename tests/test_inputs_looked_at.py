"""Inputs looked at before they run: a trace's replay time at its time scale and what looks wrong
in its timestamps (all equal, negative, likely in another unit, a replay of hours or faster than anything answers),
on the Load test page's preview and on the CLI; a large dataset says how far it is read, on the CLI as on the page,
and one too large for a run is refused before its prompts are counted."""
from __future__ import annotations

import json

import pytest

from engine.cli import run as cli_run
from engine.measure.workloads import datasets, traces
from engine.measure.workloads.base import WorkloadError

from .conftest import app_page, cli_in_process
from .said import read, reads, said, shown, tree, values

DEAD = "http://127.0.0.1:9"
REPLAY = "{n:,} requests over {span} at time scale {scale:g}."  # a trace's replay time


def _trace(times, unit: str = "ms", scale: float = 1.0) -> dict:
    data = "".join(json.dumps({"timestamp": t, "input_length": 8, "output_length": 4}) + "\n" for t in times).encode()
    return traces.plan(traces.parse(data, "t.jsonl", unit), scale).summary


MINUTES = "{x:,.0f} min"


@pytest.mark.parametrize("times, unit, scale, says, numbers", [
    ([5, 5, 5, 5], "ms", 1.0, "Every timestamp of {name} is the same, so all {n:,} requests go out at once",
     {"name": "t.jsonl", "n": 4}),
    ([0, 0, 0, 1000, 1000, 1000], "ms", 1.0,
     "{same:,} of the {n:,} requests of {name} share their timestamp with the one before", {"same": 4, "n": 6}),
    ([-100, -50, 0, 50], "ms", 1.0, "{name} has negative timestamps", {"name": "t.jsonl"}),
    ([0.1, 0.5, 1.2, 2.0], "ms", 1.0, "read as milliseconds: its timestamps are likely seconds",
     {"gap": {"id": "{x:,.1f} ms", "x": pytest.approx(0.7)}}),
    ([0, 3000, 60000, 120000], "s", 1.0, "read as seconds: its timestamps are likely milliseconds",
     {"gap": {"id": "{h} h {m} min", "h": 15, "m": 50}}),
    ([i * 10**6 for i in range(10)], "ms", 1.0, "read as milliseconds: its timestamps are likely microseconds",
     {"gap": {"id": MINUTES, "x": pytest.approx(1000 / 60)}}),
    ([i * 1000 for i in range(3000)], "ms", 1.0, "The replay takes {span} at time scale {scale:g}: a time scale of "
     "{less:g} replays it in {shorter}.", {"span": {"id": MINUTES, "x": pytest.approx(2999 / 60)}, "scale": 1.0,
                                           "less": 0.1, "shorter": {"id": MINUTES, "x": pytest.approx(2999 / 600)}}),
    ([i * 1000 for i in range(3000)], "ms", 0.001, "At time scale {scale:g} the replay sends {rate:,.0f} requests a "
     "second", {"scale": 0.001, "rate": pytest.approx(3000 / 2.999)}),
])
def test_a_trace_s_timestamps_are_looked_at(times, unit, scale, says, numbers):
    said = [tree(m) for m in traces.checks(_trace(times, unit, scale))]
    assert any(says in s["id"] and {k: s.get(k) for k in numbers} == numbers for s in said), said


def test_a_plausible_trace_passes_without_a_word_and_says_its_replay_time():
    summary = _trace([0, 400, 1100, 1500, 2300])
    assert traces.checks(summary) == []
    assert values(traces.duration_said(summary)) == {"n": 5, "span": {"x": pytest.approx(2.3)}, "scale": 1.0}
    long = traces.duration_said(_trace([i * 1000 for i in range(3000)]))  # 2,999 s: said in minutes
    assert values(long) == {"n": 3000, "span": {"x": pytest.approx(2999 / 60)}, "scale": 1.0}
    assert said(long.values["span"]).template.endswith(" min")


def test_the_cli_says_the_replay_time_and_the_warnings_before_it_runs(tmp_path):
    f = tmp_path / "secs.jsonl"
    f.write_text("".join(json.dumps({"timestamp": t, "input_length": 8, "output_length": 4}) + "\n"
                         for t in (0.1, 0.5, 1.2, 2.0)))
    p = cli_in_process("run", "trace-tiny", "--url", DEAD, "--trace", str(f))
    out = [line for line in p.stdout.splitlines() if not line.startswith("  ")]  # progress lines aside
    assert out[0].startswith("secs.jsonl: ") and read(REPLAY, out[0]) == {"n": "4", "span": "1.9 ms", "scale": "1"}, \
        p.stdout
    assert out[1].startswith("warning: ") and read(
        "The requests of {name} arrive {gap} apart on the median, read as milliseconds: its timestamps are likely "
        "seconds. Read them as seconds (time unit s), or the replay runs a thousand times too fast.", out[1]) == {
        "name": "secs.jsonl", "gap": "0.7 ms"}, p.stdout
    p = cli_in_process("run", "trace-tiny", "--url", DEAD, "--trace", str(f), "--time-unit", "s")
    assert reads(REPLAY, p.stdout) == [{"n": "4", "span": "1.9 s", "scale": "1"}], p.stdout
    assert "warning:" not in p.stdout


def test_the_page_previews_a_trace_s_replay_time_and_what_looks_wrong(lab):
    at = app_page("app_pages/load.py")
    at.selectbox(key="load_what").set_value("Trace replay").run()
    replays = shown(REPLAY, [m.value.replace("\\", "") for m in at.markdown])
    assert {"n": "40", "span": "15.5 s", "scale": "1"} in replays, replays
    at.selectbox(key="wl_trace_file").set_value("Upload a file").run()
    data = "".join(json.dumps({"timestamp": 7, "input_length": 8, "output_length": 4}) + "\n" for _ in range(3))
    at.file_uploader(key="wl_trace_upload").set_value(("same.jsonl", data.encode(), "application/json")).run()
    assert not at.exception
    warnings = [w.value.replace("\\", "") for w in at.warning]
    burst = ("Every timestamp of {name} is the same, so all {n:,} requests go out at once: a burst, not a replay. "
             "Check the timestamp column.")
    assert [read(burst, w) for w in warnings if read(burst, w)] == [{"name": "same.jsonl", "n": "3"}], warnings


def _dataset(tmp_path, n: int):
    f = tmp_path / "many.jsonl"
    f.write_text("".join(json.dumps({"prompt": f"question {i}"}) + "\n" for i in range(n)))
    return f


def test_a_large_dataset_says_how_far_it_is_read_on_the_cli(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_run.Reading, "EVERY_S", 0.0)  # every report printed: no test waits on the clock
    p = cli_in_process("run", "dataset-chat", "--url", DEAD, "--dataset", str(_dataset(tmp_path, 45_000)))
    lines = [line.strip() for line in p.stdout.splitlines()]
    assert "many.jsonl: 20,000 of 45,000 rows read" in lines and "many.jsonl: 45,000 of 45,000 rows read" in lines
    assert "many.jsonl: 45,000 of 45,000 prompts counted" in lines


def test_a_dataset_larger_than_a_run_is_refused_before_its_prompts_are_counted(tmp_path):
    ds = datasets.parse(_dataset(tmp_path, 100_001).read_bytes(), "many.jsonl")
    counted = []
    with pytest.raises(WorkloadError) as refused:
        datasets.plan(ds, report=lambda done, total, what: counted.append(done))
    assert said(refused.value).template.startswith("{name} holds {n:,} rows, and a load test sends at most {limit:,}")
    assert values(refused.value) == {"name": "many.jsonl", "n": 100_001, "limit": 100_000}
    assert counted == []
