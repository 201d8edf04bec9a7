"""History: every run the app measured (or imported), compared on one chart and exported."""
import pandas as pd
import streamlit as st

import ui
from engine import figures
from engine.errors import LabError
from engine.figures import METRICS

lab = ui.get_lab()

st.title("History")
st.caption("Every finished run is saved the moment it completes, with the server's exact flags, the model, the "
           "versions and the hardware. Select runs to compare or export them (JSON keys follow `vllm bench serve`).")

rows = lab.store.list()
if not rows:
    st.info("No runs yet: run a load test, or import runs exported from another machine below.",
            icon=":material/info:")
else:
    table = pd.DataFrame([{
        "started": r.started, "run": r.label or r.scenario, "kind": r.kind, "model": r.model.split("/")[-1],
        "requests": r.n_requests, "failed": r.n_failed,
        "wall time (s)": round(r.duration, 2),
        "output tok/s": round(r.summary.get("output_throughput") or 0, 1),
        "mean TTFT (ms)": round(r.summary.get("mean_ttft_ms") or 0),
        "hardware": (r.hardware or {}).get("summary", ""), "source": r.source,
    } for r in rows])
    picked = st.dataframe(table, width="stretch", hide_index=True, on_select="rerun", selection_mode="multi-row",
                          key="history_table")
    chosen = [rows[i] for i in picked.selection.rows]
    if not chosen:
        st.caption("Select rows (left edge of the table) to compare, export or delete them. Showing the latest 8.")
    shown = chosen or rows[:8]
    metric = st.selectbox("Compare by", list(METRICS), format_func=lambda k: figures.metric_info(k)[0],
                          index=list(METRICS).index("output_throughput") if "output_throughput" in METRICS else 0)
    ui.chart(figures.history_compare(shown, metric), key="compare")

    ids = [r.id for r in chosen] or None
    which = f"{len(chosen)} selected" if chosen else "all"
    c1, c2, c3 = st.columns(3)
    c1.download_button(f"Export JSON ({which})", lab.store.export_json(ids), "serving-lab-runs.json",
                       "application/json", icon=":material/download:", width="stretch")
    c2.download_button(f"Export CSV ({which})", lab.store.export_csv(ids), "serving-lab-requests.csv", "text/csv",
                       icon=":material/download:", width="stretch")
    if c3.button(f"Delete {len(chosen)} selected", icon=":material/delete:", width="stretch",
                 disabled=not chosen or not ui.can_act(lab)):
        n = ui.act(lab, lab.store.delete, [r.id for r in chosen])
        if n is not None:
            st.toast(f"Deleted {n} run(s).")
            st.rerun()

    if len(chosen) == 1:
        run = lab.store.load(chosen[0].id)
        with st.expander("Details of the selected run", expanded=True):
            if run.command:
                st.code(run.command, language="bash")
            st.json({"summary": run.summary, "load": run.load, "hardware": run.hardware, "versions": run.versions},
                    expanded=False)
            if run.kind == "vllm" and run.records:
                ui.chart(figures.request_timeline(run), key="detail-tl")

st.divider()
st.subheader("Bring runs from another machine")
c1, c2 = st.columns(2)
with c1:
    up = st.file_uploader("Import a JSON export (e.g. from a GPU box's `python -m engine run … --json`)",
                          type="json")
    if up is not None and st.button("Import", icon=":material/upload:", disabled=not ui.can_act(lab)):
        try:
            n = len(lab.store.import_json(up.getvalue().decode("utf-8")))
            st.success(f"Imported {n} run(s).")
            st.rerun()
        except (LabError, UnicodeDecodeError) as e:
            st.error(f"That file could not be imported: {e}")
with c2:
    st.markdown("The repository ships example runs measured on an NVIDIA H200.")
    if st.button("Load the example runs", icon=":material/dataset:", disabled=not ui.can_act(lab)):
        n = ui.act(lab, lab.store.import_examples)
        if n is not None:
            st.success(f"Loaded {len(n)} example run(s)." if n else "No new example runs (already loaded).")
