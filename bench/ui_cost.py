"""What the dashboard itself costs in a real browser (the numbers go to bench/results/ui-cost.md):

1. one viewer on the Monitor page: the Streamlit process's CPU (% of one core) and memory growth
   over --soak seconds;
2. page switches: click in the navigation -> the new page's title drawn, each page, a few times.

    .venv/bin/python bench/ui_cost.py [--soak 300]

It starts its own vLLM server (embedded model) and app, and stops both; the viewer is headless
Chromium. What N viewers cost, and what they cost a load test, is bench/viewers.py."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from engine.observe import hardware  # noqa: E402
from engine.serving import models  # noqa: E402
from engine.serving.config import ServerConfig  # noqa: E402
from engine.serving.server import VLLMServer  # noqa: E402
from engine.settings import from_env  # noqa: E402
from common import free_port  # noqa: E402
from scripts.shoot import CHROMIUM_ARGS  # noqa: E402

PAGES = ["Monitor", "Naive vs vLLM", "Load test", "Tuning", "Chat", "History", "Server"]
TITLES = {"Server": "vLLM server"}


def cpu_seconds(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--soak", type=float, default=300)
    ap.add_argument("--idle", type=float, default=60, help="seconds with no viewer (the baseline)")
    ap.add_argument("--out", default=str(ROOT / "bench/results/ui-cost.md"))
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    home = Path(tempfile.mkdtemp(prefix="ui-cost-"))
    env = {**os.environ, "SERVING_LAB_HOME": str(home), "SERVING_LAB_RUNTIME": str(home / "runtime")}
    os.environ.update({k: env[k] for k in ("SERVING_LAB_HOME", "SERVING_LAB_RUNTIME")})
    os.environ.setdefault("SERVING_LAB_MODELS", str(Path.home() / ".cache/serving-lab/models"))
    env["SERVING_LAB_MODELS"] = os.environ["SERVING_LAB_MODELS"]
    vport, aport = free_port(), free_port()
    cfg = ServerConfig(model=models.embedded(from_env().models).path, served_model_name="smol", port=vport,
                       cpu_kvcache_gib=1)
    srv = VLLMServer(from_env(), port=vport)
    srv.start(cfg)
    srv.wait_ready(900)
    env["SERVING_LAB_VLLM_PORT"] = str(vport)
    app = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(aport),
                            "--server.headless", "true"], cwd=ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lines = []
    try:
        proc = psutil.Process(app.pid)
        url = f"http://127.0.0.1:{aport}"
        for _ in range(120):  # the app answers its health check once Streamlit is up
            try:
                if httpx.get(url + "/_stcore/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(url)
            page.get_by_role("heading", name="vLLM server").wait_for(timeout=60000)
            # 2. page switches
            switch: dict[str, list[float]] = {}
            for _ in range(3):
                for name in PAGES:
                    t0 = time.perf_counter()
                    page.get_by_role("link", name=name, exact=True).click()
                    page.get_by_role("heading", name=TITLES.get(name, name), exact=True).wait_for(timeout=30000)
                    switch.setdefault(name, []).append(time.perf_counter() - t0)
            # 0. no viewer at all: what the app's own sampler costs
            page.goto("about:blank")
            time.sleep(5)
            c0, w0 = cpu_seconds(proc), time.time()
            time.sleep(args.idle)
            idle_pct = 100 * (cpu_seconds(proc) - c0) / (time.time() - w0)
            # 1. one viewer on Monitor
            page.goto(url + "/monitor")
            page.get_by_role("heading", name="Monitor", exact=True).wait_for(timeout=30000)
            page.wait_for_timeout(5000)
            rss0, cpu0, t0 = proc.memory_info().rss, cpu_seconds(proc), time.time()
            rss_max = rss0
            while time.time() - t0 < args.soak:
                time.sleep(5)
                rss_max = max(rss_max, proc.memory_info().rss)
            cpu_pct = 100 * (cpu_seconds(proc) - cpu0) / (time.time() - t0)
            rss1 = proc.memory_info().rss
            browser.close()
    finally:
        app.terminate()
        srv.stop()
    hw = hardware.describe()["summary"]
    lines = [
        "# Cost of the dashboard itself", "",
        f"Hardware: {hw}. vLLM {hardware.versions().get('vllm')} on the embedded model. "
        f"{time.strftime('%Y-%m-%d %H:%M')}. Viewers are headless Chromium on the same machine.", "",
        f"## One viewer on Monitor for {args.soak:.0f} s (redrawn every 2 s while anything runs, "
        "in 10 s steps when idle)", "",
        "| Streamlit process | value |", "|---|---:|",
        f"| CPU, % of one core, no viewer ({args.idle:.0f} s: the telemetry sampler alone) | {idle_pct:.1f} |",
        f"| CPU, % of one core, one viewer on Monitor | {cpu_pct:.1f} |",
        f"| memory at start / end / peak (MB) | {rss0 / 1e6:.0f} / {rss1 / 1e6:.0f} / {rss_max / 1e6:.0f} |",
        f"| growth (MB) | {(rss1 - rss0) / 1e6:+.1f} |", "",
        "Growth is expected until the sampler's ring buffer is full (the last hour, 3,600 samples); "
        "the charts are built once per redraw tick and replayed to every viewer.", "",
        "## Page switch: click -> new page's title drawn (3 rounds)", "",
        "| page | median s | max s |", "|---|---:|---:|",
        *[f"| {k} | {sorted(v)[len(v) // 2]:.2f} | {max(v):.2f} |" for k, v in switch.items()], "",
    ]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
