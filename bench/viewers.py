"""What N open viewer sessions cost the benchmark they watch (results: bench/results/viewers.md).

    .venv/bin/python bench/viewers.py [--viewers 20] [--window 60] [--repeats 3]

1. Per-viewer CPU of the Streamlit process on Monitor with 0, 1 and N viewers (CPU seconds from
   psutil, so a noisy machine stretches the wall clock but not the count), 0 / 1 / N interleaved.
2. Validation: one headless Chromium viewer and one light viewer on Monitor cost the app about
   the same (the light viewer is what makes N viewers fit on a small machine).
3. A load test's output throughput, run by the presenter through the app (the Load test page's
   form, so the app runs it as a job and viewers see it live), with 0 and with N viewers watching
   Monitor and Load test, interleaved repeats.

A light viewer is a Streamlit session driven over its websocket exactly as the browser drives it:
`/_stcore/stream`, a `rerun_script` BackMsg with the page name on load, then for each `auto_rerun`
ForwardMsg a timer that sends the fragment's rerun (`fragment_id`, `is_auto_rerun`, every widget's
state and the hashes of the messages it has cached) every `interval` seconds — what the frontend's
`handleAutoRerun` does. It keeps the frontend's message cache, so the server sends references to
charts the viewer already has, as it would to a browser. It draws nothing: its own CPU is a parse.

It starts its own vLLM server (embedded model) and app on free ports, and stops both.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import free_port  # noqa: E402


# -- a light viewer ---------------------------------------------------------------------------------

DRAW_S = 0.01  # what a browser takes to draw one element, as far as message timing goes

def _default_state(el) -> WidgetState | None:
    """The state a browser reports for a widget it has just drawn (its default), as the frontend's
    widget manager sends it with every rerun. Only the widget types the pages use."""
    kind = el.WhichOneof("type")
    w = getattr(el, kind, None)
    if w is None or not getattr(w, "id", ""):
        return None
    s = WidgetState(id=w.id)
    if kind == "slider":
        s.double_array_value.data.extend(w.default)
    elif kind == "number_input":
        if w.data_type == w.INT:
            s.int_value = int(w.default)
        else:
            s.double_value = w.default
    elif kind == "checkbox":
        s.bool_value = w.default
    elif kind in ("selectbox", "radio") and w.HasField("default"):
        s.string_value = w.options[w.default]
    elif kind == "multiselect":
        s.string_array_value.data.extend(w.options[i] for i in w.default)
    elif kind == "button_group":
        s.string_array_value.data.extend(w.options[i].content for i in w.default)
    elif kind == "text_input" and w.HasField("default"):
        s.string_value = w.default
    else:
        return None
    return s


@dataclass
class ViewerStats:
    sent: dict[str, int] = field(default_factory=dict)  # timed reruns sent, by "main" / "sidebar" fragment
    served: dict[str, int] = field(default_factory=dict)  # … and served (the fragment's run finished)
    bytes_in: int = 0
    latencies: list[float] = field(default_factory=list)  # page fragment's timed rerun sent -> served


class LightViewer:
    """One browser tab's worth of Streamlit protocol, with no browser (see the module docstring)."""

    def __init__(self, base_url: str, page: str):
        self.ws_url = base_url.replace("http", "ws", 1) + "/_stcore/stream"
        self.base_url, self.page = base_url, page
        self.stats = ViewerStats()
        self.widgets: dict[str, WidgetState] = {}  # id -> state sent with every rerun
        self.labels: dict[str, str] = {}  # label -> widget id (for the presenter)
        self.page_hash = ""
        self._cache: dict[str, tuple[int, str]] = {}  # hash -> (run count when cached, fragment id)
        self._runs = 0
        self._max_age = 2
        self._timers: dict[str, tuple[float, asyncio.Task]] = {}
        self._sent_at: dict[str, float] = {}
        self._where: dict[str, str] = {}  # fragment id -> "main" | "sidebar"
        self._ws = None
        self.finished = asyncio.Event()  # set after each full run of the page

    def _client_state(self, **kw):
        msg = BackMsg()
        cs = msg.rerun_script
        cs.widget_states.widgets.extend(self.widgets.values())
        cs.context_info.timezone, cs.context_info.locale = "UTC", "en-US"
        cs.context_info.url = f"{self.base_url}/{self.page}"
        cs.context_info.is_embedded, cs.context_info.color_scheme = False, "light"
        cs.cached_message_hashes.extend(self._cache)
        for k, v in kw.items():
            setattr(cs, k, v)
        return msg

    async def send_rerun(self, **kw) -> None:
        await self._ws.send(self._client_state(**kw).SerializeToString())

    async def click(self, label: str) -> None:
        """Press a button (a form's submit button sends the form's widget states with it)."""
        msg = self._client_state(page_script_hash=self.page_hash)
        msg.rerun_script.widget_states.widgets.add(id=self.labels[label], trigger_value=True)
        self.finished.clear()
        await self._ws.send(msg.SerializeToString())

    async def change(self, label: str, value) -> None:
        """Change a widget outside a form: the browser reruns the page at once; wait for that run."""
        self.set(label, value)
        self.finished.clear()
        await self.send_rerun(page_script_hash=self.page_hash)
        await asyncio.wait_for(self.finished.wait(), 60)

    def set(self, label: str, value) -> None:
        s = self.widgets[self.labels[label]]
        which = s.WhichOneof("value")
        if which == "double_array_value":
            del s.double_array_value.data[:]
            s.double_array_value.data.append(value)
        else:
            setattr(s, which, value)

    async def _auto_rerun(self, fragment_id: str, interval: float) -> None:
        while True:  # setInterval: every interval, whether or not the last rerun has finished
            await asyncio.sleep(interval)
            self._sent_at.setdefault(fragment_id, time.perf_counter())
            where = self._where.get(fragment_id, "main")
            self.stats.sent[where] = self.stats.sent.get(where, 0) + 1
            await self.send_rerun(page_script_hash=self.page_hash, fragment_id=fragment_id, is_auto_rerun=True)

    def _on(self, raw: bytes) -> bool:
        """Handle one ForwardMsg as the frontend would; True when it was an element to draw."""
        self.stats.bytes_in += len(raw)
        msg = ForwardMsg()
        msg.ParseFromString(raw)
        kind = msg.WhichOneof("type")
        if kind == "ref_hash":
            self._cache[msg.ref_hash] = (self._runs, self._cache.get(msg.ref_hash, (0, ""))[1])
            return True
        if msg.metadata.cacheable and msg.hash not in self._cache:
            self._cache[msg.hash] = (self._runs, msg.delta.fragment_id)
        if kind == "new_session":
            self._max_age = msg.new_session.config.max_cached_message_age
        elif kind == "navigation":  # st.navigation names the page it ran (new_session cannot know it yet)
            self.page_hash = msg.navigation.page_script_hash
        if kind == "delta" and msg.delta.fragment_id:
            self._where[msg.delta.fragment_id] = "sidebar" if msg.metadata.delta_path[0] == 1 else "main"
        if kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            el = msg.delta.new_element
            state = _default_state(el)
            if state is not None and state.id not in self.widgets:
                self.widgets[state.id] = state
            w = getattr(el, el.WhichOneof("type") or "", None)
            if getattr(w, "label", "") and getattr(w, "id", ""):
                self.labels[w.label] = w.id
        elif kind == "auto_rerun":
            fid, every = msg.auto_rerun.fragment_id, msg.auto_rerun.interval
            old = self._timers.get(fid)
            if old is None or old[0] != every:
                if old:
                    old[1].cancel()
                self._timers[fid] = (every, asyncio.create_task(self._auto_rerun(fid, every)))
        elif kind == "stop_auto_rerun":
            for fid in msg.stop_auto_rerun.fragment_ids:
                if fid in self._timers:
                    self._timers.pop(fid)[1].cancel()
        elif kind == "script_finished":
            now = time.perf_counter()
            # A fragment rerun that arrives while another fragment runs preempts it (Streamlit ends
            # that run early and does not run it again): only runs that finished count as served.
            if msg.script_finished != msg.FINISHED_EARLY_FOR_RERUN:
                for fid in msg.metadata.run.fragment_ids:  # several timed reruns may share one run
                    where = self._where.get(fid, "main")
                    self.stats.served[where] = self.stats.served.get(where, 0) + 1
                    if fid in self._sent_at and where == "main":
                        self.stats.latencies.append(now - self._sent_at.pop(fid))
                    self._sent_at.pop(fid, None)
                # The frontend's cache ageing (incrementRunCount): a fragment run ages only its own messages.
                self._runs += 1
                frags = set(msg.metadata.run.fragment_ids)
                self._cache = {h: v for h, v in self._cache.items()
                               if (frags and v[1] not in frags) or self._runs - v[0] <= self._max_age}
                if not frags:
                    self.finished.set()
        return kind == "delta" and msg.delta.WhichOneof("type") == "new_element"

    async def run(self, stop: asyncio.Event) -> None:
        host = self.base_url.split("//", 1)[1]
        async with websockets.connect(self.ws_url, subprotocols=["streamlit"], origin=self.base_url,
                                      additional_headers={"Host": host}, max_size=None) as ws:
            self._ws = ws
            await self.send_rerun(page_name=self.page)
            receiver = asyncio.create_task(self._receive())
            await stop.wait()
            for _, task in self._timers.values():
                task.cancel()
            receiver.cancel()

    async def _receive(self) -> None:
        async for raw in self._ws:
            if self._on(raw):
                # A browser draws each element before it handles the next message, so the timers of
                # a page's fragments start tens of ms apart (Chromium on Monitor: 40-60 ms). Started
                # in the same millisecond, one fragment's rerun would preempt the other's every time.
                await asyncio.sleep(DRAW_S)


# -- measuring --------------------------------------------------------------------------------------

def cpu_seconds(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "unknown CPU")
    return (f"{cpu}, {psutil.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.1f} GiB RAM, "
            f"{platform.system()} {platform.release()}")


def load_average() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


class Viewers:
    """N light viewers on the given pages (round robin), all in this process's event loop."""

    def __init__(self, url: str, n: int, pages: tuple[str, ...] = ("monitor",)):
        self.viewers = [LightViewer(url, pages[i % len(pages)]) for i in range(n)]
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task] = []

    async def __aenter__(self) -> "Viewers":
        for v in self.viewers:  # a room arrives over a few seconds, not in one instant
            self._tasks.append(asyncio.create_task(v.run(self._stop)))
            await asyncio.sleep(0.1)
        return self

    async def __aexit__(self, *exc) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def totals(self, where: str = "main") -> tuple[int, int]:
        """Timed reruns of the page's (or the sidebar's) fragments sent and served, all viewers."""
        return (sum(v.stats.sent.get(where, 0) for v in self.viewers),
                sum(v.stats.served.get(where, 0) for v in self.viewers))


@dataclass
class CpuSample:
    viewers: int
    app_pct: float  # Streamlit process, % of one core
    here_pct: float  # this process (the light viewers themselves)
    kept: float  # the page's timed reruns served / sent: below 1 the app drops chart redraws
    kept_sidebar: float  # the same for the sidebar's status fragment
    kb_s: float  # what the app sent each viewer, KB/s
    latency_ms: tuple[float, float]  # timed rerun sent -> served: median, 95th percentile


async def measure_cpu(url: str, app: psutil.Process, n: int, seconds: float, settle: float = 6,
                      pages: tuple[str, ...] = ("monitor",)) -> CpuSample:
    me = psutil.Process()
    async with Viewers(url, n, pages) as vs:
        await asyncio.sleep(settle)  # page load and the first full run are not what a viewer costs
        before = vs.totals(), vs.totals("sidebar")
        b0 = sum(v.stats.bytes_in for v in vs.viewers)
        l0 = [len(v.stats.latencies) for v in vs.viewers]
        c0, m0, t0 = cpu_seconds(app), cpu_seconds(me), time.monotonic()
        await asyncio.sleep(seconds)
        dt = time.monotonic() - t0
        c1, m1 = cpu_seconds(app), cpu_seconds(me)
        after = vs.totals(), vs.totals("sidebar")
        b1 = sum(v.stats.bytes_in for v in vs.viewers)
        lat = sorted(x * 1000 for v, k in zip(vs.viewers, l0) for x in v.stats.latencies[k:])
    kept = [(a[1] - b[1]) / (a[0] - b[0]) if a[0] > b[0] else 1.0 for a, b in zip(after, before)]
    return CpuSample(n, 100 * (c1 - c0) / dt, 100 * (m1 - m0) / dt, *kept, (b1 - b0) / 1000 / dt / max(n, 1),
                     (lat[len(lat) // 2], lat[int(len(lat) * 0.95)]) if lat else (0.0, 0.0))


def measure_chromium(url: str, app: psutil.Process, seconds: float, settle: float = 10) -> float:
    """App CPU (% of one core) while one headless Chromium tab shows Monitor."""
    from playwright.sync_api import sync_playwright

    from scripts.shoot import CHROMIUM_ARGS

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(url + "/monitor")
        page.get_by_role("heading", name="Monitor", exact=True).wait_for(timeout=60000)
        page.wait_for_timeout(settle * 1000)
        c0, t0 = cpu_seconds(app), time.monotonic()
        page.wait_for_timeout(seconds * 1000)
        pct = 100 * (cpu_seconds(app) - c0) / (time.monotonic() - t0)
        browser.close()
    return pct


# The presenter's load test, set on the Load test page: long enough (tens of seconds on a 2-core VM)
# that page loads and timer phases average out. ABOVE sits outside the form and redraws it, so it goes first.
ABOVE = [("Arrival", "Keep N in flight"), ("What to send", "Synthetic prompts (seeded)")]
FORM = {"Requests in flight": 32.0, "Number of requests": 48, "Max tokens per answer": 128.0,
        "Always generate max tokens": True}


async def presenter_run(presenter: LightViewer, store, timeout: float = 600) -> dict:
    """Press Run on the presenter's Load test page and wait for the run to land in the history."""
    before = {r.id for r in store.list(limit=5)}
    await presenter.click("Run load test")
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        await asyncio.sleep(1)
        rows = [r for r in store.list(limit=5) if r.id not in before]
        if rows:
            return rows[0].summary
    raise TimeoutError("the load test did not finish")


@dataclass
class LoadSample:
    watching: str  # "none" | the pages the viewers are on
    tok_s: float
    app_pct: float  # the Streamlit process during the run, % of one core
    here_pct: float  # the light viewers' own process during the run


# Who watches the presenter's run: nobody, N viewers on Monitor, N split between Monitor and Load test.
def watchers(n: int) -> list[tuple[int, tuple[str, ...]]]:
    return [(0, ()), (n, ("monitor",)), (n, ("monitor", "load_test"))]


def watching(n: int, pages: tuple[str, ...]) -> str:
    return f"{n} on " + " / ".join(pages).replace("_", " ") if n else "none"


async def measure_load(url: str, app: psutil.Process, store, n: int, repeats: int) -> list[LoadSample]:
    out = []
    me = psutil.Process()
    stop = asyncio.Event()
    presenter = LightViewer(url, "load_test")
    task = asyncio.create_task(presenter.run(stop))
    try:
        while not presenter.finished.is_set():  # the page's first run (the connection may not be up yet)
            await asyncio.sleep(0.2)
        for label, value in ABOVE:
            await presenter.change(label, value)
        for label, value in FORM.items():
            presenter.set(label, value)
        await presenter_run(presenter, store)  # warm-up: the server's first batch shapes
        for r in range(repeats):
            conditions = watchers(n)
            for k, pages in conditions if r % 2 == 0 else conditions[::-1]:  # interleaved, order alternating
                async with Viewers(url, k, pages or ("monitor",)):
                    await asyncio.sleep(8 if k else 2)
                    c0, m0, t0 = cpu_seconds(app), cpu_seconds(me), time.monotonic()
                    summary = await presenter_run(presenter, store)
                    dt = time.monotonic() - t0
                    s = LoadSample(watching(k, pages), summary.output_throughput,
                                   100 * (cpu_seconds(app) - c0) / dt, 100 * (cpu_seconds(me) - m0) / dt)
                out.append(s)
                print(f"  load test, viewers {s.watching}: {s.tok_s:6.1f} tok/s, app {s.app_pct:5.1f}% of a core, "
                      f"light viewers {s.here_pct:4.1f}%", flush=True)
    finally:
        stop.set()
        await task
    return out


# -- the run ----------------------------------------------------------------------------------------

def start_stack(home: Path) -> tuple[str, subprocess.Popen, object]:
    """A vLLM server (embedded model) and the app, in `home`, on free ports; the app adopts the server."""
    from engine.serving import models
    from engine.serving.config import ServerConfig
    from engine.serving.server import VLLMServer
    from engine.settings import from_env

    vport, aport = free_port(), free_port()
    srv = VLLMServer(from_env(), port=vport)
    srv.start(ServerConfig(model=models.embedded(from_env().models).path, port=vport, cpu_kvcache_gib=1,
                           enforce_eager=True))
    srv.wait_ready(900)
    env = {**os.environ, "SERVING_LAB_VLLM_PORT": str(vport)}
    app = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(aport)],
                           cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{aport}"
    for _ in range(240):
        try:
            if httpx.get(url + "/_stcore/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    return url, app, srv


def listening_pid(url: str) -> int:
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    return next(c.pid for c in psutil.net_connections("tcp") if c.laddr.port == port and c.status == "LISTEN")


def mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--viewers", type=int, default=20, help="N: the most light viewers measured")
    ap.add_argument("--window", type=float, default=60, help="seconds measured per CPU sample")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats of each measurement")
    ap.add_argument("--fill", type=float, default=300,
                    help="seconds the app samples before measuring, so Monitor's 5 min window is full")
    ap.add_argument("--app", help="an app already running (its own SERVING_LAB_HOME, a server ready) "
                                  "instead of starting one")
    ap.add_argument("--skip", default="", help="comma list of parts to leave out: cpu,chromium,load")
    ap.add_argument("--out", default=str(ROOT / "bench/results/viewers.md"))
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    stack = None
    if args.app:
        url = args.app.rstrip("/")
    else:
        home = Path(tempfile.mkdtemp(prefix="viewers-"))
        os.environ.update(SERVING_LAB_HOME=str(home), SERVING_LAB_RUNTIME=str(home / "runtime"))
        os.environ.setdefault("SERVING_LAB_MODELS", str(Path.home() / ".cache/serving-lab/models"))
        url, *stack = start_stack(home)
        print(f"app at {url}; letting the sampler fill Monitor's window for {args.fill:.0f} s", flush=True)
        time.sleep(args.fill)
    from engine.observe import hardware
    from engine.results.store import RunStore
    from engine.settings import from_env

    app = psutil.Process(listening_pid(url))
    started, load_before = time.strftime("%Y-%m-%d %H:%M"), load_average()
    counts = [0, 1, args.viewers]
    cpu: list[CpuSample] = []
    chromium: list[tuple[float, float]] = []
    loads: list[LoadSample] = []
    try:
        if "cpu" not in skip:
            for r in range(args.repeats):
                for n in counts if r % 2 == 0 else counts[::-1]:
                    cpu.append(asyncio.run(measure_cpu(url, app, n, args.window)))
                    s = cpu[-1]
                    print(f"  Monitor, {n:3d} viewers: app {s.app_pct:5.1f}% of a core, viewers' own process "
                          f"{s.here_pct:4.1f}%, redraws kept {s.kept:.2f} (sidebar {s.kept_sidebar:.2f}), "
                          f"redraw latency median {s.latency_ms[0]:.0f} ms, p95 {s.latency_ms[1]:.0f} ms", flush=True)
        if "chromium" not in skip:
            for _ in range(2):
                light = asyncio.run(measure_cpu(url, app, 1, args.window)).app_pct
                chromium.append((measure_chromium(url, app, args.window), light))
                print(f"  one viewer on Monitor: Chromium {chromium[-1][0]:.1f}%, light {light:.1f}%", flush=True)
        if "load" not in skip:
            loads = asyncio.run(measure_load(url, app, RunStore(from_env().db), args.viewers, args.repeats))
    finally:
        if stack:
            app_proc, srv = stack
            app_proc.terminate()
            app_proc.wait(30)
            srv.stop()
    report(args, url, started, load_before, load_average(), cpu, chromium, loads, hardware.versions().get("vllm"))


NOTES = "## Where the time goes"


def report(args, url, started, load_before, load_after, cpu, chromium, loads, vllm) -> None:
    n = args.viewers
    lines = [
        "# What viewers cost the benchmark they watch", "",
        f"Machine: {machine()}. vLLM {vllm} (CPU build) on the embedded model (SmolLM2-135M-Instruct). "
        f"{started}; load average (1/5/15 min) {load_before} before, {load_after} after. "
        "Everything (vLLM, the app, the viewers) runs on this one machine.", "",
        "Viewers are light viewers (`bench/viewers.py`): Streamlit sessions driven over the browser's "
        "websocket protocol, timed fragment reruns included, drawing nothing. CPU is the Streamlit "
        "process's CPU seconds (psutil) over the wall time, in % of one core.", "",
    ]
    if cpu:
        by = {k: [s for s in cpu if s.viewers == k] for k in sorted({s.viewers for s in cpu})}
        base = mean([s.app_pct for s in by.get(0, [])])
        lines += [f"## Monitor: {len(by[0])} interleaved rounds of {args.window:.0f} s per count", "",
                  "| viewers | app CPU % of one core | per viewer (minus no viewer) | chart redraws kept "
                  "| sidebar redraws kept | chart redraw latency median / p95 ms | KB/s per viewer "
                  "| light viewers' own CPU % |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for k, ss in by.items():
            app_pct = mean([s.app_pct for s in ss])
            per = f"{(app_pct - base) / k:.2f}" if k else "–"
            lines.append(f"| {k} | {app_pct:.1f} ({', '.join(f'{s.app_pct:.1f}' for s in ss)}) | {per} | "
                         f"{mean([s.kept for s in ss]):.2f} | {mean([s.kept_sidebar for s in ss]):.2f} | "
                         f"{mean([s.latency_ms[0] for s in ss]):.0f} / "
                         f"{mean([s.latency_ms[1] for s in ss]):.0f} | {mean([s.kb_s for s in ss]) if k else 0:.1f} | "
                         f"{mean([s.here_pct for s in ss]):.1f} |")
        lines += ["", "Redraws kept: timed fragment reruns served / sent. Below 1 the app dropped redraws: "
                  "Streamlit lets a fragment rerun that arrives while another fragment of the same session runs "
                  "preempt it, and does not run the preempted one again. Latency: the chart fragment's timed "
                  "rerun sent -> its run finished.", ""]
    if chromium:
        lines += ["## Light viewer against a real browser (one viewer on Monitor)", "",
                  "| headless Chromium: app CPU % | light viewer: app CPU % |", "|---:|---:|"]
        lines += [f"| {c:.1f} | {lv:.1f} |" for c, lv in chromium]
        lines += ["", "Chromium's own CPU is not counted: only what the viewer costs the app.", ""]
    if loads:
        base = mean([s.tok_s for s in loads if s.watching == "none"])
        lines += [f"## The presenter's load test with 0 and {n} viewers", "",
                  f"Run from the Load test page by a presenter session ({FORM['Number of requests']} requests, "
                  f"{FORM['Requests in flight']:.0f} in flight, {FORM['Max tokens per answer']:.0f} tokens each, "
                  f"fixed length) against the app's vLLM server; {args.repeats} interleaved repeats, order "
                  "alternating. Viewers on Load test watch the run live (its timeline redraws every second).", "",
                  "| viewers watching | output tok/s per run | mean | × none | app CPU % of one core during the run "
                  "| light viewers' own CPU % |", "|---|---|---:|---:|---:|---:|"]
        for k, pages in watchers(n):
            ss = [s for s in loads if s.watching == watching(k, pages)]
            xs = [s.tok_s for s in ss]
            lines.append(f"| {watching(k, pages)} | {', '.join(f'{x:.1f}' for x in xs)} | {mean(xs):.1f} | "
                         f"{mean(xs) / base:.3f} | {mean([s.app_pct for s in ss]):.1f} | "
                         f"{mean([s.here_pct for s in ss]):.1f} |")
        lines += ["", "Goal: the presenter's throughput within 5 % of no viewers (× none ≥ 0.95). The light "
                  "viewers' own CPU runs on the same two cores as vLLM here; in a room it is on the viewers' laptops.",
                  ""]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    old = out.read_text() if out.exists() else ""
    if NOTES in old:  # the profile written by hand below the numbers stays (it says when it was taken)
        text += "\n" + old[old.index(NOTES):]
    out.write_text(text)


if __name__ == "__main__":
    main()
