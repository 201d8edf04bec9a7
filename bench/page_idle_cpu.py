"""What an idle page costs while it is open: the Streamlit app's and Chromium's CPU seconds over a window with one
page open and nothing moving, and how many elements the app sent that page meanwhile (results:
bench/results/page-idle-cpu.md).

    .venv/bin/python bench/page_idle_cpu.py [--window 60] [--pages follower,monitor,load]

follower: the guided lab as a viewer who follows the presenter; monitor: the Monitor page; load: the Load test page
after a finished load test (2 requests to the fault-injecting fake of tests/fakes.py, connected by URL: no vLLM).
CPU is user + system seconds from psutil over each process tree (the app's; Chromium's: the browser and its
renderers), so a busy machine stretches the wall clock, not the count. Elements are the ForwardMsgs that carry one
(a new element, or a reference to one the browser cached), read off the page's websocket.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

from engine.observe import hardware  # noqa: E402
from tests.browser import StreamlitApp, button, goto, launch_chromium, metric  # noqa: E402

TOKEN = "bench-presenter"
VIEW = {"width": 1400, "height": 1000}


def _tree_cpu(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def _tree(pid: int) -> list[int]:
    try:
        p = psutil.Process(pid)
        return [pid] + [c.pid for c in p.children(recursive=True)]
    except psutil.Error:
        return []


def _chromium() -> list[int]:
    """Chromium's processes under this one (Playwright's driver is node: not counted)."""
    me = psutil.Process()
    return [c.pid for c in me.children(recursive=True) if "chrom" in c.name().lower()]


# DOM mutations inside plotly charts: plotly rewrites its SVG when it redraws, so none means the browser kept its chart
CHART_MUTATIONS = """
window.__chartMutations = 0;
new MutationObserver(records => {
  for (const r of records) if (r.target.closest && r.target.closest('.js-plotly-plot')) window.__chartMutations++;
}).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
"""


def element_counter(page) -> dict:
    """Counts the ForwardMsgs that carry an element to this page (new or a cached one by reference)."""
    seen = {"elements": 0, "runs": 0}
    page.add_init_script(CHART_MUTATIONS)

    def frame(payload) -> None:
        if isinstance(payload, str):
            return
        msg = ForwardMsg.FromString(payload)
        kind = msg.WhichOneof("type")
        if kind == "ref_hash" or (kind == "delta" and msg.delta.WhichOneof("type") == "new_element"):
            seen["elements"] += 1
        elif kind == "script_finished":
            seen["runs"] += 1

    page.on("websocket", lambda ws: ws.on("framereceived", frame))
    return seen


def measure(app: StreamlitApp, page, seen: dict, window: float) -> dict:
    page.wait_for_timeout(5000)  # the page has drawn and settled
    procs_app, procs_chr = _tree(app.proc.pid), _chromium()
    mutations = "() => window.__chartMutations"
    a0, c0, e0, r0, t0 = _tree_cpu(procs_app), _tree_cpu(procs_chr), seen["elements"], seen["runs"], time.monotonic()
    m0 = page.evaluate(mutations)
    page.wait_for_timeout(window * 1000)
    a1, c1, wall = _tree_cpu(procs_app), _tree_cpu(procs_chr), time.monotonic() - t0
    return {"app_cpu_s": a1 - a0, "chromium_cpu_s": c1 - c0, "elements": seen["elements"] - e0,
            "runs": seen["runs"] - r0, "wall_s": wall, "chart_mutations": page.evaluate(mutations) - m0}


def follower(app, browser, window):
    presenter_ctx, ctx = browser.new_context(viewport=VIEW), browser.new_context(viewport=VIEW)
    page = ctx.new_page()
    seen = element_counter(page)
    goto(page, app, "", title="Guided lab")
    page.locator("[data-testid=stSidebar]").get_by_text("Follow the presenter").click()
    expect(page.get_by_text(re.compile(r"^Following the presenter"))).to_be_visible()
    presenter_ctx.close()
    out = measure(app, page, seen, window)
    ctx.close()
    return out


def monitor(app, browser, window):
    ctx = browser.new_context(viewport=VIEW)
    page = ctx.new_page()
    seen = element_counter(page)
    goto(page, app, "monitor", title="Monitor")
    out = measure(app, page, seen, window)
    ctx.close()
    return out


def _presenter(page) -> None:
    page.locator("[data-testid=stSidebar] input[type=password]").fill(TOKEN)
    page.keyboard.press("Enter")


def load(app, browser, window, fake_url: str):
    ctx = browser.new_context(viewport=VIEW)
    page = ctx.new_page()
    goto(page, app, "server", title="vLLM server")
    _presenter(page)
    page.get_by_text("Connect to an existing server").first.click()
    page.get_by_role("textbox", name="Server URL").fill(fake_url + "/v1")
    button(page, "Connect").click()
    expect(page.get_by_text("every page measures this server")).to_be_visible(timeout=60000)
    seen = element_counter(page)
    goto(page, app, "load_test", title="Load test")  # a new session: the token is typed again
    _presenter(page)
    page.get_by_role("spinbutton", name="Number of requests").fill("2")
    button(page, "Run load test").click()
    expect(metric(page, "OK / failed")).to_have_text("2 / 0", timeout=240000)
    out = measure(app, page, seen, window)
    ctx.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--window", type=float, default=60)
    ap.add_argument("--pages", default="follower,monitor,load")
    a = ap.parse_args()
    print(f"# {hardware.cpu()}, load {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        fake = subprocess.Popen([sys.executable, "-m", "tests.fakes", "--models", "ok", "--metrics",
                                 "--chunk-delay", "0.01"], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        try:
            fake_url = f"http://127.0.0.1:{fake.stdout.readline().strip()}"
            env = {"SERVING_LAB_RUNTIME": f"{tmp}/runtime", "SERVING_LAB_DB": f"{tmp}/history.sqlite",
                   "SERVING_LAB_PRESENTER_TOKEN": TOKEN, "SERVING_LAB_LANG": "en",
                   "SERVING_LAB_VLLM_PORT": str(StreamlitApp({}, Path(tmp) / "x").port)}
            with StreamlitApp(env, Path(tmp) / "streamlit.log") as app, sync_playwright() as p:
                browser = launch_chromium(p)
                for name in a.pages.split(","):
                    args = (fake_url,) if name == "load" else ()
                    r = globals()[name](app, browser, a.window, *args)
                    print(f"{name:9s} app {r['app_cpu_s']:6.2f} s  chromium {r['chromium_cpu_s']:6.2f} s  "
                          f"elements {r['elements']:5d}  chart mutations {r['chart_mutations']:5d}  "
                          f"script runs {r['runs']:4d}  over {r['wall_s']:.0f} s  (load {os.getloadavg()[0]:.1f})",
                          flush=True)
                browser.close()
        finally:
            fake.terminate()
            fake.wait(10)


if __name__ == "__main__":
    main()
