"""Small shared helpers for the pages: the process-wide Lab, the sidebar, actions with clear errors,
the panel of a background job, and charts with their one-line caption. Layout only; the work is in
engine/. Like the pages, this imports from engine only the Lab facade, the figures and the read-only
concept modules tests/test_layering.py names."""
from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

import app_settings
import i18n
from engine import figures
from engine.lab import Lab, LabError
from engine.measure.judge import cost as pricing
from engine.measure.judge import failures, speculation, utilization
from engine.measure.judge import token_check as token_counts
from engine.measure.judge.warmth import said as warmth_said
from engine.measure.judge.warmth import warmup_cost
from engine.observe.disturbance import said_of as disturbed_said
from engine.serving import models
from engine.serving.states import FAILED, READY, STARTING, STOPPED, STOPPING
from i18n import N_, _, ngettext

STATE_BADGE = {
    STOPPED: ("gray", N_("stopped")),
    STARTING: ("orange", N_("starting")),
    READY: ("green", N_("ready")),
    STOPPING: ("orange", N_("stopping")),
    FAILED: ("red", N_("failed")),
}


@st.cache_resource(show_spinner=False)
def get_lab() -> Lab:
    """One Lab per app process: every browser session sees the same server, jobs and history. It knows
    where the app listens: beyond loopback with no presenter token, nobody may act."""
    return Lab(app_settings.get(), listen_host=st.get_option("server.address") or "0.0.0.0")


def can_act(lab: Lab) -> bool:
    return lab.may_act(st.session_state.get("presenter_token"))


def caller() -> str:
    """Who is asking, for throttling wrong tokens: the viewer's address, else their browser session."""
    return st.context.ip_address or st.session_state.setdefault("caller_id", f"session:{uuid.uuid4().hex[:12]}")


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~:$])")


def plain(text: object) -> str:
    """Text for st.markdown / st.error & co. shown as typed: sentences may quote run labels, log lines or
    model names from anywhere, and none of that may turn into markdown, links or icons. An engine
    sentence (or an error carrying one) is said in this viewer's language."""
    return _MARKDOWN.sub(r"\\\1", i18n.tr(text))


def plain_code(text: object) -> str:
    """As plain(), but a `quoted command` in the sentence shows as code (not as literal backticks): the text
    between backticks goes into a code span, where markdown is not read; an unpaired backtick falls back to plain()."""
    parts = i18n.tr(text).split("`")
    if len(parts) % 2 == 0:
        return plain(text)
    return "".join(_MARKDOWN.sub(r"\\\1", p) if i % 2 == 0 else f"`{p}`" for i, p in enumerate(parts))


def act(fn: Callable[..., Any], *args, rerun: bool = False, **kw) -> Any:
    """Run one Lab action (a @presenter_only method) with this viewer's token; a user-caused error
    becomes one st.error sentence, never a traceback. rerun=True redraws the whole page afterwards
    (buttons follow the new state); the error sentence survives that redraw and shows at the top."""
    try:
        result = fn(*args, token=st.session_state.get("presenter_token"), caller=caller(), **kw)
    except LabError as e:
        if not rerun:
            st.error(plain(e), icon=":material/error:")
            return None
        st.session_state["action_error"] = i18n.said(e)  # said in the language of whoever reads it
        result = None
    if rerun:
        st.rerun()
    return result


def on_press(fn: Callable[..., Any], *args, **kw) -> None:
    """A widget's callback (on_click / on_change): one Lab action with this viewer's token, run before the script
    draws, with the arguments the page was drawn with. A press handled in the script's body is lost when anything
    above it reruns the script first (a choice changed elsewhere meanwhile, a session that moved); a callback is
    not. Its error sentence shows at the top of the page that follows (pending_error)."""
    try:
        fn(*args, token=st.session_state.get("presenter_token"), caller=caller(), **kw)
    except LabError as e:
        st.session_state["action_error"] = i18n.said(e)


def fragment_rerun() -> bool:
    """Whether this run is a fragment's (a timed redraw), not the page's. Its request carries every widget as the
    browser holds it, so a widget outside the fragment whose value the server has since moved reads as changed and
    its callback is called: such a change is an echo of the page before, never a click."""
    ctx = get_script_run_ctx()
    return bool(ctx and ctx.fragment_ids_this_run)


def pending_error() -> None:
    """Show the error of an action that redrew the page (see act)."""
    if err := st.session_state.pop("action_error", None):
        st.error(plain(err), icon=":material/error:")


def badge(state: str) -> str:
    color, text = STATE_BADGE.get(state, ("gray", state))
    return f":{color}-badge[{_(text)}]"


def started(run) -> str:
    """When a saved run started, as this viewer's locale writes a date and time; 'unknown' for a stored
    time that is not one."""
    return i18n.tr(run.started) if run.started == "unknown" else i18n.when(run.started_at)


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return i18n.duration(seconds)


def file_uploader(label: str, types: list[str], key: str):
    """st.file_uploader in this viewer's language. Streamlit writes its button ("Upload") and its limit line
    itself and offers no parameter for either (streamlit/streamlit#13500): outside English the two are
    hidden and the translation drawn in their place by CSS."""
    up = st.file_uploader(label, type=types, key=key)
    if i18n.lang() != "en":
        limit = _("{mb} MB per file · {types}", mb=st.get_option("server.maxUploadSize"),
                  types=", ".join(t.upper() for t in types))
        zone = "[data-testid=stFileUploaderDropzone]"
        texts = ((f"{zone} button [data-testid=stMarkdownContainer] p", "1rem", _("Choose a file")),
                 (f"{zone} [data-testid=stFileUploaderDropzoneInstructions] span", "0.875rem", limit))
        rules = [f"{sel} {{ visibility: hidden; font-size: 0; }} "
                 f"{sel}::after {{ visibility: visible; font-size: {size}; "
                 f"content: {json.dumps(text, ensure_ascii=False)}; }}"
                 for sel, size, text in texts]
        st.html("<style>" + "\n".join(rules) + "</style>")
    return up


def line_breaking() -> None:
    """Korean breaks lines between words, never inside one ("배칭을", not "배/칭을"): CSS keep-all for a Korean
    viewer (a long name or URL may still break anywhere rather than overflow). Drawn on every run, in either
    language, so the page's elements keep their places."""
    rule = ("[data-testid=stApp] * { word-break: keep-all !important; overflow-wrap: break-word; }"  # over the
            if i18n.lang() == "ko"  # markdown's own break-word on each paragraph
            else "/* English breaks at spaces already */")
    # markdown, not st.html: a style-only st.html (with or without an empty element before it) left the paragraphs
    # at break-word in Chromium (test_e2e_guide_screen.py's test_korean_breaks_lines_between_words); at the
    # sidebar's end, where it takes no room
    st.sidebar.markdown(f"<style>{rule}</style>", unsafe_allow_html=True)


def chart(fig, key: str | None = None) -> None:
    """Draw a figure from engine.figures with the sentence that tells a viewer what to notice."""
    # theme=None: keep the figure's own projector-sized fonts instead of Streamlit's smaller theme.
    st.plotly_chart(fig, width="stretch", key=key, theme=None, config={"displaylogo": False})
    if cap := figures.caption(fig):
        st.markdown(f":material/visibility: {plain(cap)}")


FIRST_SCREEN_CHART_H = 430  # px: a chart beside a page's form and numbers that leaves its caption on a 1080-px screen


def fit(fig, height: int = FIRST_SCREEN_CHART_H):
    """The figure no taller than `height` (a figure drawn shorter keeps its own height)."""
    return fig.update_layout(height=min(fig.layout.height or height, height))


# A download button built when clicked (its data a callable) is pressed with this: Streamlit clears the messages
# not yet sent whenever a full run of the page starts, the made file's link among them (Streamlit 1.67,
# ForwardMsgQueue.clear), and a click that reruns the page starts one while the file is being made. The link lost,
# the button stays greyed with its spinner for the browser's three minutes, and the viewer gets no file.
NO_RERUN: Final = "ignore"


def job_count(job) -> str:
    """A job's line, "label: stage (3/8)", its count left out while its total is unknown (never "(0/?)")."""
    line = f"{i18n.tr(job.label)}: {i18n.tr(job.stage)}"
    return f"{line} ({job.done}/{job.total})" if job.total else line


# -- live parts: redrawn while they move, watched while they stand still ----------------------------------------
# A fragment's rerun re-sends every element it draws (a chart as a reference to the browser's cached copy) and costs
# the app a script run and each open browser a new session message, a pass over its element tree and React's work on
# every element it drew, whether or not anything changed (bench/results/page-idle-cpu.md). So a live part is a timed
# fragment only while what it shows moves every tick (a job's progress, a server's start); the rest of the time it is
# drawn once, and one watcher per page, which draws nothing, reads each still part's cheap fingerprint every WATCH_S
# and reruns the page once one changed. Streamlit lets a fragment's body rerun only itself or the whole app (a keyed
# rerun of another fragment only from a widget's callback), and clears what a rerun did not draw again: hence the page.
WATCH_S = 1.0  # a follower is taken to the presenter's step, a finished run drawn, within about a second


def live(draw: Callable[[], None], seen: Callable[[], object], moving: Callable[[], bool] | None = None,
         every: float = 1.0) -> None:
    """`draw` now, redrawn every `every` s while `moving()`, else again (with the page) once `seen()` changed."""
    with st.container():  # one slot, ticking or still: the page keeps its shape
        if moving is not None and moving():
            st.fragment(run_every=every)(_ticking)(draw, moving)
        else:
            drawn = seen()  # before drawing: a change while it draws shows at the next look
            draw()
            watch(seen, drawn)


def live_job(draw: Callable[[], None], job: Callable[[], Any], every: float = 1.0) -> None:
    """A job's part of a page: redrawn while `job()` (the newest of its kind) runs, watched once it ended."""
    live(draw, lambda: (j.seen if (j := job()) is not None else None),
         lambda: (j := job()) is not None and j.active, every)


def watch(seen: Callable[[], object], drawn: object) -> None:
    """The page reruns once `seen()` is no longer `drawn` (watch_page looks)."""
    st.session_state.setdefault("still_parts", []).append((seen, drawn))


def begin_page() -> None:
    """A full run of the page begins: the still parts it draws are watched from now on, the last run's no more."""
    st.session_state["still_parts"] = []


def watch_page() -> None:
    """After the page: one watcher for all of its still parts (none while every part is ticking)."""
    if parts := st.session_state.get("still_parts"):
        st.fragment(run_every=WATCH_S)(_watching)(list(parts))


def _ticking(draw: Callable[[], None], moving: Callable[[], bool]) -> None:
    if not moving():  # it stopped: the page draws its still shape, watched from then on
        st.rerun(scope="app")
    draw()


def _watching(parts: list[tuple[Callable[[], object], object]]) -> None:
    if any(seen() != drawn for seen, drawn in parts):
        st.rerun(scope="app")


def job_panel(lab: Lab, job, text: str, *, cancel: str = N_("Cancel"), icon: str | None = None, key: str | None = None,
              error_for_s: float | None = None, share: float | None = None) -> None:
    """A background job's progress bar (with `text`) and Cancel button while it runs, and the sentence
    of its error once it failed (only within `error_for_s` seconds of its end, when given). The bar shows `share`
    (0-1), else the job's own count; with neither known, `text` alone, never an empty bar that never fills."""
    if job.active:
        share = share if share is not None else job.progress if job.total else None
        with st.container():  # one slot: a bar, or the text alone, keeps a fragment's element tree in shape
            if share is None:
                st.markdown(f":material/hourglass_top: {text}")
            else:
                st.progress(min(max(share, 0.0), 1.0), text=text)
        if st.button(_(cancel), icon=icon, key=key, disabled=not can_act(lab)):
            act(lab.cancel_job, job.id)
    if job.error_shown(error_for_s):
        st.error(plain(job.error), icon=":material/error:")


def failure_causes(runs: Iterable, prefix: bool = False) -> None:
    """Why requests failed, one sentence per cause (after the run's label with `prefix`), wherever
    OK / failed counts or a run's bars are shown."""
    for run in runs:
        for _cause, sentence in failures.run_causes(run):
            st.warning(plain(_("{label}: {sentence}", label=run.label, sentence=sentence) if prefix else sentence),
                       icon=":material/error:")


def disturbance(run, label: str | None = None) -> None:
    """What else ran beside the run's measured part (other programs' CPU, another client, chats), one sentence
    next to its numbers (for a list of runs, the first disturbed one's with how many were); nothing when quiet."""
    if said := disturbed_said(run if isinstance(run, list) else [run]):
        st.warning(plain(_("{label}: {sentence}", label=label, sentence=said) if label else said),
                   icon=":material/speed:")


def token_check(run) -> None:
    """The server's count of a run's output tokens against the client's: a caption when they agree or
    could not be compared, a warning when they differ by more than a few percent."""
    check = token_counts.token_check(run.extra)
    if check is None:
        return
    text = " ".join(plain(sentence) for sentence in check.sentences)
    if check.level == "warn":
        st.warning(text, icon=":material/rule:")
    else:
        st.caption(text)


def code_behind(code: str | None, label: str | None = None) -> None:
    """The short openai-SDK Python behind what the page just ran (snippets.run_code / Lab.code_for_chat), folded
    away and ready to copy (st.code's button) into an attendee's notebook; nothing when there is none."""
    if not code:
        return
    with st.expander(label or _("The Python behind this run"), icon=":material/code:"):
        st.caption(_("What this page just did, through the openai SDK as the lab's notebook does it: copy it with "
                     "the button at its top right. Its base_url is the address this app uses; from another machine, "
                     "put the server's address there."))
        st.code(code, language="python")


def _viewer_price(name: str, where: str, label: str, help: str, check: Callable, step: float, fmt: str):
    """One viewer's price (`name`), blank by default: one number input per page, the value kept for the viewer
    across pages (a widget's own state is dropped on a page that does not draw it). No hard bounds of
    Streamlit's (a value past them turns the field red and is dropped without a word): the engine's `check`
    refuses what it cannot use, in the sentence the CLI prints for it."""
    key = f"{name}_{where}"
    if key not in st.session_state and st.session_state.get(name) is not None:
        st.session_state[key] = st.session_state[name]
    price = st.number_input(label, value=None, step=step, format=fmt, key=key, placeholder=_("no price"), help=help)
    if refused := refusal(check, price):
        st.error(plain(refused), icon=":material/error:")
        price = None
    st.session_state[name] = price
    return price


def gpu_price(where: str) -> float | None:
    """This viewer's price per GPU-hour (blank: None)."""
    return _viewer_price("gpu_price", where, _("Price per GPU-hour"),
                         _("What an hour of the machine costs you, in any currency: the cost of a million output "
                           "tokens is worked out from each run's measured wall time. Only you see it."),
                         pricing.check_price, 0.5, "%.2f")


def kwh_price(where: str) -> float | None:
    """This viewer's price per kWh of electricity (blank: None)."""
    return _viewer_price("kwh_price", where, _("Price per kWh"),
                         _("What a kWh of electricity costs you, in any currency: a run whose energy was measured (an "
                           "NVIDIA GPU, or RAPL) then says what its tokens cost in energy. Only you see it."),
                         pricing.check_kwh_price, 0.05, "%.3f")


def refusal(check: Callable[..., Any], *values) -> str | None:
    """The engine's sentence for values its `check` refuses (ConfigError), else None: what a bounded
    control shows under itself instead of Streamlit's red field that says nothing."""
    try:
        check(*values)
    except LabError as e:
        return e.args[0] if e.args else str(e)
    return None


def cost_text(run, price: float | None) -> str | None:
    """A run's cost per million output tokens at `price`, in the viewer's digits; None without a price."""
    cost = pricing.run_cost_per_million(run, price)
    return None if cost is None else i18n.number(cost, 2 if cost >= 0.1 else 4)


def warmth(run) -> None:
    """What the run's warm-up cost, and whether the measured batch was cold (a warning) or warm (a caption)."""
    if warm := warmup_cost(run.records):
        st.caption(plain(warm.said))
    if said := warmth_said(run.extra):
        if run.extra.warmth.cold:
            st.warning(plain(said), icon=":material/ac_unit:")
        else:
            st.caption(plain(said))


def server_view(runs, key: str, lang: str | None = None, names: list[str] | None = None) -> None:
    """Where a run's time went inside the server against the client's clock (a chart, or the sentence that says
    why there is none), then its energy line (or why it has none); said in `lang` (the viewer's). `runs`: one run,
    or several in one chart, each line then headed by its name in `names`."""
    lang = lang or i18n.lang()
    runs = runs if isinstance(runs, list) else [runs]
    fig = figures.server_view_chart(runs, lang=lang, names=names)
    if isinstance(fig, str):  # no /metrics histograms: a sentence, never an empty chart
        st.caption(plain(fig))
    else:
        chart(fig, key=key)
    for i, run in enumerate(runs):
        head = f"{names[i]}: " if names and len(runs) > 1 else ""
        if line := figures.energy_line(run, lang=lang):
            st.markdown(f":material/bolt: {plain(head + line)}")
        for line in (speculation.said(run), utilization.said(run), *utilization.why_absent(run)):  # or why not
            if line:
                st.caption(plain(head + i18n.tr(line)))


def cancelled_note(job) -> None:
    """What a cancelled load test (or its repeats) kept."""
    if job.status == "cancelled":
        ok = sum(r.ok for run in (job.result if isinstance(job.result, list) else [job.result]) for r in run.measured)
        st.warning(ngettext("Cancelled: the {n} request that finished was kept and saved.",
                            "Cancelled: the {n} requests that finished were kept and saved.", ok),
                   icon=":material/cancel:")


def sidebar(lab: Lab, on_guide: bool = False):
    """The sidebar; returns the slot of its server status, which the app fills after the page (server_status):
    drawn before it, the status could be older than the result the page shows (a server killed while the page
    drew its run's failures still read "ready" above them)."""
    # What the page's buttons were drawn for; the server status redraws the page when it changes.
    st.session_state["drawn_state"] = _drawn_for(lab)
    st.session_state["on_guide"] = on_guide  # read by the follower's tick between full runs
    with st.sidebar:
        i18n.switch()
        slot = st.container()
        if lab.access.locked:
            st.warning(_("Viewing only: the app is reachable from the network and no presenter token is set. "
                         "Restart it with `SERVING_LAB_PRESENTER_TOKEN` to let a presenter act."),
                         icon=":material/lock:")
        elif lab.access.token:
            st.text_input(_("Presenter token"), type="password", key="presenter_token", on_change=_try_token,
                          help=_("Starting, stopping and running benchmarks is reserved for the presenter."))
            if err := st.session_state.get("token_error"):
                st.error(plain(err), icon=":material/key_off:")
            elif not can_act(lab):
                st.caption(_("Viewing only: the presenter drives the server and the benchmarks."))
        if not can_act(lab):
            _follow()
    return slot


def model_detail(model: str | None) -> str | None:
    """A model's full name or path, for the hover of a place that shows its short name (models.shown_name)."""
    return model if model and models.shown_name(model) != model else None


def server_status(slot) -> None:
    """The sidebar's server status, drawn into its slot once the page is drawn (see sidebar): every 2 s while the
    server starts or a run measures (their stages), else once, and again when what it says changed."""
    lab = get_lab()
    with slot:
        live(_server_status, lambda: (_drawn_for(lab), lab.server_snapshot().config),
             lambda: lab.server_snapshot().state == STARTING or lab.measuring() is not None, every=2)


def _follow() -> None:
    """A viewer's choice to follow the presenter through the guided lab: when the presenter changes step, a
    follower is taken to it (from any page); the viewer's language stays their own."""
    # Kept across pages (persist_state): a switch the script asks for carries no widget values, and Streamlit then
    # drops every widget's: the follower arrived as a viewer who does not follow, on the step before.
    st.toggle(_("Follow the presenter"), key="follow_presenter", persist_state="session",
              help=_("Your screen shows the presenter's step of the guided lab and moves when they move."))
    if st.session_state.get("follow_presenter") and not st.session_state.get("on_guide"):
        if _presenter_moved():
            # The page's full run switches, before it draws a page about to be left (the tick below only asks
            # for that run). switch_page drops the query string unless given it (a viewer's ?lang= among it).
            st.switch_page("app_pages/guide.py", query_params=st.query_params.to_dict())
        _follow_tick()  # on the guided lab, the page's watcher follows (Guide.seen)


def _presenter_moved() -> bool:
    """The presenter's step moved since this viewer's guided lab last drew it."""
    s = get_lab().guide.state()
    return (s.current, s.moved_at) != st.session_state.get("guide_seen")


@st.fragment(run_every=WATCH_S)
def _follow_tick() -> None:
    """From another page, a full run once the presenter moved, which takes the follower to the step (_follow). The
    guided lab marks a step seen when it draws it: a switch that Streamlit folds into a newer rerun of this page
    (the newest request's page wins) is asked again at the next tick instead of being lost."""
    if fragment_rerun() and not st.session_state.get("on_guide") and _presenter_moved():  # not its first draw
        st.rerun(scope="app")


def _try_token() -> None:
    """A typed token is checked (and counted, when wrong) once, when it changes."""
    st.session_state.pop("token_error", None)
    if token := st.session_state.get("presenter_token"):
        try:
            get_lab().access.check(token, caller())
        except LabError as e:
            st.session_state["token_error"] = i18n.said(e)


def _drawn_for(lab: Lab) -> tuple[str, str]:
    """What a page's buttons depend on: our server's state and the server at a URL attached, if any."""
    remote = lab.attached()
    return lab.server_snapshot().state, f"{remote.url} {remote.answering} {remote.said}" if remote else ""


def _server_status() -> None:
    lab = get_lab()
    s = lab.server_snapshot()
    if (now := _drawn_for(lab)) != st.session_state.get("drawn_state", now):
        st.rerun(scope="app")  # started, ready, failed, stopped, connected elsewhere: enable the right buttons
    title = _("vLLM server")
    if remote := lab.attached():  # a server at a URL: measured, never started or stopped here
        connected, gone = _("connected"), _("not answering")
        st.markdown(f"**{title}** :blue-badge[{connected}]" if remote.answering else f"**{title}** :red-badge[{gone}]")
        st.caption(plain(_("{model} · {url}", model=models.shown_name(remote.model), url=remote.url)),
                   help=model_detail(remote.model))
        if remote.said and remote.answering:  # it answers again: restarted or not, another model or not
            st.info(plain(remote.said), icon=":material/link:")
        elif remote.said:  # since when it stopped answering, and what to do
            st.error(plain(remote.said), icon=":material/link_off:")
    else:
        st.markdown(f"**{title}** {badge(s.state)}")
    if s.config and not remote:
        st.caption(plain(_("{model} · port {port}", model=models.shown_name(s.config.model_name),
                             port=s.config.port)), help=model_detail(s.config.model))
    if s.state == STARTING:
        st.caption(plain(f"{i18n.tr(s.stage)} · {fmt_s(s.elapsed)}"))
    if job := lab.measuring():
        st.caption(plain(_("Running: {label} ({stage})", label=job.label, stage=job.stage)))

