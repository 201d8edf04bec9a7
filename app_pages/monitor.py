"""Monitor: live memory with lifecycle markers, and vLLM's own /metrics, redrawn every 2 seconds."""
import time

import streamlit as st

import i18n
import ui
from engine import figures
from i18n import N_, _

REDRAW_S = 2
IDLE_REDRAW_S = 10  # nothing running: the charts move in 10 s steps (a new event still shows at once)
MAX_POINTS = 400  # per series: about one per two pixels of the plot, so a 1 h window stays light

lab = ui.get_lab()

st.title(_("Monitor"))
st.caption(_("Memory and vLLM's live counters, sampled once a second and redrawn every {s} seconds while anything "
             "runs; the numbered markers are listed under the charts.", s=REDRAW_S))
# The labels are the control's values (English, kept in session state), shown in the viewer's language.
WINDOWS = {N_("1 min"): 60, N_("5 min"): 300, N_("15 min"): 900, N_("1 h"): 3600}
window = st.segmented_control(_("Window"), list(WINDOWS), default="5 min", key="mon_window",
                              format_func=i18n.shown(WINDOWS))
seconds = WINDOWS.get(window or "5 min", 300)


@st.cache_resource(max_entries=8, show_spinner=False)
def _draw(seconds: int, step: int, tick: int, last_event: float | None, lang: str, remote_url: str) -> None:
    """Draw both charts for the window ending at redraw tick `tick` (of `step` seconds). Streamlit
    records what a cached function draws and replays those messages on a hit, so every viewer within
    one tick gets the same prebuilt charts: figures are built and serialised once per tick, not once
    per viewer (and a replayed chart the browser already holds travels as a reference to its copy); once
    per language (`lang`), as the replay holds the drawing viewer's text."""
    memory, metrics, events = lab.monitor.rows(seconds, MAX_POINTS)
    # One time axis for both charts: the same x = 0 and span, so a marker sits at the same x on each
    # (the /metrics only begin once the server is ready, memory is sampled all along).
    window = figures.time_window(memory, metrics, events)
    remote = lab.attached() if remote_url else None
    if remote:  # its memory is on its own machine: this one's would mislead
        st.info(ui.plain(_("Memory: not available for the server at {url}, which runs on a machine this app does not "
                           "see; only its /metrics reach here.", url=remote.url)), icon=":material/memory:")
    else:
        where = (_("GPU memory (NVML)") if lab.device == "cuda" else
                 _("Memory (no GPU here: system RAM and the vLLM processes)"))
        ui.chart(figures.memory_chart(memory, events, title=where, window=window, lang=lang), key="mem")
        if workers := lab.monitor.gpu_workers():  # one row per process per GPU: a parallel server's workers
            st.dataframe([{_("GPU"): i18n.tr(w["gpu"]), _("Process"): w["process"], "PID": w["pid"],
                           _("Whose"): i18n.tr(w["owner"]), _("Memory (GB)"): round(w["used_gb"], 1)}
                          for w in workers], hide_index=True, width="stretch")
    if metrics:
        ui.chart(figures.metrics_chart(metrics, events, window=window, lang=lang), key="metrics")
    elif remote and not remote.metrics:
        st.warning(ui.plain(remote.metrics_said), icon=":material/monitoring:")
    else:
        st.info(_("vLLM's /metrics appear here while a server is ready."), icon=":material/info:")
    if power := figures.power_chart(lab.monitor.power_rows(seconds, MAX_POINTS), window=window, lang=lang):
        ui.chart(power, key="power")  # on a GPU only: NVML's power draw, on the same time axis
    if marks := figures.event_list(events, lang):  # what each numbered marker on the charts is
        st.markdown(" &nbsp; ".join(f"**{n}** {time.strftime('%H:%M:%S', time.localtime(t))} {ui.plain(label)}" for n,
                                    t, label in marks))


def _drawn() -> tuple:
    """Which charts are due now: the window's tick (of REDRAW_S while anything runs, else IDLE_REDRAW_S), the newest
    event, the viewer's language and the server at a URL, if any: _draw's key, which the page watches while idle."""
    newest = lab.monitor.latest_sample()
    events = lab.server_snapshot().events
    step = REDRAW_S if lab.busy() else IDLE_REDRAW_S
    remote = lab.attached()
    return (seconds, step, int(newest.t // step) if newest else 0, events[-1][0] if events else None, i18n.lang(),
            remote.url if remote else "")


ui.live(lambda: _draw(*_drawn()), _drawn, lab.busy, every=REDRAW_S)
