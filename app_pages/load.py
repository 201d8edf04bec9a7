"""Load test: fire concurrent requests and watch continuous batching — the lab's step 3, plus a sweep."""
import time

import streamlit as st

import i18n
import ui
from engine import figures
from engine.lab import LabError
from i18n import N_, _, ngettext

lab = ui.get_lab()
snap = lab.server_snapshot()
# What this machine runs in reasonable time for our own server; what a server at a URL says of itself
defaults = lab.load_defaults()
# Answers longer than the running server's max-model-len are refused, so no control offers them.
server_len = lab.serving_max_len()
TOKENS_CAP = 1024  # longer answers make a CPU run crawl; the lab uses 150

st.title(_("Load test"))
st.caption(_("Send many requests at once and watch vLLM batch them: with continuous batching they run side by side "
             "instead of queueing one after another (the lab's step 3)."))

# The labels are the radio's values (English, as tests set them); shown in the viewer's language.
ARRIVALS = {N_("All at once (the lab)"): "burst", N_("Keep N in flight"): "concurrency",
            N_("Poisson arrivals"): "poisson"}
# Outside the form: the controls below depend on it and redraw when it changes.
arrival = st.radio(_("Arrival"), list(ARRIVALS), horizontal=True, key="load_arrival", format_func=i18n.shown(ARRIVALS),
                   help=_("All at once: every request is sent together, like asyncio.gather. Keep N in flight: a new "
                          "request as soon as one finishes. Poisson: requests arrive at random at a set rate."))
shape = ARRIVALS[arrival]
if remote := lab.attached():  # say where the requests go: a server this app did not start
    st.caption(ui.plain(_("Requests go to {model} at {url} (connected on the Server page).", model=remote.model,
                          url=remote.url)))

tokens_hi = min(TOKENS_CAP, server_len) if server_len else TOKENS_CAP
tokens_help = (
    _("The lab uses 150. At most {hi}: the running server's max-model-len is {len}, and it refuses longer answers.",
      hi=tokens_hi, len=server_len)
    if server_len and server_len <= TOKENS_CAP else
    _("The lab uses 150. The running server accepts up to {len} (its max-model-len); this slider stops at {cap} "
      "to keep runs short.", len=server_len, cap=TOKENS_CAP)
    if server_len else _("The lab uses 150. Once the server runs, this stops at its max-model-len."))
PROMPT_SETS = [N_("The lab's 10 prompts"), N_("Synthetic prompts (seeded)")]  # values English, shown translated

with st.form("load"):
    c1, c2, c3 = st.columns(3, gap="large")
    with c1:
        n_requests = st.number_input(_("Number of requests"), 1, 1024, 10,
                                     help=_("Total requests; prompts repeat if there are more requests than "
                                            "prompts."))
        concurrency, rate = 1, None
        if shape == "concurrency":
            concurrency = st.slider(_("Requests in flight"), 1, defaults.in_flight_max, 4,
                                    help=_("How many requests are kept in flight: a new one goes out as soon as one "
                                           "finishes."))
        elif shape == "poisson":
            rate = st.number_input(_("Rate (requests/s)"), 0.1, 100.0, 2.0, 0.5,
                                   help=_("Requests arrive at random times, this many per second on average."))
        else:
            st.caption(_("Every request is sent at once: as many in flight as there are requests."))
    with c2:
        max_tokens = st.slider(_("Max tokens per answer"), 16, max(tokens_hi, 17), min(150, tokens_hi), 2,
                               help=tokens_help)
        ignore_eos = st.toggle(_("Always generate max tokens"), value=False,
                               help=_("Ignore end-of-sequence: a fixed output length, so runs compare exactly. "
                                      "Off: answers end naturally, as in the lab."))
    with c3:
        prompt_set = st.selectbox(_("Prompts"), PROMPT_SETS, format_func=i18n.shown(PROMPT_SETS))
        warmup = st.toggle(_("Warm up first (not counted)"), value=True, key="load_warmup",
                           help=_("Send one batch as big as the measured one first and leave it out of the numbers: "
                                  "the first batch of a size after the server starts pays one-off start-up work "
                                  "(on an H200 the first 10 at once took 4.1 s, the same batch warm 0.85 s). Off: "
                                  "see that cost in the run itself."))
    submitted = st.form_submit_button(_("Run load test"), type="primary", icon=":material/play_arrow:",
                                      disabled=not ui.can_act(lab))

if submitted:
    try:
        spec = lab.load_test_spec(shape, int(n_requests), int(max_tokens), ignore_eos=ignore_eos, rate=rate,
                                  concurrency=int(concurrency), synthetic=prompt_set != PROMPT_SETS[0],
                                  warmup=warmup)
    except LabError as e:
        st.error(ui.plain(e), icon=":material/error:")
    else:
        ui.act(lab, lab.run_load, spec)

# The SLO is each viewer's own (their session): it judges the run and the sweep shown below, and a change
# redraws only this viewer's page. The defaults and why they suit a chat user: engine/measure/slo.py.
slo_title = _("Service-level objective (SLO)")
st.markdown(f"**{slo_title}**")
slo_cols = st.columns([1, 1, 3], gap="large", vertical_alignment="center")
slo_cols[0].number_input(_("TTFT limit (ms)"), 1, 600_000, int(lab.DEFAULT_SLO.ttft_ms), 100, key="slo_ttft_ms",
                         help=_("The longest a user may wait for the first token."))
slo_cols[1].number_input(_("TPOT limit (ms)"), 1, 60_000, int(lab.DEFAULT_SLO.tpot_ms), 10, key="slo_tpot_ms",
                         help=_("The longest each later token may take on average (100 ms is 10 tokens/s)."))
target, ttft, rate = (f"{lab.ATTAINMENT:.0%}", f"{lab.DEFAULT_SLO.ttft_ms / 1000:g}",
                      f"{1000 / lab.DEFAULT_SLO.tpot_ms:g}")
slo_cols[2].caption(_("These limits are your choice, not a standard: a request is good when it meets both, as "
                      "`vllm bench serve --goodput` counts it, and a run meets the SLO when at least {target} of its "
                      "requests are good. The defaults suit a chat user: text starts within {ttft} s, then streams "
                      "at {rate} tokens/s, faster than people read.", target=target, ttft=ttft, rate=rate))


price_cols = st.columns([1, 3], gap="large", vertical_alignment="center")
with price_cols[0]:
    ui.gpu_price("load")
price_cols[1].caption(_("Cost per million output tokens = price per GPU-hour / 3600 × the measured wall time / the "
                        "output tokens × 1,000,000: the rate pays for the whole machine, only while the run "
                        "measured (not the warm-up, nor idle time between runs)."))


def _price():
    """This viewer's price per GPU-hour (blank: None), read in the fragments like the SLO."""
    return st.session_state.get("gpu_price")


def _cost(run) -> None:
    """What a million of the run's output tokens cost at this viewer's price."""
    if (cost := ui.cost_text(lab, run, _price())) is not None:
        price = i18n.number(_price(), 2)
        st.markdown(_("At **{price}** per GPU-hour, a million output tokens cost **{cost}** ({tokens} output tokens "
                      "in {wall} s).", price=price, cost=cost,
                      tokens=i18n.number(run.summary.get("total_output_tokens", 0)), wall=f"{run.duration:.1f}"))


def _slo():
    """This viewer's SLO (the inputs above; read in the fragments, which redraw on their own)."""
    return lab.Slo(ttft_ms=float(st.session_state.get("slo_ttft_ms", lab.DEFAULT_SLO.ttft_ms)),
                   tpot_ms=float(st.session_state.get("slo_tpot_ms", lab.DEFAULT_SLO.tpot_ms)))


def _slo_verdict(run) -> None:
    """How many of the run's requests met this viewer's SLO, and its goodput: green when it holds."""
    verdict = lab.judge_slo(run, _slo())
    if verdict is None or not verdict.requests:
        return
    (st.success if verdict.meets else st.warning)(ui.plain(verdict.said), icon=":material/timer:")


def _summary_metrics(run) -> None:
    s = run.summary
    cols = st.columns(6)
    cols[0].metric(_("Wall time"), ui.fmt_s(run.duration))
    cols[1].metric(_("Output throughput"), f"{s.output_throughput or 0:,.0f} tok/s")
    ms = lambda key: None if s.get(key) is None else s.get(key) / 1000  # noqa: E731 - none measured it: "–"
    cols[2].metric(_("Mean TTFT"), ui.fmt_s(ms("mean_ttft_ms")),
                   help=_("Time to first token: what a user waits before text starts."))
    cols[3].metric(_("p99 TTFT"), ui.fmt_s(ms("p99_ttft_ms")))
    cols[4].metric(_("Mean TPOT"), "–" if s.get("mean_tpot_ms") is None else f"{s.get('mean_tpot_ms'):,.0f} ms",
                   help=_("Time per output token after the first: the speed text appears at."))
    cols[5].metric(_("OK / failed"), f"{s.completed or 0} / {s.failed or 0}")
    ui.failure_causes([run])
    if n := run.extra.chat_requests_beside:
        st.info(ngettext("{n} chat answer was streamed while this run measured: its numbers include that traffic.",
                         "{n} chat answers were streamed while this run measured: its numbers include that traffic.",
                         n), icon=":material/forum:")
    ui.token_check(run)
    serial = s.total_latency_s
    if serial and run.duration and lab.peak_in_flight(run.records) <= 1:
        wall = f"{run.duration:.1f}"
        st.markdown(_("These requests ran one after another, so the wall time (**{wall} s**) is the sum of their "
                      "latencies: nothing was batched. Send them at once to see continuous batching.", wall=wall))
    elif serial and run.duration:
        done = s.completed or 0
        wall, total = f"{run.duration:.1f}", f"{serial:.0f}"
        st.markdown(_("The **{done}** requests that succeeded finished in **{wall} s**. One after another they would "
                      "have taken about **{total} s** (the sum of their latencies): that is continuous batching.",
                      done=done, wall=wall, total=total) if s.failed else
                    _("All **{done}** requests finished in **{wall} s**. One after another they would have taken "
                      "about **{total} s** (the sum of their latencies): that is continuous batching.",
                      done=done, wall=wall, total=total))


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_live(job_id: str, tick: int, lang: str) -> None:
    """The timeline of a running load test at one-second `tick`. Streamlit replays what a cached
    function drew, so every viewer in that second gets the same chart, built once (see monitor.py);
    once per language (`lang`), as the replay holds the drawing viewer's text."""
    partial, now = lab.live_run(job_id)
    ui.failure_causes([partial])  # a run where every request is refused says so at once, not at the end
    ui.chart(figures.request_timeline(partial, now=now, lang=lang), key="tl-live")


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_numbers(job_id: str, status: str, lang: str) -> None:
    """A finished load test's numbers, built once for every viewer of a language (`lang`)."""
    job = lab.job(job_id)
    ui.cancelled_note(job)
    _summary_metrics(job.result)
    ui.warmth(lab, job.result)
    if ceiling := lab.decode_ceiling(job.result):  # the physical limit: what the memory bandwidth allows
        st.markdown(ui.plain(ceiling.sentence))
        st.caption(ui.plain(ceiling.why))


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_charts(job_id: str, status: str, lang: str) -> None:
    """A finished load test's charts, built once for every viewer of a language (`lang`)."""
    run = lab.job(job_id).result
    if lab.decode_ceiling(run):
        ui.chart(figures.ceiling_bars([run], lang=lang), key="ceiling")
    ui.chart(figures.request_timeline(run, lang=lang), key="tl")
    ui.chart(figures.concurrent_latency_bars(run, lang=lang), key="bars")
    ui.chart(figures.throughput_over_time(run, lang=lang), key="tput")
    if not isinstance(lab.slots(run), str):  # a sentence: this run cannot show its slots (no token times)
        ui.chart(figures.slot_chart([run], lang=lang), key="slots")
    ui.code_behind(lab.code_for_run(run, lang))


@st.fragment(run_every=1)
def live() -> None:
    job = lab.latest_job("load")
    if job is None:
        st.info(_("Press **Run load test**.") if lab.ready() else
                _("Start the server on the Server page, then press **Run load test**."), icon=":material/info:")
        return
    ui.job_panel(lab, job, _("{label}: {done}/{total} requests done", label=job.label, done=job.done,
                             total=job.total or "?"), icon=":material/cancel:")
    if job.active:
        _draw_live(job.id, int(time.time()), i18n.lang())
        return
    if job.result is not None:
        _draw_numbers(job.id, job.status, i18n.lang())
        _slo_verdict(job.result)  # this viewer's own SLO: not in the drawings shared by every viewer
        _cost(job.result)  # this viewer's own price, likewise
        _draw_charts(job.id, job.status, i18n.lang())

live()


# -- two servers at once (issue #13 item 2) -------------------------------------------------------------
with st.expander(_("Against two servers at once"), icon=":material/view_column_2:"):
    st.caption(_("The same workload sent to this app's server (A) and a second one at a URL (B) at the same moment: "
                 "each warms up first, then both are measured on one clock and drawn on shared axes as they run. "
                 "Each run is saved, the two as a pair."))
    shared_ok = False
    if why := lab.side_by_side_here():
        st.info(ui.plain(why), icon=":material/info:")
        st.page_link("app_pages/tuning.py", label=_("Compare configurations on Tuning"), icon=":material/tune:")
        shared_ok = st.toggle(_("Both on this machine anyway"), key="pair_shared",
                              help=_("Runs two servers on this machine's one device: they slow each other down, so "
                                     "the numbers show the sharing as much as the settings. For trying it out."))
    elif cmd := lab.second_server_command():
        st.markdown(_("Start the second server on another GPU with this command (change its max-model-len or "
                      "memory to the setting you want to compare), then give its address below:"))
        st.code(cmd, language="bash")
    with st.form("pair"):
        u1, u2 = st.columns([2, 1], gap="large")
        url_b = u1.text_input(_("Second server's address (B)"), placeholder="http://127.0.0.1:8001", key="pair_url",
                              help=_("Its root, /v1 or a router's path prefix; the app finds the model it serves."))
        key_b = u2.text_input(_("Its API key (optional)"), type="password", key="pair_key",
                              help=_("Sent to server B only; never saved or shown."))
        p1, p2, p3 = st.columns(3, gap="large")
        pair_n = p1.number_input(_("Number of requests"), 1, 1024, 10, key="pair_n")
        pair_in_flight, pair_rate = 1, None
        if shape == "concurrency":
            pair_in_flight = p2.slider(_("Requests in flight"), 1, defaults.in_flight_max, 4, key="pair_in_flight")
        elif shape == "poisson":
            pair_rate = p2.number_input(_("Rate (requests/s)"), 0.1, 100.0, 2.0, 0.5, key="pair_rate")
        else:
            p2.caption(_("Every request is sent at once: as many in flight as there are requests."))
        pair_tokens = p3.slider(_("Max tokens per answer"), 16, max(tokens_hi, 17), min(defaults.sweep_max_tokens, tokens_hi),
                                2, key="pair_tokens", help=tokens_help)
        st.caption(_("Arrival as chosen above: {arrival}. Answers always run to max tokens on both, so the two get the "
                     "same work.", arrival=_(arrival)))
        run_pair = st.form_submit_button(_("Run on both servers"), type="primary", icon=":material/play_arrow:",
                                   disabled=not ui.can_act(lab))
    if run_pair:
        if not url_b.strip():
            st.error(_("Give the second server's address first."), icon=":material/error:")
        else:
            try:
                pair_spec = lab.load_test_spec(shape, int(pair_n), int(pair_tokens), ignore_eos=True, rate=pair_rate,
                                               concurrency=int(pair_in_flight))
            except LabError as e:
                st.error(ui.plain(e), icon=":material/error:")
            else:
                ui.act(lab, lab.run_side_by_side, url_b.strip(), pair_spec, key_b or None, shared_ok=shared_ok)


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_pair_live(job_id: str, tick: int, lang: str) -> None:
    """A running pair at one-second `tick`, built once for every viewer of a language (as _draw_live)."""
    runs, now = lab.live_pair(job_id)
    if len(runs) == 2:
        ui.chart(figures.side_by_side(*runs, now=now, lang=lang), key="pair-live")


def _pair_table(runs) -> None:
    """The pair's numbers, one column a server."""
    def ms(run, key):
        v = run.summary.get(key)
        return "–" if v is None else f"{v:,.0f} ms"

    rows = [(_("Output throughput"), lambda r: f"{r.summary.get('output_throughput') or 0:,.1f} tok/s"),
            (_("Mean TTFT"), lambda r: ms(r, "mean_ttft_ms")), (_("p99 TTFT"), lambda r: ms(r, "p99_ttft_ms")),
            (_("Mean TPOT"), lambda r: ms(r, "mean_tpot_ms")), (_("Wall time"), lambda r: ui.fmt_s(r.duration)),
            (_("OK / failed"), lambda r: f"{r.summary.completed or 0} / {r.summary.failed or 0}")]
    st.table({"": [name for name, _f in rows],
              **{i18n.tr(r.label): [f(r) for _n, f in rows] for r in runs}})
    for col, r in zip(st.columns(len(runs), gap="large"), runs):
        with col:  # under its own column of the table: which server each sentence is about
            ui.failure_causes([r], prefix=True)
            ui.token_check(r)


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_pair(job_id: str, status: str, lang: str) -> None:
    """A finished pair: its numbers side by side and its chart, built once for every viewer of a language."""
    runs, _now = lab.live_pair(job_id)
    ui.cancelled_note(lab.job(job_id))
    if len(runs) == 2:
        _pair_table(runs)
        ui.chart(figures.side_by_side(*runs, lang=lang), key="pair")


@st.fragment(run_every=1)
def pair_live() -> None:
    job = lab.latest_job("side-by-side")
    if job is None:
        return
    ui.job_panel(lab, job, _("{stage}: {done}/{total} requests done on both", stage=job.stage, done=job.done,
                             total=job.total or "?"), key="pair_cancel")
    if job.active:
        _draw_pair_live(job.id, int(time.time()), i18n.lang())
    else:
        _draw_pair(job.id, job.status, i18n.lang())


pair_live()

st.divider()
st.subheader(_("Concurrency sweep"))
st.caption(_("The same workload at 1, 2, 4 … N requests in flight, with a warm-up at each level: throughput climbs "
             "while each request gets only a little slower — until the server is full."))
all_levels = [1, 2, 4, 8, 16, 32, 64, 128, 256]
levels = st.multiselect(_("Levels"), all_levels, default=list(defaults.sweep_levels))
if defaults.said:  # a server at a URL: why these levels
    st.caption(ui.plain(defaults.said))
if st.button(_("Run sweep"), icon=":material/trending_up:", disabled=not ui.can_act(lab) or not levels):
    ui.act(lab, lab.run_sweep, lab.sweep_spec(), sorted(levels))


@st.fragment(run_every=2)
def sweep_live() -> None:
    job = lab.latest_job("sweep")
    if job is None:
        return
    ui.job_panel(lab, job, _("{stage}: {done}/{total} levels", stage=job.stage, done=job.done, total=job.total),
                 cancel=N_("Cancel sweep"))
    if job.result:
        slo = _slo()
        _draw_sweep(job.id, job.status, i18n.lang())
        _draw_knee(job.id, job.status, i18n.lang(), slo.ttft_ms, slo.tpot_ms)
        ui.failure_causes(job.result, prefix=True)
        costs = [(r.extra.sweep_level or r.load.concurrency, c) for r in job.result
                 if (c := ui.cost_text(lab, r, _price())) is not None]
        if costs:
            st.markdown(_("At **{price}** per GPU-hour, a million output tokens cost, by requests in flight: {levels}.",
                          price=i18n.number(_price(), 2),
                          levels=" · ".join(f"{level}: **{cost}**" for level, cost in costs)))


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_sweep(job_id: str, status: str, lang: str) -> None:
    """A finished sweep's throughput and TTFT by level, built once for every viewer of a language."""
    ui.chart(figures.sweep_chart(lab.job(job_id).result, lang=lang), key="sweep")


@st.cache_resource(max_entries=16, show_spinner=False)
def _draw_knee(job_id: str, status: str, lang: str, ttft_ms: float, tpot_ms: float) -> None:
    """The sweep's Pareto view with the knee of one SLO, built once for every viewer who chose that SLO."""
    slo = lab.Slo(ttft_ms=ttft_ms, tpot_ms=tpot_ms)
    ui.chart(figures.pareto_chart(lab.job(job_id).result, slo, lang=lang), key="pareto")


sweep_live()
