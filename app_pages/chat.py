"""Chat: talk to the running server; each answer streams in with its time to first token (step 5)."""
import threading

import streamlit as st

import ui
from engine import figures
from engine.lab import LabError

lab = ui.get_lab()
snap = lab.server_snapshot()
presenter = ui.can_act(lab)

st.title("Chat")
st.caption("Answers stream token by token. Under each: the time to first token (what a user feels), the tokens "
           "and the speed. The chart shows when each token arrived, as in the lab's step 5.")
if snap.config and snap.config.load_format == "dummy":
    st.warning(f"The server runs the {lab.SHAPE_ONLY_NOTE}.", icon=":material/warning:")

limits = lab.chat_limits
with st.sidebar:
    st.subheader("Chat settings")
    max_tokens = st.slider("Max tokens", 16, 2048 if presenter else limits.max_tokens, 300, 16,
                           help="The lab streams a 300-token answer." if presenter else
                                f"The lab streams a 300-token answer; viewers may ask for up to {limits.max_tokens}.")
    temperature = st.slider("Temperature", 0.0, 1.5, 0.7, 0.1)
    if st.button("Clear conversation", icon=":material/delete:"):
        st.session_state.chat = []
    if presenter:
        allow = st.toggle("Let viewers chat during benchmarks", value=lab.chat_under_load,
                          help="Off: a viewer's message waits until the running benchmark ends, so the room's "
                               "numbers are not distorted. On: chatting under load is a fair demo of TTFT; the "
                               "run is marked as having had chat traffic beside it.")
        if allow != lab.chat_under_load:
            ui.act(lab, lab.allow_chat_under_load, allow)
    else:
        st.caption(f"Viewers may send {limits.per_minute} messages a minute, up to {limits.max_prompt_chars:,} "
                   "characters each; during a benchmark a message waits until it ends.")

history = st.session_state.setdefault("chat", [])


def _stats_line(m: dict) -> str:
    r = m["record"]  # a RequestRecord, filled by lab.chat
    total = r.e2e
    parts = [f"TTFT **{ui.fmt_s(r.ttft)}**", f"{r.output_tokens} tokens", f"total {ui.fmt_s(total)}"]
    if r.ttft is not None and total and total > r.ttft and r.output_tokens > 1:
        parts.append(f"{(r.output_tokens - 1) / (total - r.ttft):.0f} tok/s after the first token")
    if m.get("stopped"):
        parts.append("stopped")
    return " · ".join(parts)


for m in history:
    with st.chat_message(m["role"]):
        st.markdown(m["content"])
        if m.get("record"):
            st.caption(_stats_line(m))

if snap.state != lab.READY:
    st.info("Start the server on the Server page to chat.", icon=":material/info:")
elif lab.access.locked:
    st.info(lab.access.why_not(), icon=":material/lock:")
can_chat = snap.state == lab.READY and not lab.access.locked
prompt = st.chat_input("Ask something… (try the lab's: " + lab.chat_example + ")", disabled=not can_chat)

if prompt and can_chat:
    history.append({"role": "user", "content": prompt})
    with st.chat_message("user"):
        st.markdown(prompt)
    record, stop = lab.chat_record(prompt), threading.Event()
    entry = {"role": "assistant", "content": "", "record": record}
    history.append(entry)  # kept even if the stream is stopped or breaks off
    with st.chat_message("assistant"):
        stop_slot = st.empty()  # the Stop button lives only while the answer streams
        stop_slot.button("Stop", icon=":material/stop_circle:", on_click=stop.set, key="stop_stream")
        waiting = st.empty()

        def chunks():
            for text in lab.chat([{"role": m["role"], "content": m["content"]} for m in history[:-1]], record,
                                 max_tokens=max_tokens, temperature=temperature, stop=stop,
                                 on_wait=lambda why: waiting.info(why, icon=":material/hourglass_top:"),
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
    ui.chart(figures.token_timeline(last), key="tokens")
