"""Two servers at once: the same workload sent to this app's server (A) and one at a URL (B),
both measured on one clock; its form, its live chart and its finished numbers."""
import time

import streamlit as st

import i18n
import ui
from engine import figures
from engine.digits import significant
from engine.lab import LabError
from engine.measure.workloads.named import one_workload, run_workload
from engine.measure.workloads.defaults import load_test_spec
from engine.serving.cluster import second_server_command, side_by_side_here
from i18n import _


def section(lab, chosen, request, shape: str, arrival: str, defaults, tokens_hi: int, tokens_help: str) -> None:
    """The folded "two servers at once" box: why it may not apply here, its form, and Run."""
    what, wl_plan = chosen.what, chosen.plan
    with st.expander(_("Against two servers at once"), icon=":material/view_column_2:"):
        st.caption(_("The same workload sent to this app's server (A) and a second one at a URL (B) at the same "
                     "moment: each warms up first, then both are measured on one clock and drawn on shared axes as "
                     "they run. Each run is saved, the two as a pair."))
        shared_ok = False
        if why := side_by_side_here(lab.device):
            st.info(ui.plain(why), icon=":material/info:")
            st.page_link("app_pages/tuning.py", label=_("Compare configurations on Tuning"), icon=":material/tune:")
            shared_ok = st.toggle(_("Both on this machine anyway"), key="pair_shared",
                                  help=_("Runs two servers on this machine's one device: they slow each other down, "
                                         "so the numbers show the sharing as much as the settings. For trying it "
                                         "out."))
        elif cmd := second_server_command(lab.server_snapshot().config, lab.device, lab.settings.models):
            st.markdown(_("Start the second server on another GPU with this command (change its max-model-len or "
                          "memory to the setting you want to compare), then give its address below:"))
            st.code(cmd, language="bash")
        with st.form("pair"):
            u1, u2 = st.columns([2, 1], gap="large")
            url_b = u1.text_input(_("Second server's address (B)"), placeholder="http://127.0.0.1:8001",
                                  key="pair_url", help=_("Its root, /v1 or a router's path prefix; the app finds the "
                                                         "model it serves."))
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
                pair_in_flight = p2.slider(_("Requests in flight"), 1, defaults.in_flight_max, 4,
                                           key="pair_in_flight")
            elif shape == "poisson":
                pair_rate = p2.number_input(_("Rate (requests/s)"), value=2.0, step=0.5, key="pair_rate")
            elif what == "multi-turn":
                p2.caption(_("Every conversation starts at once; each sends its next turn when its reply has come."))
            else:
                p2.caption(_("Every request is sent at once: as many in flight as there are requests."))
            pair_tokens = 16
            if chosen.own_lengths:
                p3.caption(_("Each answer runs to the length the workload gives it (up to {n} tokens).",
                             n=max(wl_plan.max_tokens_each)))
            else:
                pair_tokens = p3.slider(_("Max tokens per answer"), 16, max(tokens_hi, 17),
                                        min(defaults.sweep_max_tokens, tokens_hi), 2, key="pair_tokens",
                                        help=tokens_help)
            # what both get, from the same plan the single run sends (the "what to send" control above)
            st.caption(ui.plain(_("Both servers get the same requests. {what} Arrival: {arrival}. Answers always run "
                                  "to their full length on both, so the two get the same work.", what=chosen.said(),
                                  arrival=_("the trace's own clock") if what == "trace" else _(arrival))))
            run_pair = st.form_submit_button(_("Run on both servers"), type="primary", icon=":material/play_arrow:",
                                             disabled=not ui.can_act(lab) or chosen.blocked)
        if run_pair:
            if not url_b.strip():
                st.error(_("Give the second server's address first."), icon=":material/error:")
            else:
                try:
                    pair_spec = load_test_spec(shape, int(pair_n), int(pair_tokens), max_len=lab.serving_max_len(),
                                               ignore_eos=True, rate=pair_rate, concurrency=int(pair_in_flight),
                                               synthetic=what == "synthetic", plan=wl_plan,
                                               request=request.fields(), models_dir=lab.settings.models)
                except LabError as e:
                    st.error(ui.plain(e), icon=":material/error:")
                else:
                    ui.act(lab.run_side_by_side, url_b.strip(), pair_spec, key_b or None, shared_ok=shared_ok)


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_pair_live(job_id: str, tick: int, lang: str) -> None:
    """A running pair at one-second `tick`, built once for every viewer of a language (as the single run's live
    timeline is)."""
    runs, now = ui.get_lab().job(job_id).live_pair()
    if len(runs) == 2:
        ui.chart(figures.side_by_side(*runs, now=now, lang=lang), key="pair-live")


def _pair_table(runs) -> None:
    """The pair's numbers, one column a server."""
    def ms(run, key):
        v = run.summary.get(key)
        return "–" if v is None else f"{significant(v)} ms"

    rows = [(_("Output throughput"), lambda r: f"{significant(r.summary.get('output_throughput'))} tok/s"),
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
    job = ui.get_lab().job(job_id)
    runs, _now = job.live_pair()
    ui.cancelled_note(job)
    if len(runs) == 2:
        _pair_table(runs)
        ui.chart(figures.side_by_side(*runs, lang=lang), key="pair")
        st.caption(ui.plain(_pair_sent(runs)))


def _pair_sent(runs) -> str:
    """Which workload the pair's runs recorded: one plan, sent to both (Runner.side_by_side)."""
    if one_workload(runs):
        return _("Both servers were sent the same workload: {what}.", what=i18n.tr(run_workload(runs[0])))
    return " · ".join(f"{i18n.tr(r.label)}: {i18n.tr(run_workload(r))}" for r in runs)


def live() -> None:
    ui.live_job(_live, lambda: ui.get_lab().latest_job("side-by-side"))


def _live() -> None:
    lab = ui.get_lab()
    job = lab.latest_job("side-by-side")
    if job is None:
        return
    ui.job_panel(lab, job, _("{stage}: {done}/{total} requests done on both", stage=job.stage, done=job.done,
                             total=job.total or "?"), key="pair_cancel")
    if job.active:
        _draw_pair_live(job.id, int(time.time()), i18n.lang())
    else:
        _draw_pair(job.id, job.status, i18n.lang())
