"""What the room costs the app: N attendees pressing at once (results: bench/results/room-cpu.md).

    .venv/bin/python bench/room.py [--attendees 30] [--rounds 2] [--tokens 64]

A vLLM server (embedded model) and the app start on free ports, the app with a presenter token. One presenter
session (bench/viewers.py's light viewer: Streamlit's websocket protocol as a browser drives it, drawing nothing)
types the token, and N attendee sessions open the room's page. Measured:

1. Idle: the app's CPU with N attendees on the page and no round (the page's 2-s watch of the room).
2. A round: the presenter opens it, the N attendees press at once (their form's submit, all within a few ms); the
   app's CPU from the presses until the round's run is saved, then during the same requests one at a time; how
   many of each session's timed redraws the app served, and the presenter's redraw (its live timeline fragment:
   rerun sent -> its run finished) median and 95th percentile.
3. The timeline figure alone (engine.figures.room_timeline) on the round's saved run: what one redraw computes.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
from streamlit.proto.WidgetStates_pb2 import WidgetState

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from common import free_port  # noqa: E402
from viewers import LightViewer, cpu_seconds, load_average, machine  # noqa: E402

TOKEN = "bench-room"


def start_stack(home: Path) -> tuple[str, subprocess.Popen, object]:
    """A vLLM server (embedded model) and the app (loopback, a presenter token) in `home`; the app adopts it."""
    from engine.serving import models
    from engine.serving.config import ServerConfig
    from engine.serving.server import VLLMServer
    from engine.settings import from_env

    vport, aport = free_port(), free_port()
    srv = VLLMServer(from_env(), port=vport)
    srv.start(ServerConfig(model=models.embedded(from_env().models).path, port=vport, cpu_kvcache_gib=1,
                           enforce_eager=True))
    srv.wait_ready(900)
    env = {**os.environ, "SERVING_LAB_VLLM_PORT": str(vport), "SERVING_LAB_PRESENTER_TOKEN": TOKEN}
    app = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(aport),
                            "--server.address", "127.0.0.1", "--server.headless", "true"],
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


class Counted(LightViewer):
    """A light viewer that also counts how its runs ended: fragment runs finished, runs ended early for a rerun."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.ends: dict[str, int] = {}

    def _on(self, raw: bytes) -> bool:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

        msg = ForwardMsg()
        msg.ParseFromString(raw)
        if msg.WhichOneof("type") == "script_finished":
            name = ForwardMsg.ScriptFinishedStatus.Name(msg.script_finished)
            self.ends[name] = self.ends.get(name, 0) + 1
        return super()._on(raw)


def typed(v: LightViewer, label: str, text: str) -> None:
    """A text field as the browser reports it once typed into (a field the page filled has no default to copy)."""
    v.widgets[v.labels[label]] = WidgetState(id=v.labels[label], string_value=text)


async def connected(vs: list[LightViewer], stop: asyncio.Event, limit_s: float = 300) -> list[asyncio.Task]:
    tasks = []
    for v in vs:  # a room arrives over a few seconds
        tasks.append(asyncio.create_task(v.run(stop)))
        await asyncio.sleep(0.1)
    t0 = time.monotonic()
    while not all(v.finished.is_set() for v in vs):
        if time.monotonic() - t0 > limit_s:
            raise TimeoutError("the room's page did not load for every session")
        await asyncio.sleep(0.2)
    return tasks


def served(vs: list[LightViewer]) -> tuple[int, int]:
    return (sum(sum(v.stats.sent.values()) for v in vs), sum(sum(v.stats.served.values()) for v in vs))


@dataclass
class Phase:
    name: str
    seconds: float
    app_pct: float
    here_pct: float
    kept: float
    presenter_ms: tuple[float, float] | None  # the presenter's timed redraw: median, p95


async def phase(name: str, app: psutil.Process, presenter: LightViewer, attendees: list[LightViewer], until) -> Phase:
    """App CPU and redraws from now until `until()` (an awaitable condition checked each half second)."""
    me = psutil.Process()
    s0, l0 = served([presenter, *attendees]), len(presenter.stats.latencies)
    c0, m0, t0 = cpu_seconds(app), cpu_seconds(me), time.monotonic()
    while not until():
        await asyncio.sleep(0.5)
    dt = time.monotonic() - t0
    s1 = served([presenter, *attendees])
    lat = sorted(x * 1000 for x in presenter.stats.latencies[l0:])
    return Phase(name, dt, 100 * (cpu_seconds(app) - c0) / dt, 100 * (cpu_seconds(me) - m0) / dt,
                 (s1[1] - s0[1]) / (s1[0] - s0[0]) if s1[0] > s0[0] else 1.0,
                 (lat[len(lat) // 2], lat[int(len(lat) * 0.95)]) if lat else None)


async def one_round(url: str, app: psutil.Process, store, n: int, idle_s: float, tokens: int) -> list[Phase]:
    stop = asyncio.Event()
    presenter = Counted(url, "room")
    attendees = [Counted(url, "room") for _ in range(n)]
    tasks = await connected([presenter], stop)
    typed(presenter, "Presenter token", TOKEN)
    await presenter.change("Presenter token", TOKEN)  # the page redraws as the presenter's
    tasks += await connected(attendees, stop)
    await asyncio.sleep(5)  # page loads are not what an attendee costs
    out = [await phase("idle, no round", app, presenter, attendees, deadline(idle_s))]
    before = {r.id for r in store.list(limit=20)}
    presenter.set("Tokens per answer", float(tokens))
    presenter.set("The round stays open (s)", 10.0)  # the shortest: it closes while the answers stream
    await presenter.click("Open a round")
    await asyncio.sleep(3)  # the job opens the round: its server counts read, its loop started
    for i, a in enumerate(attendees):
        typed(a, "Your name on the big screen", f"Bench {i}")
    await asyncio.gather(*(a.click("Send my request") for a in attendees))  # the room presses at once

    def saved(scenario: str):
        return lambda: any(r.scenario == scenario and r.id not in before for r in store.list(limit=20))

    out.append(await phase("round: the room's requests", app, presenter, attendees, saved("room")))
    out.append(await phase("round: one at a time", app, presenter, attendees, saved("room-one-at-a-time")))
    print(f"  how runs ended: presenter {presenter.ends}; attendee 1 {attendees[0].ends}", flush=True)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return out


def deadline(seconds: float):
    end = time.monotonic() + seconds
    return lambda: time.monotonic() >= end


def redraw_ms(run, repeats: int = 5) -> float:
    """The timeline figure alone, and its JSON (what Streamlit sends), on a saved round: ms per redraw."""
    from engine.figures import room_timeline

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        room_timeline(run, lang="en").to_json()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attendees", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tokens", type=int, default=64, help="tokens per answer (a 2-core CPU: a short round)")
    ap.add_argument("--idle", type=float, default=30, help="seconds measured with no round open")
    ap.add_argument("--out", default=str(ROOT / "bench/results/room-cpu.md"))
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="room-bench-"))
    os.environ.update(SERVING_LAB_HOME=str(home), SERVING_LAB_RUNTIME=str(home / "runtime"))
    os.environ.setdefault("SERVING_LAB_MODELS", str(Path.home() / ".cache/serving-lab/models"))
    from engine.observe import hardware
    from engine.results.store import RunStore
    from engine.settings import from_env

    started, load_before = time.strftime("%Y-%m-%d %H:%M"), load_average()
    url, app_proc, srv = start_stack(home)
    app = psutil.Process(app_proc.pid)
    store = RunStore(from_env().db)  # the app's (SERVING_LAB_HOME is this run's own)
    phases: list[Phase] = []
    try:
        for r in range(args.rounds):
            phases += asyncio.run(one_round(url, app, store, args.attendees, args.idle, args.tokens))
            for p in phases[-3:]:
                print(f"  round {r + 1}, {p.name}: {p.seconds:.0f} s, app {p.app_pct:.1f}% of a core, redraws kept "
                      f"{p.kept:.2f}, presenter's redraw {p.presenter_ms}", flush=True)
    finally:
        app_proc.terminate()
        app_proc.wait(30)
        srv.stop()
    rooms = [r for r in store.list() if r.scenario == "room"]
    run = store.load(rooms[0].id)
    figure_ms = redraw_ms(run)
    report(args, started, load_before, load_average(), phases, run, figure_ms, hardware.versions().get("vllm"))


def report(args, started, load_before, load_after, phases, run, figure_ms, vllm) -> None:
    """This run as a section appended to `--out` (its header, the method, written by hand above the first)."""
    others = [p for p in psutil.process_iter(["cmdline"]) if "vllm" in " ".join(p.info["cmdline"] or [])]
    lines = [
        f"## {started}, {args.attendees} attendees, {args.tokens} tokens per answer", "",
        f"Machine: {machine()}, vLLM {vllm} (CPU build). Load average (1/5/15 min) {load_before} before, {load_after} "
        f"after; {len(others)} vLLM processes of other work still running at the end.", "",
        "| round | phase | seconds | app CPU % of one core | redraws kept | presenter's redraw median / p95 ms |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for i, p in enumerate(phases):
        lat = f"{p.presenter_ms[0]:.0f} / {p.presenter_ms[1]:.0f}" if p.presenter_ms else "–"
        lines.append(f"| {i // 3 + 1} | {p.name} | {p.seconds:.0f} | {p.app_pct:.1f} | {p.kept:.2f} | {lat} |")
    n = len(run.measured)
    tokens = sum(len(r.chunk_times) for r in run.measured)
    lines += ["", f"The timeline figure alone (engine.figures.room_timeline, then its JSON) on the last round's saved "
              f"run ({n} requests, {tokens:,} token ticks): {figure_ms:.0f} ms per redraw (median of 5), in the "
              "bench's process.", ""]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(args.out)
    out.write_text((out.read_text() + "\n" if out.exists() else "") + text)


if __name__ == "__main__":
    main()
