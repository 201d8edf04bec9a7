"""Tuning: restart vLLM with each configuration, run the same workload, compare — the lab's step 4."""
import pandas as pd
import streamlit as st

import ui
from engine import figures
from engine.errors import LabError
from engine.measure import stats
from engine.measure.scenarios import SCENARIOS
from engine.serving.server import READY, STARTING

lab = ui.get_lab()
cpu = lab.device == "cpu"
snap = lab.server.snapshot()
scn = SCENARIOS["tuning"]

st.title("Tuning")
st.caption("Each row is one server configuration. The app restarts vLLM with it, waits until it is ready, sends "
           "the same 10 concurrent requests (100 tokens, the lab's step 4), and puts the results side by side "
           "with the KV-cache capacity vLLM reported.")

mem_col = "CPU KV cache (GiB)" if cpu else "GPU memory utilization"
default = pd.DataFrame([
    {"max-model-len": c["max_model_len"], mem_col: 2 if cpu else c["gpu_memory_utilization"]} for c in scn.configs
])
rows = st.data_editor(default, num_rows="dynamic", width="stretch", key="tuning_rows",
                      column_config={
                          "max-model-len": st.column_config.NumberColumn(min_value=64, max_value=131072, step=64),
                          mem_col: st.column_config.NumberColumn(min_value=0.05, max_value=64.0, step=0.05),
                      })
# Every row's server refuses answers longer than its max-model-len: the slider stops at the shortest.
shortest = int(rows["max-model-len"].dropna().min()) if rows["max-model-len"].notna().any() else None
tokens_hi = min(512, shortest or 512)
max_tokens = st.slider("Max tokens per answer", 16, max(tokens_hi, 20), min(scn.max_tokens, tokens_hi), 4,
                       help="The lab uses 100." + (
                           f" At most {tokens_hi}: the shortest max-model-len in the table, whose server refuses "
                           "longer answers." if shortest and shortest <= 512 else ""))

run = False
if snap.config is None:
    st.info("Start the server once on the Server page: tuning reuses its model and other settings.",
            icon=":material/info:")
else:
    if snap.state in (READY, STARTING):
        st.warning(f"Running the comparison stops the server on port {snap.config.port} and restarts it with each "
                   "row: anyone chatting or load testing on it is cut off, and it stays up with the last row's "
                   "settings.", icon=":material/restart_alt:")
    run = st.button("Restart vLLM and compare", type="primary", icon=":material/play_arrow:",
                    disabled=not ui.can_act(lab))
if run:
    try:
        configs = []
        for _, r in rows.dropna().iterrows():
            mem = float(r[mem_col])
            configs.append(snap.config.with_changes(
                max_model_len=int(r["max-model-len"]),
                **({"cpu_kvcache_gib": int(mem)} if cpu else {"gpu_memory_utilization": mem})))
        labels = [f"max-model-len {c.max_model_len}" + ("" if cpu else f" / {c.gpu_memory_utilization:g}")
                  for c in configs]
        ui.act(lab, lab.run_tuning, configs, scn.load_spec(max_tokens=max_tokens), labels)
    except ValueError as e:
        st.error(f"The table has a value that is not a number ({e}): fix the row and run again.")
    except LabError as e:  # a setting vLLM would refuse
        st.error(ui.plain(e), icon=":material/error:")


@st.fragment(run_every=2)
def results() -> None:
    job = lab.jobs.latest("tuning")
    runs = list(job.result or []) if job else []
    if job and job.active:
        st.progress(job.progress, text=f"{job.stage} ({job.done}/{job.total} configurations)")
        if st.button("Cancel", disabled=not ui.can_act(lab)):
            ui.act(lab, lab.cancel_job, job.id)
    if job and job.error:
        st.error(ui.plain(job.error), icon=":material/error:")
    saved = [r for r in lab.store.list_cached(limit=100)  # read once per change of the history
             if r.scenario == "tuning" and not r.problem and r.id not in {x.id for x in runs}]
    overlay = st.multiselect("Overlay saved tuning runs", saved, format_func=lambda r: f"{r.label} · {r.started}",
                             key="tuning_overlay") if saved else []  # no empty, disabled box before the first run
    for r in overlay:
        try:
            runs.append(lab.store.load_cached(r.id))
        except LabError as e:  # a damaged stored run: History shows why and deletes it
            st.warning(str(e), icon=":material/warning:")
    if runs:
        ui.chart(figures.tuning_compare(runs), key="tuning")
        for r in runs:  # a configuration whose requests failed says why, once per cause
            for _, sentence in stats.failure_causes(r.records):
                st.warning(ui.plain(f"{r.label}: {sentence}"), icon=":material/error:")
    else:
        st.info("Results appear here as each configuration finishes.", icon=":material/info:")


results()
