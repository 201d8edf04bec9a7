"""Tuning: restart vLLM with each configuration, run the same workload, compare — the lab's step 4."""
import pandas as pd
import streamlit as st

import i18n
import ui
from engine import figures
from engine.lab import LabError
from i18n import _

lab = ui.get_lab()
cpu = lab.device == "cpu"
snap = lab.server_snapshot()
scn = lab.scenario("tuning")

st.title(_("Tuning"))
st.caption(_("Each row is one server configuration. The app restarts vLLM with it, waits until it is ready, sends "
             "the same 10 concurrent requests (100 tokens, the lab's step 4), and puts the results side by side "
             "with the KV-cache capacity vLLM reported."))

# The columns keep their English names (the rows are read back by them, and the editor's state stays the
# viewer's when they switch language); the titles shown are translated in column_config.
mem_col = "CPU KV cache (GiB)" if cpu else "GPU memory utilization"
default = pd.DataFrame([
    {"max-model-len": c["max_model_len"], mem_col: 2 if cpu else c["gpu_memory_utilization"]} for c in scn.configs
])
rows = st.data_editor(default, num_rows="dynamic", width="stretch", key="tuning_rows",
                      column_config={
                          "max-model-len": st.column_config.NumberColumn(min_value=64, max_value=131072, step=64),
                          mem_col: st.column_config.NumberColumn(
                              _("CPU KV cache (GiB)") if cpu else _("GPU memory utilization"),
                              min_value=0.05, max_value=64.0, step=0.05),
                      })
# Every row's server refuses answers longer than its max-model-len: the slider stops at the shortest.
shortest = int(rows["max-model-len"].dropna().min()) if rows["max-model-len"].notna().any() else None
tokens_hi = min(512, shortest or 512)
# A key keeps the value when the viewer switches language (the label is part of a keyless widget's id).
max_tokens = st.slider(_("Max tokens per answer"), 16, max(tokens_hi, 20), min(scn.max_tokens, tokens_hi), 4,
                       key="tuning_max_tokens",
                       help=_("The lab uses 100. At most {tokens_hi}: the shortest max-model-len in the table, whose "
                              "server refuses longer answers.", tokens_hi=tokens_hi)
                       if shortest and shortest <= 512 else _("The lab uses 100."))

run = False
if remote := lab.attached():  # tuning restarts a server, and the app restarts only its own
    st.info(ui.plain(_("Tuning restarts the server with each row, and the app restarts only a server it started: "
                       "disconnect from {url} on the Server page to tune a server here.", url=remote.url)),
            icon=":material/link:")
    st.button(_("Restart vLLM and compare"), type="primary", icon=":material/play_arrow:", disabled=True,
              help=_("Disconnect from the server at a URL first (Server page)."))
elif snap.config is None:
    st.info(_("Start the server once on the Server page: tuning reuses its model and other settings."),
            icon=":material/info:")
else:
    if snap.state in (lab.READY, lab.STARTING):
        st.warning(_("Running the comparison stops the server on port {port} and restarts it with each "
                     "row: anyone chatting or load testing on it is cut off, and it stays up with the last row's "
                     "settings.", port=snap.config.port), icon=":material/restart_alt:")
    run = st.button(_("Restart vLLM and compare"), type="primary", icon=":material/play_arrow:",
                    disabled=not ui.can_act(lab))
if run:
    try:
        configs = lab.tuning_configs([(int(r["max-model-len"]), float(r[mem_col]))
                                      for _i, r in rows.dropna().iterrows()])
        ui.act(lab, lab.run_tuning, configs, lab.load_spec("tuning", max_tokens=max_tokens))
    except ValueError as e:
        st.error(_("The table has a value that is not a number ({error}): fix the row and run again.", error=e))
    except LabError as e:  # a setting vLLM would refuse
        st.error(ui.plain(e), icon=":material/error:")


@st.fragment(run_every=2)
def results() -> None:
    job = lab.latest_job("tuning")
    runs = list(job.result or []) if job else []
    if job:
        ui.job_panel(lab, job, _("{stage} ({done}/{total} configurations)", stage=job.stage, done=job.done,
                                 total=job.total))
    saved = [r for r in lab.runs(limit=100)  # read once per change of the history
             if r.scenario == "tuning" and not r.problem and r.id not in {x.id for x in runs}]
    overlay = st.multiselect(_("Overlay saved tuning runs"), saved, format_func=lambda r: f"{i18n.tr(r.label)} · {ui.started(r)}",
                             key="tuning_overlay") if saved else []  # no empty, disabled box before the first run
    for r in overlay:
        try:
            runs.append(lab.run(r.id))
        except LabError as e:  # a damaged stored run: History shows why and deletes it
            st.warning(ui.plain(e), icon=":material/warning:")
    if runs:
        ui.chart(figures.tuning_compare(runs, lang=i18n.lang()), key="tuning")
        ui.failure_causes(runs, prefix=True)  # a configuration whose requests failed says why, once per cause
        ui.code_behind(lab.code_for_run(runs[-1], i18n.lang()))  # every row sent the same workload
    else:
        st.info(_("Results appear here as each configuration finishes."), icon=":material/info:")


results()


# -- the KV cache as the scarce resource (issue #12) ------------------------------------------------
st.subheader(_("The KV cache as the scarce resource"))
squeeze = lab.scenario("kv-squeeze")
st.caption(_("The same {n} concurrent answers of {tokens} tokens on a KV cache too small for them, then on one with "
             "room to spare. Watch the Monitor meanwhile: requests wait, the cache stays full and requests are "
             "preempted (their blocks taken back; they start again).", n=squeeze.concurrency,
             tokens=st.session_state.get("kv_max_tokens", squeeze.max_tokens)))
# Shorter answers make the squeeze quicker (each half takes minutes on a CPU). Below 100 the answers (~37 prompt
# tokens each) could fit in one of the CPU build's 128-token blocks, and nothing would be preempted.
kv_tokens = st.slider(_("Max tokens per answer"), 100, squeeze.max_tokens, squeeze.max_tokens, 20, key="kv_max_tokens",
                      help=_("Shorter answers make the comparison quicker (minutes on a CPU); from 100 tokens up they "
                             "still outgrow the squeezed cache."))
if snap.config is not None and st.button(_("Squeeze the KV cache and compare"), icon=":material/compress:",
                                         disabled=not ui.can_act(lab)):
    try:
        ui.act(lab, lab.run_tuning, lab.scenario_configs("kv-squeeze"),
               lab.load_spec("kv-squeeze", max_tokens=kv_tokens), list(squeeze.config_labels))
    except LabError as e:
        st.error(ui.plain(e), icon=":material/error:")


@st.fragment(run_every=2)
def kv_results() -> None:
    """The latest comparison's configurations (a kv-squeeze or any tuning job), else the last saved squeeze."""
    job = lab.latest_job("tuning")
    runs = list(job.result or []) if job else []
    if not runs:
        try:
            runs = lab.latest_pair("kv-squeeze")
        except LabError as e:  # a damaged stored run: History shows why and deletes it
            st.warning(ui.plain(e), icon=":material/warning:")
    if not runs:
        st.info(_("The KV cache of each configuration appears here after a comparison."), icon=":material/info:")
        return
    ui.chart(figures.kv_compare(runs, lang=i18n.lang()), key="kv")
    # Whole numbers with thousands separators: a projector shows "16,298", not "16297.5772".
    whole, tenths = st.column_config.NumberColumn(format="localized"), st.column_config.NumberColumn(format="%.1f")
    columns = {"config": (_("Flags"), st.column_config.TextColumn()),
               "capacity_tokens": (_("KV capacity (tokens)"), whole), "blocks": (_("Blocks"), whole),
               "block_size": (_("Block size"), whole), "need_tokens": (_("Needed at once (tokens)"), whole),
               "peak_kv_percent": (_("Peak KV use (%)"), tenths), "preemptions": (_("Preemptions"), whole),
               "peak_waiting": (_("Peak waiting"), whole), "median_ttft_ms": (_("Median TTFT (ms)"), whole),
               "output_throughput": (_("Throughput (tok/s)"), tenths)}
    table = pd.DataFrame(lab.kv_rows(runs)).round({"median_ttft_ms": 0, "peak_waiting": 0})
    st.dataframe(table.rename(columns={k: name for k, (name, _c) in columns.items()}), hide_index=True,
                 width="stretch", column_config={name: c for name, c in columns.values()})


kv_results()


# -- prefix caching (issue #12 item 3): its own comparison, on vs off, with its own chart ---------------
st.divider()
st.subheader(_("Prefix caching"))
pscn = lab.scenario("prefix-cache")
st.caption(_("The same {n} short questions after one long shared system prompt (a workshop assistant's "
             "instructions, about 1,300 tokens), sent one at a time to vLLM restarted with prefix caching on, then "
             "off. With the cache on, only the first request computes the shared prompt; the others reuse it.",
             n=len(pscn.prompts)))
if snap.config is not None and st.button(_("Restart vLLM and compare prefix caching"), icon=":material/cached:",
                                         disabled=not ui.can_act(lab), key="prefix_run"):
    ui.act(lab, lab.run_prefix_cache, lab.load_spec("prefix-cache"))


@st.fragment(run_every=2)
def prefix_results() -> None:
    job = lab.latest_job("prefix-cache")
    runs = list(job.result or []) if job else []
    if job:
        ui.job_panel(lab, job, _("{stage} ({done}/{total} configurations)", stage=job.stage, done=job.done,
                                 total=job.total), key="prefix_cancel")
    if not runs and not (job and job.active):  # the last comparison from the history: one run with the cache on, one with it off
        try:
            runs = lab.latest_pair("prefix-cache")
        except LabError as e:  # a damaged stored run: History shows why and deletes it
            st.warning(ui.plain(e), icon=":material/warning:")
    if runs:
        ui.chart(figures.prefix_cache_compare(runs, lang=i18n.lang()), key="prefix")
        ui.failure_causes(runs, prefix=True)
    else:
        st.info(_("The time to first token of each request, with the cache on and off, appears here."),
                icon=":material/info:")


prefix_results()
