"""Guided lab: the seed notebook's steps in its order, one button each, for a presenter and a room (issue #18).

The session (the presenter's step, the runs each step made) lives in the engine (`lab.guide`, engine/guide/),
so a reload or an app restart keeps it and every viewer sees the same; a viewer who follows the presenter
(sidebar) sees the presenter's step, the rest may browse on their own."""
import streamlit as st

import i18n
import ui
from app_pages.parts import rehearsal
from engine import figures
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

head, side = st.columns([3, 1], vertical_alignment="bottom")
head.title(_("Guided lab"))
with side:
    if presenter:
        labels = {1.0: _("the lab's"), 0.5: _("half"), 0.25: _("a quarter"), 0.1: _("a tenth")}
        scale = st.segmented_control(_("Answer length"), list(guide.scales), default=state.scale,
                                     format_func=labels.get, key=f"guide_scale_{state.scale}",
                                     help=_("Token budgets as a share of the lab's. On a CPU a quarter (a tenth on a "
                                            "busy one) keeps each step to a minute or two; the ratios stay "
                                            "comparable, the times do not."))
        if scale is not None and scale != state.scale:
            ui.act(lab, guide.set_scale, scale, rerun=True)
        choices = models.catalogue()
        if len(choices) > 1:  # the model of every step; on a GPU the lab's Llama 3 8B (or its shape-only stand-in)
            paths = [m.path for m in choices]
            now = guide.model_spec().path
            picked = st.selectbox(_("Model"), paths, index=paths.index(now) if now in paths else 0,
                                  format_func=i18n.shown(paths, lambda p: i18n.tr(choices[paths.index(p)].label)),
                                  key="guide_model", help=_("The model every step uses: the naive baseline and vLLM "
                                                            "alike, so their numbers compare."))
            if picked != now:
                ui.act(lab, guide.set_model, picked, rerun=True)
    elif following:
        st.caption(_("Following the presenter: step {n} of {total}.", n=shown.number, total=len(steps)))


def _agenda_label(step_id: str) -> str:
    s = guide.step(step_id)
    mark = "✓ " if state.done(step_id) else ""
    return f"{mark}{s.number} · {i18n.tr(s.title)}"


# The agenda: every step, done ones ticked; the presenter's choice moves the room.
st.session_state["guide_pick"] = shown.id
pick = st.segmented_control(_("Agenda"), ids, format_func=i18n.shown(ids, _agenda_label), key="guide_pick",
                            label_visibility="collapsed", disabled=following)
if pick and pick != shown.id:
    if presenter:
        ui.act(lab, guide.go_to, pick, rerun=True)
    else:
        st.session_state["guide_view"] = pick
        st.rerun()
done = sum(state.done(i) for i in ids[:-1])
st.progress(done / (len(ids) - 1), text=_("Step {n} of {total}: {title} · {done} of {steps} steps run",
                                          n=shown.number, total=len(steps), title=shown.title, done=done,
                                          steps=len(ids) - 1))
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
    again = state.done(s.id) and s.id not in ("summary",)
    running = lab.measuring() is not None or lab.server_snapshot().state == STARTING  # one press, one run
    if st.button(_("Run again: {label}", label=label) if again else label, type="primary", width="stretch",
                 icon=":material/play_arrow:", disabled=not presenter or running, key=f"run-{s.id}"):
        ui.act(lab, guide.run_step, s.id, rerun=True)
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
        ui.job_panel(lab, job, f"{i18n.tr(job.label)}: {i18n.tr(job.stage)} ({job.done}/{job.total or '?'})",
                     key=f"cancel-{s.id}")


# The summary's finding a step's run fills in (engine.guide.findings' order)
FINDING = {"naive": 0, "sequential": 1, "concurrent": 2, "tuning": 3, "streaming": 4}


def _result(s) -> None:
    """The step's picture from the runs the step itself made."""
    lang = i18n.lang()
    run = guide.latest(s.id, state)
    if s.id == "naive":
        if run:
            ui.chart(figures.latency_bars(run, None, lang=lang), key="g-naive")
            ui.warmth(lab, run)
    elif s.id == "free":
        fact = state.facts.get("free")
        if not fact:
            st.info(_("Not run yet: press the button on the left."), icon=":material/info:")
        else:
            where = _("GPU memory") if fact.get("gpu") else _("system RAM")
            c = st.columns(4)
            gb = lambda v: "–" if v is None else _("{v:.2f} GB", v=v)  # noqa: E731
            c[0].metric(_("{where} before the naive run", where=where), gb(fact.get("before_gb")))
            c[1].metric(_("The worker's peak"), gb(fact.get("worker_peak_gb")))
            c[2].metric(_("{where} after it exited", where=where), gb(fact.get("after_gb")))
            c[3].metric(_("Left behind"), gb(fact.get("left_gb")))
            st.markdown(_("The naive worker's process exited: its {peak} came back to the operating system, nothing "
                          "stays reserved.", peak=gb(fact.get("worker_peak_gb"))) if not fact.get("worker_alive") else
                        _("A naive worker is still running: wait for it to end, then check again."))
            if not fact.get("gpu"):
                st.caption(_("No GPU here: the numbers are the system's RAM (other programs on this machine move it "
                             "too) and the worker's own resident memory."))
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
                st.caption(_("{time} · {n} tokens", time=ui.fmt_s(r.e2e), n=r.output_tokens))
    elif s.id == "sequential":
        if run:
            ui.chart(figures.latency_bars(guide.latest("naive", state), run, lang=lang), key="g-seq")
    elif s.id == "concurrent":
        if run:
            ui.chart(figures.concurrent_latency_bars(run, lang=lang), key="g-conc")
            ui.warmth(lab, run)
    elif s.id == "tuning":
        runs = guide.runs("tuning", state)
        if runs:
            ui.chart(figures.tuning_compare(runs, lang=lang), key="g-tune")
    elif s.id == "streaming":
        if run:
            ui.chart(figures.token_timeline(run, lang=lang), key="g-stream")
    if run is not None or (s.id == "tuning" and guide.runs("tuning", state)):
        if (f := FINDING.get(s.id)) is not None and (found := guide.findings(state)[f]).measured:
            st.success(ui.plain(found.text), icon=":material/insights:")  # the summary's sentence, the same numbers
        ui.failure_causes([run] if run else guide.runs("tuning", state))
        st.caption(_("From this step's run of {when}.", when=i18n.when((run or guide.runs("tuning", state)[-1]).started_at)))
    elif s.scenario is not None and guide.job(s.id) is None:
        st.info(_("Not run yet: press the button on the left."), icon=":material/info:")


def _summary() -> None:
    st.subheader(_("What this lab found"))
    for f in guide.findings(state):
        icon = "✓" if f.measured else "·"
        st.markdown(f"**{f.number}. {ui.plain(f.title)}** {icon} {ui.plain(f.text)}")
    with st.expander(_("Which engine when"), expanded=True):
        for line in guide.which_engine:
            st.markdown(f"- {ui.plain(line)}")
    lang = i18n.lang()  # made when clicked (a callable): the report inlines plotly.js, megabytes
    st.download_button(_("Download the HTML report"), lambda: guide.report_html(lang), file_name="serving-lab-guide.html",
                       mime="text/html", icon=":material/download:", type="primary")


@st.fragment(run_every=1.5)
def body() -> None:
    """The step, redrawn while its job runs; the whole page redraws when the session changed (a step's run
    came back, the presenter moved), so the agenda's ticks and a follower's step follow."""
    if guide.state().to_dict() != state.to_dict():
        st.rerun(scope="app")
    if shown.id == "summary":
        _summary()
        return
    left, right = st.columns([5, 6], gap="large")  # the numbers table keeps its three columns, the button its label
    with left:
        st.subheader(f"{shown.number}. {i18n.tr(shown.title)}")
        st.markdown(i18n.tr(shown.narrative))  # the catalogue's own text: its `code` stays code
        _button(shown)
        _job(shown)
        _numbers(shown.id)
        st.caption(_("The notebook's numbers: {source}; it does not name its GPU.", source=guide.seed_source))
        with st.expander(_("More about this step")):
            st.markdown(i18n.tr(shown.more))
    with right:
        st.info(ui.plain(shown.notice), icon=":material/visibility:")
        _result(shown)


body()

i = ids.index(shown.id)
prev, _gap, nxt = st.columns([1, 3, 1])
if i > 0 and prev.button(_("Previous step"), icon=":material/arrow_back:", width="stretch", disabled=following):
    if presenter:
        ui.act(lab, guide.go_to, ids[i - 1], rerun=True)
    st.session_state["guide_view"] = ids[i - 1]
    st.rerun()
if i < len(ids) - 1 and nxt.button(_("Next step"), icon=":material/arrow_forward:", type="primary", width="stretch",
                                   disabled=following):
    if presenter:
        ui.act(lab, guide.go_to, ids[i + 1], rerun=True)
    st.session_state["guide_view"] = ids[i + 1]
    st.rerun()
if presenter:
    with st.expander(_("Start the guided lab over")):
        st.caption(_("Back to step 1 for everyone; the runs stay in the history."))
        if st.button(_("Start over"), icon=":material/restart_alt:"):
            ui.act(lab, guide.reset, rerun=True)
    rehearsal.presenter_tools(lab)
