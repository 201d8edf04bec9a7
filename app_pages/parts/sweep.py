"""The sweep and the SLO search: the same workload at several levels in flight or arrival rates, and the most in
flight (or the highest rate) that meets the viewer's SLO, found by bisection and starred on the sweep's Pareto chart."""
from dataclasses import dataclass

import streamlit as st

import i18n
import ui
from app_pages.parts import viewer_limits
from engine import figures
from engine.measure.judge import warmth
from engine.lab import LabError
from engine.measure.judge.slo import Slo, rates_said, whole_percent
from engine.measure.load.spec import parse_rates
from engine.measure.workloads.defaults import sweep_spec
from i18n import N_, _

ALL_LEVELS = [1, 2, 4, 8, 16, 32, 64, 128, 256]


# What the sweep and the search step through: requests in flight, or the rate requests arrive at (the values are
# the radio's, English, as tests set them)
BY = {N_("Requests in flight"): "concurrency", N_("Arrival rate"): "rate"}
RATES = "0.5, 1, 2, 4"  # requests/s: the first offer of a rate sweep on a CPU server


@dataclass(frozen=True)
class _Axis:
    """What the sweep and the search say and take on one axis (BY's values): its sentences (marked, said through
    _() where shown), the search tolerance's first value and step, the widgets' keys."""

    caption: str
    no_slo: str  # why the search waits: no SLO set
    too_few: str  # ... fewer than two levels
    tolerance: str
    tolerance_help: str
    tolerance_start: int | float  # an int: a whole number of requests in flight
    search: str  # the search's button
    search_said: str  # what the search will do ({low}, {high}, {slo})
    tolerance_key: str
    sweep_key: str | None = None


AXES = {
    "concurrency": _Axis(
        caption=N_("The same workload at 1, 2, 4 … N requests in flight, with a warm-up at each level: throughput "
                   "climbs while each request gets only a little slower — until the server is full."),
        no_slo=N_("Set an SLO above (a TTFT or TPOT limit in milliseconds) to search for the most requests in flight "
                  "that meet it."),
        too_few=N_("Pick at least two levels: the search runs between the lowest and the highest."),
        tolerance=N_("Search tolerance (requests in flight)"),
        tolerance_help=N_("The search stops when the most in flight that met the SLO and the fewest that missed it "
                          "are this close."),
        tolerance_start=1, tolerance_key="search_tolerance",
        search=N_("Find the most in flight that meets the SLO"),
        search_said=N_("The search runs the sweep's workload at levels it picks by bisection between {low} and {high} "
                       "requests in flight, to within the tolerance, judged by your SLO ({slo}); a level clearly past "
                       "saturation is stopped early and counts as missed.")),
    "rate": _Axis(
        caption=N_("The same workload arriving at each rate, Poisson: throughput follows the rate while the server "
                   "keeps up; past that, requests queue and the wait for the first token grows."),
        no_slo=N_("Set an SLO above (a TTFT or TPOT limit in milliseconds) to search for the highest rate that meets "
                  "it."),
        too_few=N_("Give at least two rates: the search runs between the lowest and the highest."),
        tolerance=N_("Search tolerance (requests/s)"),
        tolerance_help=N_("The search stops when the highest rate that met the SLO and the lowest that missed it are "
                          "this close."),
        tolerance_start=0.25, tolerance_key="search_rate_tolerance", sweep_key="run_rate_sweep",
        search=N_("Find the highest rate that meets the SLO"),
        search_said=N_("The search runs the sweep's workload at rates it picks by bisection between {low:g} and "
                       "{high:g} requests/s, to within the tolerance, judged by your SLO ({slo}); a rate the server "
                       "clearly cannot keep up with is stopped early and counts as missed.")),
}


def _spec(defaults, wl_plan, request):
    """The sweep's (and the search's) workload sent in the page's request shape; None, its one sentence shown, when
    a request box holds a bad value."""
    try:
        return sweep_spec(defaults, plan=wl_plan, request=request.fields(), models_dir=ui.get_lab().settings.models)
    except LabError as e:
        st.error(ui.plain(e), icon=":material/error:")
        return None


def section(lab, defaults, wl_plan, request) -> None:
    """The sweep's levels (requests in flight or arrival rates) and Run, and the search's tolerance and Run, with
    what each will do. The search runs the sweep's workload between the lowest and the highest level picked, judged
    by this viewer's SLO (the limits above); its answer is starred on the Pareto chart. Both send the page's request
    shape (`request`: request_form.Chosen, the boxes above the load test's form)."""
    st.divider()
    st.subheader(_("Sweep"))
    by = BY[st.radio(_("Sweep over"), list(BY), horizontal=True, key="sweep_by", format_func=i18n.shown(BY),
                     help=_("Requests in flight: a closed loop at each level, as `vllm bench sweep`. Arrival rate: "
                            "requests arrive at each rate (Poisson), as `vllm bench serve --request-rate`; each rate "
                            "sends at least 15 s of arrivals."))]
    axis = AXES[by]
    st.caption(_(axis.caption))
    levels = _rates() if by == "rate" else _levels_in_flight(defaults)
    sweep_col, tolerance_col, search_col = st.columns([1, 1, 2], vertical_alignment="bottom")
    if sweep_col.button(_("Run sweep"), icon=":material/trending_up:", key=axis.sweep_key,
                        disabled=not ui.can_act(lab) or not levels):
        if (spec := _spec(defaults, wl_plan, request)) is not None:
            ui.act(lab.run_sweep, spec, levels, by=by)
    search_why = (_(axis.no_slo) if ui.refusal(viewer_limits.slo) else
                  _(axis.too_few) if len(levels) < 2 else None)
    tolerance = tolerance_col.number_input(_(axis.tolerance), value=axis.tolerance_start, step=axis.tolerance_start,
                                           key=axis.tolerance_key, help=_(axis.tolerance_help))
    searched = search_col.button(_(axis.search), icon=":material/target:",
                                 disabled=not ui.can_act(lab) or search_why is not None)
    if search_why is not None:
        st.caption(search_why)
        return
    st.caption(ui.plain(_(axis.search_said, low=min(levels), high=max(levels), slo=viewer_limits.slo().said)))
    if searched and (spec := _spec(defaults, wl_plan, request)) is not None:
        ui.act(lab.run_slo_search, spec, viewer_limits.slo(), min(levels), max(levels),
               int(tolerance) if by == "concurrency" else float(tolerance), by=by)


def _levels_in_flight(defaults) -> list[int]:
    """The levels in flight picked, in order (a server at a URL: why these are offered)."""
    levels = st.multiselect(_("Levels"), ALL_LEVELS, default=list(defaults.sweep_levels),
                            placeholder=_("Pick the levels"))
    if defaults.said:
        st.caption(ui.plain(defaults.said))
    return sorted(levels)


def _rates() -> list[float]:
    """The arrival rates given, in order; none (and the sentence why) when the text is not a list of rates."""
    text = st.text_input(_("Rates (requests/s)"), value=RATES, key="sweep_rates",
                         help=_("Comma-separated, e.g. 0.5, 1, 2, 4, as `vllm bench serve --request-rate` takes one."))
    try:
        return parse_rates(text)
    except LabError as e:
        st.error(ui.plain(e), icon=":material/error:")
        return []


def _search_done() -> str:
    """The newest SLO search that ended with an answer (its job id; '' when none): starred on the Pareto chart."""
    job = ui.get_lab().latest_job("slo-search")
    done = job is not None and job.status == "done" and job.result is not None
    return job.id if done and job.result.by == "concurrency" else ""  # a rate's answer has no point in flight


def sweep_live() -> None:
    ui.live_job(_sweep_live, lambda: ui.get_lab().latest_job("sweep"), every=2)


def _sweep_live() -> None:
    lab = ui.get_lab()
    job = lab.latest_job("sweep")
    if job is None:
        return
    ui.job_panel(lab, job, _("{stage}: {done}/{total} levels", stage=job.stage, done=job.done, total=job.total),
                 cancel=N_("Cancel sweep"))
    if job.result:
        _draw_sweep(job.id, job.status, i18n.lang())
        rated = figures.sweep_by_rate(job.result)
        if not ui.refusal(viewer_limits.slo) and rated:  # the highest rate that met this viewer's SLO
            st.markdown(ui.plain(rates_said(job.result, viewer_limits.slo())))
        elif not ui.refusal(viewer_limits.slo):
            slo = viewer_limits.slo()
            _draw_knee(job.id, job.status, i18n.lang(), slo.ttft_ms, slo.tpot_ms, _search_done())
        _draw_sweep_server(job.id, job.status, i18n.lang())
        ui.failure_causes(job.result, prefix=True)
        for run in job.result:  # a cold level says so beside the charts that draw it
            if run.extra.warmth.cold and (said := warmth.said(run.extra)):
                st.warning(ui.plain(_("{label}: {sentence}", label=run.label, sentence=said)),
                           icon=":material/ac_unit:")
        costs = [(f"{r.load.rate:g}/s" if rated else r.extra.sweep_level or r.load.concurrency, c)
                 for r in job.result if (c := ui.cost_text(r, viewer_limits.price())) is not None]
        if costs:
            levels = " · ".join(f"{level}: **{cost}**" for level, cost in costs)
            price = i18n.number(viewer_limits.price(), 2)
            st.markdown(_("At **{price}** per GPU-hour, a million output tokens cost, by arrival rate: {levels}.",
                          price=price, levels=levels) if rated else
                        _("At **{price}** per GPU-hour, a million output tokens cost, by requests in flight: {levels}.",
                          price=price, levels=levels))


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_sweep(job_id: str, status: str, lang: str) -> None:
    """A finished sweep's throughput and TTFT by level, built once for every viewer of a language."""
    ui.chart(figures.sweep_chart(ui.get_lab().job(job_id).result, lang=lang), key="sweep")


@st.cache_resource(max_entries=16, show_spinner=False)
def _draw_knee(job_id: str, status: str, lang: str, ttft_ms: float, tpot_ms: float, search_id: str = "") -> None:
    """The sweep's Pareto view with the knee of one SLO, and the SLO search's answer starred (`search_id`: its
    job), built once for every viewer who chose that SLO."""
    slo = Slo(ttft_ms=ttft_ms, tpot_ms=tpot_ms)
    search = ui.get_lab().job(search_id).result if search_id else None
    ui.chart(figures.pareto_chart(ui.get_lab().job(job_id).result, slo, lang=lang,
                                  search_best=search.best_run if search else None,
                                  search_slo=search.slo if search else None), key="pareto")


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_sweep_server(job_id: str, status: str, lang: str) -> None:
    """Where each level's time went inside the server against the client's clock (one row a level), and each
    level's energy per output token where it was measured, built once for every viewer of a language."""
    runs = ui.get_lab().job(job_id).result
    with st.expander(_("Where each level's time went inside the server, and its energy"), icon=":material/dns:"):
        fig = figures.server_view_chart(runs, lang=lang)
        if isinstance(fig, str):  # no /metrics histograms: a sentence, never an empty chart
            st.caption(ui.plain(fig))
        else:
            ui.chart(fig, key="sweep-server-view")
        rated = figures.sweep_by_rate(runs)
        per_level = [(f"{r.load.rate:g}/s" if rated else r.extra.sweep_level or r.load.concurrency, j) for r in runs
                     if (j := figures.j_per_token(r)) is not None]
        if per_level:
            levels = " · ".join(f"{level}: **{j:.3g} J**" for level, j in per_level)
            st.markdown(_("Energy per output token, by arrival rate: {levels}.", levels=levels) if rated else
                        _("Energy per output token, by requests in flight: {levels}.", levels=levels))
        elif line := figures.energy_line(runs[0], lang=lang):  # why none was measured
            st.caption(ui.plain(line))




@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_search(job_id: str, status: str, lang: str) -> None:
    """A finished SLO search: its answer in one sentence and every level it tried, built once per language."""
    search = ui.get_lab().job(job_id).result
    (st.success if search.best is not None and not search.cancelled else st.warning)(
        ui.plain(search.said), icon=":material/target:")
    rows = search.rows()
    held = {True: _("yes"), False: _("no")}
    level = _("Rate (requests/s)") if search.by == "rate" else _("Requests in flight")
    st.dataframe({level: [r.level for r in rows],
                  _("SLO held"): [_("no: stopped early, past saturation") if r.saturated else held[r.held]
                                  for r in rows],
                  _("Met the SLO"): ["–" if r.attainment is None else f"{whole_percent(r.attainment):.0%}"
                                     for r in rows],
                  _("Goodput (req/s)"): [r.goodput for r in rows]},
                 hide_index=True, column_config={_("Goodput (req/s)"): st.column_config.NumberColumn(format="%.2f")})


def search_live() -> None:
    ui.live_job(_search_live, lambda: ui.get_lab().latest_job("slo-search"), every=2)


def _search_live() -> None:
    lab = ui.get_lab()
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
