"""Two real Streamlit apps on one data folder, Start pressed in both browsers at once:
one vLLM server tree; the page that came second follows it and says who started it; `python -m engine
status` leaves it running; Stop on one page is said as a stop, naming who, on the other; nothing is left.
And every bounded input of the Load test page given a value outside its bounds (item 3): the engine's
sentence appears (the one the CLI prints), instead of a red field and a press that does nothing."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest
from playwright.sync_api import expect

from engine.serving import proctree

from . import said
from .browser import (
    VIEWPORT,
    StreamlitApp,
    api_servers,
    button,
    described,
    free_port,
    goto,
    kill_recorded_server,
    metric,
)
from .conftest import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


FOLLOWS = ("A vLLM server on port {port} was already started by {who}, so this app follows it instead of starting a "
           "second one; Restart applies your settings.")
TOOK_OVER = "This server was started by {who}; the app found it running and took it over."
STOPPED_BY = "This server was stopped by {who}."
ANOTHER_APP = "another app process on this data folder (pid {pid})"


def _started_by_another_app(text: str) -> dict | None:
    """The values of "another app process … (pid N)" where a page says it follows a server another app started
    (at its press, or when it found the server running); None where it says neither."""
    found = said.read(FOLLOWS, text) or said.read(TOOK_OVER, text)
    return said.read(ANOTHER_APP, found["who"]) if found else None


def test_two_apps_pressing_start_together_run_one_server(browser, tmp_path):
    vllm_port, runtime, db = free_port(), tmp_path / "runtime", tmp_path / "history.sqlite"
    env = {"SERVING_LAB_VLLM_PORT": str(vllm_port), "SERVING_LAB_RUNTIME": str(runtime), "SERVING_LAB_DB": str(db),
           "SERVING_LAB_HOME": str(tmp_path)}
    apps = [StreamlitApp(env, tmp_path / f"streamlit-{n}.log") for n in (1, 2)]
    contexts = []
    try:
        for a in apps:
            a.start()
        contexts = [browser.new_context(viewport=VIEWPORT) for _ in apps]
        pages = [c.new_page() for c in contexts]
        for pg, a in zip(pages, apps):
            goto(pg, a, "server", title="vLLM server", timeout_ms=120000)
            pg.get_by_text("Enforce eager (no graphs)").click(timeout=180000)  # a loaded 2-core box draws slowly
            expect(button(pg, "Start")).to_be_enabled(timeout=30000)
        # both presses at the same moment, as two presenters (or a unit and a terminal) would
        for pg in pages:
            pg.evaluate("""() => { window.__start = [...document.querySelectorAll('button')]
                .find(b => /(^|\\s)Start$/.test(b.innerText.trim())); }""")
        for pg in pages:
            pg.evaluate("() => window.__start.click()")
        for pg in pages:
            expect(metric(pg, "State")).to_have_text(re.compile("starting|ready"), timeout=60000)
        servers = api_servers(runtime)
        assert len(servers) == 1, described(runtime)
        record = json.loads((runtime / f"server-{vllm_port}.json").read_text())
        assert record["pid"] == servers[0].pid
        # the page that came second follows it, and says whose it is: the other app's
        texts = [pg.locator("[data-testid=stMain]").inner_text() for pg in pages]
        whose = [_started_by_another_app(t) for t in texts]
        second = [i for i, w in enumerate(whose) if w is not None]
        assert len(second) == 1, texts
        assert int(whose[second[0]]["pid"]) == apps[1 - second[0]].proc.pid, texts[second[0]]
        # status only reports
        status = subprocess.run([sys.executable, "-m", "engine", "status", "--port", str(vllm_port)], cwd=ROOT,
                                env={**apps[0].env}, capture_output=True, text=True, timeout=300)
        assert status.returncode == 0 and json.loads(status.stdout)["pid"] == servers[0].pid
        assert proctree.alive(servers[0])
        # Stop on the first page: the other says who stopped it; nothing of ours is left
        first = 1 - second[0]
        button(pages[first], "Stop").click()
        expect(metric(pages[first], "State")).to_have_text("stopped", timeout=120000)
        stopped = pages[second[0]].get_by_text(said.on_page(STOPPED_BY)).first
        expect(stopped).to_be_visible(timeout=60000)
        by = said.read(ANOTHER_APP, said.read(STOPPED_BY, stopped.inner_text())["who"])
        assert by is not None and int(by["pid"]) == apps[first].proc.pid, stopped.inner_text()
        deadline = time.time() + 20
        while proctree.tagged(str(runtime.resolve())) and time.time() < deadline:
            time.sleep(0.2)
        assert not proctree.tagged(str(runtime.resolve()))
    finally:
        for c in contexts:
            c.close()
        for a in apps:
            a.stop()
        kill_recorded_server(runtime, vllm_port)
        for q, _ in proctree.tagged(str(runtime.resolve())):
            proctree.stop([q], grace_s=2)


# Each bounded input of the Load test page, a value outside its bounds, and the engine's sentence for it by its
# message id and values (what LoadSpec.validate, Slo and cost.check_price say, the CLI's too).
WHOLE = "{what} must be a whole number from {lo} to {hi}, not {v}."
RATE = "{what} must be above 0 and at most {limit:g} requests/s, not {rate}."
LIMIT = "The {name} limit must be a number of milliseconds above 0, not {value}."
PRICE = ("A price per GPU-hour of {price:g} cannot be used: give a price from 0 to 1,000,000 (any currency, for an "
         "hour of the whole machine).")
OUT_OF_BOUNDS = [
    ("Number of requests", "0", "Run load test", WHOLE, {"what": "The number of requests", "lo": 1, "hi": 100000,
                                                         "v": 0}),
    ("Number of requests", "100001", "Run load test", WHOLE, {"what": "The number of requests", "v": 100001}),
    ("Rate (requests/s)", "0", "Run load test", RATE, {"what": "The Poisson rate", "limit": 1000, "rate": 0}),
    ("TTFT limit (ms)", "0", None, LIMIT, {"name": "TTFT", "value": 0}),
    ("TPOT limit (ms)", "-5", None, LIMIT, {"name": "TPOT", "value": -5}),
    ("Price per GPU-hour", "1e30", None, PRICE, {"price": 1e30}),
]


FOLDED = {"TTFT limit (ms)": "Service-level objective (SLO)", "TPOT limit (ms)": "Service-level objective (SLO)",
          "Price per GPU-hour": "Price per GPU-hour (cost per million tokens)"}


@pytest.fixture(scope="module")
def idle_app(tmp_path_factory):
    """One app with no server for every bound below (each test gets a fresh browser context, so none sees
    another's input): an app start per value cost more than the checks themselves."""
    d = tmp_path_factory.mktemp("bounds")
    env = {"SERVING_LAB_VLLM_PORT": str(free_port()), "SERVING_LAB_RUNTIME": str(d / "runtime"),
           "SERVING_LAB_DB": str(d / "history.sqlite")}
    with StreamlitApp(env, d / "streamlit.log") as app:
        yield app


@pytest.mark.parametrize("label,value,press,says,values", OUT_OF_BOUNDS, ids=[f"{c[0]}={c[1]}" for c in OUT_OF_BOUNDS])
def test_a_value_outside_its_bounds_gets_the_engines_sentence(browser, idle_app, label, value, press, says, values):
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        pg = ctx.new_page()
        goto(pg, idle_app, "load_test", title="Load test")
        if label.startswith("Rate"):
            pg.get_by_text("At a rate", exact=True).click()
        elif label in FOLDED:  # inputs kept in a closed expander, so the first screen shows the results
            pg.get_by_text(FOLDED[label], exact=True).click()
        field = pg.get_by_label(label, exact=True).first
        field.wait_for(timeout=30000)
        field.fill(value)
        field.press("Enter" if press is None else "Tab")
        if press:
            button(pg, press).click()
        sentence = pg.get_by_text(said.on_page(says)).first
        expect(sentence).to_be_visible(timeout=30000)
        shown = said.read(says, sentence.inner_text())
        assert {k: shown[k] if isinstance(v, str) else float(shown[k].replace(",", "")) for k, v in values.items()} \
            == values, sentence.inner_text()
    finally:
        ctx.close()
