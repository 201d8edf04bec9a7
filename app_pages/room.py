"""The room as the load: on the presenter's cue every attendee presses once on their own device; the big screen
shows their requests on one clock (who joined whose answer mid-generation, how many generated together, each
person's TTFT), then the same requests one at a time. The round lives in the engine (`lab.room`, engine/room.py),
shared by every viewer; each attendee sees only their own question and answer, the room sees names and timings."""
import uuid

import streamlit as st

import i18n
import ui
from engine import figures
from engine.lab import LabError
from i18n import _

lab = ui.get_lab()
room = lab.room
presenter = ui.can_act(lab)
# one request per attendee per round: the attendee is this browser session (many share one address behind a proxy)
attendee = st.session_state.setdefault("room_attendee", uuid.uuid4().hex[:12])
st.session_state.setdefault("room_name", room.suggest_name(i18n.lang()))

st.title(_("The room"))
st.caption(_("Continuous batching with the room as the load: when the presenter opens a round, everyone presses once "
             "on their own device. The big screen shows each request joining the answers already being generated, "
             "then the same requests sent one at a time."))


def _send() -> None:
    """The press, before the page draws: the form that follows already shows it sent (its button greyed)."""
    try:
        room.send(attendee, st.session_state.get("room_name") or "", st.session_state.get("room_question") or "")
    except LabError as e:
        st.session_state["room_refused"] = ui.plain(e)


def _press_form() -> None:
    """An attendee's name, an optional short question and the one button (greyed once they sent in this round)."""
    view = room.view()
    sent = view is not None and not view.over and room.mine(attendee) is not None
    with st.form("room_press", border=True):
        st.text_input(_("Your name on the big screen"), key="room_name", max_chars=room.max_name)
        st.text_input(_("Your question (optional)"), key="room_question", max_chars=room.max_question,
                      placeholder=_("Leave it empty to send one of the lab's prompts"),
                      help=_("Only you see your question and its answer; the room sees your name and your timings."))
        st.form_submit_button(_("Send my request"), type="primary", icon=":material/send:", width="stretch",
                              disabled=sent, on_click=_send)
        if refused := st.session_state.pop("room_refused", None):
            st.error(refused, icon=":material/block:")


def _controls() -> None:
    """The presenter's round: how long it stays open and how long each answer is; while one runs, its own settings
    (a second screen's form would show its defaults beside the round's)."""
    if (view := room.view()) is not None and not view.over:
        with st.container(border=True):
            st.markdown(_("**This round**: open for {s} s, {n} tokens per answer", s=view.seconds,
                          n=view.max_tokens))
            if view.full_length:
                st.caption(_("Every answer to its full length."))
        return
    with st.form("room_open", border=True):
        st.markdown(_("**The next round**"))  # beside a finished round's numbers: these are for the next one
        lo, hi = room.round_s
        seconds = st.slider(_("The round stays open (s)"), lo, hi, room.default_s, 5)
        hi = max(room.max_tokens(), 17)  # the server's max-model-len less a question's room, within a viewer's limit
        tokens = st.slider(_("Tokens per answer"), 16, hi, min(room.default_tokens, hi), 16,
                           help=_("Within a viewer's chat limit and what the server's max-model-len leaves beside a "
                                  "question; on a CPU a short answer keeps the round to a minute."))
        full = st.toggle(_("Every answer to its full length"), value=True,
                         help=_("Ignores the end-of-text token (ignore_eos), so every answer has the same length and "
                                "the one-at-a-time contrast does exactly the same work."))
        if st.form_submit_button(_("Open a round"), type="primary", icon=":material/play_arrow:", width="stretch"):
            ui.act(room.open, seconds, tokens, full, rerun=True)  # the page in its live shape: the round's settings


def _status(view) -> None:
    """The round's stage in one line, and the presenter's Close and Cancel while it runs."""
    pressed, answered = len(view.names), view.answered
    if view.accepting:
        st.markdown(_(":green-badge[Round open] closes in **{s}** · **{n}** pressed · {done} answered",
                      s=ui.fmt_s(view.closes_in), n=pressed, done=answered))
    elif view.over:
        st.markdown(_(":gray-badge[Round over: {stage}] {n} pressed", stage=i18n.tr(view.status), n=pressed))
    elif view.status == "one at a time":  # the room's answers are all in: the same requests go again
        st.markdown(_(":orange-badge[{stage}] the room's {n} requests again, one after another",
                      stage=i18n.tr(view.status), n=pressed))
    else:
        st.markdown(_(":orange-badge[{stage}] {n} pressed · {done} answered", stage=i18n.tr(view.status), n=pressed,
                      done=answered))
    if presenter and view.accepting and st.button(_("Close the round now"), icon=":material/stop_circle:"):
        ui.act(room.close)
    if (job := lab.job(view.job_id)) is not None:  # the bar counts what the stage waits for, never an empty one
        done, total = view.alone
        text = (_("The round's time") if view.accepting else
                _("One at a time: {done} of {n} answered", done=done, n=total) if view.status == "one at a time" else
                # the count so far, and what follows once it is full: not "complete" on a filling bar
                _("Answers completed so far: {done} of {n}; then the same requests one at a time",
                  done=view.answered, n=len(view.names)) if view.status == "answering" else _("Opening the round"))
        ui.job_panel(lab, job, text, key="room_cancel", error_for_s=room.error_for_s, share=view.share)


def _results(together, alone) -> None:
    """A finished round: the total each way and each person's wait both ways first, then its timeline."""
    lang = i18n.lang()
    if alone is None:
        st.caption(_("The one-at-a-time contrast was not kept: it was cancelled, or nobody's answer ended well."))
    else:
        last_a, last_b, tok_a, tok_b = figures.room_totals(together, alone)
        c = st.columns(3)
        c[0].metric(_("Together: all answers complete"), ui.fmt_s(last_a))
        c[1].metric(_("One at a time"), ui.fmt_s(last_b))
        c[2].metric(_("Tokens generated (together / one at a time)"), f"{i18n.number(tok_a)} / {i18n.number(tok_b)}")
        ui.chart(figures.room_contrast(together, alone, lang=lang), key="room_contrast")
    ui.chart(figures.room_timeline(together, lang=lang), key="room_timeline")
    ui.warmth(together)
    if alone is not None:
        st.caption(_("Both are saved in History: {together} and {alone}, from {when}.",
                     together=i18n.tr(together.label), alone=i18n.tr(alone.label),
                     when=i18n.when(together.started_at)))


def _live() -> bool:
    """Whether a round is running now (open, answering, or its one-at-a-time contrast)."""
    view = room.view()
    return view is not None and not view.over


def big_screen() -> None:
    """The newest round: live while it runs, else the last round's results, drawn once."""
    view = room.view()
    if view is None:
        together, alone = room.saved()
        if together is None:
            st.info(_("No round yet: the presenter opens one, then everyone presses once."), icon=":material/groups:")
        else:
            st.caption(_("The last round kept in History."))
            _results(together, alone)
        return
    if not view.over:
        # the big screen each second; an attendee's copy of it every 2 s (a room of phones redrawing it costs the app)
        (_big_screen_live if presenter else _big_screen_slow)()
        return
    _status(view)
    together, alone = room.results(view)  # a run deleted in History meanwhile is None
    if together is not None:
        _results(together, alone)


def _big_screen_body() -> None:
    """The round's requests as they stand, from the reading the room's shared figures were built from (status line
    and chart agree; the figures unchanged between two builds, so the browser keeps its chart); the page redraws
    once the round ends."""
    screen = room.screen(i18n.lang())
    if screen is None or (current := room.view()) is None or current.over:
        st.rerun(scope="app")
    _status(screen.view)  # the one-at-a-time part as its bar's count: its chart comes with the results
    ui.chart(screen.timeline, key="room_live")


_big_screen_live = st.fragment(run_every=1.0)(_big_screen_body)
_big_screen_slow = st.fragment(run_every=2.0)(_big_screen_body)


def my_request() -> None:
    """This attendee's own request: the round's stage, their question and the answer as it streams (redrawn every
    2 s while a round runs: one timed redraw per phone, cheap, so that thirty of them leave the big screen its
    second), where it joined the others. The presenter's own press is drawn with the page (the big screen is theirs)."""
    if _live() and not presenter:
        _my_request_live()
    else:
        _my_request()


@st.fragment(run_every=2.0)
def _my_request_live() -> None:
    if not _live():
        st.rerun(scope="app")
    _my_request()


def _my_request() -> None:
    view = room.view()
    mine = room.mine(attendee)
    if not presenter and (view is None or view.over):  # the presenter's big screen says the round's stage, live
        st.caption(_("Waiting for the presenter to open a round.") if mine is None else
                   _("This round is over: your request and its answer stay here until the presenter opens the "
                     "next one."))
    if not presenter and view is not None and view.accepting:
        if mine is None:
            st.success(_("The round is open for {s}: press Send.", s=ui.fmt_s(view.closes_in)),
                       icon=":material/timer:")
        else:
            st.info(_("Your request is in: its answer streams below. The round closes in {s}.",
                      s=ui.fmt_s(view.closes_in)), icon=":material/check_circle:")
    if mine is None:
        return
    r = mine.record
    with st.chat_message("user"):
        st.markdown(ui.plain(mine.text) if mine.typed else _("The lab's prompt: {prompt}", prompt=ui.plain(mine.text)))
    with st.chat_message("assistant"):
        st.markdown(ui.plain(r.output_text) or "…")
        ttft = _("TTFT **{ttft}**", ttft=ui.fmt_s(r.ttft)) if r.ttft is not None else _("waiting for the first token")
        parts = [ttft, _("{n} tokens", n=r.output_tokens)]
        if mine.join is not None:
            parts.append(_("you joined at {name}'s token {k}", name=ui.plain(mine.joined_name), k=mine.join.at_token))
        if mine.sharing:
            parts.append(_("{n} requests were generating together when your first token came", n=mine.sharing))
        st.caption(" · ".join(parts))
        if view is not None and view.full_length:
            st.caption(_("Every answer in this round runs to its {n} tokens (the end-of-text token is ignored, so "
                         "both ways do the same work): past the answer's natural end the model writes filler.",
                         n=view.max_tokens))


# Each part in a slot of its own: a live round's timed fragments and a finished round's static charts take turns there
if presenter:
    left, right = st.columns([1, 3], gap="large")
    with left:
        _controls()
        with st.expander(_("Press as an attendee"), icon=":material/touch_app:"):
            _press_form()
            with st.container():
                my_request()
    with right, st.container():
        big_screen()
else:
    _press_form()
    with st.container():
        my_request()
    if st.toggle(_("Show the room's timeline"), key="room_show",
                 help=_("The presenter's big screen: everyone's names and timings, never their questions.")):
        with st.container():
            big_screen()
if not _live():
    ui.watch(room.seen, room.seen())  # between rounds: drawn once, redrawn when a round opens or its error's time ends
