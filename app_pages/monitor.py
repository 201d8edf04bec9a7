"""Monitor: live memory with lifecycle markers, and vLLM's own /metrics, redrawn every second."""
import time

import streamlit as st

import ui
from engine import figures
from engine.telemetry import event_rows, memory_rows, metric_rows

lab = ui.get_lab()

st.title("Monitor")
st.caption("Memory and vLLM's live counters, sampled once a second by the app (one sampler for every viewer). "
           "Markers show when the server started, loaded weights, allocated its KV cache, and when benchmarks ran.")
window = st.segmented_control("Window", ["1 min", "5 min", "15 min", "1 h"], default="5 min", key="mon_window")
seconds = {"1 min": 60, "5 min": 300, "15 min": 900, "1 h": 3600}.get(window or "5 min", 300)


@st.fragment(run_every=1)
def live() -> None:
    since = time.time() - seconds
    samples = lab.telemetry.samples(since=since)
    events = event_rows(lab.server.snapshot().events, since=since)
    where = "GPU memory (NVML)" if lab.device == "cuda" else "Memory (no GPU here: system RAM and the vLLM processes)"
    ui.chart(figures.memory_chart(memory_rows(samples), events, title=where), key="mem")
    rows = metric_rows(samples)
    if rows:
        ui.chart(figures.metrics_chart(rows, events), key="metrics")
    else:
        st.info("vLLM's /metrics appear here while a server is ready.", icon=":material/info:")


live()
