"""Small shared helpers for the pages: the process-wide Lab, the sidebar, actions with clear errors,
the panel of a background job, and charts with their one-line caption. Layout only; the work is in
engine/. Like the pages, this imports nothing from engine but the Lab facade and the figures."""
from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import streamlit as st

import i18n
from engine import figures
from engine.lab import Lab, LabError
from i18n import N_, _, ngettext

STATE_BADGE = {
    Lab.STOPPED: ("gray", N_("stopped")),
    Lab.STARTING: ("orange", N_("starting")),
    Lab.READY: ("green", N_("ready")),
    Lab.STOPPING: ("orange", N_("stopping")),
    Lab.FAILED: ("red", N_("failed")),
}


@st.cache_resource(show_spinner=False)
def get_lab() -> Lab:
    """One Lab per app process: every browser session sees the same server, jobs and history. It knows
    where the app listens: beyond loopback with no presenter token, nobody may act."""
    return Lab(listen_host=st.get_option("server.address") or "0.0.0.0")


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


def act(lab: Lab, fn: Callable[..., Any], *args, rerun: bool = False, **kw) -> Any:
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
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def chart(fig, key: str | None = None) -> None:
    """Draw a figure from engine.figures with the sentence that tells a viewer what to notice."""
    # theme=None: keep the figure's own projector-sized fonts instead of Streamlit's smaller theme.
    st.plotly_chart(fig, width="stretch", key=key, theme=None, config={"displaylogo": False})
    if cap := figures.caption(fig):
        st.markdown(f":material/visibility: {plain(cap)}")


def job_panel(lab: Lab, job, text: str, *, cancel: str = N_("Cancel"), icon: str | None = None, key: str | None = None,
              error_for_s: float | None = None) -> None:
    """A background job's progress bar (with `text`) and Cancel button while it runs, and the sentence
    of its error once it failed (only within `error_for_s` seconds of its end, when given)."""
    if job.active:
        st.progress(job.progress, text=text)
        if st.button(_(cancel), icon=icon, key=key, disabled=not can_act(lab)):
            act(lab, lab.cancel_job, job.id)
    recent = error_for_s is None or (job.ended_at is not None and time.time() - job.ended_at < error_for_s)
    if job.error and recent:
        st.error(plain(job.error), icon=":material/error:")


def failure_causes(runs: Iterable, prefix: bool = False) -> None:
    """Why requests failed, one sentence per cause (after the run's label with `prefix`), wherever
    OK / failed counts or a run's bars are shown."""
    for run in runs:
        for _cause, sentence in Lab.failure_causes(run.records):
            st.warning(plain(_("{label}: {sentence}", label=run.label, sentence=sentence) if prefix else sentence),
                       icon=":material/error:")


def token_check(run) -> None:
    """The server's count of a run's output tokens against the client's: a caption when they agree or
    could not be compared, a warning when they differ by more than a few percent."""
    check = Lab.token_check(run)
    if check is None:
        return
    text = " ".join(plain(sentence) for sentence in check.sentences)
    if check.level == "warn":
        st.warning(text, icon=":material/rule:")
    else:
        st.caption(text)


def code_behind(code: str | None, label: str | None = None) -> None:
    """The short openai-SDK Python behind what the page just ran (Lab.code_for_run / code_for_chat), folded
    away and ready to copy (st.code's button) into an attendee's notebook; nothing when there is none."""
    if not code:
        return
    with st.expander(label or _("The Python behind this run"), icon=":material/code:"):
        st.caption(_("What this page just did, through the openai SDK as the lab's notebook does it: copy it with "
                     "the button at its top right. Its base_url is the address this app uses; from another machine, "
                     "put the server's address there."))
        st.code(code, language="python")


def gpu_price(where: str) -> float | None:
    """This viewer's price per GPU-hour, blank by default: one number input per page, the value kept for
    the viewer across pages (a widget's own state is dropped on a page that does not draw it)."""
    key = f"gpu_price_{where}"
    if key not in st.session_state and st.session_state.get("gpu_price") is not None:
        st.session_state[key] = st.session_state["gpu_price"]
    price = st.number_input(_("Price per GPU-hour"), min_value=0.0, max_value=1_000_000.0, value=None, step=0.5,
                            format="%.2f", key=key, placeholder=_("no price"),
                            help=_("What an hour of the machine costs you, in any currency: the cost of a "
                                   "million output tokens is worked out from each run's measured wall time. "
                                   "Only you see it."))
    st.session_state["gpu_price"] = price
    return price


def cost_text(lab: Lab, run, price: float | None) -> str | None:
    """A run's cost per million output tokens at `price`, in the viewer's digits; None without a price."""
    cost = lab.cost_per_million(run, price)
    return None if cost is None else i18n.number(cost, 2 if cost >= 0.1 else 4)


def warmth(lab: Lab, run) -> None:
    """What the run's warm-up cost, and whether the measured batch was cold (a warning) or warm (a caption)."""
    if warm := lab.warmup_cost(run):
        st.caption(plain(warm.said))
    if said := lab.warmth_said(run):
        if run.extra.cold:
            st.warning(plain(said), icon=":material/ac_unit:")
        else:
            st.caption(plain(said))


def cancelled_note(job) -> None:
    """What a cancelled load test kept."""
    if job.status == "cancelled":
        ok = sum(r.ok for r in job.result.measured)
        st.warning(ngettext("Cancelled: the {n} request that finished was kept and saved.",
                            "Cancelled: the {n} requests that finished were kept and saved.", ok),
                   icon=":material/cancel:")


def sidebar(lab: Lab) -> None:
    # What the page's buttons were drawn for; the status fragment redraws the page when it changes.
    st.session_state["drawn_state"] = _drawn_for(lab)
    with st.sidebar:
        i18n.switch()
        _server_status()
        if lab.access.locked:
            st.warning(_("Viewing only: the app is reachable from the network and no presenter token is set. "
                         "Restart it with `SERVING_LAB_PRESENTER_TOKEN` to let a presenter act."), icon=":material/lock:")
        elif lab.access.token:
            st.text_input(_("Presenter token"), type="password", key="presenter_token", on_change=_try_token,
                          help=_("Starting, stopping and running benchmarks is reserved for the presenter."))
            if err := st.session_state.get("token_error"):
                st.error(plain(err), icon=":material/key_off:")
            elif not can_act(lab):
                st.caption(_("Viewing only: the presenter drives the server and the benchmarks."))


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


@st.fragment(run_every=2)
def _server_status() -> None:
    lab = get_lab()
    s = lab.server_snapshot()
    if (now := _drawn_for(lab)) != st.session_state.get("drawn_state", now):
        st.rerun(scope="app")  # started, ready, failed, stopped, connected elsewhere: enable the right buttons
    title = _("vLLM server")
    if remote := lab.attached():  # a server at a URL: measured, never started or stopped here
        connected, gone = _("connected"), _("not answering")
        st.markdown(f"**{title}** :blue-badge[{connected}]" if remote.answering else f"**{title}** :red-badge[{gone}]")
        st.caption(plain(_("{model} · {url}", model=remote.model, url=remote.url)))
        if remote.said and remote.answering:  # it answers again: restarted or not, another model or not
            st.info(plain(remote.said), icon=":material/link:")
        elif remote.said:  # since when it stopped answering, and what to do
            st.error(plain(remote.said), icon=":material/link_off:")
    else:
        st.markdown(f"**{title}** {badge(s.state)}")
    if s.config and not remote:
        st.caption(plain(_("{model} · port {port}", model=s.config.model_name, port=s.config.port)))
    if s.state == Lab.STARTING:
        st.caption(plain(f"{i18n.tr(s.stage)} · {fmt_s(s.elapsed)}"))
    if job := lab.measuring():
        st.caption(plain(_("Running: {label} ({stage})", label=job.label, stage=job.stage)))

