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
        # the page that came second follows it, and says whose it is
        texts = [pg.locator("[data-testid=stMain]").inner_text() for pg in pages]
        second = [i for i, t in enumerate(texts) if "another app process on this data folder" in t]
        assert len(second) == 1, texts
        assert f"A vLLM server on port {vllm_port} was already started by another app process" in texts[second[0]] \
            or "This server was started by another app process" in texts[second[0]]
        # status only reports
        status = subprocess.run([sys.executable, "-m", "engine", "status", "--port", str(vllm_port)], cwd=ROOT,
                                env={**apps[0].env}, capture_output=True, text=True, timeout=300)
        assert status.returncode == 0 and json.loads(status.stdout)["pid"] == servers[0].pid
        assert proctree.alive(servers[0])
        # Stop on the first page: the other says who stopped it; nothing of ours is left
        first = 1 - second[0]
        button(pages[first], "Stop").click()
        expect(metric(pages[first], "State")).to_have_text("stopped", timeout=120000)
        expect(pages[second[0]].get_by_text("This server was stopped by another app process")).to_be_visible(
            timeout=60000)
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


# Each bounded input of the Load test page, a value outside its bounds, and the engine's sentence for it
# (the words LoadSpec.validate and cost.check_price say, the CLI's too).
OUT_OF_BOUNDS = [
    ("Number of requests", "0", "Run load test",
     "The number of requests must be a whole number from 1 to 100000, not 0."),
    ("Number of requests", "100001", "Run load test", "The number of requests must be a whole number from 1 to 100000"),
    ("Rate (requests/s)", "0", "Run load test", "The Poisson rate must be above 0 and at most 1000 requests/s, not 0"),
    ("TTFT limit (ms)", "0", None, "The TTFT limit must be a number of milliseconds above 0, not 0"),
    ("TPOT limit (ms)", "-5", None, "The TPOT limit must be a number of milliseconds above 0, not -5"),
    ("Price per GPU-hour", "1e30", None,
     "A price per GPU-hour of 1e+30 cannot be used: give a price from 0 to 1,000,000"),
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


@pytest.mark.parametrize("label,value,press,says", OUT_OF_BOUNDS, ids=[f"{c[0]}={c[1]}" for c in OUT_OF_BOUNDS])
def test_a_value_outside_its_bounds_gets_the_engines_sentence(browser, idle_app, label, value, press, says):
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
        expect(pg.get_by_text(says, exact=False).first).to_be_visible(timeout=30000)
    finally:
        ctx.close()
