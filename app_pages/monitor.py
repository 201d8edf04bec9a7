"""Monitor: live memory with lifecycle markers, and vLLM's own /metrics, redrawn every 2 seconds."""
import streamlit as st

import ui
from engine import figures
from engine.telemetry import downsample, event_rows, memory_rows, metric_rows

REDRAW_S = 2
MAX_POINTS = 400  # per series: about one per two pixels of the plot, so a 1 h window stays light

lab = ui.get_lab()

st.title("Monitor")
st.caption("Memory and vLLM's live counters, sampled once a second by the app (one sampler for every viewer) "
           f"and redrawn every {REDRAW_S} seconds. "
           "Markers show when the server started, loaded weights, allocated its KV cache, and when benchmarks ran.")
window = st.segmented_control("Window", ["1 min", "5 min", "15 min", "1 h"], default="5 min", key="mon_window")
seconds = {"1 min": 60, "5 min": 300, "15 min": 900, "1 h": 3600}.get(window or "5 min", 300)


@st.cache_resource(max_entries=8, show_spinner=False)
def _draw(seconds: int, tick: int, last_event: float | None) -> None:
    """Draw both charts for the window ending at redraw tick `tick`. Streamlit records what a cached
    function draws and replays those messages on a hit, so every viewer within one tick gets the
    same prebuilt charts: figures are built and serialised once per tick, not once per viewer."""
    newest = lab.telemetry.latest()
    since = (newest.t if newest else tick * REDRAW_S) - seconds
    samples = downsample(lab.telemetry.samples(since=since), MAX_POINTS)
    events = event_rows(lab.server.snapshot().events, since=since)
    where = "GPU memory (NVML)" if lab.device == "cuda" else "Memory (no GPU here: system RAM and the vLLM processes)"
    ui.chart(figures.memory_chart(memory_rows(samples), events, title=where), key="mem")
    if rows := metric_rows(samples):
        ui.chart(figures.metrics_chart(rows, events), key="metrics")
    else:
        st.info("vLLM's /metrics appear here while a server is ready.", icon=":material/info:")


@st.fragment(run_every=REDRAW_S)
def live() -> None:
    newest = lab.telemetry.latest()
    events = lab.server.snapshot().events
    _draw(seconds, int(newest.t // REDRAW_S) if newest else 0, events[-1][0] if events else None)


live()
