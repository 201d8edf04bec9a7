"""Serving Lab: router only. Pages live in pages/, the work in engine/ (see DESIGN.md)."""
import streamlit as st

import ui

st.set_page_config(page_title="Serving Lab", page_icon=":material/speed:", layout="wide")

lab = ui.get_lab()
nav = st.navigation([
    st.Page("pages/server.py", title="Server", icon=":material/dns:", default=True),
    st.Page("pages/monitor.py", title="Monitor", icon=":material/monitor_heart:"),
    st.Page("pages/naive_vs_vllm.py", title="Naive vs vLLM", icon=":material/compare_arrows:"),
    st.Page("pages/load_test.py", title="Load test", icon=":material/stacked_bar_chart:"),
    st.Page("pages/tuning.py", title="Tuning", icon=":material/tune:"),
    st.Page("pages/chat.py", title="Chat", icon=":material/chat:"),
    st.Page("pages/history.py", title="History", icon=":material/history:"),
])
ui.sidebar(lab)
nav.run()
