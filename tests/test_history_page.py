"""The History page with the rows a room really meets: failed runs, hostile labels, rows an older version or
a hand edit left odd. Driven through app.py with Streamlit's AppTest, on this module's own history file."""
from __future__ import annotations

import json
import sqlite3

import pytest
from streamlit.testing.v1 import AppTest

from tests.test_store import insert_raw, make_run
from engine.results.records import Warmth
from engine.measure.load.shape import shape_said
from tests.conftest import app_page
from tests.said import chain, reads

HTML_LABEL = "<b>bold</b> <a href='https://example.com'>link</a>"


@pytest.fixture(scope="module", autouse=True)
def lab(lab):
    """The app's Lab (conftest) on a history holding good, failed, hostile and damaged runs."""
    store = lab.store
    store.save(make_run(1_764_500_000.0, "good run"))
    store.save(make_run(1_764_500_100.0, HTML_LABEL))
    cold = make_run(1_764_499_000.0, "cold run")  # the oldest: tests below rename the newest
    cold.extra.warmth = Warmth(cold=True, why="first", batch_size=4, instance="i")
    store.save(cold)
    failed = make_run(1_764_500_200.0, "all failed")
    for r in failed.records:
        r.error, r.end_time, r.first_token_time, r.chunk_times = "HTTP 400: max_tokens is too large", None, None, []
    failed.summary.output_throughput = 0.0
    store.save(failed)
    with sqlite3.connect(store.path) as c:
        insert_raw(c, make_run(label="from the far future"), id="future", started_at=1e20)
        insert_raw(c, make_run(label="unreadable summary"), id="badjson", summary="{oops", config="[1, 2]")
        insert_raw(c, make_run(label="numbers as text"), id="textnum", duration="long", n_requests="many")
    return lab


def page() -> AppTest:
    return app_page("app_pages/history.py")


def chart_spec(at: AppTest) -> str:
    return at.get("plotly_chart")[0].proto.spec


def select(at: AppTest, *labels: str) -> AppTest:
    table = at.dataframe[0]
    runs = list(table.value["run"])
    at.session_state[table.key] = {"selection": {"rows": [runs.index(x) for x in labels], "columns": [],
                                                 "cells": []}}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_every_row_is_listed_with_its_status(lab):
    at = page()
    df = at.dataframe[0].value
    status = dict(zip(df["run"], df["status"]))
    assert status["good run"] == "◐ some failed" and status["all failed"] == "✗ failed"
    assert status["from the far future"] == status["unreadable summary"] == "⚠ damaged"
    assert df.loc[df["run"] == "from the far future", "started"].item() == "unknown"
    assert status[HTML_LABEL] == "◐ some failed"  # the label is text in the table, shown as typed


def test_failed_runs_stay_out_of_the_chart_unless_included(lab):
    at = page()
    assert "all failed" not in chart_spec(at) and "good run" in chart_spec(at)
    assert any("1 failed run is left out" in c.value for c in at.caption)
    at.toggle(key="history_include_failed").set_value(True).run()
    assert "all failed" in chart_spec(at)


def test_labels_reach_the_chart_as_text(lab):
    ticks = json.loads(chart_spec(page()))["layout"]["xaxis"]["ticktext"]  # one position per run, its label here
    label = next(x for x in ticks if "bold" in x)
    assert label.startswith("&lt;b&gt;bold&lt;/b&gt;<br>&lt;a<br>href=") and "<a" not in label


def test_a_failed_run_says_why(lab):
    at = select(page(), "all failed")
    assert any("5 of 5 requests failed" in m.value for m in at.markdown)
    causes = [w.value for w in at.warning if "refused" in w.value]  # one sentence per cause, as on the Load test
    assert len(causes) == 1 and "All 5 requests were refused" in causes[0] and "max\\_tokens is too large" in causes[0]


def test_a_damaged_row_can_be_selected_and_deleted(lab):
    at = select(page(), "from the far future")
    warnings = " ".join(w.value for w in at.warning)
    assert "start time is not a date" in warnings and "delete it" in warnings
    next(b for b in at.button if b.label == "Delete 1 selected").click().run()
    assert not at.exception
    assert "future" not in lab.store and "from the far future" not in list(at.dataframe[0].value["run"])
    assert any("Deleted 1 run." in s.value for s in at.success)


def test_exports_are_built_only_when_asked(lab, monkeypatch):
    calls = []
    monkeypatch.setattr(lab.store, "export_json", lambda *a, **k: calls.append("json") or "[]")
    monkeypatch.setattr(lab.store, "export_csv", lambda *a, **k: calls.append("csv") or "")
    at = page()
    select(at, "good run")
    assert [b.label for b in at.get("download_button")] == ["Export JSON (1 selected)", "Export CSV (1 selected)",
                                                             "Export CSV per run (1 selected)",
                                                             "HTML report (1 selected)"]
    assert calls == []


def test_the_selected_runs_download_as_one_html_report(lab, monkeypatch):
    """Built when clicked (report.report_html, in the viewer's language), of the readable runs selected only."""
    at = page()
    report = next(b for b in at.get("download_button") if b.proto.id.endswith("history_report"))
    assert report.label == "HTML report (select runs)" and report.proto.disabled
    asked = []
    from engine.figures import report as report_mod

    real = report_mod.report_html
    monkeypatch.setattr(report_mod, "report_html",
                        lambda history, ids, lang="en": asked.append((ids, lang)) or real(history, ids, lang))
    select(at, "good run", HTML_LABEL, "unreadable summary")
    report = next(b for b in at.get("download_button") if b.proto.id.endswith("history_report"))
    assert report.label == "HTML report (2 selected)" and not report.proto.disabled and asked == []
    ids = {r.label: r.id for r in lab.history.runs()}
    text = report_mod.report_html(lab.history, [ids["good run"], ids[HTML_LABEL]])
    assert "good run" in text and "&lt;b&gt;bold&lt;/b&gt;" in text and "<b>bold</b>" not in text


def test_the_page_reads_the_store_once_per_change(lab, monkeypatch):
    reads = []
    real = type(lab.store).list
    monkeypatch.setattr(lab.store, "list", lambda *a, **k: reads.append(1) or real(lab.store, *a, **k))
    at = page()
    at.run()
    at.run()
    assert len(reads) <= 1
    lab.store.rename(lab.store.list_cached()[0].id, "renamed")
    at.run()
    assert "renamed" in list(at.dataframe[0].value["run"])


def test_export_leaves_secrets_and_damaged_runs_out(lab):
    objs = json.loads(lab.store.export_json())
    assert {o["serving_lab"]["id"] for o in objs}.isdisjoint({"badjson", "future"})
    assert all("api_key" not in o["serving_lab"]["load"] for o in objs)


def test_cold_runs_are_labelled_and_a_price_adds_their_cost(lab):
    at = page()
    df = at.dataframe[0].value
    warmth = dict(zip(df["run"], df["warmth"]))
    assert warmth["cold run"] == "❄ cold" and warmth["good run"] == ""  # saved before it was recorded: unknown
    assert "cost / M output tokens" not in df.columns  # blank by default
    at.number_input(key="gpu_price_history").set_value(3.6).run()
    df = at.dataframe[0].value
    # 3.6 an hour over the run's 0.6 s, spread over its 80 output tokens: 7.5 a million
    assert df.loc[df["run"] == "cold run", "cost / M output tokens"].item() == pytest.approx(7.5)
    at = select(at, "cold run")
    from engine.measure.judge import warmth as judged

    cold = lab.store.load(next(row.id for row in lab.store.list() if row.label == "cold run"))
    said = [w.value.replace("\\", "") for w in at.warning]  # shown as typed: markdown escaped
    assert any(judged.said(cold.extra) in w for w in said) and cold.extra.warmth.batch_size == 4, said
    cost = judged.warmup_cost(cold.records)
    assert cost.requests == 1 and any(cost.said in c.value.replace("\\", "") for c in at.caption)


def test_two_sets_of_repeats_of_one_label_are_told_apart_and_judged_against_noise(lab):
    """Two groups of repeats of the identical workload read "'X' differs from 'X' … beyond noise". Now
    each set is named by its start too, and an A/A pair is no measurable difference."""
    from engine.messages import when

    runs = []
    for group, start, values in (("g1", 1_764_600_000.0, (300.0, 304.0, 298.0)), ("g2", 1_764_600_600.0,
                                                                                (301.0, 299.0, 303.0))):
        for i, v in enumerate(values):
            r = make_run(start + i, "repeated")
            r.summary.output_throughput = v
            r.extra.repeat.group, r.extra.repeat.index, r.extra.repeat.total = group, i + 1, 3
            runs.append(r)
    for r in runs:
        lab.store.save(r)
    try:
        at = page()
        said = " ".join(m.value.replace("\\", "") for m in at.markdown)  # the chart's caption (ui.chart)
        first, second = (when(t, "en", "time") for t in (1_764_600_000.0, 1_764_600_600.0))  # as the table writes
        within = reads("{name}: no measurable difference on this machine between {a} and {b} (measured {effect}; "
                       "{interval}, which holds no change; {how}).", said)
        assert within and within[0]["name"] == "Output throughput", said
        assert {within[0]["a"], within[0]["b"]} == {f"repeated from {first}", f"repeated from {second}"}  # by start
        assert within[0]["how"].endswith("3 runs each"), said
        assert "differs from" not in said
    finally:
        lab.store.delete([r.id for r in runs])


def test_a_runs_request_shape_is_said_in_its_details_and_no_header_value_anywhere(lab):
    """What a run's requests carried beyond the plain chat request (the Load test's request boxes, the
    CLI's options) is said in History's details as on the Load test page; a header by its name only."""
    from engine.measure.load.spec import LoadSpec

    run = make_run(1_764_400_000.0, "shaped run")
    spec = LoadSpec(base_url="http://127.0.0.1:9", model="m", prompts=["hi"], endpoint="completions",
                    sampling={"top_p": 0.9}, headers={"X-Team": "sk-team-secret"}, extra_body={"seed": 3},
                    lora_modules=["sql", "chat"], lora_weights=[3, 1])
    run.load = type(run.load).from_dict(spec.as_dict())
    lab.store.save(run)
    try:
        at = select(page(), "shaped run")
        shown = [c.value.replace("\\", "") for c in at.caption]
        said = shape_said(lab.history.run(run.id).load)  # the stored run's shape (its parts: test_request_shape)
        assert said is not None and str(said) in shown, shown
        assert [p["id"] for p in chain(said.values["parts"])] == [
            "the {endpoint} endpoint", "{name} {value}", "extra body {json}", "headers {names} (values not recorded)",
            "LoRA {names} in turn"]
        assert "sk-team-secret" not in json.dumps([e.value for e in at.json]) + lab.store.export_json([run.id])
    finally:
        lab.store.delete([run.id])
