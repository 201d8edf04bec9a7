"""Chat: talk to the running server; each answer streams in with its time to first token (step 5)."""
import threading

import streamlit as st

import i18n
import ui
from engine import figures
from engine.lab import LabError
from engine.serving import models
from engine.serving.models import SHAPE_ONLY_NOTE
from engine.serving.states import STARTING, STOPPING
from i18n import _

lab = ui.get_lab()
snap = lab.server_snapshot()
presenter = ui.can_act(lab)

st.title(_("Chat"))
st.caption(_("Answers stream token by token. Under each: the time to first token (what a user feels), the tokens "
             "and the speed. The chart shows when each token arrived, as in the lab's step 5."))
remote = lab.attached()  # a server at a URL, chatted with instead of our own
if remote:
    st.caption(ui.plain(_("Chatting with {model} at {url}.", model=models.shown_name(remote.model), url=remote.url)),
               help=ui.model_detail(remote.model))
elif snap.config and snap.config.load_format == "dummy":
    st.warning(_("The server runs the {note}.", note=SHAPE_ONLY_NOTE), icon=":material/warning:")

limits = lab.chat_limits
LAB_TOKENS = 300  # the lab's streamed answer
with st.sidebar:
    st.subheader(_("Chat settings"))
    # The server holds prompt and answer within its max-model-len: the slider stops there, to the token (step
    # 1: a cap such as 300 is reachable), and says so when that is below the lab's 300.
    server_len = lab.serving_max_len()
    tokens_hi = min(2048 if presenter else limits.max_tokens, server_len or 2048)
    max_tokens = st.slider(_("Max tokens"), 16, max(tokens_hi, 17), min(LAB_TOKENS, tokens_hi), 1,
                           help=_("The lab streams a 300-token answer.") if presenter else
                           _("The lab streams a 300-token answer; viewers may ask for up to {max_tokens}.",
                             max_tokens=limits.max_tokens))
    if server_len and server_len < LAB_TOKENS:
        st.caption(_("At most {len} tokens, below the lab's 300: the server runs with --max-model-len {len} (a "
                     "Tuning comparison leaves its last configuration running), which holds the prompt and the "
                     "answer together. Restart it on the Server page for longer answers.", len=server_len))
    temperature = st.slider(_("Temperature"), 0.0, 1.5, 0.7, 0.1)
    if st.button(_("Clear conversation"), icon=":material/delete:"):
        st.session_state.chat = []
    if presenter:
        allow = st.toggle(_("Let viewers chat during benchmarks"), value=lab.chat_under_load,
                          help=_("Off: a viewer's message waits until the running benchmark ends, so the room's "
                                 "numbers are not distorted. On: chatting under load is a fair demo of TTFT; the "
                                 "run is marked as having had chat traffic beside it."))
        if allow != lab.chat_under_load:
            ui.act(lab.allow_chat_under_load, allow)
    else:
        st.caption(_("Viewers may send {per_minute} messages a minute, up to {chars} characters each; during a "
                     "benchmark a message waits until it ends.", per_minute=limits.per_minute,
                     chars=i18n.number(limits.max_prompt_chars)))

history = st.session_state.setdefault("chat", [])


def _stats_line(m: dict) -> str:
    r = m["record"]  # a RequestRecord, filled by lab.chat
    total = r.e2e
    parts = [_("TTFT **{ttft}**", ttft=ui.fmt_s(r.ttft)), _("{n} tokens", n=r.output_tokens),
             _("total {time}", time=ui.fmt_s(total))]
    if r.ttft is not None and total and total > r.ttft and r.output_tokens > 1:
        rate = (r.output_tokens - 1) / (total - r.ttft)
        parts.append(_("{rate} tok/s after the first token", rate=format(rate, ".0f")))
    if m.get("stopped"):
        parts.append(_("stopped"))
    return " · ".join(parts)


for m in history:
    with st.chat_message(m["role"]):
        st.markdown(m["content"])
        if m.get("record"):
            st.caption(_stats_line(m))

if not lab.ready() and snap.state in (STARTING, STOPPING):  # what is true now, for whoever reads it
    st.info(ui.plain(_("The vLLM server is {state} ({stage}): chat opens once it is ready.",
                       state=_(ui.STATE_BADGE[snap.state][1]), stage=i18n.tr(snap.stage) or "…")),
            icon=":material/hourglass_top:")
elif not lab.ready() and presenter:
    st.info(_("Start the server on the Server page (or step 3 of the guided lab) to chat."), icon=":material/info:")
elif not lab.ready():
    st.info(_("No vLLM server is running: chat opens once the presenter starts one."), icon=":material/info:")
elif lab.access.locked:
    st.info(ui.plain(lab.access.why_not()), icon=":material/lock:")
can_chat = lab.ready() and not lab.access.locked
prompt = st.chat_input(_("Ask something… (try the lab's: {example})", example=lab.chat_example),
                       disabled=not can_chat)

if prompt and can_chat:
    history.append({"role": "user", "content": prompt})
    with st.chat_message("user"):
        st.markdown(prompt)
    record, stop = lab.chat_record(prompt), threading.Event()
    entry = {"role": "assistant", "content": "", "record": record}
    history.append(entry)  # kept even if the stream is stopped or breaks off
    with st.chat_message("assistant"):
        stop_slot = st.empty()  # the Stop button lives only while the answer streams
        stop_slot.button(_("Stop"), icon=":material/stop_circle:", on_click=stop.set, key="stop_stream")
        waiting = st.empty()

        def chunks():
            for text in lab.chat([{"role": m["role"], "content": m["content"]} for m in history[:-1]], record,
                                 max_tokens=max_tokens, temperature=temperature, stop=stop,
                                 on_wait=lambda why: waiting.info(ui.plain(why), icon=":material/hourglass_top:"),
                                 token=st.session_state.get("presenter_token"), caller=ui.caller()):
                waiting.empty()
                entry["content"] += text
                yield text

        try:
            st.write_stream(chunks())
        except LabError as e:
            waiting.empty()
            st.error(ui.plain(e), icon=":material/error:")
        entry["stopped"] = stop.is_set()
        stop_slot.empty()
        if record.first_token_time is None:
            history.pop()  # nothing came back: keep the question, not an empty answer
        else:
            st.caption(_stats_line(entry))

last = next((m["record"] for m in reversed(history) if m.get("record") and m["record"].ttft is not None), None)
if last:
    ui.chart(figures.token_timeline(last, lang=i18n.lang()), key="tokens")

asked = [m["content"] for m in history if m["role"] == "user"]
ui.code_behind(lab.code_for_chat(asked[-1] if asked else lab.chat_example, max_tokens=max_tokens,
                                 temperature=temperature, earlier_turns=len(asked) > 1, lang=i18n.lang()),
               _("The Python behind this chat"))
