"""Serving Lab: router only. The pages live in app_pages/, the work in engine/ (see docs/architecture.md).

Not `pages/`: Streamlit treats a folder of that name as a legacy multipage app, and the first visit
of a fresh server through a deep link (/load_test) then runs the page without this navigation."""
import streamlit as st

import ui
from engine.lab import LabError
from i18n import _

st.set_page_config(page_title="Serving Lab", page_icon=":material/speed:", layout="wide")

try:
    lab = ui.get_lab()
except LabError as e:  # e.g. a history file written by a newer Serving Lab: a sentence, not a traceback
    st.error(ui.plain(e), icon=":material/error:")
    st.stop()
guide = st.Page("app_pages/guide.py", title=_("Guided lab"), icon=":material/school:", default=True)
nav = st.navigation([
    guide,
    st.Page("app_pages/server.py", title=_("Server"), icon=":material/dns:"),
    st.Page("app_pages/monitor.py", title=_("Monitor"), icon=":material/monitor_heart:"),
    st.Page("app_pages/naive_vs_vllm.py", title=_("Naive vs vLLM"), icon=":material/compare_arrows:"),
    # load.py, not load_test.py (pytest's test-file pattern); the address stays /load_test.
    st.Page("app_pages/load.py", title=_("Load test"), icon=":material/stacked_bar_chart:", url_path="load_test"),
    st.Page("app_pages/tuning.py", title=_("Tuning"), icon=":material/tune:"),
    st.Page("app_pages/chat.py", title=_("Chat"), icon=":material/chat:"),
    st.Page("app_pages/room.py", title=_("The room"), icon=":material/groups:"),
    st.Page("app_pages/history.py", title=_("History"), icon=":material/history:"),
])
ui.begin_page()
status = ui.sidebar(lab, on_guide=nav is guide)
ui.line_breaking()
with st.container():  # one slot, shown or not: the page's elements (and its fragments) keep their places
    ui.pending_error()
# The page's one watcher of its still parts, filled after the page, in a slot above it: a timed fragment's run
# re-sends its container at the place it was drawn, and on a page change the browser keeps only what was drawn
# before the page. Below the page, a watcher's run in flight during a switch (a follower taken to the presenter's
# step) landed past the new page's end ("Bad delta path index") and the app went blank. Its cost: the slot's gap
# starts every page 16 px lower; keyed so CSS could take the gap back, hidden, or at the sidebar's foot, the rare
# empty page after a switch (about one in 35 beside a CPU hog, its cause not found) came no less often.
watcher = st.container()
nav.run()
ui.server_status(status)  # after the page: never older than the result it shows
with watcher:
    ui.watch_page()
