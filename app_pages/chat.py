"""Chat: talk to the running server; each answer streams in with its time to first token (step 5)."""
import threading

import streamlit as st

import ui
from engine import figures, models
from engine.chat import ChatTiming, stream_chat
from engine.errors import LabError
from engine.prompts import LAB_STREAM
from engine.server import READY

lab = ui.get_lab()
snap = lab.server.snapshot()
placeholder = bool(snap.config and snap.config.load_format == "dummy")

st.title("Chat")
st.caption("Answers stream token by token. Under each: the time to first token (what a user feels), the tokens "
           "and the speed. The chart shows when each token arrived, as in the lab's step 5.")
if placeholder:
    st.warning(f"The server runs the {models.SHAPE_ONLY_NOTE}.", icon=":material/warning:")

with st.sidebar:
    st.subheader("Chat settings")
    max_tokens = st.slider("Max tokens", 16, 2048, 300, 16, help="The lab streams a 300-token answer.")
    temperature = st.slider("Temperature", 0.0, 1.5, 0.7, 0.1)
    if st.button("Clear conversation", icon=":material/delete:"):
        st.session_state.chat = []

history = st.session_state.setdefault("chat", [])


def _stats_line(m: dict) -> str:
    t = m["timing"]
    parts = [f"TTFT **{ui.fmt_s(t.ttft)}**", f"{t.tokens} tokens", f"total {ui.fmt_s(t.total)}"]
    if t.tok_per_s:
        parts.append(f"{t.tok_per_s:.0f} tok/s after the first token")
    if t.stopped:
        parts.append("stopped")
    return " · ".join(parts)


for m in history:
    with st.chat_message(m["role"]):
        st.markdown(m["content"])
        if m.get("timing"):
            st.caption(_stats_line(m))

if snap.state != READY:
    st.info("Start the server on the Server page to chat.", icon=":material/info:")
prompt = st.chat_input("Ask something… (try the lab's: " + LAB_STREAM + ")", disabled=snap.state != READY)

if prompt and snap.state == READY:
    history.append({"role": "user", "content": prompt})
    with st.chat_message("user"):
        st.markdown(prompt)
    timing, stop = ChatTiming(), threading.Event()
    entry = {"role": "assistant", "content": "", "timing": timing, "prompt": prompt}
    history.append(entry)  # kept even if the stream is stopped or breaks off
    with st.chat_message("assistant"):
        stop_slot = st.empty()  # the Stop button lives only while the answer streams
        stop_slot.button("Stop", icon=":material/stop_circle:", on_click=stop.set, key="stop_stream")

        def chunks():
            for text in stream_chat(snap.config.base_url, snap.config.model_name,
                                    [{"role": m["role"], "content": m["content"]} for m in history[:-1]],
                                    timing, max_tokens=max_tokens, temperature=temperature,
                                    api_key=snap.config.api_key, stop=stop):
                entry["content"] += text
                yield text

        try:
            st.write_stream(chunks())
        except LabError as e:
            st.error(str(e), icon=":material/error:")
        stop_slot.empty()
        st.caption(_stats_line(entry))

last = next((m for m in reversed(history) if m.get("timing") and m["timing"].ttft is not None), None)
if last:
    run = last["timing"].as_run(last["prompt"], last["content"], snap.config.model if snap.config else "",
                                placeholder)
    ui.chart(figures.token_timeline(run), key="tokens")
