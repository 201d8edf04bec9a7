"""Load test: fire concurrent requests and watch continuous batching — the lab's step 3, plus a sweep."""
import time

import streamlit as st

import ui
from engine import figures
from engine.lab import LabError

lab = ui.get_lab()
cpu = lab.device == "cpu"
snap = lab.server_snapshot()
# Answers longer than the running server's max-model-len are refused, so no control offers them.
server_len = lab.serving_max_len()
TOKENS_CAP = 1024  # longer answers make a CPU run crawl; the lab uses 150

st.title("Load test")
st.caption("Send many requests at once and watch vLLM batch them: with continuous batching they run side by side "
           "instead of queueing one after another (the lab's step 3).")

ARRIVALS = {"All at once (the lab)": "burst", "Keep N in flight": "concurrency", "Poisson arrivals": "poisson"}
# Outside the form: the controls below depend on it and redraw when it changes.
arrival = st.radio("Arrival", list(ARRIVALS), horizontal=True, key="load_arrival",
                   help="All at once: every request is sent together, like asyncio.gather. Keep N in flight: a new "
                        "request as soon as one finishes. Poisson: requests arrive at random at a set rate.")
shape = ARRIVALS[arrival]

tokens_hi = min(TOKENS_CAP, server_len) if server_len else TOKENS_CAP
tokens_help = "The lab uses 150. " + (
    f"At most {tokens_hi}: the running server's max-model-len is {server_len}, and it refuses longer answers."
    if server_len and server_len <= TOKENS_CAP else
    f"The running server accepts up to {server_len} (its max-model-len); this slider stops at {TOKENS_CAP} to keep "
    "runs short." if server_len else "Once the server runs, this stops at its max-model-len.")

with st.form("load"):
    c1, c2, c3 = st.columns(3, gap="large")
    with c1:
        n_requests = st.number_input("Number of requests", 1, 1024, 10,
                                     help="Total requests; prompts repeat if there are more requests than prompts.")
        concurrency, rate = 1, None
        if shape == "concurrency":
            concurrency = st.slider("Requests in flight", 1, 64 if cpu else 256, 4,
                                    help="How many requests are kept in flight: a new one goes out as soon as one "
                                         "finishes.")
        elif shape == "poisson":
            rate = st.number_input("Rate (requests/s)", 0.1, 100.0, 2.0, 0.5,
                                   help="Requests arrive at random times, this many per second on average.")
        else:
            st.caption("Every request is sent at once: as many in flight as there are requests.")
    with c2:
        max_tokens = st.slider("Max tokens per answer", 16, max(tokens_hi, 17), min(150, tokens_hi), 2,
                               help=tokens_help)
        ignore_eos = st.toggle("Always generate max tokens", value=False,
                               help="Ignore end-of-sequence: a fixed output length, so runs compare exactly. "
                                    "Off: answers end naturally, as in the lab.")
    with c3:
        prompt_set = st.selectbox("Prompts", ["The lab's 10 prompts", "Synthetic prompts (seeded)"])
    submitted = st.form_submit_button("Run load test", type="primary", icon=":material/play_arrow:",
                                      disabled=not ui.can_act(lab))

if submitted:
    try:
        spec = lab.load_test_spec(shape, int(n_requests), int(max_tokens), ignore_eos=ignore_eos, rate=rate,
                                  concurrency=int(concurrency), synthetic=not prompt_set.startswith("The lab"))
    except LabError as e:
        st.error(ui.plain(e), icon=":material/error:")
    else:
        ui.act(lab, lab.run_load, spec)


def _summary_metrics(run) -> None:
    s = run.summary
    cols = st.columns(6)
    cols[0].metric("Wall time", ui.fmt_s(run.duration))
    cols[1].metric("Output throughput", f"{s.output_throughput or 0:,.0f} tok/s")
    ms = lambda key: None if s.get(key) is None else s.get(key) / 1000  # noqa: E731 - none measured it: "–"
    cols[2].metric("Mean TTFT", ui.fmt_s(ms("mean_ttft_ms")),
                   help="Time to first token: what a user waits before text starts.")
    cols[3].metric("p99 TTFT", ui.fmt_s(ms("p99_ttft_ms")))
    cols[4].metric("Mean TPOT", "–" if s.get("mean_tpot_ms") is None else f"{s.get('mean_tpot_ms'):,.0f} ms",
                   help="Time per output token after the first: the speed text appears at.")
    cols[5].metric("OK / failed", f"{s.completed or 0} / {s.failed or 0}")
    ui.failure_causes([run])
    if n := run.extra.chat_requests_beside:
        st.info(f"{n} chat answer{'s were' if n != 1 else ' was'} streamed while this run measured: its numbers "
                "include that traffic.", icon=":material/forum:")
    serial = s.total_latency_s
    if serial and run.duration:
        done = s.completed or 0
        who = f"The **{done}** requests that succeeded" if s.failed else f"All **{done}** requests"
        st.markdown(f"{who} finished in **{run.duration:.1f} s**. One after another they would have taken about "
                    f"**{serial:.0f} s** (the sum of their latencies): that is continuous batching.")


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_live(job_id: str, tick: int) -> None:
    """The timeline of a running load test at one-second `tick`. Streamlit replays what a cached
    function drew, so every viewer in that second gets the same chart, built once (see monitor.py)."""
    partial, now = lab.live_run(job_id)
    ui.failure_causes([partial])  # a run where every request is refused says so at once, not at the end
    ui.chart(figures.request_timeline(partial, now=now), key="tl-live")


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_result(job_id: str, status: str) -> None:
    """A finished load test's numbers and charts, built once for every viewer."""
    job = lab.job(job_id)
    run = job.result
    ui.cancelled_note(job)
    _summary_metrics(run)
    ui.chart(figures.request_timeline(run), key="tl")
    ui.chart(figures.concurrent_latency_bars(run), key="bars")
    ui.chart(figures.throughput_over_time(run), key="tput")


@st.fragment(run_every=1)
def live() -> None:
    job = lab.latest_job("load")
    if job is None:
        st.info("Press **Run load test**." if snap.state == lab.READY else
                "Start the server on the Server page, then press **Run load test**.", icon=":material/info:")
        return
    ui.job_panel(lab, job, f"{job.label}: {job.done}/{job.total or '?'} requests done", icon=":material/cancel:")
    if job.active:
        _draw_live(job.id, int(time.time()))
        return
    if job.result is not None:
        _draw_result(job.id, job.status)

live()

st.divider()
st.subheader("Concurrency sweep")
st.caption("The same workload at 1, 2, 4 … N requests in flight, with a warm-up at each level: throughput climbs "
           "while each request gets only a little slower — until the server is full.")
default_levels = [1, 2, 4, 8, 16] if cpu else [1, 4, 16, 64, 128, 256]
all_levels = [1, 2, 4, 8, 16, 32, 64, 128, 256]
levels = st.multiselect("Levels", all_levels, default=default_levels)
if st.button("Run sweep", icon=":material/trending_up:", disabled=not ui.can_act(lab) or not levels):
    ui.act(lab, lab.run_sweep, lab.sweep_spec(), sorted(levels))


@st.fragment(run_every=2)
def sweep_live() -> None:
    job = lab.latest_job("sweep")
    if job is None:
        return
    ui.job_panel(lab, job, f"{job.stage}: {job.done}/{job.total} levels", cancel="Cancel sweep")
    if job.result:
        ui.chart(figures.sweep_chart(job.result), key="sweep")
        ui.failure_causes(job.result, prefix=True)


sweep_live()
