"""Load test: fire concurrent requests and watch continuous batching — the lab's step 3, plus a sweep."""
import time

import streamlit as st

import ui
from engine import figures, prompts
from engine.records import RunResult
from engine.scenarios import SCENARIOS

lab = ui.get_lab()
cpu = lab.device == "cpu"

st.title("Load test")
st.caption("Send many requests at once and watch vLLM batch them: with continuous batching they run side by side "
           "instead of queueing one after another (the lab's step 3).")

with st.form("load"):
    c1, c2, c3 = st.columns(3, gap="large")
    with c1:
        concurrency = st.slider("Requests in flight", 1, 64 if cpu else 256, 10,
                                help="How many requests are sent together (the lab sends 10 at once).")
        n_requests = st.number_input("Number of requests", 1, 1024, 10,
                                     help="Total requests; prompts repeat if there are more requests than prompts.")
    with c2:
        max_tokens = st.slider("Max tokens per answer", 16, 1024, 150, 2, help="The lab uses 150.")
        ignore_eos = st.toggle("Always generate max tokens", value=False,
                               help="Ignore end-of-sequence: a fixed output length, so runs compare exactly. "
                                    "Off: answers end naturally, as in the lab.")
    with c3:
        prompt_set = st.selectbox("Prompts", ["The lab's 10 prompts", "Synthetic prompts (seeded)"])
        shape = st.selectbox("Arrival", ["All at once (the lab)", "Keep N in flight", "Poisson arrivals"],
                             help="All at once: like asyncio.gather. Keep N in flight: a new request as soon as "
                                  "one finishes. Poisson: requests arrive at random at a set rate.")
        rate = st.number_input("Poisson rate (requests/s)", 0.1, 100.0, 2.0, 0.5,
                               help="Used only with Poisson arrivals.")
    submitted = st.form_submit_button("Run load test", type="primary", icon=":material/play_arrow:",
                                      disabled=not ui.can_act(lab))

if submitted:
    scn = SCENARIOS["concurrent-10"]
    plist = prompts.LAB_CONCURRENT if prompt_set.startswith("The lab") else prompts.seeded_prompts(int(n_requests))
    shape_key = {"All at once (the lab)": "burst", "Keep N in flight": "concurrency",
                 "Poisson arrivals": "poisson"}[shape]
    spec = scn.load_spec(prompts=list(plist), concurrency=int(concurrency), num_requests=int(n_requests),
                         max_tokens=int(max_tokens), ignore_eos=ignore_eos, shape=shape_key,
                         rate=float(rate) if shape_key == "poisson" else None,
                         scenario=f"concurrent-{int(concurrency)}",
                         label=f"{int(n_requests)} requests, {int(concurrency)} in flight, {int(max_tokens)} tokens")
    ui.act(lab, lab.run_load, spec)


def _summary_metrics(run: RunResult) -> None:
    s = run.summary
    cols = st.columns(6)
    cols[0].metric("Wall time", ui.fmt_s(run.duration))
    cols[1].metric("Output throughput", f"{s.get('output_throughput') or 0:,.0f} tok/s")
    cols[2].metric("Mean TTFT", ui.fmt_s((s.get("mean_ttft_ms") or 0) / 1000),
                   help="Time to first token: what a user waits before text starts.")
    cols[3].metric("p99 TTFT", ui.fmt_s((s.get("p99_ttft_ms") or 0) / 1000))
    cols[4].metric("Mean TPOT", f"{s.get('mean_tpot_ms') or 0:,.0f} ms",
                   help="Time per output token after the first: the speed text appears at.")
    cols[5].metric("OK / failed", f"{s.get('completed', 0)} / {s.get('failed', 0)}")
    serial = s.get("total_latency_s")
    if serial and run.duration:
        st.markdown(f"All **{s.get('completed', 0)}** requests finished in **{run.duration:.1f} s**. "
                    f"One after another they would have taken about **{serial:.0f} s** (the sum of their "
                    f"latencies): that is continuous batching.")


@st.fragment(run_every=1)
def live() -> None:
    job = lab.jobs.latest("load")
    if job is None:
        st.info("Start the server on the Server page, then press **Run load test**.", icon=":material/info:")
        return
    if job.active:
        st.progress(job.progress, text=f"{job.label}: {job.done}/{job.total or '?'} requests done")
        if st.button("Cancel", icon=":material/cancel:", disabled=not ui.can_act(lab)):
            lab.jobs.cancel(job.id)
        partial = RunResult(kind="vllm", scenario="live", label=job.label, records=job.live_records(),
                            duration=0, started_at=job.started_at)
        now = time.time() - (job.run_start or job.started_at)
        ui.chart(figures.request_timeline(partial, now=now), key="tl-live")
        return
    if job.error:
        st.error(job.error, icon=":material/error:")
    run = job.result
    if run is None:
        return
    if job.status == "cancelled":
        st.warning(f"Cancelled: {len(run.measured)} finished requests were kept and saved.", icon=":material/cancel:")
    _summary_metrics(run)
    ui.chart(figures.request_timeline(run), key="tl")
    ui.chart(figures.concurrent_latency_bars(run), key="bars")
    ui.chart(figures.throughput_over_time(run), key="tput")


live()

st.divider()
st.subheader("Concurrency sweep")
st.caption("The same workload at 1, 2, 4 … N requests in flight, with a warm-up at each level: throughput climbs "
           "while each request gets only a little slower — until the server is full.")
default_levels = [1, 2, 4, 8, 16] if cpu else [1, 4, 16, 64, 128, 256]
all_levels = [1, 2, 4, 8, 16, 32, 64, 128, 256]
levels = st.multiselect("Levels", all_levels, default=default_levels)
if st.button("Run sweep", icon=":material/trending_up:", disabled=not ui.can_act(lab) or not levels):
    spec = SCENARIOS["sweep"].load_spec(max_tokens=64 if cpu else 128)
    ui.act(lab, lab.run_sweep, spec, sorted(levels))


@st.fragment(run_every=2)
def sweep_live() -> None:
    job = lab.jobs.latest("sweep")
    if job is None:
        return
    if job.active:
        st.progress(job.progress, text=f"{job.stage}: {job.done}/{job.total} levels")
        if st.button("Cancel sweep", disabled=not ui.can_act(lab)):
            lab.jobs.cancel(job.id)
    if job.error:
        st.error(job.error, icon=":material/error:")
    if job.result:
        ui.chart(figures.sweep_chart(job.result), key="sweep")


sweep_live()
