"""Helpers for the browser tests: headless Chromium, `streamlit run` on a free port, adoption records.

Chromium is Debian's /usr/bin/chromium (Playwright's own download is not used); override with
$SERVING_LAB_CHROMIUM.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator
from urllib.parse import urlparse

import httpx
import psutil
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import expect

from engine.serving import proctree
from scripts.shoot import CHROMIUM_ARGS

from .conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = os.environ.get("SERVING_LAB_CHROMIUM", "/usr/bin/chromium")
# Streamlit scrolls inside its own container, so a tall viewport is what makes a "full page" shot.
VIEWPORT = {"width": 1400, "height": 2200}
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
# Playwright's assertions wait 5 s by default: a rerun of a page on a 2-core machine running two test workers,
# vLLM and Chromium can take longer. A liveness bound, not a timing: each assertion still returns when it holds.
expect.set_options(timeout=30_000)


def launch_chromium(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)


class StreamlitApp:
    """`streamlit run app.py` in its own process group, on a free port, with extra env vars.
    Use as a context manager; the log is kept in `log_path` for failure reports."""

    def __init__(self, env: dict[str, str], log_path: Path, port: int | None = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "StreamlitApp":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout_s: float = 60) -> None:
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(self.port),
             "--server.headless", "true", "--server.address", "127.0.0.1",
             "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if httpx.get(self.url + "/_stcore/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"streamlit did not answer on {self.url} within {timeout_s:.0f} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)
        except ProcessLookupError:
            pass

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"


@contextmanager
def adopting_app(vllm_server, folder: Path, **env: str) -> Iterator[StreamlitApp]:
    """An app that adopts the session's vLLM server (conftest's vllm_server) from the record VLLMServer wrote in
    $SERVING_LAB_RUNTIME, as after an app restart; its history in `folder`, `env` on top. With
    SERVING_LAB_TEST_URL (a server started by hand, no record) a record is written for the local process
    listening there, and removed afterwards; the test is skipped when no local process listens."""
    import pytest

    port = urlparse(vllm_server.base_url).port
    runtime = Path(os.environ["SERVING_LAB_RUNTIME"])
    written = None
    if vllm_server.server is None:
        written = write_adoption_record(runtime, port)
        if written is None:
            pytest.skip(f"no local vLLM process listens on port {port} ({vllm_server.base_url}), so the app "
                        "cannot adopt it: unset SERVING_LAB_TEST_URL to let the fixture start one")
    else:
        assert vllm_server.server.record_path.exists(), "the fixture's server left no record to adopt"
    env = {"SERVING_LAB_VLLM_PORT": str(port), "SERVING_LAB_RUNTIME": str(runtime),
           "SERVING_LAB_DB": str(folder / "history.sqlite"), **env}
    try:
        with StreamlitApp(env, folder / "streamlit.log") as a:
            yield a
            print(f"--- streamlit log ---\n{a.log_tail()}")
    finally:
        if written is not None:
            written.unlink(missing_ok=True)


def goto(page, app: StreamlitApp, path: str = "", title: str | None = None, timeout_ms: int = 30000) -> None:
    """Open a page of the app (url path as st.navigation derives it from the file name) and wait for its title."""
    page.goto(f"{app.url}/{path}")
    page.wait_for_selector("[data-testid=stApp]", timeout=timeout_ms)
    if title:
        page.get_by_role("heading", name=title).first.wait_for(timeout=timeout_ms)


def settle(page) -> None:
    """Until Streamlit has finished the run and the page stops growing: charts are drawn after the script
    ends, and a page's timed fragments keep redrawing (no idle moment to wait for)."""
    page.wait_for_function("() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=60000)
    shape = "() => [document.querySelectorAll('.js-plotly-plot .main-svg').length, " \
            "document.querySelector('[data-testid=stMainBlockContainer]').scrollHeight]"
    last = None
    for _ in range(30):
        page.wait_for_timeout(1000)
        if (now := page.evaluate(shape)) == last:
            return
        last = now


def metric(page, label: str):
    """The value element of the st.metric with this label."""
    box = page.locator("[data-testid=stMetric]").filter(
        has=page.locator("[data-testid=stMetricLabel]", has_text=re.compile(rf"^\s*{re.escape(label)}\s*$")))
    return box.locator("[data-testid=stMetricValue]").first


def button(page, label: str):
    """The button whose label is exactly `label` (its accessible name may start with a material icon's name)."""
    # an optional icon name first ("play_arrow Start"), never other words ("Help for Start": a metric's help)
    # never Streamlit's own header "Stop" (shown while a script runs): strict mode would see two
    return page.get_by_role("button", name=re.compile(rf"^([a-z_]+\s)?{re.escape(label)}$")) \
        .and_(page.locator("button:not([kind=header])"))


def screenshot(page, name: str) -> Path:
    """artifacts/screenshots/<name>.png of the whole page. Streamlit scrolls inside its main container, which
    a full_page shot does not unroll, so the viewport is stretched to the content's height for the shot."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    out = SCREENSHOTS / f"{name}.png"
    size = page.viewport_size or VIEWPORT
    content = page.evaluate("""() => {
        const m = document.querySelector('[data-testid=stMain]') || document.scrollingElement;
        return m ? m.scrollHeight : 0; }""")
    tall = min(max(int(content or 0), size["height"]), 12000)
    if tall > size["height"]:
        page.set_viewport_size({"width": size["width"], "height": tall})
        page.wait_for_timeout(300)  # one layout pass
    try:
        page.screenshot(path=str(out), full_page=True)
    finally:
        if tall > size["height"]:
            page.set_viewport_size(size)
    return out


# -- adopting a server that was started by hand ------------------------------------------------------
def _arg(argv: list[str], flag: str) -> str | None:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def write_adoption_record(runtime_dir: Path, port: int) -> Path | None:
    """Write runtime_dir/server-<port>.json for a vLLM API server already listening on `port`, in the
    format engine.serving.server.VLLMServer._write_record uses, so an app started with SERVING_LAB_RUNTIME=runtime_dir
    and SERVING_LAB_VLLM_PORT=port adopts it. The log is the server's stdout file, when it writes to one.
    Returns None when no local vLLM process listens there (e.g. the URL points to another machine)."""
    from engine.serving.config import API_SERVER_MODULE, ServerConfig

    proc = None
    for c in psutil.net_connections(kind="inet"):
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
            try:
                p = psutil.Process(c.pid)
                # uvicorn may listen in a child; walk up to the API server process.
                while p is not None and API_SERVER_MODULE not in " ".join(p.cmdline()):
                    p = p.parent()
            except psutil.Error:
                p = None
            if p is not None:
                proc = p
                break
    if proc is None:
        return None
    argv = proc.cmdline()
    cfg = ServerConfig(
        model=_arg(argv, "--model") or "", served_model_name=_arg(argv, "--served-model-name"),
        max_model_len=int(_arg(argv, "--max-model-len") or 2048), port=port,
        host=_arg(argv, "--host") or "127.0.0.1",
    )
    log = Path(os.readlink(f"/proc/{proc.pid}/fd/1"))
    if not log.is_file():
        runtime_dir.mkdir(parents=True, exist_ok=True)
        log = runtime_dir / f"server-{port}.log"
        log.touch()
    rec = {
        "pid": proc.pid, "since_boot": proctree.since_boot(proc), "port": port, "argv": argv,
        "config": cfg.to_dict() | {"api_key": None}, "started_at": proc.create_time(), "log": str(log),
    }
    runtime_dir.mkdir(parents=True, exist_ok=True)
    path = runtime_dir / f"server-{port}.json"
    path.write_text(json.dumps(rec, indent=2))
    return path


def kill_recorded_server(runtime_dir: Path, port: int) -> None:
    """Last-resort cleanup after a failed test: end the server an app started, from its record."""
    try:
        rec = json.loads((runtime_dir / f"server-{port}.json").read_text())
        if proctree.same_process(rec["pid"], rec["since_boot"]) is None:
            return
    except (OSError, ValueError, KeyError):
        return
    proctree.stop(proctree.family(rec["pid"]), grace_s=2, group=rec["pid"])  # the engine's own stop


def api_servers(runtime_dir: Path) -> list[psutil.Process]:
    """The vLLM API servers this runtime folder's apps started: each leads a session of its own (the app starts
    it so), while a child it has just forked still shows its command line but sits in its session."""
    from engine.serving.config import API_SERVER_MODULE

    out = []
    for p, _tag in proctree.tagged(str(runtime_dir.resolve())):
        try:
            if os.getsid(p.pid) == p.pid and API_SERVER_MODULE in " ".join(p.cmdline()):
                out.append(p)
        except (OSError, psutil.Error):  # gone meanwhile
            continue
    return out


def described(runtime_dir: Path) -> str:
    """Every process this runtime folder's apps started, one a line, for a failure's message (pytest shortens a
    list): pid, parent, session, start id, command line with its port."""
    out = []
    for p, tag in proctree.tagged(str(runtime_dir.resolve())):
        try:
            out.append(f"{p.pid} (parent {p.ppid()}, session {os.getsid(p.pid)}, start {tag.start_id}): "
                       f"{' '.join(p.cmdline())[-300:]}")
        except (OSError, psutil.Error):
            continue
    return "\n".join(out)


def press_until(page, control, arrived, tries: int = 3, each_ms: int = 45000) -> None:
    """Click `control` until `arrived()` holds. A click that lands while the page redraws on a busy machine is
    dropped (the element is replaced between press and release); `arrived` reads what one click changes (the
    guide's saved step, a page's heading), so a second click goes only after the first was lost."""
    for _ in range(tries):
        control.click()
        for _ in range(each_ms // 500):
            if arrived():
                return
            page.wait_for_timeout(500)
    raise AssertionError(f"{tries} clicks on {control} did not arrive")


def download(page, control, tries: int = 3, each_ms: int = 60000):
    """Press a download button until its file has come whole (Playwright's Download, its path read). The file is
    made on the press (a report inlines plotly.js: megabytes); a press that lands while the page redraws on a busy
    machine is dropped, and a download under way when a rerun drops its file is canceled."""
    for attempt in range(tries):
        try:
            with page.expect_download(timeout=each_ms) as dl:
                control.click()
            dl.value.path()  # waits for the whole file; raises when Chromium canceled it
            return dl.value
        except PlaywrightError:  # TimeoutError is one
            if attempt == tries - 1:
                raise
