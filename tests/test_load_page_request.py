"""The request's shape on the Load test page (endpoint, sampling parameters, headers, an extra
body, LoRA modules with their weights) chosen under the form, sent and recorded with the run (a header's value
never), each bad one a sentence on the page; the code behind a run writes the same request."""
from __future__ import annotations

import json

import pytest

from app_pages.parts.sweep import AXES
from engine.measure.load.shape import shape_said
from tests.conftest import app_page, wait_done
from tests.said import chain, read


@pytest.fixture()
def sent(lab, monkeypatch):
    """The specs the page hands to Lab.run_load (no server needed to see what Run would send)."""
    specs = []
    monkeypatch.setattr(lab, "run_load", lambda spec, **kw: specs.append(spec))
    return specs


def _run(at):
    next(b for b in at.button if b.label == "Run load test").click().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _shape(at, **values):
    for key, value in values.items():
        widget = next(w for w in (*at.selectbox, *at.number_input, *at.text_input, *at.text_area)
                      if w.key == f"load_{key}")
        widget.set_value(value)
    return at


def test_the_request_boxes_reach_the_spec_and_a_headers_value_never_its_record(lab, sent):
    at = app_page("app_pages/load.py")
    _shape(at, endpoint="Completions (prompt as text)", temperature=0.0, top_p=0.9, top_k=5,
           header_name_0="X-Request-Source", header_value_0="sk-very-secret", extra_body='{"seed": 7}',
           lora_modules="sql chat", lora_weights="3 1", lora_assignment="At random (seeded)")
    _run(at)
    assert not at.error, [e.value for e in at.error]
    spec, = sent
    assert (spec.endpoint, spec.temperature, spec.sampling) == ("completions", 0.0, {"top_p": 0.9, "top_k": 5})
    assert spec.headers == {"X-Request-Source": "sk-very-secret"} and spec.extra_body == {"seed": 7}
    assert (spec.lora_modules, spec.lora_weights, spec.lora_assignment) == (["sql", "chat"], [3, 1], "random")
    recorded = json.dumps(spec.as_dict())
    assert "sk-very-secret" not in recorded and '"headers": ["X-Request-Source"]' in recorded


def test_only_the_first_header_row_shows_an_example_name(lab):
    """Seen at 1920x1080: "X-Request-Source" in grey in all three rows read as three headers already set."""
    at = app_page("app_pages/load.py")
    names = {w.key: w.placeholder for w in at.text_input if w.key.startswith("load_header_name_")}
    assert names["load_header_name_0"] == "X-Request-Source"
    assert {k: v for k, v in names.items() if k != "load_header_name_0"} == {"load_header_name_1": "",
                                                                             "load_header_name_2": ""}


def test_the_request_boxes_left_alone_send_the_lab_s_plain_chat_request(lab, sent):
    _run(app_page("app_pages/load.py"))
    spec, = sent
    assert (spec.endpoint, spec.temperature, spec.sampling, spec.headers, spec.extra_body, spec.lora_modules) == \
        ("chat", 0.7, {}, {}, {}, [])


@pytest.mark.parametrize("values, says", [
    ({"extra_body": "{seed: 1}"}, "The extra body is not JSON (Expecting property name enclosed in double quotes)"),
    ({"extra_body": "[1]"}, "The extra body must be a JSON object of fields to add"),
    ({"extra_body": '{"stream": false}'}, "The extra body may not set stream"),
    ({"header_name_0": "Bad Name", "header_value_0": "sk-1"}, "'Bad Name' is not an HTTP header name"),
    ({"header_value_0": "sk-only-a-value"}, "A header takes NAME:VALUE"),
    ({"lora_modules": "a b", "lora_weights": "3"}, "1 LoRA weight was given for 2 LoRA modules"),
    ({"lora_weights": "x"}, "The LoRA weights are whole numbers separated by spaces, e.g. 3 1, not 'x'."),
    ({"top_p": 1.5}, "top_p must be above 0 and at most 1, not 1.5"),
    ({"endpoint": "Embeddings (a pooling model)", "top_k": 3}, "An embedding samples no tokens, so top_k does not"),
])
def test_a_bad_request_box_is_one_sentence_and_nothing_runs(lab, sent, values, says):
    at = _run(_shape(app_page("app_pages/load.py"), **values))
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and says in errors[0].replace("\\", ""), errors
    assert "sk-" not in errors[0] and not sent


def _rate_sweep_runs():
    """make_slo_sweep's levels as a sweep over arrival rates (1, 2, 4 … 64 requests/s)."""
    from .test_figures import make_slo_sweep

    runs = make_slo_sweep()
    for i, r in enumerate(runs):
        r.load.shape, r.load.rate, r.extra.sweep_level = "poisson", float(2 ** i), 0
    return runs


def test_a_sweep_and_a_search_by_rate_reach_the_lab_with_their_rates(lab, monkeypatch):
    asked = []
    monkeypatch.setattr(lab, "run_sweep", lambda spec, levels, by="concurrency", **kw: asked.append(("sweep", levels,
                                                                                                      by)))
    monkeypatch.setattr(lab, "run_slo_search", lambda spec, slo, low, high, tolerance, by="concurrency", **kw:
                        asked.append(("search", (low, high, tolerance), by)))
    at = app_page("app_pages/load.py")
    at.radio(key="sweep_by").set_value("Arrival rate").run()
    assert not [w for w in at.multiselect if w.label == "Levels"]  # the levels in flight give way to the rates
    at.text_input(key="sweep_rates").set_value("4, 0.5,1").run()
    next(b for b in at.button if b.key == "run_rate_sweep").click().run()
    next(b for b in at.button if b.label == AXES["rate"].search).click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert asked == [("sweep", [0.5, 1.0, 4.0], "rate"), ("search", (0.5, 4.0, 0.25), "rate")]
    at.text_input(key="sweep_rates").set_value("1, fast").run()
    said = [e.value.replace("\\", "") for e in at.error]
    assert [read("The rates '{text}' are not a comma-separated list of numbers, e.g. 0.5,1,2,4.", e) for e in said] == [
        {"text": "1, fast"}], said
    assert next(b for b in at.button if b.key == "run_rate_sweep").disabled


def test_a_finished_rate_sweep_draws_rates_on_its_axis_and_says_the_highest_that_met_the_slo(lab):
    import time

    from engine.jobs import JobManager
    from engine.measure.judge.slo import Slo, rates_said

    jobs, lab.jobs = lab.jobs, JobManager()
    try:
        runs = _rate_sweep_runs()
        job = lab.jobs.submit("sweep", "sweep 1…64 requests/s", lambda job: runs)
        deadline = time.time() + 30
        while job.active and time.time() < deadline:
            time.sleep(0.05)
        at = app_page("app_pages/load.py")
        charts = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
        sweep, = [c for c in charts if c["layout"]["title"]["text"].startswith("Rate sweep")]
        assert sweep["data"][0]["x"] == [1, 2, 4, 8, 16, 32, 64]
        assert sweep["layout"]["xaxis"]["title"]["text"] == "Arrival rate (requests/s)"
        said = str(rates_said(runs, Slo(ttft_ms=2000, tpot_ms=100)))  # the page's default SLO
        assert said in [m.value.replace("\\", "") for m in at.markdown]
        assert not [c for c in charts if "Pareto" in c["layout"]["title"]["text"]]  # no point "in flight" to star
    finally:
        lab.jobs = jobs


@pytest.mark.server
def test_a_shaped_request_runs_through_the_page_on_the_real_server_and_is_said_and_written(lab, vllm_server):
    """The completions endpoint, a sampling parameter, a header and an extra body chosen on the page reach the real
    server (min_tokens holds each answer to its length), the run says them, and the code behind it sends them."""
    wait_done(lab.connect(vllm_server.base_url), 60)
    try:
        at = app_page("app_pages/load.py")
        next(w for w in at.slider if w.label == "Max tokens per answer").set_value(16)
        at.toggle(key="load_warmup").set_value(False)
        _shape(at, endpoint="Completions (prompt as text)", top_k=5, header_name_0="X-Request-Source",
               header_value_0="sk-page-secret", extra_body='{"min_tokens": 16}')
        _run(at)
        assert not at.error, [e.value for e in at.error]
        job = lab.latest_job("load")
        wait_done(job)
        at.run()
        run = job.result
        assert run.load.endpoint == "completions" and all(r.output_tokens == 16 for r in run.measured)
        said = [c.value.replace("\\", "") for c in at.caption]
        assert str(shape_said(run.load)) in said, said  # the run's recorded shape (read by its parts below)
        assert chain(shape_said(run.load).values["parts"]) == [
            {"id": "the {endpoint} endpoint", "endpoint": "completions"}, {"id": "{name} {value}", "name": "top_k",
                                                                          "value": "5"},
            {"id": "extra body {json}", "json": '{"min_tokens": 16}'},
            {"id": "headers {names} (values not recorded)", "names": "X-Request-Source"}]
        code = next(c.value for c in at.code if "AsyncOpenAI" in c.value)
        assert "client.completions.create(" in code and '"min_tokens": 16' in code and '"top_k": 5' in code
        assert 'os.environ["X_REQUEST_SOURCE"]' in code and "sk-page-secret" not in code
        assert "sk-page-secret" not in lab.store.export_json([run.id])
    finally:
        lab.detach()


def test_the_request_boxes_shape_the_sweep_the_search_and_the_pair_too(lab, monkeypatch):
    """One request shape for every run the page starts: the boxes above the forms reach the sweep's, the SLO
    search's and the pair's specs as they reach the load test's; a bad one is the same sentence there, and nothing
    runs."""
    asked = []
    monkeypatch.setattr(lab, "run_sweep", lambda spec, levels, by="concurrency", **kw: asked.append(("sweep", spec)))
    monkeypatch.setattr(lab, "run_slo_search", lambda spec, slo, low, high, tolerance, by="concurrency", **kw:
                        asked.append(("search", spec)))
    monkeypatch.setattr(lab, "run_side_by_side", lambda url, spec, key=None, **kw: asked.append(("pair", spec)))
    at = _shape(app_page("app_pages/load.py"), endpoint="Completions (prompt as text)", temperature=0.0, top_p=0.9,
                header_name_0="X-Team", header_value_0="sk-team", extra_body='{"seed": 7}', lora_modules="sql chat")
    at.run()
    next(b for b in at.button if b.label == "Run sweep").click().run()
    next(b for b in at.button if b.label == AXES["concurrency"].search).click().run()
    at.text_input(key="pair_url").set_value("http://127.0.0.1:8001")
    next(b for b in at.button if b.label == "Run on both servers").click().run()
    assert not at.exception and not at.error, [e.value for e in [*at.exception, *at.error]]
    assert [kind for kind, _spec in asked] == ["sweep", "search", "pair"]
    for kind, spec in asked:
        assert (spec.endpoint, spec.temperature, spec.sampling, spec.headers, spec.extra_body, spec.lora_modules) == \
            ("completions", 0.0, {"top_p": 0.9}, {"X-Team": "sk-team"}, {"seed": 7}, ["sql", "chat"]), kind
    asked.clear()
    _shape(at, extra_body="{seed: 1}").run()
    next(b for b in at.button if b.label == "Run sweep").click().run()
    said = [e.value.replace("\\", "") for e in at.error]
    assert len(said) == 1 and said[0].startswith("The extra body is not JSON"), said
    assert not asked
