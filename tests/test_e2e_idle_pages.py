"""An open page whose content stands still sends the browser nothing to draw again, while a change still reaches it:
a follower of the guided lab is taken to the presenter's next step, and the Load test page keeps a finished run's
charts without redrawing them. Real Chromium and a real app; the load test goes to the fake of tests/fakes.py,
connected by URL (no vLLM: the runs are not what is tested). The idle windows are counted in the page's own
reruns (its watchers'), not in seconds, so a slow machine lengthens them and a fast one does not shorten them."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import expect
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from engine import guide as g

from .browser import StreamlitApp, button, goto, metric, press_until
from .conftest import free_port
from .fakes import FakeOpenAIServer

pytestmark = [pytest.mark.e2e]

TOKEN = "idle-presenter"
SCREEN = {"width": 1400, "height": 1000}
RUNS = 5  # script runs watched (each a timed fragment's rerun at least a second apart): the idle window
LIVE_MS = 60000  # a liveness bound for every wait: a busy 2-core machine reruns slowly


class Received:
    """What the app sent one page over its websocket: elements (new, or a chart the browser cached, by reference)
    and finished script runs (the page's own, its fragments' included)."""

    def __init__(self, page) -> None:
        self.elements, self.runs = 0, 0
        page.on("websocket", lambda ws: ws.on("framereceived", self._frame))

    def _frame(self, payload) -> None:
        if isinstance(payload, str):
            return
        msg = ForwardMsg.FromString(payload)
        kind = msg.WhichOneof("type")
        if kind == "ref_hash" or (kind == "delta" and msg.delta.WhichOneof("type") == "new_element"):
            self.elements += 1
        elif kind == "script_finished":
            self.runs += 1

    def elements_over_idle_runs(self, page) -> int:
        """The elements sent while the page reran RUNS more times (it waits for them: a liveness bound)."""
        page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=LIVE_MS)
        page.wait_for_timeout(2000)  # charts and the last rerun's messages are in
        elements, runs = self.elements, self.runs
        for _ in range(LIVE_MS // 250):
            if self.runs >= runs + RUNS:
                break
            page.wait_for_timeout(250)
        assert self.runs >= runs + RUNS, f"the page reran {self.runs - runs} times in {LIVE_MS // 1000} s"
        return self.elements - elements


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("idle")
    env = {"SERVING_LAB_RUNTIME": str(tmp / "runtime"), "SERVING_LAB_DB": str(tmp / "history.sqlite"),
           "SERVING_LAB_PRESENTER_TOKEN": TOKEN, "SERVING_LAB_LANG": "en", "SERVING_LAB_VLLM_PORT": str(free_port())}
    with StreamlitApp(env, tmp / "streamlit.log") as a:
        yield a
        print(f"--- streamlit log ---\n{a.log_tail()}")


def _presenter(page) -> None:
    page.locator("[data-testid=stSidebar] input[type=password]").fill(TOKEN)
    page.keyboard.press("Enter")


def _saved(app) -> str | None:
    path = g.guide_path(Path(app.env["SERVING_LAB_DB"]))
    return json.loads(path.read_text())["current"] if path.exists() else None


def test_a_follower_on_a_still_step_is_sent_nothing_until_the_presenter_moves(browser, app):
    presenter_ctx, follower_ctx = (browser.new_context(viewport=SCREEN) for _ in range(2))
    presenter, follower = presenter_ctx.new_page(), follower_ctx.new_page()
    try:
        got = Received(follower)
        goto(follower, app, "", title="Guided lab")
        switch = follower.locator("[data-testid=stSidebar]").get_by_role("switch", name="Follow the presenter")
        press_until(follower, follower.locator("[data-testid=stSidebar]").get_by_text("Follow the presenter"),
                    switch.is_checked)
        expect(follower.get_by_text(re.compile(r"^Following the presenter: step 1 of"))).to_be_visible()
        assert got.elements_over_idle_runs(follower) == 0

        goto(presenter, app, "", title="Guided lab")
        _presenter(presenter)
        expect(button(presenter, "Next step")).to_be_enabled(timeout=LIVE_MS)
        press_until(presenter, button(presenter, "Next step"), lambda: _saved(app) == "free")
        expect(follower.get_by_role("heading", name="2. Free the memory")).to_be_visible(timeout=LIVE_MS)
    finally:
        presenter_ctx.close()
        follower_ctx.close()


def test_the_load_page_after_a_finished_run_is_sent_nothing_while_it_stands_still(browser, app):
    ctx = browser.new_context(viewport=SCREEN)
    page = ctx.new_page()
    try:
        with FakeOpenAIServer(models=("ok",)) as fake:
            goto(page, app, "server", title="vLLM server")
            _presenter(page)
            page.get_by_text("Connect to an existing server").first.click()
            page.get_by_role("textbox", name="Server URL").fill(fake.base_url + "/v1")
            button(page, "Connect").click()
            expect(page.get_by_text("every page measures this server")).to_be_visible(timeout=LIVE_MS)
            got = Received(page)
            goto(page, app, "load_test", title="Load test")  # a new session: the token again
            _presenter(page)
            page.get_by_role("spinbutton", name="Number of requests").fill("2")
            button(page, "Run load test").click()
            expect(metric(page, "OK / failed")).to_have_text("2 / 0", timeout=LIVE_MS)
            expect(page.locator(".js-plotly-plot").first).to_be_visible()
            assert got.elements_over_idle_runs(page) == 0
    finally:
        ctx.close()
