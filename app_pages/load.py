"""Load test: fire concurrent requests and watch continuous batching — the lab's step 3, plus a sweep."""
import time

import streamlit as st

import i18n
import ui
from app_pages.parts import pair, request_form, sweep, viewer_limits, workload_form
from engine import figures
from engine.figures import workloads as wl_figures
from engine.lab import LabError
from engine.digits import significant
from engine.measure.judge import failures, lateness, prefix, repeats, stats
from engine.measure.judge.ceiling import run_ceiling
from engine.measure.judge.slots import occupancy
from engine.measure.snippets.load import run_code
from engine.measure.load.shape import shape_said
from engine.measure.load.spec import arrivals_recorded, deadline_said
from engine.measure.workloads.defaults import SEEDED, load_defaults, load_test_spec, rate_choice
from engine.serving import models
from i18n import N_, _, ngettext

lab = ui.get_lab()
# What this machine runs in reasonable time for our own server; what a server at a URL says of itself
defaults = load_defaults(lab.device, lab.serving_max_len(), lab.attached())
# Answers longer than the running server's max-model-len are refused, so no control offers them.
server_len = lab.serving_max_len()
TOKENS_CAP = 1024  # longer answers make a CPU run crawl; the lab uses 150

st.title(_("Load test"))
st.caption(_("Send many requests at once and watch vLLM batch them: with continuous batching they run side by side "
             "instead of queueing one after another (the lab's step 3)."))

# The labels are the radio's values (English, as tests set them); shown in the viewer's language.
ARRIVALS = {N_("All at once (the lab)"): "burst", N_("Keep N in flight"): "concurrency",
            N_("At a rate"): "poisson"}
# How requests arriving at a rate are spaced, and how their rate may rise (vllm bench serve's --ramp-up-strategy)
SPACINGS = {N_("Random (Poisson, gamma)"): "poisson", N_("Evenly spaced"): "constant"}
RAMPS = {N_("No ramp"): None, N_("Over time"): "time", N_("Linear by request"): "linear",
         N_("Exponential by request"): "exponential"}
# Outside the form: the controls below depend on it and redraw when it changes.
# One row: how requests arrive, what they send, and in a few words what that makes
top_arrival, top_what, top_said = st.columns([3, 2, 3], gap="large", vertical_alignment="bottom")
arrival = top_arrival.radio(_("Arrival"), list(ARRIVALS), horizontal=True, key="load_arrival",
                            format_func=i18n.shown(ARRIVALS),
                   help=_("All at once: every request is sent together, like asyncio.gather. Keep N in flight: a new "
                          "request as soon as one finishes. At a rate: requests arrive at a set rate, at random "
                          "(Poisson, gamma) or evenly spaced, as `vllm bench serve --request-rate` sends them."))
shape = ARRIVALS[arrival]
if remote := lab.attached():  # say where the requests go: a server this app did not start
    st.caption(ui.plain(_("Requests go to {model} at {url} (connected on the Server page).",
                          model=models.shown_name(remote.model), url=remote.url)), help=ui.model_detail(remote.model))

tokens_hi = min(TOKENS_CAP, server_len) if server_len else TOKENS_CAP
tokens_help = (
    _("The lab uses 150. At most {hi}: the running server's max-model-len is {len}, and it refuses longer answers.",
      hi=tokens_hi, len=server_len)
    if server_len and server_len <= TOKENS_CAP else
    _("The lab uses 150. The running server accepts up to {len} (its max-model-len); this slider stops at {cap} "
      "to keep runs short.", len=server_len, cap=TOKENS_CAP)
    if server_len else _("The lab uses 150. Once the server runs, this stops at its max-model-len."))
# What to send: the lab's prompts stay the default
chosen = workload_form.choose(top_what, top_said, tokens_hi)
what, wl_plan = chosen.what, chosen.plan
# How each request is sent, for every run this page starts: the load test, the sweep, the SLO search and the pair
request = request_form.boxes()

with st.form("load"):
    c1, c2, c3 = st.columns(3, gap="large")
    with c1:
        n_requests = 10
        if what in ("lab", "synthetic"):
            # no hard bounds here: the engine's check says what it refuses when Run is pressed (as the CLI does)
            n_requests = st.number_input(_("Number of requests"), value=10, step=1,
                                         help=_("Total requests; prompts repeat if there are more requests than "
                                                "prompts."))
        concurrency, rate, ramp_up, burstiness = 1, None, 0.0, 1.0
        spacing, cap, ramp_kind, ramp_value = next(iter(SPACINGS)), 0, next(iter(RAMPS)), 0.0
        if what == "trace":
            st.caption(_("Sent on the trace's own clock, scaled as set above."))
        elif shape == "concurrency":
            concurrency = st.slider(_("Requests in flight"), 1, defaults.in_flight_max, 4,
                                    help=_("How many requests are kept in flight: a new one goes out as soon as one "
                                           "finishes."))
            ramp_up = st.number_input(_("Ramp up over (s)"), value=0.0, step=5.0,
                                      help=_("Start with 1 in flight and rise linearly to the number above over this "
                                             "many seconds; 0: all from the start."))
        elif shape == "poisson":
            r0, r1, r2 = st.columns(2), st.columns(2), st.columns(2)
            rate = r0[0].number_input(_("Rate (requests/s)"), value=2.0, step=0.5,
                                      help=_("Requests arrive this many per second on average (the end rate of a "
                                             "ramp)."))
            spacing = r0[1].selectbox(_("Spacing"), list(SPACINGS), key="load_spacing",
                                      format_func=i18n.shown(SPACINGS),
                                      help=_("Random: Poisson, or gamma with a burstiness other than 1. Evenly "
                                             "spaced: one request every 1/rate seconds."))
            burstiness = r1[0].number_input(_("Burstiness"), value=1.0, step=0.25,
                                            help=_("As vllm bench serve --burstiness: 1 is Poisson; below 1 the "
                                                   "requests come in bursts, above 1 more evenly (gamma arrivals)."))
            cap = r1[1].number_input(_("Most in flight"), value=0, step=1, key="load_cap",
                                     help=_("As `vllm bench serve --max-concurrency`: an arrival past this many in "
                                            "flight waits for one to end (its wait is recorded, not counted as the "
                                            "client's lateness); 0: no cap."))
            ramp_kind = r2[0].selectbox(_("Ramp-up"), list(RAMPS), key="load_ramp", format_func=i18n.shown(RAMPS),
                                        help=_("Over time: from a tenth of the rate up to it over the seconds "
                                               "beside. By request: as `vllm bench serve --ramp-up-strategy`, "
                                               "request i of n at a rate from the one beside up to the rate above, "
                                               "linearly or exponentially."))
            ramp_value = r2[1].number_input(_("Ramp: seconds, or start rate"), value=0.0, step=1.0,
                                            key="load_ramp_value",
                                            help=_("Over time: the ramp's seconds. By request: its first rate "
                                                   "(requests/s)."))
        elif what == "multi-turn":  # a chat's turns wait for their replies: conversations, not requests, at once
            st.caption(_("Every conversation starts at once; each sends its next turn when its reply has come."))
        else:
            st.caption(_("Every request is sent at once: as many in flight as there are requests."))
    with c2:
        if chosen.own_lengths:
            max_tokens = max(wl_plan.max_tokens_each)
            st.caption(_("Each answer runs to the length the workload gives it (up to {n} tokens).", n=max_tokens))
            ignore_eos = None
        else:
            max_tokens = st.slider(_("Max tokens per answer"), 16, max(tokens_hi, 17), min(150, tokens_hi), 2,
                                   help=tokens_help)
            ignore_eos = st.toggle(_("Always generate max tokens"), value=False,
                                   help=_("Ignore end-of-sequence: a fixed output length, so runs compare exactly. "
                                          "Off: answers end naturally, as in the lab."))
    with c3:
        warmup = st.toggle(_("Warm up first (not counted)"), value=True, key="load_warmup",
                           help=_("Send one batch as big as the measured one first and leave it out of the numbers: "
                                  "the first batch of a size after the server starts pays one-off start-up work "
                                  "(on an H200 the first 10 at once took 4.1 s, the same batch warm 0.85 s). Off: "
                                  "see that cost in the run itself."))
        repeat_n = st.number_input(_("Repeat"), min_value=1, max_value=10, value=1, step=1, key="load_repeats",
                                   help=_("Run the same load test this many times: the results show the median of "
                                          "its throughput and TTFT with the range of the runs (from 6 repeats up, an "
                                          "interval holding the median with 95 % probability), so you see how much a "
                                          "number varies from run to run. The server's prefix cache is emptied "
                                          "between repeats where it allows it."))
        seed = st.number_input(_("Seed of the synthetic prompts"), min_value=0, max_value=2**31 - 1, value=None,
                               step=1, key="load_seed", placeholder=_("a new one each run"),
                               disabled=what not in ("synthetic", *SEEDED),
                               help=_("Empty: every run and every repeat makes new prompts, so none finds another's "
                                      "in the server's prefix cache. A number sends the same prompts each time (the "
                                      "cache then serves their prefill, and the results say how much of it)."))
    submitted = st.form_submit_button(_("Run load test"), type="primary", icon=":material/play_arrow:",
                                      disabled=not ui.can_act(lab) or chosen.blocked)

st.caption(ui.plain(deadline_said(int(max_tokens))))  # every wait has an end, said before it
if submitted:
    try:
        if shape == "poisson" and RAMPS[ramp_kind] == "time":
            ramp_up = ramp_value
        spec = load_test_spec(shape, int(n_requests), int(max_tokens), max_len=lab.serving_max_len(),
                              ignore_eos=bool(ignore_eos), rate=rate, concurrency=int(concurrency),
                              synthetic=what == "synthetic", warmup=warmup, plan=wl_plan, ramp_up_s=float(ramp_up),
                              burstiness=float(burstiness), seed=None if seed is None else int(seed),
                              request=request.fields(), models_dir=lab.settings.models,
                              **rate_choice(SPACINGS[spacing], int(cap), RAMPS[ramp_kind], float(ramp_value)))
    except LabError as e:
        st.error(ui.plain(e), icon=":material/error:")
    else:
        ui.act(lab.run_load, spec, repeats=int(repeat_n), fixed_seed=seed is not None)

viewer_limits.boxes()  # this viewer's SLO and prices: they judge the run, the sweep and the search below


def _summary_metrics(run) -> None:
    """The headline numbers, one row."""
    s = run.summary
    cols = st.columns(6)
    cols[0].metric(_("Wall time"), ui.fmt_s(run.duration))
    cols[1].metric(_("Output throughput"), f"{significant(s.output_throughput)} tok/s")
    ms = lambda key: None if s.get(key) is None else s.get(key) / 1000  # noqa: E731 - none measured it: "–"
    cols[2].metric(_("Mean TTFT"), ui.fmt_s(ms("mean_ttft_ms")),
                   help=_("Time to first token: what a user waits before text starts."))
    cols[3].metric(_("p99 TTFT"), ui.fmt_s(ms("p99_ttft_ms")))
    tpot = s.get("mean_tpot_ms")
    cols[4].metric(_("Mean TPOT"), "–" if tpot is None else f"{significant(tpot)} ms",
                   help=_("Time per output token after the first: the speed text appears at."))
    c = failures.counts(run)  # adds up to the requests planned: those never sent are said apart
    if c.never_sent:
        cols[5].metric(_("OK / failed / never sent"), f"{c.answered} / {c.failed} / {c.never_sent}",
                       help=_("Never sent: a conversation's later turns after one failed, or what a stopped run had "
                              "not sent yet."))
    else:
        cols[5].metric(_("OK / failed"), f"{c.answered} / {c.failed}")


def _summary_said(run) -> None:
    """What the numbers mean, in sentences (under the timeline: the numbers and the picture come first)."""
    s = run.summary
    ui.failure_causes([run])
    ui.disturbance(run)  # other programs, another client, chats beside it: one sentence
    ui.token_check(run)
    serial = s.total_latency_s
    if serial and run.duration and stats.peak_in_flight(run.records) <= 1:
        wall = significant(run.duration)
        st.markdown(_("These requests ran one after another, so the wall time (**{wall} s**) is the sum of their "
                      "latencies: nothing was batched. Send them at once to see continuous batching.", wall=wall))
    elif serial and run.duration:
        done = s.completed or 0
        wall, total = significant(run.duration), significant(serial)
        st.markdown(_("The **{done}** requests that succeeded finished in **{wall} s**. One after another they would "
                      "have taken about **{total} s** (the sum of their latencies): that is continuous batching.",
                      done=done, wall=wall, total=total) if s.failed else
                    _("All **{done}** requests finished in **{wall} s**. One after another they would have taken "
                      "about **{total} s** (the sum of their latencies): that is continuous batching.",
                      done=done, wall=wall, total=total))


TIMELINE_H = 420  # px: what a 1080-pixel screen leaves the timeline under the form and the numbers


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_live(job_id: str, tick: int, lang: str) -> None:
    """The timeline of a running load test at one-second `tick`. Streamlit replays what a cached
    function drew, so every viewer in that second gets the same chart, built once (see monitor.py);
    once per language (`lang`), as the replay holds the drawing viewer's text."""
    partial, now = lab.job(job_id).live_run()
    ui.failure_causes([partial])  # a run where every request is refused says so at once, not at the end
    ui.chart(ui.fit(figures.request_timeline(partial, now=now, lang=lang), TIMELINE_H), key="tl-live")


def _shown_run(job):
    """The run a finished load test's numbers and charts draw: its run, or the last of its repeats (None: none
    finished)."""
    return (job.result[-1] if job.result else None) if isinstance(job.result, list) else job.result


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_repeats(job_id: str, status: str, lang: str) -> None:
    """A load test's repeats: the median of its throughput and mean TTFT with their range (an interval from six
    repeats up, engine.measure.judge.repeats), each repeat's value, a repeat far from the others, and whether the
    prefix cache was emptied between them; why the rest did not run when their server went away."""
    ran = lab.job(job_id).result
    if (stopped := getattr(ran, "stopped", None)) is not None:
        st.error(ui.plain(stopped), icon=":material/error:")
    runs = failures.counted_repeats(ran)  # a repeat that failed never enters the statistics as a zero
    if not runs:
        return
    st.markdown(ngettext("**{n} repeat** of this load test: the median of each number and the spread of the runs.",
                         "**{n} repeats** of this load test: the median of each number and the spread of the runs.",
                         len(runs)))
    numbers = (("output_throughput", _("Output throughput (tok/s)")), ("mean_ttft_ms", _("Mean TTFT (ms)")))
    rows = [(name, spread) for key, name in numbers if (spread := repeats.of_runs(runs, key)) is not None]
    st.dataframe({_("Number"): [name for name, _s in rows], _("Median"): [s.shown(s.median) for _n, s in rows],
                  _("Spread"): [i18n.tr(s.spread_said) for _n, s in rows],
                  _("Each repeat"): [" · ".join(s.shown(v) for v in s.values) for _n, s in rows]}, hide_index=True)
    for name, s in rows:  # a repeat far from the others is said, not averaged away
        for said in s.outliers_said:
            st.warning(ui.plain(_("{number}: {sentence}", number=name, sentence=i18n.tr(said))),
                       icon=":material/warning:")
    if said := repeats.reset_said(runs):  # emptied between them, or why later repeats may have found it warm
        st.info(ui.plain(said), icon=":material/cached:")
    drawn = ran[-1]  # _shown_run's: the last repeat that ran, counted or not
    st.caption(_("The numbers and charts below are the last repeat's ({i} of {n}).",
                 i=drawn.extra.repeat.index or len(ran), n=drawn.extra.repeat.total or len(ran)))


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_numbers(job_id: str, status: str, lang: str) -> None:
    """A finished load test's numbers, built once for every viewer of a language (`lang`)."""
    job = lab.job(job_id)
    run = _shown_run(job)
    ui.cancelled_note(job)
    _summary_metrics(run)
    if cached := prefix.cached_said(run):  # its prefill mostly skipped: said beside its throughput and TTFT
        st.warning(ui.plain(cached), icon=":material/cached:")
    ui.chart(ui.fit(figures.request_timeline(run, lang=lang), TIMELINE_H), key="tl")  # the key picture
    _summary_said(run)
    if (arrivals := arrivals_recorded(run.load)) is not None:  # at a rate: how, and the most in flight seen
        peak = lateness.in_flight_said(run)
        st.caption(ui.plain(_("Arrivals: {arrivals}.", arrivals=i18n.tr(arrivals)) + (f" {i18n.tr(peak)}" if peak
                                                                                          else "")))
    if shape := shape_said(run.load):  # its endpoint, sampling, extra body, headers by name, LoRA
        st.caption(ui.plain(shape))
    if late := lateness.said(run.extra):  # a scheduled run: did the client send on time?
        (st.warning if run.extra.lateness.late_sends else st.caption)(ui.plain(late))
    if held := lateness.budget_said(run.extra):  # requests that waited for a connection of the client's files
        st.warning(ui.plain(held), icon=":material/lan:")
    ui.warmth(run)


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_charts(job_id: str, status: str, lang: str) -> None:
    """A finished load test's charts, built once for every viewer of a language (`lang`)."""
    run = _shown_run(lab.job(job_id))
    if any(r.turn is not None for r in run.records):  # a multi-turn chat: does a later turn still start fast?
        ui.chart(wl_figures.ttft_by_turn(run, lang=lang), key="turns")
    left, right = st.columns(2, gap="large")
    with left:
        ui.chart(figures.concurrent_latency_bars(run, lang=lang), key="bars")
    with right:
        ui.chart(figures.throughput_over_time(run, lang=lang), key="tput")
    ui.server_view(run, key="server-view", lang=lang)  # queue, prefill, decode inside vLLM; the energy
    if ceiling := run_ceiling(run):  # the physical limit: what the memory bandwidth allows
        with st.expander(_("Decode speed against the memory-bandwidth ceiling"), icon=":material/speed:"):
            st.markdown(ui.plain(ceiling.sentence))
            st.caption(ui.plain(ceiling.why))
            ui.chart(figures.ceiling_bars([run], lang=lang), key="ceiling")
    if not isinstance(occupancy(run), str):  # a sentence: this run cannot show its slots (no token times)
        with st.expander(_("Batch slots step by step"), icon=":material/grid_on:"):
            ui.chart(figures.slot_chart([run], lang=lang), key="slots")
    ui.code_behind(run_code(run, lang))


# The scenarios this page's form makes (defaults.load_test_spec: an arrival, or a workload's kind, which the
# catalogue's workload scenarios start with too): the Naive page's vLLM runs are load tests too, and are not shown.
OWN_SCENARIOS = ("concurrent-", "poisson", "dataset", "hub", "lengths", "random-", "prefix-", "fixed-", "multi-turn",
                 "trace", "ramp-up", "bursty")


def _job():
    return lab.latest_job("load", OWN_SCENARIOS)


def live() -> None:
    job = _job()
    if job is None:  # a viewer can neither press Run nor start a server: told what will happen instead
        st.info(_("No load test yet: the presenter runs it, and its result appears here.") if not ui.can_act(lab)
                else _("Press **Run load test**.") if lab.ready() else
                _("Start the server on the Server page, then press **Run load test**."), icon=":material/info:")
        return
    if job.active and job.warming:  # the warm-up is not the run: said, not drawn as if it were measured
        ui.job_panel(lab, job, _("{label}: warming up, {done}/{total} warm-up requests done (not counted)",
                                 label=job.label, done=job.warmup_done, total=job.warmup_total),
                     icon=":material/cancel:")
        st.info(_("Warming up: one batch as big as the measured one goes first and is left out of the numbers. "
                  "The timeline starts when the measured requests are sent."), icon=":material/local_fire_department:")
        return
    ui.job_panel(lab, job, _("{label}: {stage}, {done} requests of it done", label=job.label, stage=job.stage,
                             done=len(job.records)) if job.steps else  # repeats: the bar counts them
                 _("{label}: {done}/{total} requests done", label=job.label, done=job.done, total=job.total or "?"),
                 icon=":material/cancel:")
    if job.active:
        _draw_live(job.id, int(time.time()), i18n.lang())
        return
    if isinstance(job.result, list) and job.result:  # repeats: their median and interval first
        _draw_repeats(job.id, job.status, i18n.lang())
    if (run := _shown_run(job)) is not None:
        _draw_numbers(job.id, job.status, i18n.lang())
        viewer_limits.slo_verdict(run)  # this viewer's own SLO: not in the drawings shared by every viewer
        viewer_limits.cost(run)  # this viewer's own price, likewise
        _draw_charts(job.id, job.status, i18n.lang())


# no job yet: what it says depends on whether a server answers
ui.live(live, lambda: (_job().seen if _job() else lab.ready()), lambda: (j := _job()) is not None and j.active)


pair.section(lab, chosen, request, shape, arrival, defaults, tokens_hi, tokens_help)
pair.live()
sweep.section(lab, defaults, wl_plan, request)
sweep.sweep_live()
sweep.search_live()
