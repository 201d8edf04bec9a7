"""Monitor: live memory with lifecycle markers, and vLLM's own /metrics, redrawn every second."""
import time

import streamlit as st

import ui
from engine import figures
from engine.telemetry import event_rows, memory_rows, metric_rows

lab = ui.get_lab()

st.title("Monitor")
st.caption("Memory and vLLM's live counters, sampled once a second by the app (one sampler for every viewer) "
           "and redrawn every 2 seconds. "
           "Markers show when the server started, loaded weights, allocated its KV cache, and when benchmarks ran.")
window = st.segmented_control("Window", ["1 min", "5 min", "15 min", "1 h"], default="5 min", key="mon_window")
seconds = {"1 min": 60, "5 min": 300, "15 min": 900, "1 h": 3600}.get(window or "5 min", 300)


@st.cache_resource(max_entries=8, show_spinner=False)
def _figures(seconds: int, newest: float | None, last_event: float | None):
    """The two charts for a window ending at the newest sample. Cached by that sample, so every viewer
    (and every page visit) within one sampler tick shares one build: building plotly figures is most
    of what this page costs the server."""
    since = (newest or time.time()) - seconds
    samples = lab.telemetry.samples(since=since)
    events = event_rows(lab.server.snapshot().events, since=since)
    where = "GPU memory (NVML)" if lab.device == "cuda" else "Memory (no GPU here: system RAM and the vLLM processes)"
    rows = metric_rows(samples)
    return (figures.memory_chart(memory_rows(samples), events, title=where),
            figures.metrics_chart(rows, events) if rows else None)


@st.fragment(run_every=2)
def live() -> None:
    newest = lab.telemetry.latest()
    events = lab.server.snapshot().events
    mem, metrics = _figures(seconds, newest.t if newest else None, events[-1][0] if events else None)
    ui.chart(mem, key="mem")
    if metrics is not None:
        ui.chart(metrics, key="metrics")
    else:
        st.info("vLLM's /metrics appear here while a server is ready.", icon=":material/info:")


live()
