"""Server: pick a model, set the flags (or press a preset from the lab), see the exact command, start
and stop vLLM, and watch it come up."""
import time

import streamlit as st

import i18n
import ui
from engine.lab import LabError
from engine.metrics import ANSWER_DEADLINE_S
from engine.serving import models
from engine.serving.cluster import ray_commands
from engine.serving.config import PRESETS, checked, fit_check, gpu_choices
from engine.serving.models import ModelNotPrepared
from engine.serving.states import FAILED, READY, STARTING, STOPPING, startup_fraction
from i18n import N_, _, number

lab = ui.get_lab()
cpu = lab.device == "cpu"

st.title(_("vLLM server"))
st.caption(_("Choose a model and settings, press **Start**, and watch vLLM load the weights, size its KV cache "
             "and begin serving. Every setting shows up in the command line below, ready to paste in a terminal."))
# The first screen (a projector's 1920×1080): the server's state, headline numbers and buttons, filled in below
# once the settings they start with are known.
first_screen = st.container()

# -- a server this app did not start ---------------------------------------------------------
@st.fragment(run_every=0.5)
def connecting(job_id: str) -> None:
    """Discovery runs as a job (each answer it waits for has a deadline): a spinner and a way to give up
    here, while the rest of the page stays usable; the whole page redraws once it has ended."""
    job = lab.job(job_id)
    if job is None:
        st.session_state.pop("connect_job", None)
        return
    if job.active:
        c1, c2 = st.columns([5, 1], vertical_alignment="center")
        c1.status(ui.plain(_("{what}… (each answer it owes has {s} s)", what=job.label, s=number(ANSWER_DEADLINE_S))),
                  state="running")
        if c2.button(_("Give up"), icon=":material/close:", key=f"give_up_{job.id}"):
            ui.act(lab.cancel_job, job.id)
            st.session_state.pop("connect_job", None)
            st.session_state["action_error"] = _("Gave up connecting: nothing was changed.")
            st.rerun(scope="app")
        return
    st.session_state.pop("connect_job", None)
    if job.error:
        st.session_state["action_error"] = i18n.said(job.error)
    st.rerun(scope="app")


remote = lab.attached()  # the server at a URL every page measures now, or None: our own
may = ui.can_act(lab)
with st.expander(_("Connect to an existing server"), expanded=remote is not None, icon=":material/link:"):
    if remote is None:
        st.caption(_("Measure a vLLM (or other OpenAI-compatible) server that is already running, on this machine "
                     "or elsewhere: the Load test, Chat and Naive vs vLLM pages then send their requests there, for "
                     "every viewer, until you disconnect. The key stays in this app's memory only: it is never "
                     "saved, exported or shown."))
        with st.form("attach", clear_on_submit=True, border=False):
            a1, a2, a3 = st.columns([3, 2, 2])
            url = a1.text_input(_("Server URL"), placeholder="http://127.0.0.1:8000",
                                help=_("The server's address: http://host:8000, its /v1, or a router's path prefix "
                                       "such as https://gateway/team-a/v1."))
            key = a2.text_input(_("API key (if it needs one)"), type="password",
                                help=_("Sent as 'Authorization: Bearer' with every request; kept in memory only."))
            wanted = a3.text_input(_("Model (if it serves several)"), placeholder=_("the first it lists"))
            if st.form_submit_button(_("Connect"), icon=":material/link:", disabled=not may):
                if (job := ui.act(lab.connect, url, key or None, wanted or None)) is not None:
                    st.session_state["connect_job"] = job.id
        if job_id := st.session_state.get("connect_job"):
            connecting(job_id)
    else:
        if not remote.answering:  # the one sentence: since when, what the checks saw, what to do
            st.error(ui.plain(remote.said), icon=":material/link_off:")
        else:
            st.success(ui.plain(_("Connected to {url}: every page measures this server.", url=remote.url)),
                       icon=":material/link:")
            if remote.said:  # it answers again: restarted or not, the same model or another
                st.info(ui.plain(remote.said), icon=":material/restart_alt:")
        r1, r2, r3, r4 = st.columns([3, 2, 2, 2])  # a model id is long: its column is wider
        r1.metric(_("Model"), models.shown_name(remote.model), help=ui.model_detail(remote.model))
        r2.metric(_("Max model length"), number(remote.max_model_len) if remote.max_model_len else "–",
                  help=_("As the server's model card says (vLLM's max_model_len); the app stops its sliders there."))
        r3.metric(_("vLLM version"), remote.version or "–")
        r4.metric(_("API key"), remote.key or _("none"))
        if not remote.max_model_len:
            st.caption(_("The server does not say its max-model-len: a too-long request is refused by the server "
                         "itself, and its failure says so."))
        if len(remote.models) > 1:
            st.caption(ui.plain(_("It serves {models}: disconnect and name another in the Model field to measure it.",
                                  models=", ".join(remote.models))))
        if not remote.vllm:
            st.warning(_("This server does not say it is vLLM: load tests and chat work as on any OpenAI-compatible "
                         "server, and vLLM's own numbers (its counters, its max-model-len) may be missing."),
                       icon=":material/warning:")
        if remote.metrics:
            st.caption(_("vLLM's /metrics are readable: the Monitor charts its counters, and each run is checked "
                         "against the server's own count of the tokens it generated."))
            if remote.kv_capacity_tokens:
                st.caption(_("Its KV cache holds {tokens} tokens (its /metrics say so): the Load test's sweep offers "
                             "as many requests in flight as fit in it.", tokens=number(remote.kv_capacity_tokens)))
        else:
            st.warning(ui.plain(remote.metrics_said), icon=":material/monitoring:")
        if st.button(_("Disconnect"), icon=":material/link_off:", disabled=not may):
            ui.act(lab.detach, rerun=True)

# -- model -----------------------------------------------------------------------------------
left, right = st.columns([3, 2], gap="large")
with left:
    st.subheader(_("Model"))
    kinds = {
        "embedded": N_("Embedded default: SmolLM2-135M-Instruct (works offline, tiny)"),
        "shape-only": N_("Llama 3 8B, shape only (real size and speed, random weights: meaningless text)"),
        "local": N_("A model folder on this machine"),
        "hub": N_("A Hugging Face hub id (needs a network)"),
    }
    kind = st.radio(_("Model"), list(kinds), format_func=i18n.shown(kinds, lambda k: _(kinds[k])), key="model_kind",
                    label_visibility="collapsed")
    where = ""  # the folder or hub id, for the two kinds that take one
    if kind == "local":
        where = st.text_input(_("Folder"), value="/models/meta-llama--Meta-Llama-3-8B-Instruct",
                              help=_("A Hugging Face folder with config.json, tokenizer and weights."))
    elif kind == "hub":
        where = st.text_input(_("Hub id"), value="meta-llama/Meta-Llama-3-8B-Instruct")
    spec, model_error = None, None
    try:
        spec = models.pick(kind, lab.settings.models, where)
        if kind == "shape-only":
            st.info(_("Shape-only: the real Llama-3-8B architecture and tokenizer with random weights, served with "
                      "`--load-format dummy`. Same compute and memory as the real model; its answers are noise."),
                    icon=":material/info:")
    except ModelNotPrepared as e:
        model_error = e
        st.warning(ui.plain(model_error), icon=":material/download:")
        preparing = lab.latest_job("prepare")
        if preparing and preparing.active:
            st.caption(ui.plain(_("Preparing… {stage}", stage=preparing.stage)))
        elif st.button(_("Prepare it"), icon=":material/download:", disabled=not ui.can_act(lab)):
            ui.act(lab.prepare_model, kind)
            st.rerun()
        elif preparing and preparing.error:
            st.error(ui.plain(preparing.error), icon=":material/error:")
    except LabError as e:
        model_error = e
        st.error(ui.plain(model_error), icon=":material/error:")

with right:
    st.subheader(_("Presets from the lab"))
    for p in PRESETS:
        if st.button(i18n.tr(p.name), help=i18n.tr(p.description), key=f"preset-{p.name}", width="stretch"):
            for k, v in p.changes.items():
                st.session_state[f"cfg_{k}"] = v
            st.toast(_("Preset '{name}': {description}", name=p.name, description=p.description))
    if cpu:
        st.caption(_("No NVIDIA GPU here: vLLM's CPU build runs, and the **CPU KV cache size** plays the part of "
                     "the GPU memory fraction."))

# -- settings --------------------------------------------------------------------------------
st.subheader(_("Settings"))
model_max = spec.max_len if spec and spec.max_len else 8192
lens = sorted({n for n in (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072) if n <= model_max}
              | {model_max})
st.session_state.setdefault("cfg_max_model_len", min(2048, model_max))
if st.session_state["cfg_max_model_len"] not in lens:
    st.session_state["cfg_max_model_len"] = min(lens, key=lambda n: abs(n - st.session_state["cfg_max_model_len"]))

c1, c2, c3 = st.columns(3, gap="large")
with c1:
    max_len = st.select_slider(_("Max model length (tokens)"), options=lens, key="cfg_max_model_len",
                               help=_("The longest prompt + answer one request may have. Shorter means less KV "
                                      "cache per request, so more requests fit at once."))
    if cpu:
        kv_gib = st.slider(_("CPU KV cache size (GiB)"), 1, 16, 2, 1, key="cfg_cpu_kvcache_gib",
                           help=_("Memory set aside for the KV cache (VLLM_CPU_KVCACHE_SPACE). More means more "
                                  "requests in flight."))
        mem_frac = 0.85
    else:
        mem_frac = st.slider(_("GPU memory utilization"), 0.10, 1.00, 0.85, 0.01, key="cfg_gpu_memory_utilization",
                             help=_("The fraction of GPU memory vLLM may take for weights + KV cache. Higher "
                                    "means a bigger KV cache, but nothing else can use the GPU."))
        kv_gib = 2
with c2:
    dtypes = ["auto", "float16", "bfloat16", "float32"]
    dtype = st.selectbox(_("Data type"), dtypes, index=1 if not cpu else 0, key="cfg_dtype",
                         help=_("Number format of weights and activations. float16 halves memory vs float32; "
                                "'auto' uses the model's own."))
    # no hard bounds of Streamlit's: the engine's check refuses in its sentence (under the settings)
    max_seqs = st.number_input(_("Max requests in a batch (max-num-seqs)"), value=0, step=1,
                               key="cfg_max_num_seqs",
                               help=_("Upper limit on requests decoded together. 0 keeps vLLM's default."))
    port = st.number_input(_("Port"), 1024, 65535, lab.server_port, disabled=True,
                           help=_("The app manages one server on this port (set SERVING_LAB_VLLM_PORT to change "
                                  "it)."))
with c3:
    eager = st.toggle(_("Enforce eager (no graphs)"), key="cfg_enforce_eager",
                      help=_("Skip CUDA-graph capture and compilation: starts faster, decodes slower."))
    prefixes = [N_("vLLM default"), N_("on"), N_("off")]
    prefix = st.selectbox(_("Prefix caching"), prefixes, key="cfg_prefix", format_func=i18n.shown(prefixes),
                          help=_("Reuse the KV cache of a shared prompt prefix across requests (vLLM's default: "
                                 "on). Off: every request computes its whole prompt, so a run that repeats earlier "
                                 "prompts measures their prefill instead of the cache."))

gpu_names = gpu_choices()
with st.expander(_("Several GPUs: tensor, pipeline and data parallel"), expanded=len(gpu_names) > 1):
    if cpu:
        st.caption(_("No NVIDIA GPU here: vLLM's CPU build runs on one machine's cores, so these stay at 1."))
    picked = st.multiselect(_("GPUs to use (CUDA_VISIBLE_DEVICES)"), list(gpu_names), key="cfg_gpus",
                            format_func=i18n.shown(gpu_names, lambda g: gpu_names[g]), disabled=cpu,
                            placeholder=_("all of them"),
                            help=_("Leave empty to let vLLM see every GPU; pick some to keep others free."))
    most = max(1, len(picked) or len(gpu_names))
    g1, g2, g3 = st.columns(3)
    tp = g1.number_input(_("Tensor parallel size"), value=1, step=1, key="cfg_tp", disabled=cpu or most == 1,
                         help=_("Split every layer of the model over this many GPUs (fast links inside one "
                                "machine): more memory for the KV cache, each step a little slower to sync."))
    pp = g2.number_input(_("Pipeline parallel size"), value=1, step=1, key="cfg_pp", disabled=cpu or most == 1,
                         help=_("Split the model by groups of layers over this many GPUs (vLLM's way across "
                                "machines)."))
    dp = g3.number_input(_("Data parallel size"), value=1, step=1, key="cfg_dp", disabled=cpu or most == 1,
                         help=_("Whole copies of the model, each serving its share of the requests: more "
                                "throughput, the same latency per request."))
    if not cpu:
        st.caption(_("vLLM takes tensor × pipeline × data = {need} of the {have} GPUs.",
                     need=int(tp) * int(pp) * int(dp), have=most))
    cluster_box = st.popover(_("More than one machine (Ray cluster)"))
    with cluster_box:
        st.markdown(_("vLLM serves one model from several machines through a Ray cluster: tensor parallel "
                      "inside each machine, pipeline parallel across them. Fill in the head machine's address "
                      "and run what follows on each machine (the model at the same path on each, or a hub id); "
                      "then connect to the head's server by URL."))
        head = st.text_input(_("Head machine's address"), key="cluster_head", placeholder="10.0.0.1")
        n1, n2 = st.columns(2)
        nodes = n1.number_input(_("Machines"), value=2, step=1, key="cluster_nodes")
        per_node = n2.number_input(_("GPUs per machine"), value=len(gpu_names) or 8, step=1, key="cluster_gpus")

with st.expander(_("Advanced: API key, served name, extra flags")):
    api_key = st.text_input(_("API key (clients must send it)"), type="password", key="cfg_api_key")
    served = st.text_input(_("Served model name"), value=lab.default_config(spec).served_model_name if spec else "",
                           key=f"cfg_served_{kind}", help=_("The name clients put in requests."))
    extra_text = st.text_input(_("Extra flags"), key="cfg_extra", placeholder="--swap-space 4 --seed 0",
                               help=_("Any other vLLM flag, as you would type it after the command."))
    if lab.device == "cuda":  # off by default: measured on an H200 (bench/results/mfu-h200.md)
        st.caption(_("`--enable-mfu-metrics`: vLLM estimates each step's FLOPs and bytes, and every run says its MFU "
                     "and the memory bandwidth it used. It costs throughput under heavy load (on an H200, 29–42 % "
                     "at 256 in flight), so it is off unless you add it here."))

cfg, cfg_error = None, model_error
if spec:
    try:
        cfg = checked(
            lab.default_config(spec), extra_text, spec.max_len,
            max_model_len=int(max_len), gpu_memory_utilization=float(mem_frac), cpu_kvcache_gib=int(kv_gib),
            dtype=dtype, max_num_seqs=int(max_seqs) or None, enforce_eager=eager,
            enable_prefix_caching={"on": True, "off": False}.get(prefix), tensor_parallel_size=int(tp),
            pipeline_parallel_size=int(pp), data_parallel_size=int(dp), gpus=tuple(picked),
            api_key=api_key or None, served_model_name=served or None,
        )
    except LabError as e:
        cfg_error = e
        st.error(ui.plain(cfg_error), icon=":material/error:")

if cfg and spec:
    fit = fit_check(cfg, spec, lab.device)
    show = {"ok": st.success, "warn": st.warning, "error": st.error}[fit.level]
    show(ui.plain(_("Fit check: {result}", result=fit.message)), icon=":material/memory:")
    if lab.server_snapshot().state in (STARTING, READY):
        st.markdown(_("**Command line for the next start** (the running server's own is under Status below)"))
    else:
        st.markdown(_("**Command line** (copy with the icon on the right)"))
    st.code(cfg.shell_command(), language="bash")
    if head:
        with cluster_box:  # drawn here, where the settings are known
            try:
                for node in ray_commands(cfg, head, int(nodes), int(per_node)):
                    st.markdown(_("**On {where}:**", where=i18n.tr(node.where)))
                    st.code(node.command, language="bash")
            except LabError as e:
                st.error(ui.plain(e), icon=":material/error:")


# -- lifecycle -------------------------------------------------------------------------------
state = lab.server_snapshot().state  # the buttons are drawn for this state; the sidebar redraws on a change
# Connected to a server at a URL: the app neither starts nor stops it, nor its own meanwhile.
elsewhere = (_("Connected to {url}: the app does not start or stop a server it did not start. Disconnect above to "
               "run a server here.", url=remote.url) if remote else None)
with first_screen:
    status_slot = st.container()  # the state and headline numbers, above the buttons
    b1, b2, b3, _spare = st.columns([1, 1, 1, 3])  # not `_`: that is the translator
    if b1.button(_("Start"), type="primary", icon=":material/play_arrow:", width="stretch",
                 disabled=not may or cfg is None or state in (STARTING, READY) or remote is not None, help=elsewhere):
        ui.act(lab.start_server, cfg, spec, rerun=True)
    if b2.button(_("Stop"), icon=":material/stop:", width="stretch", disabled=not may or state not in (STARTING, READY),
                 help=elsewhere):
        with st.spinner(_("Stopping vLLM and every process it started…")):
            ui.act(lab.stop_server, rerun=True)
    if b3.button(_("Restart"), icon=":material/restart_alt:", width="stretch",
                 disabled=not may or cfg is None or state not in (READY, FAILED) or remote is not None, help=elsewhere):
        with st.spinner(_("Stopping the old server…")):
            ui.act(lab.restart_server, cfg, spec, rerun=True)
    if not may:
        st.caption(ui.plain(lab.access.why_not()))
    if elsewhere:
        st.info(ui.plain(elsewhere), icon=":material/link:")
    if leftover := lab.leftovers():
        st.warning(ui.plain(leftover), icon=":material/memory:")
        if st.button(_("Clear leftovers"), icon=":material/cleaning_services:", disabled=not may):
            if cleared := ui.act(lab.clear_leftovers):
                st.toast(ui.plain(cleared))
            st.rerun()
    if state not in (STARTING, READY) and not remote and (foreign := lab.foreign_holders()):
        st.info(ui.plain(foreign), icon=":material/info:")
    if state not in (STARTING, READY) and not remote and (other := lab.servers_on_other_ports()):
        st.info(ui.plain(other), icon=":material/dns:")


def live_status() -> None:
    """The first screen's line: state, stage, time, and the KV cache's capacity and use."""
    s = lab.server_snapshot()
    cols = st.columns([1, 1.3, 1, 1.4, 1.4, 1.2])
    state_label = ui.STATE_BADGE.get(s.state, (None, s.state))[1]  # msgids of ui.py
    cols[0].metric(_("State"), _(state_label) if state_label else "–")
    cols[1].metric(_("Stage"), i18n.tr(s.stage) or "–")
    if s.adopted:  # its start was before this app: show how long it has been up, not a startup time
        up = time.time() - s.started_at if s.started_at else None
        cols[2].metric(_("Up for"),
                       ui.fmt_s(up) if up is None or up < 120 else _("{minutes} min", minutes=number(up / 60)))
    else:
        cols[2].metric(_("Start → ready") if s.ready_at else _("Elapsed"), ui.fmt_s(s.elapsed))
    # the live /metrics: the blocks vLLM allocated (cache_config_info), how full they are, the preemptions
    live = (lab.monitor.latest_sample().metrics if s.state == READY and lab.monitor.latest_sample() else {})
    blocks, size = live.get("kv_blocks"), live.get("kv_block_size")
    cols[3].metric(_("KV cache capacity"),
                   _("{tokens} tokens", tokens=number(s.kv_cache_tokens)) if s.kv_cache_tokens else "–",
                   delta=_("{blocks} blocks of {size}", blocks=number(blocks), size=number(size)) if blocks and size
                   else None, delta_color="off",
                   help=_("How many tokens of context vLLM can hold at once, as it reported at startup."))
    mml = s.config.max_model_len if s.config else None
    cols[4].metric(_("Max concurrency at {tokens} tokens/request", tokens=mml or "–"),
                   _("{n} requests", n=number(s.max_concurrency, 1)) if s.max_concurrency else "–",
                   help=_("How many full-length requests fit in the KV cache together (vLLM's own figure)."))
    cols[5].metric(_("KV cache in use"), f"{live['kv_usage']:.0%}" if "kv_usage" in live else "–",
                   delta=_("{n} preempted since start", n=number(live["preemptions_total"]))
                   if "preemptions_total" in live else None, delta_color="off",
                   help=_("The share of the cache's blocks requests hold now (vLLM's /metrics); a preempted request "
                          "lost its blocks to make room and started again."))
    if s.state == STARTING:
        st.progress(startup_fraction(s.stage), text=f"{i18n.tr(s.stage)}…")
    if s.state == FAILED and s.error:
        st.error(ui.plain(s.error), icon=":material/error:")
    if s.notice:
        st.warning(ui.plain(s.notice), icon=":material/cleaning_services:")
    if s.adopted and s.started_by:  # who started it: this app before a restart, another app, the CLI
        st.caption(ui.plain(s.started_by))


def _status_seen() -> tuple:
    """What live_status shows, read again each second while nothing moves: its page redraws once any of it changed."""
    s, sample = lab.server_snapshot(), lab.monitor.latest_sample()
    live = sample.metrics if s.state == READY and sample else {}
    up = time.time() - s.started_at if s.adopted and s.started_at else None
    return (s.state, s.stage, s.ready_at, s.kv_cache_tokens, s.max_concurrency, s.error, s.notice, s.started_by,
            s.config, *(live.get(k) for k in ("kv_blocks", "kv_block_size", "kv_usage", "preemptions_total")),
            None if up is None else round(up) if up < 120 else int(up // 60))


def _log_seen() -> tuple:
    s = lab.server_snapshot()
    return s.pid, s.command, s.state, tuple(s.log_tail[-40:])


def _starting() -> bool:
    return lab.server_snapshot().state in (STARTING, STOPPING)


def live_log() -> None:
    """Below the settings: the running server's own command, its PID and the tail of its log."""
    s = lab.server_snapshot()
    st.subheader(_("Status"))
    st.metric(_("PID"), s.pid or "–")
    if s.command and s.state != "stopped":
        with st.expander(_("Command of the running server")):
            st.code(s.command, language="bash")
    with st.expander(_("Server log (last lines)"), expanded=s.state == FAILED):
        st.code("\n".join(s.log_tail[-40:]) or _("(no output yet)"), language="log")


if remote is None:  # our own server's state, stage and log; an attached one shows its own above
    with status_slot:  # its KV cache in use moves while anything runs
        ui.live(live_status, _status_seen, lambda: _starting() or lab.busy())
    ui.live(live_log, _log_seen, _starting)
