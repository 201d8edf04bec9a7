"""Tuning: restart vLLM with each configuration, run the same workload, compare — the lab's step 4."""
import pandas as pd
import streamlit as st

import i18n
import ui
from engine import figures
from engine.lab import LabError
from engine.measure.judge import kvcache
from engine.measure.snippets.load import run_code
from engine.measure.workloads import scenarios
from engine.measure.workloads.named import named as workload_named
from engine.measure.workloads.named import one_workload, run_workload
from engine.measure.workloads.defaults import example_workloads, tuning_spec, workload_plan
from engine.serving.config import tuning_configs
from engine.serving.states import READY, STARTING
from i18n import _

lab = ui.get_lab()
cpu = lab.device == "cpu"
snap = lab.server_snapshot()
scn = scenarios.get("tuning")

st.title(_("Tuning"))
# Every section keeps the same elements in the same order whatever the server's state: a redraw of the whole
# app (the sidebar's, when the server stops and starts mid-comparison) must find each fragment where the
# browser has it. What depends on the state lives inside a fixed st.container() slot (the page
# went blank with "Bad delta path index 16" when an element appeared or vanished before a fragment).
st.caption(_("The lab's step 4: restart vLLM with each row's settings, send each the same workload (the lab's 10 "
             "concurrent requests, or a shipped example), compare throughput and wall time."))

# What each configuration is sent: the lab's prompts, or one of the shipped example workloads
WORKLOADS = example_workloads()
LAB_PROMPTS = "lab"


@st.cache_data(max_entries=8, show_spinner=False)
def _plan(key: str):
    """A shipped example's plan, made once (every configuration is sent this same one)."""
    return workload_plan(WORKLOADS[key], models_dir=lab.settings.models)


def _what_named(key: str) -> str:
    return _("The lab's 10 prompts") if key == LAB_PROMPTS else i18n.tr(workload_named(
        {"kind": WORKLOADS[key]["kind"], "name": WORKLOADS[key]["file"]}))


def _sent(runs) -> str:
    """Which workload the runs shown recorded: one sentence when they all got the same, else each run's."""
    if one_workload(runs):
        return _("Every configuration was sent the same workload: {what}.", what=i18n.tr(run_workload(runs[0])))
    return _("The runs shown were sent different workloads: {runs}.", runs=" · ".join(
        f"{i18n.tr(r.label)}: {i18n.tr(run_workload(r))}" for r in runs))


def _saved_named(r) -> str:
    """A saved run in the overlay list: its label and start, and its hardware when it came from elsewhere."""
    named = f"{i18n.tr(r.label)} · {ui.started(r)}"
    return f"{named} · {r.hardware.get('summary')}" if r.source != "local" and r.hardware.get("summary") else named


def action_slot(label: str, icon: str, key: str, tip: str | None = None) -> bool:
    """The section's button, or the sentence of why there is none yet: always one slot."""
    with st.container():
        if remote := lab.attached():  # tuning restarts a server, and the app restarts only its own
            st.info(ui.plain(_("Tuning restarts the server with each row, and the app restarts only a server it "
                               "started: disconnect from {url} on the Server page to tune a server here.",
                               url=remote.url)), icon=":material/link:")
            st.button(label, icon=icon, disabled=True, key=key,
                      help=_("Disconnect from the server at a URL first (Server page)."))
            return False
        if snap.config is None:
            st.info(_("Start the server once on the Server page: tuning reuses its model and other settings."),
                    icon=":material/info:")
            return False
        pressed = st.button(label, type="primary", icon=icon, key=key, disabled=not ui.can_act(lab), help=tip)
        if tip and snap.state in (READY, STARTING):  # said before anyone chatting on it is cut off
            st.caption(tip)
        return pressed


def progress(kind: str, cancel_key: str) -> None:
    """This section's job under this section's button: its progress and Cancel while it runs, its error after."""
    def panel() -> None:
        if job := lab.latest_job(kind):
            ui.job_panel(lab, job, ui.plain(_("{stage} ({done}/{total} configurations)", stage=i18n.tr(job.stage),
                                              done=job.done, total=job.total)), key=cancel_key)
    ui.live_job(panel, lambda: lab.latest_job(kind), every=2)


def warmth_note(runs) -> None:
    """Cold or warm, said under the chart that shows the runs (each bar is marked too)."""
    cold = [r for r in runs if r.extra.warmth.cold]
    if cold:
        st.caption(ui.plain(_("❄ Cold: {runs} measured a freshly started server's first batch, so the numbers "
                              "include one-off start-up work.", runs=", ".join(i18n.tr(r.label) for r in cold))))
    elif runs and all(r.extra.warmth.cold is False for r in runs):
        st.caption(_("Warm: each server answered one batch first (not counted), so the numbers are its settings', "
                     "not its start-up's."))
    if kept := [r for r in runs if r.extra.not_restarted]:
        st.caption(ui.plain(_("{runs}: the server already ran these settings, so it was measured as it was, not "
                              "restarted.", runs=", ".join(i18n.tr(r.label) for r in kept))))


# -- 1. max-model-len and memory (the lab's step 4) ---------------------------------------------------
# The columns keep their English names (the rows are read back by them, and the editor's state stays the
# viewer's when they switch language); the titles shown are translated in column_config.
mem_col = "CPU KV cache (GiB)" if cpu else "GPU memory utilization"
default = pd.DataFrame([
    {"max-model-len": c["max_model_len"], mem_col: 2 if cpu else c["gpu_memory_utilization"]} for c in scn.configs
])
left, right = st.columns([2, 3], gap="large")
with left:
    rows = st.data_editor(default, num_rows="dynamic", width="stretch", key="tuning_rows",
                          column_config={
                              # no hard bounds: the engine's check says what it refuses when Run is pressed
                              "max-model-len": st.column_config.NumberColumn(step=64),
                              mem_col: st.column_config.NumberColumn(
                                  _("CPU KV cache (GiB)") if cpu else _("GPU memory utilization"), step=0.05),
                          })
    # Every row's server refuses answers longer than its max-model-len: the slider stops at the shortest.
    shortest = int(rows["max-model-len"].dropna().min()) if rows["max-model-len"].notna().any() else None
    tokens_hi = min(512, shortest or 512)
    what = st.selectbox(_("What to send"), [LAB_PROMPTS, *WORKLOADS], key="tuning_what", format_func=_what_named,
                        help=_("The lab's 10 prompts at once, or a workload shipped in examples/workloads/ sent 10 in "
                               "flight (a trace on its own clock). Every configuration gets the same requests."))
    wl_plan, wl_error = None, None
    if what != LAB_PROMPTS:
        try:
            wl_plan = _plan(what)
        except LabError as e:
            wl_error = e
    # A key keeps the value when the viewer switches language (the label is part of a keyless widget's id).
    # Tokens and repeats share a row: one more row pushes the next section's chart below a projector's fold.
    tokens_col, repeats_col = st.columns([3, 2])
    max_tokens = tokens_col.slider(
        _("Max tokens per answer"), 16, max(tokens_hi, 20), min(scn.max_tokens, tokens_hi), 4, key="tuning_max_tokens",
        help=_("The lab uses 100. At most {tokens_hi}: the shortest max-model-len in the table, whose server refuses "
               "longer answers.", tokens_hi=tokens_hi) if shortest and shortest <= 512 else _("The lab uses 100."))
    tuning_repeats = repeats_col.number_input(
        _("Measure each configuration"), min_value=1, max_value=5, value=1, step=1, key="tuning_repeats",
        help=_("How many times to run the workload on each configuration after its restart. Once is quickest, but "
               "a single run's noise is unknown and no difference is called real; from 2 the chart shows each "
               "configuration's mean and range, and the caption says which differences are beyond noise."))
    with st.container():  # what the chosen workload sends: one slot
        if wl_error is not None:
            st.error(ui.plain(wl_error), icon=":material/error:")
        elif wl_plan is not None:
            s = wl_plan.summary
            st.caption(ui.plain(_("{what}: {n} requests, prompts of median {median} tokens (longest {longest}).",
                                  what=i18n.tr(workload_named(s)), n=s.get("sent") or len(wl_plan.prompts),
                                  median=f"{(s.get('input_tokens') or {}).get('median', 0):.0f}",
                                  longest=f"{(s.get('input_tokens') or {}).get('max', 0):.0f}")
                                if wl_plan.conversations is None else
                                _("{what}: {convs} conversations × {turns} turns, each turn with the whole history.",
                                  what=i18n.tr(workload_named(s)), convs=s.get("conversations"),
                                  turns=s.get("turns"))))
            if wl_plan.max_tokens_each:
                st.caption(_("Its answers keep the workload's own lengths, each held to at most the tokens above."))
    run = action_slot(_("Restart vLLM and compare"), ":material/play_arrow:", "tuning_run",
                      _("Stops the server on its port and restarts it with each row (a row the server already runs "
                        "is measured as it is): anyone chatting or load testing on it is cut off, and it stays up "
                        "with the last row's settings."))
    with st.container():  # the sentence of a refused table: one slot
        if run:
            try:
                configs = tuning_configs(lab.server_snapshot().config, lab.device,
                                         [(int(r["max-model-len"]), float(r[mem_col]))
                                          for _i, r in rows.dropna().iterrows()])
                if wl_error is None:
                    ui.act(lab.run_tuning, configs, tuning_spec(max_tokens, wl_plan), repeats=int(tuning_repeats))
            except ValueError as e:
                st.error(_("The table has a value that is not a number ({error}): fix the row and run again.",
                           error=e))
            except LabError as e:  # a setting vLLM would refuse
                st.error(ui.plain(e), icon=":material/error:")
    progress("tuning", "tuning_cancel")
    with st.expander(_("What this comparison does"), icon=":material/help:"):
        st.markdown(_("Each row is one server configuration. The app restarts vLLM with it (a row the running server "
                      "already has is measured as it is), waits until it is ready, sends one batch as a warm-up (not "
                      "counted), then the workload chosen above (by default the lab's step 4: 10 concurrent requests "
                      "of 100 tokens), the same for every row and as many times as set above, and puts "
                      "the results side by side with the KV-cache capacity vLLM reported. The server stays up with the "
                      "last row's settings."))


def _results() -> None:
    job = lab.latest_job("tuning")
    runs = list(job.result or []) if job else []
    saved = [r for r in lab.history.runs(limit=100)  # read once per change of the history
             if r.scenario == "tuning" and not r.problem and r.id not in {x.id for x in runs}]
    overlay = st.multiselect(_("Overlay saved tuning runs"), saved, format_func=_saved_named,
                             key="tuning_overlay",
                             placeholder=_("none")) if saved else []  # no empty, disabled box before the first run
    for r in overlay:
        try:
            runs.append(lab.history.run(r.id))
        except LabError as e:  # a damaged stored run: History shows why and deletes it
            st.warning(ui.plain(e), icon=":material/warning:")
    if runs:
        ui.chart(figures.tuning_compare(runs, lang=i18n.lang()), key="tuning")
        st.caption(ui.plain(_sent(runs)))  # what the bars were measured on
        warmth_note(runs)
        ui.failure_causes(runs, prefix=True)  # a configuration whose requests failed says why, once per cause
        ui.code_behind(run_code(runs[-1], i18n.lang()))  # the last configuration's workload
    else:
        st.info(_("Results appear here as each configuration finishes."), icon=":material/info:")


with right:
    ui.live_job(_results, lambda: lab.latest_job("tuning"), every=2)


def saved_origin(pair) -> None:
    """A comparison read back from the history, not made just now: headed with where and when it was measured
    (the shipped examples ran on an H200)."""
    name = pair.source.partition(":")[2]
    origin = (_("an example shipped with the app ({file})", file=name) if pair.source.startswith("example:") else
              _("imported from {file}", file=name) if pair.source.startswith("import:") else
              _("measured with this app"))
    st.info(ui.plain(_("From the history, not measured just now: {when}, on {hardware}; {origin}.",
                       when=i18n.when(pair.started_at), hardware=pair.hardware or _("hardware not recorded"),
                       origin=origin)), icon=":material/history:")


def comparison(kind: str) -> list:
    """A section's comparison: its latest job's runs, else, while no such job runs, the last one saved, headed with
    where and when it was measured."""
    job = lab.latest_job(kind)
    runs = list(job.result or []) if job else []
    if not runs and not (job and job.active):
        try:
            if pair := lab.history.latest_pair(kind):
                saved_origin(pair)
                runs = pair.runs
        except LabError as e:  # a damaged stored run: History shows why and deletes it
            st.warning(ui.plain(e), icon=":material/warning:")
    return runs


def compare(scenario, spec, label: str, icon: str, key: str) -> None:
    """A scenario's own comparison (its section's button, its job's progress): vLLM restarted with each of its
    configurations, each otherwise as the last started server, and sent `spec`."""
    pressed = action_slot(label, icon, f"{key}_run")
    with st.container():
        if pressed:
            try:
                ui.act(lab.run_tuning, scenarios.configs_after(scenario.name, lab.server_snapshot().config),
                       spec, list(scenario.config_labels))
            except LabError as e:
                st.error(ui.plain(e), icon=":material/error:")
    progress(scenario.name, f"{key}_cancel")


# -- 2. the KV cache as the scarce resource ------------------------------------------------
st.divider()
st.subheader(_("The KV cache as the scarce resource"))
squeeze = scenarios.get("kv-squeeze")
st.caption(_("The same {n} concurrent answers of {tokens} tokens on a KV cache too small for them, then on one with "
             "room to spare: requests wait and are preempted.", n=squeeze.concurrency,
             tokens=st.session_state.get("kv_max_tokens", squeeze.max_tokens)))
left, right = st.columns([2, 3], gap="large")
with left:
    # Shorter answers make the squeeze quicker (each half takes minutes on a CPU). Below 100 the answers (~37 prompt
    # tokens each) could fit in one of the CPU build's 128-token blocks, and nothing would be preempted.
    kv_tokens = st.slider(_("Max tokens per answer"), 100, squeeze.max_tokens, squeeze.max_tokens, 20,
                          key="kv_max_tokens",
                          help=_("Shorter answers make the comparison quicker (minutes on a CPU); from 100 tokens up "
                                 "they still outgrow the squeezed cache."))
    compare(squeeze, squeeze.load_spec(max_tokens=kv_tokens), _("Squeeze the KV cache and compare"),
            ":material/compress:", "kv")
    with st.expander(_("What to watch"), icon=":material/help:"):
        st.markdown(_("Watch the Monitor meanwhile: requests wait, the cache stays full and requests are preempted "
                      "(their blocks taken back; they start again). Each half is measured cold, with no warm-up: a "
                      "warm-up would take as long as the measurement."))


def _kv_results() -> None:
    runs = comparison("kv-squeeze")
    if not runs:
        st.info(_("The KV cache of each configuration appears here after a comparison."), icon=":material/info:")
        return
    ui.chart(figures.kv_compare(runs, lang=i18n.lang()), key="kv")
    warmth_note(runs)
    # Whole numbers with thousands separators: a projector shows "16,298", not "16297.5772".
    whole, tenths = st.column_config.NumberColumn(format="localized"), st.column_config.NumberColumn(format="%.1f")
    columns = {"config": (_("Flags"), st.column_config.TextColumn(width="large")),
               "capacity_tokens": (_("KV capacity (tokens)"), whole), "blocks": (_("Blocks"), whole),
               "block_size": (_("Block size"), whole), "need_tokens": (_("Needed at once (tokens)"), whole),
               "peak_kv_percent": (_("Peak KV use (%)"), tenths), "preemptions": (_("Preemptions"), whole),
               "peak_waiting": (_("Peak waiting"), whole), "median_ttft_ms": (_("Median TTFT (ms)"), whole),
               "output_throughput": (_("Throughput (tok/s)"), tenths)}
    table = pd.DataFrame([kvcache.row(r) for r in runs]).round({"median_ttft_ms": 0, "peak_waiting": 0})
    st.dataframe(table.rename(columns={k: name for k, (name, _c) in columns.items()}), hide_index=True,
                 width="stretch", column_config={name: c for name, c in columns.values()})


with right:
    ui.live_job(_kv_results, lambda: lab.latest_job("kv-squeeze"), every=2)


# -- 3. prefix caching: its own comparison, on vs off, with its own chart ----------
st.divider()
st.subheader(_("Prefix caching"))
pscn = scenarios.get("prefix-cache")
st.caption(_("The same {n} short questions after one long shared system prompt, one at a time, with prefix caching "
             "on, then off.", n=len(pscn.prompts)))
left, right = st.columns([2, 3], gap="large")
with left:
    compare(pscn, pscn.load_spec(), _("Restart vLLM and compare prefix caching"), ":material/cached:", "prefix")
    with st.expander(_("What to watch"), icon=":material/help:"):
        st.markdown(_("The shared prompt is a workshop assistant's instructions, about 1,300 tokens. With the cache "
                      "on, only the first request computes it; the others reuse it. There is no warm-up on purpose: "
                      "it would fill the cache before the first request is measured."))


def _prefix_results() -> None:
    runs = comparison("prefix-cache")  # one run with the cache on, one with it off
    if runs:
        ui.chart(figures.prefix_cache_compare(runs, lang=i18n.lang()), key="prefix")
        warmth_note(runs)
        ui.failure_causes(runs, prefix=True)
    else:
        st.info(_("The time to first token of each request, with the cache on and off, appears here."),
                icon=":material/info:")


with right:
    ui.live_job(_prefix_results, lambda: lab.latest_job("prefix-cache"), every=2)
