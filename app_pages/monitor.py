"""Monitor: live memory with lifecycle markers, and vLLM's own /metrics, redrawn every 2 seconds."""
import streamlit as st

import ui
from engine import figures

REDRAW_S = 2
IDLE_REDRAW_S = 10  # nothing running: the charts move in 10 s steps (a new event still shows at once)
MAX_POINTS = 400  # per series: about one per two pixels of the plot, so a 1 h window stays light

lab = ui.get_lab()

st.title("Monitor")
st.caption("Memory and vLLM's live counters, sampled once a second by the app (one sampler for every viewer) "
           f"and redrawn every {REDRAW_S} seconds while anything runs. "
           "Markers show when the server started, loaded weights, allocated its KV cache, and when benchmarks ran.")
window = st.segmented_control("Window", ["1 min", "5 min", "15 min", "1 h"], default="5 min", key="mon_window")
seconds = {"1 min": 60, "5 min": 300, "15 min": 900, "1 h": 3600}.get(window or "5 min", 300)


@st.cache_resource(max_entries=8, show_spinner=False)
def _draw(seconds: int, step: int, tick: int, last_event: float | None) -> None:
    """Draw both charts for the window ending at redraw tick `tick` (of `step` seconds). Streamlit
    records what a cached function draws and replays those messages on a hit, so every viewer within
    one tick gets the same prebuilt charts: figures are built and serialised once per tick, not once
    per viewer (and a replayed chart the browser already holds travels as a reference to its copy)."""
    memory, metrics, events = lab.monitor_rows(seconds, MAX_POINTS)
    where = "GPU memory (NVML)" if lab.device == "cuda" else "Memory (no GPU here: system RAM and the vLLM processes)"
    ui.chart(figures.memory_chart(memory, events, title=where), key="mem")
    if metrics:
        ui.chart(figures.metrics_chart(metrics, events), key="metrics")
    else:
        st.info("vLLM's /metrics appear here while a server is ready.", icon=":material/info:")


@st.fragment(run_every=REDRAW_S)
def live() -> None:
    newest = lab.latest_sample()
    events = lab.server_snapshot().events
    step = REDRAW_S if lab.busy() else IDLE_REDRAW_S
    _draw(seconds, step, int(newest.t // step) if newest else 0, events[-1][0] if events else None)


live()
