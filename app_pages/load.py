"""Load test: fire concurrent requests and watch continuous batching — the lab's step 3, plus a sweep."""
import json
import time

import streamlit as st

import i18n
import ui
from engine import figures
from engine.figures import workloads as wl_figures
from engine.lab import LabError
from engine.measure.judge import lateness, repeats, stats, warmth
from engine.measure.judge.ceiling import run_ceiling
from engine.measure.judge.slo import ATTAINMENT, DEFAULT_SLO, Slo, judge, whole_percent
from engine.measure.judge.slots import occupancy
from engine.measure.load.snippets import run_code
from engine.measure.load.spec import deadline_said
from engine.measure.workloads.base import named as workload_named
from engine.measure.workloads.base import one_workload, run_workload
from engine.measure.workloads.defaults import EXAMPLES as WORKLOAD_EXAMPLES
from engine.measure.workloads.defaults import UPLOAD_BYTES, load_defaults, load_test_spec, sweep_spec
from engine.measure.workloads.defaults import workload_plan as load_workload
from engine.serving.cluster import second_server_command, side_by_side_here
from i18n import N_, _, ngettext

lab = ui.get_lab()
snap = lab.server_snapshot()
# What this machine runs in reasonable time for our own server; what a server at a URL says of itself
defaults = load_defaults(lab.device, lab.serving_max_len(), lab.attached())
# Answers longer than the running server's max-model-len are refused, so no control offers them.
server_len = lab.serving_max_len()
TOKENS_CAP = 1024  # longer answers make a CPU run crawl; the lab uses 150
UPLOAD_MB = max(1, UPLOAD_BYTES // (1024 * 1024))  # the uploader refuses what the engine would

st.title(_("Load test"))
st.caption(_("Send many requests at once and watch vLLM batch them: with continuous batching they run side by side "
             "instead of queueing one after another (the lab's step 3)."))

# The labels are the radio's values (English, as tests set them); shown in the viewer's language.
ARRIVALS = {N_("All at once (the lab)"): "burst", N_("Keep N in flight"): "concurrency",
            N_("Poisson arrivals"): "poisson"}
# Outside the form: the controls below depend on it and redraw when it changes.
# One row: how requests arrive, what they send, and in a few words what that makes
top_arrival, top_what, top_said = st.columns([3, 2, 3], gap="large", vertical_alignment="bottom")
arrival = top_arrival.radio(_("Arrival"), list(ARRIVALS), horizontal=True, key="load_arrival", format_func=i18n.shown(ARRIVALS),
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
# What to send (issue #20): the lab's prompts stay the default. Labels are the values (English, as tests set them).
WHAT = {N_("The lab's 10 prompts"): "lab", N_("Synthetic prompts (seeded)"): "synthetic", N_("A dataset"): "dataset",
        N_("Length distribution"): "lengths", N_("Multi-turn chats"): "multi-turn", N_("Trace replay"): "trace"}
DISTRIBUTIONS = {N_("Fixed"): "fixed", N_("Uniform range"): "uniform", N_("Normal"): "normal",
                 N_("Chat-like (shipped shape)"): "chat-like"}
UPLOAD = N_("Upload a file")


@st.cache_data(max_entries=16, show_spinner=False)
def _plan(desc_json: str, data: bytes | None):
    """The workload's plan, made once per description and file (the preview and the run send the same)."""
    return load_workload(json.loads(desc_json), data)


def _lengths(side: str, key: str, mean: int, top: int) -> dict:
    """One side's distribution (prompt or answer lengths) and its few parameters."""
    dist = DISTRIBUTIONS[st.selectbox(_("Prompt lengths") if side == "input" else _("Answer lengths"),
                                      list(DISTRIBUTIONS), key=f"{key}_kind", format_func=i18n.shown(DISTRIBUTIONS))]
    a, b, c = st.columns(3)
    if dist == "fixed":
        return {"kind": "fixed", "mean": a.number_input(_("Tokens"), value=mean, step=16, key=f"{key}_mean")}
    if dist == "uniform":
        return {"kind": "uniform", "low": a.number_input(_("Min"), value=mean // 4, step=8, key=f"{key}_low"),
                "high": b.number_input(_("Max"), value=mean * 2, step=8, key=f"{key}_high")}
    if dist == "normal":
        return {"kind": "normal", "mean": a.number_input(_("Mean"), value=mean, step=16, key=f"{key}_nmean"),
                "stdev": b.number_input(_("Stdev"), value=mean // 4, step=8, key=f"{key}_stdev"),
                "low": 1, "high": c.number_input(_("Max"), value=mean * 4, step=16, key=f"{key}_nhigh")}
    st.caption(_("A long tail, as chat traffic has: its median and spread are shipped data, with their source."))
    return {"kind": "chat-like", "high": top}


def _file(kind: str) -> tuple[str | None, bytes | None]:
    """A shipped example's name (bytes None) or an uploaded file's name and bytes; (None, None) before a file."""
    names = [*WORKLOAD_EXAMPLES[kind], UPLOAD]
    pick = st.selectbox(_("File"), names, key=f"wl_{kind}_file", format_func=lambda n: _(n) if n == UPLOAD else n,
                        help=_("The files shipped in examples/workloads/ (their sources in its README), or your own."))
    if pick != UPLOAD:
        return pick, None
    up = st.file_uploader(_("JSONL, JSON or CSV"), type=["jsonl", "json", "csv"], key=f"wl_{kind}_upload",
                          max_upload_size=UPLOAD_MB,
                          help=_("A prompt column (prompt, text, input or question), ShareGPT conversations or OpenAI "
                                 "messages; the run records its name, rows and hash, not the file.")
                          if kind != "trace" else _("Rows of timestamp, input_length, output_length (the Mooncake or "
                                                     "Azure shape)."))
    return (up.name, up.getvalue()) if up is not None else (None, None)


def _plan_said(plan) -> str:
    """What the plan sends in one line, from its summary (the histogram's numbers)."""
    s = plan.summary
    lengths = s.get("input_tokens") or {}
    values = dict(what=i18n.tr(workload_named(s)), n=s.get("sent") or len(plan.prompts),
                  median=f"{lengths.get('median', 0):.0f}", longest=f"{lengths.get('max', 0):.0f}")
    if plan.conversations is not None:  # only the first turns' lengths are known before the replies
        return _("{what}: {convs} conversations × {turns} turns ({n} requests), first turns of median {median} tokens "
                 "(longest {longest}).", convs=s.get("conversations"), turns=s.get("turns"), **values)
    return _("{what}: {n} requests, prompts of median {median} tokens (longest {longest}).", **values)


def _workload(what: str) -> dict | None:
    """The workload description the controls make (kinds.plan_of's keys); None for the lab's own prompts."""
    if what in ("lab", "synthetic"):
        return None
    if what == "dataset":
        name, data = _file("dataset")
        n = st.number_input(_("Prompts to send"), value=40, step=8, key="wl_ds_n")
        how = st.radio(_("Which rows"), ["random", "first"], horizontal=True, key="wl_ds_how",
                       format_func=lambda h: _("At random (seeded)") if h == "random" else _("The first ones"))
        return {"kind": "dataset", "file": name, "n": int(n), "how": how, "seed": 0, "_data": data}
    if what == "lengths":
        n = st.number_input(_("Number of requests"), value=32, step=8, key="wl_len_n")
        return {"kind": "lengths", "n": int(n), "input": _lengths("input", "wl_in", 256, 4096),
                "output": _lengths("output", "wl_out", 64, tokens_hi), "seed": 0}
    if what == "multi-turn":
        name, data = _file("multi-turn")
        a, b = st.columns(2)
        convs = a.number_input(_("Conversations"), value=8, step=1, key="wl_mt_convs")
        turns = b.number_input(_("Turns each"), value=3, step=1, key="wl_mt_turns",
                               help=_("Each turn sends the whole history so far: the shared prefix grows."))
        think = st.number_input(_("Think time between turns (s)"), value=0.0, step=0.5, key="wl_mt_think")
        return {"kind": "multi-turn", "file": name, "conversations": int(convs), "turns": int(turns),
                "think_time_s": float(think), "_data": data}
    name, data = _file("trace")
    scale = st.number_input(_("Time scale"), value=1.0, step=0.25, key="wl_tr_scale",
                            help=_("Multiplies the trace's gaps: 0.5 sends twice as fast, 2 half as fast."))
    st.caption(_("A trace brings its own clock and answer lengths: the arrival above does not apply."))
    return {"kind": "trace", "file": name, "time_scale": float(scale), "_data": data}


what = WHAT[top_what.selectbox(_("What to send"), list(WHAT), key="load_what", format_func=i18n.shown(WHAT),
                               help=_("The lab's ten prompts, seeded synthetic ones, your own dataset, prompts of "
                                      "chosen lengths, multi-turn chats that resend their history, or a replayed "
                                      "trace."))]
workload, wl_plan, wl_error = None, None, None
if what not in ("lab", "synthetic"):
    # Folded, like the SLO box: the run's picture and numbers stay on a projector's first screen
    with st.expander(_("The workload: its settings and a sample of what it sends"), icon=":material/dataset:"):
        settings, sample, chart = st.columns([2, 3, 3], gap="large")
        with settings:
            workload = _workload(what)
        data = workload.pop("_data", None)
        if workload.get("file") is None and what != "lengths":
            sample.info(_("Upload a file, or pick a shipped one."), icon=":material/upload_file:")
        else:
            try:
                wl_plan = _plan(json.dumps(workload, sort_keys=True), data)
            except LabError as e:  # a bad file or setting: the engine's one sentence, and nothing runs
                wl_error = e
            else:
                top_said.caption(ui.plain(_plan_said(wl_plan)))
                sample.markdown(_("**A sample of the prompts**"))
                if wl_plan.conversations is not None:  # a chat: its turns side by side, one row a conversation
                    turns = max(len(c) for c in wl_plan.conversations)
                    sample.dataframe({_("Turn {n}", n=t + 1): [c[t][:120] if t < len(c) else "" for c in
                                                               wl_plan.conversations[:8]] for t in range(turns)},
                                     hide_index=True)
                else:
                    sample.dataframe({_("Prompt"): [p[:160] for p in wl_plan.prompts[:8]],
                                      _("Tokens"): wl_plan.input_tokens[:8]}, hide_index=True)
                with chart:
                    # no taller than needed: the form and Run stay in reach with the box open
                    ui.chart(wl_figures.length_histogram(wl_plan, lang=i18n.lang()).update_layout(height=380),
                             key="wl_hist")
    if wl_error is not None:
        st.error(ui.plain(wl_error), icon=":material/error:")
# Answers held to lengths the workload draws (a distribution, a trace): no slider would say the truth
own_lengths = wl_plan is not None and bool(wl_plan.max_tokens_each)

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
            rate = st.number_input(_("Rate (requests/s)"), value=2.0, step=0.5,
                                   help=_("Requests arrive at random times, this many per second on average."))
            r1, r2 = st.columns(2)
            ramp_up = r1.number_input(_("Ramp up over (s)"), value=0.0, step=5.0,
                                      help=_("Start at a tenth of the rate and rise linearly to it over this many "
                                             "seconds; 0: the full rate from the start."))
            burstiness = r2.number_input(_("Burstiness"), value=1.0, step=0.25,
                                         help=_("As vllm bench serve --burstiness: 1 is Poisson; below 1 the requests "
                                                "come in bursts, above 1 more evenly (gamma arrivals)."))
        elif what == "multi-turn":  # a chat's turns wait for their replies: conversations, not requests, at once
            st.caption(_("Every conversation starts at once; each sends its next turn when its reply has come."))
        else:
            st.caption(_("Every request is sent at once: as many in flight as there are requests."))
    with c2:
        if own_lengths:
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
                                          "its throughput and TTFT with a 95 % bootstrap interval, so you see how "
                                          "much a number varies from run to run. The server's prefix cache is "
                                          "emptied between repeats where it allows it."))
    submitted = st.form_submit_button(_("Run load test"), type="primary", icon=":material/play_arrow:",
                                      disabled=not ui.can_act(lab) or (workload is not None and wl_plan is None))

st.caption(ui.plain(deadline_said(int(max_tokens))))  # every wait has an end, said before it
if submitted:
    try:
        spec = load_test_spec(shape, int(n_requests), int(max_tokens), max_len=lab.serving_max_len(),
                              ignore_eos=bool(ignore_eos), rate=rate, concurrency=int(concurrency),
                              synthetic=what == "synthetic", warmup=warmup, plan=wl_plan, ramp_up_s=float(ramp_up),
                              burstiness=float(burstiness))
    except LabError as e:
        st.error(ui.plain(e), icon=":material/error:")
    else:
        ui.act(lab, lab.run_load, spec, repeats=int(repeat_n))

def _slo():
    """This viewer's SLO (the inputs below; read in the fragments, which redraw on their own); a ConfigError
    for limits it refuses."""
    return Slo(ttft_ms=float(st.session_state.get("slo_ttft_ms", DEFAULT_SLO.ttft_ms)),
                   tpot_ms=float(st.session_state.get("slo_tpot_ms", DEFAULT_SLO.tpot_ms)))


# The SLO is each viewer's own (their session): it judges the run and the sweep shown below, and a change
# redraws only this viewer's page. The defaults and why they suit a chat user: engine/measure/judge/slo.py.
# Folded (the limits keep their values): the run's picture and numbers stay on a projector's first screen.
slo_box, price_box = st.columns(2)
slo_cols = slo_box.expander(_("Service-level objective (SLO)"), icon=":material/timer:").columns(
    [1, 1, 3], gap="large", vertical_alignment="center")
slo_cols[0].number_input(_("TTFT limit (ms)"), value=int(DEFAULT_SLO.ttft_ms), step=100, key="slo_ttft_ms",
                         help=_("The longest a user may wait for the first token."))
slo_cols[1].number_input(_("TPOT limit (ms)"), value=int(DEFAULT_SLO.tpot_ms), step=10, key="slo_tpot_ms",
                         help=_("The longest each later token may take on average (100 ms is 10 tokens/s)."))
# the engine's sentence for limits it refuses; runs are then judged by no SLO
if slo_refused := ui.refusal(lambda: Slo(ttft_ms=float(st.session_state["slo_ttft_ms"]),
                                             tpot_ms=float(st.session_state["slo_tpot_ms"]))):
    st.error(ui.plain(slo_refused), icon=":material/error:")
target, ttft, rate = (f"{ATTAINMENT:.0%}", f"{DEFAULT_SLO.ttft_ms / 1000:g}",
                      f"{1000 / DEFAULT_SLO.tpot_ms:g}")
slo_cols[2].caption(_("These limits are your choice, not a standard: a request is good when it meets both, as "
                      "`vllm bench serve --goodput` counts it, and a run meets the SLO when at least {target} of its "
                      "requests are good. The defaults suit a chat user: text starts within {ttft} s, then streams "
                      "at {rate} tokens/s, faster than people read.", target=target, ttft=ttft, rate=rate))


price_cols = price_box.expander(_("Price per GPU-hour (cost per million tokens)"),
                                icon=":material/payments:").columns([1, 3], gap="large", vertical_alignment="center")
with price_cols[0]:
    ui.gpu_price("load")
price_cols[1].caption(_("Cost per million output tokens = price per GPU-hour / 3600 × the measured wall time / the "
                        "output tokens × 1,000,000: the rate pays for the whole machine, only while the run "
                        "measured (not the warm-up, nor idle time between runs)."))
kwh_cols = price_box.expander(_("Price per kWh (energy cost per million tokens)"),
                              icon=":material/bolt:").columns([1, 3], gap="large", vertical_alignment="center")
with kwh_cols[0]:
    ui.kwh_price("load")
kwh_cols[1].caption(_("Energy cost per million output tokens = J per output token × 1,000,000 / 3,600,000 × the "
                      "price per kWh, from the energy measured over the run's measured part (an NVIDIA GPU's "
                      "counter, or RAPL): the electricity only, not the machine."))


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
    if line := figures.energy_cost_line(run, st.session_state.get("kwh_price"), lang=i18n.lang()):
        st.markdown(f":material/bolt: {ui.plain(line)}")


def _slo_verdict(run) -> None:
    """How many of the run's requests met this viewer's SLO, and its goodput: green when it holds."""
    if ui.refusal(_slo):
        return  # its sentence is under the limits
    verdict = judge(run, _slo())
    if verdict is None or not verdict.requests:
        return
    (st.success if verdict.meets else st.warning)(ui.plain(verdict.said), icon=":material/timer:")


def _summary_metrics(run) -> None:
    """The headline numbers, one row."""
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


def _summary_said(run) -> None:
    """What the numbers mean, in sentences (under the timeline: the numbers and the picture come first)."""
    s = run.summary
    ui.failure_causes([run])
    if n := run.extra.chat_requests_beside:
        st.info(ngettext("{n} chat answer was streamed while this run measured: its numbers include that traffic.",
                         "{n} chat answers were streamed while this run measured: its numbers include that traffic.",
                         n), icon=":material/forum:")
    ui.token_check(run)
    serial = s.total_latency_s
    if serial and run.duration and stats.peak_in_flight(run.records) <= 1:
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


def _first_screen(fig):
    """The timeline no taller than what is left of a 1080-pixel screen under the form and the numbers."""
    return fig.update_layout(height=min(fig.layout.height or 420, 420))


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_live(job_id: str, tick: int, lang: str) -> None:
    """The timeline of a running load test at one-second `tick`. Streamlit replays what a cached
    function drew, so every viewer in that second gets the same chart, built once (see monitor.py);
    once per language (`lang`), as the replay holds the drawing viewer's text."""
    partial, now = lab.job(job_id).live_run()
    ui.failure_causes([partial])  # a run where every request is refused says so at once, not at the end
    ui.chart(_first_screen(figures.request_timeline(partial, now=now, lang=lang)), key="tl-live")


def _shown_run(job):
    """The run a finished load test's numbers and charts draw: its run, or the last of its repeats (None: none
    finished)."""
    return (job.result[-1] if job.result else None) if isinstance(job.result, list) else job.result


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_repeats(job_id: str, status: str, lang: str) -> None:
    """A load test's repeats: the median and 95 % bootstrap interval of its throughput and mean TTFT
    (engine.measure.judge.repeats), each repeat's value, and whether the prefix cache was emptied between them."""
    runs = lab.job(job_id).result
    st.markdown(ngettext("**{n} repeat** of this load test: the median of each number and its 95 % bootstrap "
                         "interval.", "**{n} repeats** of this load test: the median of each number and its 95 % "
                         "bootstrap interval.", len(runs)))
    numbers = (("output_throughput", _("Output throughput (tok/s)")), ("mean_ttft_ms", _("Mean TTFT (ms)")))
    rows = [(name, spread, [r.summary.get(key) for r in runs]) for key, name in numbers
            if (spread := repeats.of_runs(runs, key)) is not None]
    median, low, high = _("Median"), _("95 % bootstrap low"), _("95 % bootstrap high")
    st.dataframe({_("Number"): [row[0] for row in rows], median: [row[1].median for row in rows],
                  low: [row[1].low for row in rows], high: [row[1].high for row in rows],
                  _("Each repeat"): [" · ".join("–" if v is None else f"{v:,.1f}" for v in row[2]) for row in rows]},
                 hide_index=True, column_config={c: st.column_config.NumberColumn(format="%.1f")
                                                 for c in (median, low, high)})
    if said := repeats.reset_said(runs):  # emptied between them, or why later repeats may have found it warm
        st.info(ui.plain(said), icon=":material/cached:")
    st.caption(_("The numbers and charts below are the last repeat's ({i} of {n}).", i=len(runs),
                 n=runs[-1].extra.repeats or len(runs)))


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_numbers(job_id: str, status: str, lang: str) -> None:
    """A finished load test's numbers, built once for every viewer of a language (`lang`)."""
    job = lab.job(job_id)
    run = _shown_run(job)
    ui.cancelled_note(job)
    _summary_metrics(run)
    ui.chart(_first_screen(figures.request_timeline(run, lang=lang)), key="tl")  # the key picture
    _summary_said(run)
    if late := lateness.said(run.extra):  # a scheduled run: did the client send on time?
        (st.warning if run.extra.late_sends else st.caption)(ui.plain(late))
    ui.warmth(lab, run)


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
OWN_SCENARIOS = ("concurrent-", "poisson", "dataset", "lengths", "random-", "multi-turn", "trace", "ramp-up", "bursty")


@st.fragment(run_every=1)
def live() -> None:
    job = lab.latest_job("load", OWN_SCENARIOS)
    if job is None:
        st.info(_("Press **Run load test**.") if lab.ready() else
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
        _slo_verdict(run)  # this viewer's own SLO: not in the drawings shared by every viewer
        _cost(run)  # this viewer's own price, likewise
        _draw_charts(job.id, job.status, i18n.lang())

live()


# -- two servers at once (issue #13 item 2) -------------------------------------------------------------
with st.expander(_("Against two servers at once"), icon=":material/view_column_2:"):
    st.caption(_("The same workload sent to this app's server (A) and a second one at a URL (B) at the same moment: "
                 "each warms up first, then both are measured on one clock and drawn on shared axes as they run. "
                 "Each run is saved, the two as a pair."))
    shared_ok = False
    if why := side_by_side_here(lab.device):
        st.info(ui.plain(why), icon=":material/info:")
        st.page_link("app_pages/tuning.py", label=_("Compare configurations on Tuning"), icon=":material/tune:")
        shared_ok = st.toggle(_("Both on this machine anyway"), key="pair_shared",
                              help=_("Runs two servers on this machine's one device: they slow each other down, so "
                                     "the numbers show the sharing as much as the settings. For trying it out."))
    elif cmd := second_server_command(lab.server_snapshot().config, lab.device):
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
        pair_n = 10
        if what in ("lab", "synthetic"):  # a workload brings its own requests
            pair_n = p1.number_input(_("Number of requests"), value=10, step=1, key="pair_n")
        pair_in_flight, pair_rate = 1, None
        if what == "trace":
            p2.caption(_("Sent on the trace's own clock, scaled as set above."))
        elif shape == "concurrency":
            pair_in_flight = p2.slider(_("Requests in flight"), 1, defaults.in_flight_max, 4, key="pair_in_flight")
        elif shape == "poisson":
            pair_rate = p2.number_input(_("Rate (requests/s)"), value=2.0, step=0.5, key="pair_rate")
        elif what == "multi-turn":
            p2.caption(_("Every conversation starts at once; each sends its next turn when its reply has come."))
        else:
            p2.caption(_("Every request is sent at once: as many in flight as there are requests."))
        pair_tokens = 16
        if own_lengths:
            p3.caption(_("Each answer runs to the length the workload gives it (up to {n} tokens).",
                         n=max(wl_plan.max_tokens_each)))
        else:
            pair_tokens = p3.slider(_("Max tokens per answer"), 16, max(tokens_hi, 17),
                                    min(defaults.sweep_max_tokens, tokens_hi), 2, key="pair_tokens", help=tokens_help)
        # what both get, from the same plan the single run sends (the "what to send" control above)
        pair_what = (_plan_said(wl_plan) if wl_plan is not None else
                     _("Seeded synthetic prompts.") if what == "synthetic" else _("The lab's 10 prompts."))
        st.caption(ui.plain(_("Both servers get the same requests: {what} Arrival: {arrival}. Answers always run to "
                              "their full length on both, so the two get the same work.", what=pair_what,
                              arrival=_("the trace's own clock") if what == "trace" else _(arrival))))
        run_pair = st.form_submit_button(_("Run on both servers"), type="primary", icon=":material/play_arrow:",
                                   disabled=not ui.can_act(lab) or (workload is not None and wl_plan is None))
    if run_pair:
        if not url_b.strip():
            st.error(_("Give the second server's address first."), icon=":material/error:")
        else:
            try:
                pair_spec = load_test_spec(shape, int(pair_n), int(pair_tokens), max_len=lab.serving_max_len(),
                                           ignore_eos=True, rate=pair_rate, concurrency=int(pair_in_flight),
                                           synthetic=what == "synthetic", plan=wl_plan)
            except LabError as e:
                st.error(ui.plain(e), icon=":material/error:")
            else:
                ui.act(lab, lab.run_side_by_side, url_b.strip(), pair_spec, key_b or None, shared_ok=shared_ok)


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_pair_live(job_id: str, tick: int, lang: str) -> None:
    """A running pair at one-second `tick`, built once for every viewer of a language (as _draw_live)."""
    runs, now = lab.job(job_id).live_pair()
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
    runs, _now = lab.job(job_id).live_pair()
    ui.cancelled_note(lab.job(job_id))
    if len(runs) == 2:
        _pair_table(runs)
        ui.chart(figures.side_by_side(*runs, lang=lang), key="pair")
        st.caption(ui.plain(_pair_sent(runs)))


def _pair_sent(runs) -> str:
    """Which workload the pair's runs recorded: one plan, sent to both (Runner.side_by_side)."""
    if one_workload(runs):
        return _("Both servers were sent the same workload: {what}.", what=i18n.tr(run_workload(runs[0])))
    return " · ".join(f"{i18n.tr(r.label)}: {i18n.tr(run_workload(r))}" for r in runs)


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
levels = st.multiselect(_("Levels"), all_levels, default=list(defaults.sweep_levels), placeholder=_("Pick the levels"))
if defaults.said:  # a server at a URL: why these levels
    st.caption(ui.plain(defaults.said))
sweep_col, tolerance_col, search_col = st.columns([1, 1, 2], vertical_alignment="bottom")
if sweep_col.button(_("Run sweep"), icon=":material/trending_up:", disabled=not ui.can_act(lab) or not levels):
    ui.act(lab, lab.run_sweep, sweep_spec(defaults, plan=wl_plan), sorted(levels))
# The SLO search (issue #21 item 6): the sweep's workload at levels found by bisection between the lowest and the
# highest level picked, judged by this viewer's SLO (the limits above); its answer is starred on the Pareto chart.
search_why = (_("Set an SLO above (a TTFT or TPOT limit in milliseconds) to search for the most requests in flight "
                "that meet it.") if ui.refusal(_slo) else
              _("Pick at least two levels: the search runs between the lowest and the highest.")
              if len(levels) < 2 else None)
tolerance = tolerance_col.number_input(_("Search tolerance (requests in flight)"), value=1, step=1,
                                       key="search_tolerance",
                                       help=_("The search stops when the most in flight that met the SLO and the "
                                              "fewest that missed it are this close."))
searched = search_col.button(_("Find the most in flight that meets the SLO"), icon=":material/target:",
                             disabled=not ui.can_act(lab) or search_why is not None)
if search_why is not None:
    st.caption(search_why)
else:
    st.caption(ui.plain(_("The search runs the sweep's workload at levels it picks by bisection between {low} and "
                          "{high} requests in flight, to within the tolerance, judged by your SLO ({slo}); a level "
                          "clearly past saturation is stopped early and counts as missed.", low=min(levels),
                          high=max(levels), slo=_slo().said)))
if searched and search_why is None:
    ui.act(lab, lab.run_slo_search, sweep_spec(defaults, plan=wl_plan), _slo(), min(levels), max(levels), int(tolerance))


def _search_done() -> str:
    """The newest SLO search that ended with an answer (its job id; '' when none): starred on the Pareto chart."""
    job = lab.latest_job("slo-search")
    return job.id if job is not None and job.status == "done" and job.result is not None else ""


@st.fragment(run_every=2)
def sweep_live() -> None:
    job = lab.latest_job("sweep")
    if job is None:
        return
    ui.job_panel(lab, job, _("{stage}: {done}/{total} levels", stage=job.stage, done=job.done, total=job.total),
                 cancel=N_("Cancel sweep"))
    if job.result:
        _draw_sweep(job.id, job.status, i18n.lang())
        if not ui.refusal(_slo):
            slo = _slo()
            _draw_knee(job.id, job.status, i18n.lang(), slo.ttft_ms, slo.tpot_ms, _search_done())
        _draw_sweep_server(job.id, job.status, i18n.lang())
        ui.failure_causes(job.result, prefix=True)
        for run in job.result:  # a cold level says so beside the charts that draw it
            if run.extra.cold and (said := warmth.said(run.extra)):
                st.warning(ui.plain(_("{label}: {sentence}", label=run.label, sentence=said)), icon=":material/ac_unit:")
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
def _draw_knee(job_id: str, status: str, lang: str, ttft_ms: float, tpot_ms: float, search_id: str = "") -> None:
    """The sweep's Pareto view with the knee of one SLO, and the SLO search's answer starred (`search_id`: its
    job), built once for every viewer who chose that SLO."""
    slo = Slo(ttft_ms=ttft_ms, tpot_ms=tpot_ms)
    search = lab.job(search_id).result if search_id else None
    ui.chart(figures.pareto_chart(lab.job(job_id).result, slo, lang=lang,
                                  search_best=search.best_run if search else None,
                                  search_slo=search.slo if search else None), key="pareto")


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_sweep_server(job_id: str, status: str, lang: str) -> None:
    """Where each level's time went inside the server against the client's clock (one row a level), and each
    level's energy per output token where it was measured, built once for every viewer of a language."""
    runs = lab.job(job_id).result
    with st.expander(_("Where each level's time went inside the server, and its energy"), icon=":material/dns:"):
        fig = figures.server_view_chart(runs, lang=lang)
        if isinstance(fig, str):  # no /metrics histograms: a sentence, never an empty chart
            st.caption(ui.plain(fig))
        else:
            ui.chart(fig, key="sweep-server-view")
        per_level = [(r.extra.sweep_level or r.load.concurrency, j) for r in runs
                     if (j := figures.j_per_token(r)) is not None]
        if per_level:
            st.markdown(_("Energy per output token, by requests in flight: {levels}.",
                          levels=" · ".join(f"{level}: **{j:.3g} J**" for level, j in per_level)))
        elif line := figures.energy_line(runs[0], lang=lang):  # why none was measured
            st.caption(ui.plain(line))


sweep_live()


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_search(job_id: str, status: str, lang: str) -> None:
    """A finished SLO search: its answer in one sentence and every level it tried, built once per language."""
    search = lab.job(job_id).result
    (st.success if search.best is not None and not search.cancelled else st.warning)(
        ui.plain(search.said), icon=":material/target:")
    rows = search.rows()
    held = {True: _("yes"), False: _("no")}
    st.dataframe({_("Requests in flight"): [r.level for r in rows],
                  _("SLO held"): [_("no: stopped early, past saturation") if r.saturated else held[r.held]
                                  for r in rows],
                  _("Met the SLO"): ["–" if r.attainment is None else f"{whole_percent(r.attainment):.0%}"
                                     for r in rows],
                  _("Goodput (req/s)"): [r.goodput for r in rows]},
                 hide_index=True, column_config={_("Goodput (req/s)"): st.column_config.NumberColumn(format="%.2f")})


@st.fragment(run_every=2)
def search_live() -> None:
    job = lab.latest_job("slo-search")
    if job is None:
        return
    ui.job_panel(lab, job, _("SLO search, {stage}: {done} of about {total} levels", stage=job.stage, done=job.done,
                             total=job.total), cancel=N_("Cancel search"))
    if not job.active and job.result is not None:
        _draw_search(job.id, job.status, i18n.lang())
        sweep = lab.latest_job("sweep")
        if job.status == "done" and job.result.best is not None and (sweep is None or not sweep.result):
            st.caption(_("Run a sweep to see the answer starred on its Pareto chart."))


search_live()
