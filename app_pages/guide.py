"""Guided lab: the seed notebook's steps in its order, one button each, for a presenter and a room.

The session (the presenter's step, the runs each step made) lives in the engine (`lab.guide`, engine/guide/),
so a reload or an app restart keeps it and every viewer sees the same; a viewer who follows the presenter
(sidebar) sees the presenter's step, the rest may browse on their own."""
import streamlit as st

import i18n
import ui
from app_pages.parts import rehearsal
from engine import figures
from engine.digits import significant
from engine.measure.judge import worker_memory
from engine.serving import models
from engine.serving.states import FAILED, STARTING, startup_fraction
from i18n import _

lab = ui.get_lab()
guide = lab.guide
presenter = ui.can_act(lab)
state = guide.state()
steps = guide.steps
ids = [s.id for s in steps]

# Which step this viewer sees: the presenter's own (the presenter, a follower), else the one they browse to.
following = not presenter and st.session_state.get("follow_presenter", False)
if presenter or following or st.session_state.get("guide_view") not in ids:
    st.session_state["guide_view"] = state.current
shown = guide.step(st.session_state["guide_view"])
st.session_state["guide_seen"] = (state.current, state.moved_at)
running = guide.running(state)  # a step is ticked once its run finished, not while it runs


# Every press is a callback with the step it was drawn for (ui.on_press): it acts before the script draws, so no
# rerun above it can drop it, and two presenter tabs pressing "Next step" on step 2 both ask for step 3.
def _view(step_id: str) -> None:
    """A viewer who does not follow browses on their own."""
    st.session_state["guide_view"] = step_id


def _move(step_id: str) -> None:
    if ui.can_act(lab):
        ui.on_press(guide.go_to, step_id)
    else:
        _view(step_id)


def _picked() -> None:
    # The agenda lives outside every fragment, so a click on it reruns the whole page. A timed fragment's rerun
    # carries the agenda as the browser holds it: sent before the presenter's move reached the browser, that is the
    # step before, and acting on it moved the whole room back a step.
    if ui.fragment_rerun():
        return
    if (pick := st.session_state.get("guide_pick")) is not None and pick != st.session_state.get("guide_view"):
        _move(pick)


def _chosen(key: str, action) -> None:
    if not ui.fragment_rerun() and (value := st.session_state.get(key)) is not None:  # as _picked
        ui.on_press(action, value)


# the title and the presenter's two choices on one line: stacked, they pushed every step ~70 px down a projector
head, scale_side, model_side = st.columns([3, 2, 3], vertical_alignment="bottom")
head.title(_("Guided lab"))
with scale_side:
    if presenter:
        key = f"guide_scale_{state.scale}"  # one widget per scale: its default is the session's, never a stale one
        # required: a click on the chosen share keeps it (else it showed none chosen while the session kept it)
        st.segmented_control(_("Answer length"), list(guide.scales), default=state.scale, required=True,
                             format_func=i18n.shown(guide.scales, lambda v: i18n.tr(guide.scale_names[v])),
                             key=key, on_change=_chosen, args=(key, guide.set_scale),
                             help=_("Token budgets as a share of the lab's. On a CPU a quarter (a tenth on a "
                                    "busy one) keeps each step to a minute or two; the ratios stay "
                                    "comparable, the times do not."))
with model_side:
    if presenter:
        choices = models.catalogue(lab.settings.models)
        if len(choices) > 1:  # the model of every step; on a GPU the lab's Llama 3 8B (or its shape-only stand-in)
            paths = [m.path for m in choices]
            now = guide.model_spec().path
            key = f"guide_model_{now}"  # as the scale: a choice made elsewhere (another tab, the server) is shown
            st.selectbox(_("Model"), paths, index=paths.index(now) if now in paths else 0,
                         format_func=i18n.shown(paths, lambda p: i18n.tr(choices[paths.index(p)].label)),
                         key=key, on_change=_chosen, args=(key, guide.set_model),
                         help=_("The model every step uses: the naive baseline and vLLM alike, so their numbers "
                                "compare."))
    elif following:
        st.caption(_("Following the presenter: step {n} of {total}.", n=shown.number, total=len(steps)))


def _agenda_label(step_id: str) -> str:
    s = guide.step(step_id)
    mark = "… " if step_id in running else "✓ " if state.done(step_id) else ""
    return f"{mark}{s.number} · {i18n.tr(s.title)}"


# The agenda: every step, done ones ticked; the presenter's choice moves the room.
st.session_state["guide_pick"] = shown.id  # after _picked ran: the step shown, wherever it came from
st.segmented_control(_("Agenda"), ids, format_func=i18n.shown(ids, _agenda_label), key="guide_pick",
                     label_visibility="collapsed", disabled=following, on_change=_picked)
# Previous and Next beside the progress line: on the first screen of every step, however long the step's result
i = ids.index(shown.id)
prev, line, nxt = st.columns([1, 5, 1], vertical_alignment="bottom")
done = sum(state.done(sid) and sid not in running for sid in ids[:-1])
line.progress(done / (len(ids) - 1), text=_("{done} of the {steps} steps run", done=done, steps=len(ids) - 1))
prev.button(_("Previous step"), icon=":material/arrow_back:", width="stretch", disabled=following or i == 0,
            on_click=_move, args=(ids[max(i - 1, 0)],))
nxt.button(_("Next step"), icon=":material/arrow_forward:", type="primary", width="stretch",
           disabled=following or i == len(ids) - 1, on_click=_move, args=(ids[min(i + 1, len(ids) - 1)],))
if state.scale != 1.0:
    st.caption(_("Answers are {share} of the lab's length here, to keep this machine quick: times are not comparable "
                 "with the notebook's, ratios are.", share=f"{state.scale:.0%}"))
rehearsal.beside_agenda(lab, shown.id, presenter)  # each step's time in the last rehearsal


def _numbers(step_id: str) -> None:
    """The notebook's printed numbers beside this machine's."""
    rows = guide.numbers(step_id, state)
    if not rows:
        return
    st.dataframe([{_("Number"): i18n.tr(r.label), _("The lab notebook's GPU"): i18n.tr(r.seed),
                   _("This machine"): i18n.tr(r.here) if r.here is not None else _("not run yet")} for r in rows],
                 hide_index=True, width="stretch")


def _button(s) -> None:
    tokens = guide.tokens(s, state.scale)
    label = i18n.tr(s.button) if tokens is None else _("{action} ({tokens} tokens)", action=s.button, tokens=tokens)
    again = state.done(s.id) and s.id not in running and s.id != "summary"
    busy = lab.measuring() is not None or lab.server_snapshot().state == STARTING  # one press, one run
    st.button(_("Again: {label}", label=label) if again else label, type="primary", width="stretch",
              icon=":material/play_arrow:", disabled=not presenter or busy, key=f"run-{s.id}",
              on_click=ui.on_press, args=(guide.run_step, s.id))
    if (n := guide.repeats(s)) > 1:
        st.caption(_("Runs {n} times: the numbers are their means, and a difference counts only beyond their "
                     "spread.", n=n))
    if not presenter:
        st.caption(_("The presenter runs the steps; their results appear here for everyone."))


def _server_line() -> None:
    snap = lab.server_snapshot()
    st.markdown(_("vLLM server: {state}", state=ui.badge(snap.state)))
    if snap.state == STARTING:
        st.progress(startup_fraction(snap.stage), text=ui.plain(f"{i18n.tr(snap.stage)} · {ui.fmt_s(snap.elapsed)}"))
    elif snap.error and snap.state == FAILED:
        st.error(ui.plain(snap.error), icon=":material/error:")


def _job(s) -> None:
    if job := guide.job(s.id):
        ui.job_panel(lab, job, ui.job_count(job),
                     key=f"cancel-{s.id}")


def _last_of(fig, s):
    """A repeated step draws its newest run, while its finding and numbers are the runs' mean: the title says so,
    so that the chart's 3.6 s beside the mean's 2.6 s reads as one run of several, not a contradiction."""
    if (n := len(guide.runs(s.id, state))) > 1:
        figures.note_under_title(fig, _("The last of {n} runs", n=n))
    return fig


def _not_run_yet() -> None:
    st.info(_("Not run yet: press the button on the left.") if presenter else
            _("Not run yet: the presenter runs this step, and its result appears here."), icon=":material/info:")


def _result(s) -> None:
    """The step's picture from the runs the step itself made."""
    lang = i18n.lang()
    run = guide.latest(s.id, state)
    made = [run] if run else guide.runs("tuning", state) if s.id == "tuning" else []
    found = guide.finding(s.id, state) if made else None  # the summary's, computed once for the box and the chart
    if found is not None and found.measured:
        # the summary's heading and sentence, the same numbers: a claim only beyond noise on a quiet machine
        (st.success if found.claim == 1 else st.info)(f"**{ui.plain(found.title)}** · {ui.plain(found.text)}",
                                                      icon=":material/insights:")
    if s.id == "naive":
        if run:
            ui.chart(ui.fit(figures.latency_bars(run, None, lang=lang, numbered=False)), key="g-naive")
            ui.warmth(run)
    elif s.id == "free":
        fact = state.facts.get("free")
        if not fact:
            _not_run_yet()
        else:
            c = st.columns(4)
            gb = lambda v: "–" if v is None else _("{v} GB", v=significant(v))  # noqa: E731 - as the table says it
            if fact.get("gpu"):  # the device's memory through NVML
                c[0].metric(_("GPU memory before the naive run"), gb(fact.get("before_gb")))
                c[1].metric(_("The worker's peak"), gb(fact.get("worker_peak_gb")))
                c[2].metric(_("GPU memory after it exited"), gb(fact.get("after_gb")))
                c[3].metric(_("Left behind"), gb(fact.get("left_gb")))
            else:  # the worker's own memory: the system's RAM moves with every other program too
                c[0].metric(_("The worker's peak (its RAM)"), gb(fact.get("worker_peak_gb")))
                c[1].metric(_("After its cleanup (del + gc)"), gb(fact.get("after_cleanup_gb")))
                c[2].metric(_("Its process"), _("exited") if fact.get("exited") else _("running"))
                c[3].metric(_("Held now"), gb(fact.get("held_gb")))
            st.markdown(ui.plain(worker_memory.said(fact)))
            if fact.get("worker_alive"):  # a newer naive run's worker, not the one these numbers are of
                st.caption(_("Another naive run was under way when this was checked: check again once it ends to "
                             "read its worker."))
            if not fact.get("gpu"):
                st.caption(_("No GPU here: these are the worker's own resident memory (RSS), not the system's RAM, "
                             "which other programs on this machine move too."))
    elif s.id == "start":
        _server_line()
        snap = lab.server_snapshot()
        if fact := state.facts.get("start"):
            if fact.get("already"):
                st.info(_("The server was already running with these settings: nothing to restart."),
                        icon=":material/check_circle:")
            if fact.get("ready_s") is not None:
                st.metric(_("Ready after"), _("{v:.1f} s", v=fact["ready_s"]))
        if snap.command:
            st.code(snap.command, language="bash", wrap_lines=True)
        if lab.device != "cuda":
            cfg = guide.lab_config()
            st.caption(_("No GPU here: the CPU build of vLLM runs with max-model-len {len} and a {gib:g} GiB KV cache "
                         "in RAM (VLLM_CPU_KVCACHE_SPACE), the CPU's stand-in for gpu-memory-utilization; dtype is "
                         "chosen by vLLM for the CPU; the port is this app's, {port}.", len=cfg.max_model_len,
                         gib=cfg.cpu_kvcache_gib, port=lab.server_port))
    elif s.id == "test-query":
        if run and (r := next((x for x in run.measured if x.ok), None)):
            with st.chat_message("user"):
                st.markdown(ui.plain(r.prompt))
            with st.chat_message("assistant"):
                st.markdown(ui.plain(r.output_text[:600]))
                runs = len(guide.runs(s.id, state))  # the table's answer time is their mean: this is one answer
                st.caption(_("{time} · {n} tokens (the last of {runs} runs)", time=ui.fmt_s(r.e2e),
                             n=r.output_tokens, runs=runs) if runs > 1 else
                           _("{time} · {n} tokens", time=ui.fmt_s(r.e2e), n=r.output_tokens))
    elif s.id == "sequential":
        if run:
            # the finding's verdict, or none where it claims none
            speed = found.verdict if found is not None and found.claim is not None else None
            # unnumbered: "3 · vLLM" on step 5 read as step 3
            fig = figures.latency_bars(guide.latest("naive", state), run, lang=lang, speed=speed, numbered=False)
            ui.chart(_last_of(ui.fit(fig), s), key="g-seq")
    elif s.id == "concurrent":
        st.page_link("app_pages/room.py", label=_("Try it with the room as the load"), icon=":material/groups:")
        if run:
            ui.chart(_last_of(ui.fit(figures.concurrent_latency_bars(run, lang=lang)), s), key="g-conc")
            ui.warmth(run)
    elif s.id == "tuning":
        runs = guide.runs("tuning", state)
        if runs:
            ui.chart(ui.fit(figures.tuning_compare(runs, lang=lang)), key="g-tune")
    elif s.id == "streaming":
        if run:
            ui.chart(_last_of(ui.fit(figures.token_timeline(run, lang=lang)), s), key="g-stream")
    if made:
        ui.failure_causes(made)
        if found is None:  # what else ran beside its runs (a step with a finding says it there)
            ui.disturbance(guide.runs(s.id, state))
        st.caption(_("From this step's run of {when}.", when=i18n.when(made[-1].started_at)))
    elif s.scenario is not None and guide.job(s.id) is None:
        _not_run_yet()
    elif s.id in running:  # its half of the screen is not left blank while the run goes on
        st.info(_("Running: this step's result appears here when its run ends."), icon=":material/hourglass_top:")


def _summary() -> None:
    st.subheader(_("What this lab found"))
    for f in guide.findings(state):  # as the report lists them: no tick, which beside "No verdict" read as approval
        st.markdown(f"**{f.number}. {ui.plain(guide.heading(f))}** · {ui.plain(f.text)}")
    with st.expander(_("Which engine when"), expanded=True):
        for line in guide.which_engine:
            st.markdown(f"- {ui.plain(line)}")
    lang = i18n.lang()  # made when clicked (a callable): the report inlines plotly.js, megabytes
    st.download_button(_("Download the HTML report"), lambda: guide.report_html(lang),
                       file_name="serving-lab-guide.html",
                       mime="text/html", icon=":material/download:", type="primary", on_click=ui.NO_RERUN)


def body() -> None:
    """The step, redrawn while its job runs; the whole page redraws when the session changed (a step's run
    came back, the presenter moved), so the agenda's ticks and a follower's step follow."""
    if (now := guide.state()).to_dict() != state.to_dict() or guide.running(now) != running:
        st.rerun(scope="app")
    if shown.id == "summary":
        _summary()
        return
    left, right = st.columns([5, 6], gap="large")  # the numbers table keeps its three columns, the button its label
    with left:
        st.subheader(f"{shown.number}. {i18n.tr(shown.title)}")
        # the catalogue's own text: its `code` stays code
        st.markdown(i18n.tr(shown.told(shown.narrative, state.scale)))
        _button(shown)
        _job(shown)
        _numbers(shown.id)
        st.caption(_("The notebook's numbers: {source}; it does not name its GPU.", source=guide.seed_source))
        with st.expander(_("More about this step")):
            st.markdown(i18n.tr(shown.told(shown.more, state.scale)))
    with right:
        st.info(ui.plain(shown.told(shown.notice, state.scale)), icon=":material/visibility:")
        _result(shown)


ui.live(body, guide.seen, lambda: guide.moving(shown.id), every=1.5)

if presenter:
    with st.expander(_("Start the guided lab over")):
        st.caption(_("Back to step 1 for everyone; the runs stay in the history."))
        st.button(_("Start over"), icon=":material/restart_alt:", on_click=ui.on_press, args=(guide.reset,))
    rehearsal.presenter_tools(lab)
