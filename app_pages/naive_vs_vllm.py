"""Naive vs vLLM: the lab's steps 1–2 — the same prompts through transformers' generate(), through one
static batch, and through vLLM, with per-request latency side by side."""
import streamlit as st

import i18n
import ui
from engine import figures
from i18n import _

lab = ui.get_lab()
snap = lab.server_snapshot()
# vLLM refuses answers longer than its max-model-len: the shared token slider stops there while it runs.
server_len = lab.serving_max_len()
TOKENS_CAP = 512

st.title(_("Naive vs vLLM"))
st.caption(_("Step 1 runs the lab's 5 prompts one at a time through plain transformers `model.generate()`. "
             "Step 2 sends the same prompts, with the same token budget, to vLLM. Static batching (one padded "
             "`generate()` over all 5) is the third contender: it is fast only when all answers have the same "
             "length."))

c1, c2, c3 = st.columns(3, gap="large")
with c1:
    choices = lab.models()
    labels = [m.label for m in choices]
    default = 0
    if remote := lab.attached():  # the model the server at a URL serves, when this machine has it too
        default = next((i for i, m in enumerate(choices) if remote.model in (m.served_name, m.path)), 0)
    elif snap.config:
        default = next((i for i, m in enumerate(choices) if m.path == snap.config.model), 0)
    pick = st.selectbox(_("Model for the naive baseline"), labels, index=default, format_func=i18n.shown(labels, i18n.tr),
                        help=_("Use the same model vLLM serves, so the comparison is fair."))
    spec_model = choices[labels.index(pick)] if choices else None
with c2:
    tokens_hi = min(TOKENS_CAP, server_len or TOKENS_CAP)
    # A key keeps the value when the viewer switches language (the label is part of a keyless widget's id).
    max_tokens = st.slider(_("Max new tokens"), 16, max(tokens_hi, 24), min(200, tokens_hi), 8, key="naive_max_tokens",
                           help=_("The lab uses 200. Both contenders get the same budget; at most {tokens_hi}, the "
                                  "running vLLM server's max-model-len, which refuses longer answers.",
                                  tokens_hi=tokens_hi)
                           if server_len and server_len <= TOKENS_CAP
                           else _("The lab uses 200. Both contenders get the same budget."))
with c3:
    temperature = st.slider(_("Temperature"), 0.0, 1.5, 0.7, 0.1, key="naive_temperature",
                            help=_("The lab samples at 0.7."))
if spec_model and spec_model.placeholder_text:
    st.info(_("{note}: transformers builds it with random weights in memory (no download).",
              note=lab.SHAPE_ONLY_NOTE), icon=":material/info:")

gpu_busy = lab.device == "cuda" and snap.state in (lab.READY, lab.STARTING)
if gpu_busy:
    st.warning(_("vLLM holds the GPU now. As in the lab, stop the server first (Server page), run the naive "
                 "baseline, then start vLLM again — the app says when the naive worker's memory is returned."),
               icon=":material/memory:")

may = ui.can_act(lab)
b1, b2, b3, b4 = st.columns(4)
if b1.button(_("1 · Naive transformers (sequential)"), type="primary", width="stretch",
             disabled=not may or gpu_busy or spec_model is None):
    ui.act(lab, lab.run_naive, lab.naive_spec("naive-5", spec_model, max_new_tokens=max_tokens,
                                              temperature=temperature))
if b2.button(_("Static batch (one padded generate)"), width="stretch",
             disabled=not may or gpu_busy or spec_model is None):
    ui.act(lab, lab.run_naive, lab.naive_spec("static-batch-5", spec_model, max_new_tokens=max_tokens,
                                              temperature=temperature))
if b3.button(_("2 · vLLM (same prompts, sequential)"), type="primary", width="stretch",
             disabled=not may or not lab.ready()):
    ui.act(lab, lab.run_load, lab.load_spec("vllm-5-sequential", max_tokens=max_tokens, temperature=temperature))
if b4.button(_("vLLM, same prompts at once (continuous batching)"), width="stretch",
             disabled=not may or not lab.ready()):
    ui.act(lab, lab.run_load, lab.load_spec("vllm-5-batch", max_tokens=max_tokens, temperature=temperature))
if not lab.ready():
    st.caption(_("The vLLM buttons need a ready server: start it on the Server page."))
elif remote := lab.attached():  # the vLLM buttons go to the server at a URL; the naive ones run here
    st.caption(ui.plain(_("The vLLM buttons measure the server at {url} ({model}); the naive baseline runs on this "
                          "machine, so the comparison is fair only when both have the same hardware.",
                          url=remote.url, model=remote.model)))


@st.fragment(run_every=1)
def results() -> None:
    for kind in ("naive", "load"):
        if job := lab.latest_job(kind):  # an error stays for two minutes after the job ended
            ui.job_panel(lab, job, f"{i18n.tr(job.label)}: {i18n.tr(job.stage)} ({job.done}/{job.total or '?'})", key=f"cancel-{kind}",
                         error_for_s=120)
    # The stored runs are read once per change of the history, not each second.
    naive, static = lab.latest_run("naive"), lab.latest_run("static-batch")
    vllm, batch = lab.latest_run("vllm", "vllm-5-sequential"), lab.latest_run("vllm", "vllm-5-batch")
    if not (naive or vllm or static):
        st.info(_("Run step 1 and step 2 to see them side by side."), icon=":material/info:")
        slots(None, batch)
        return
    extra = [static] if static else []
    ui.chart(figures.latency_bars(naive, vllm, extra, lang=i18n.lang()), key="latency")
    cols = st.columns(4)
    avg = lambda r: (r.summary.mean_latency_s if r else None)  # noqa: E731
    cols[0].metric(_("Naive: mean latency"), ui.fmt_s(avg(naive)))
    cols[1].metric(_("Static batch: mean latency"), ui.fmt_s(avg(static)))
    cols[2].metric(_("vLLM: mean latency"), ui.fmt_s(avg(vllm)))
    if avg(naive) and avg(vllm):
        cols[3].metric(_("Speed-up (naive ÷ vLLM)"), f"{avg(naive) / avg(vllm):.1f}×")
    ui.failure_causes([r for r in (naive, static, vllm) if r], prefix=True)  # a failed request's bar is empty
    # The physical limit: each run's decode speed against what its hardware's memory bandwidth allows.
    ceilings = [(r, c) for r in (naive, static, vllm) if r and (c := lab.decode_ceiling(r))]
    if ceilings:
        for r, c in ceilings:
            st.markdown(ui.plain(_("{label}: {sentence}", label=r.label, sentence=c.sentence)))
        ui.chart(figures.ceiling_bars([r for r, _ in ceilings], lang=i18n.lang()), key="ceiling")
    slots(static, batch)
    if vllm:
        ui.code_behind(lab.code_for_run(vllm, i18n.lang()), _("The Python behind the vLLM run"))
    if naive and (mem := naive.extra.memory):
        with st.expander(_("Naive worker: memory before, during and after (it runs in its own process)")):
            st.json(mem)
    terms = [r for r in (naive, static, vllm) if r]
    compared = " · ".join(  # built first: pybabel does not extract a _() nested in another's arguments
        f"{i18n.tr(r.label)}: " + ", ".join(str(x) for x in (
            r.model.split('/')[-1], r.config.get('dtype'),
            _("{n} tokens", n=r.config.get('max_new_tokens') or r.load.max_tokens)) if x) for r in terms)
    st.caption(_("Compared: {runs}", runs=compared))
    warm = [f"{i18n.tr(r.label)}: {r.extra.warmup_s:.1f} s" for r in (naive, static) if r and r.extra.warmup_s]
    if warm:
        st.caption(_("Not counted above: each naive run first generated over every sequence length it would meet "
                     "(first calls at a new length pay one-off kernel and attention-plan setup; vLLM does its "
                     "warm-up at startup) — {warmups}.", warmups=" · ".join(warm)))


def slots(static, batch) -> None:
    """Static against continuous batching, slot by slot: the static batch beside vLLM on the same prompts."""
    if not (static or batch):
        return
    st.subheader(_("Static vs continuous batching, slot by slot"))
    ui.chart(figures.slot_chart([static, batch], lang=i18n.lang()), key="slots")
    for run in (static, batch):
        if run is None:
            continue
        grid = lab.slots(run)  # a sentence when the run cannot be drawn
        said = i18n.tr(grid) if isinstance(grid, str) else f"{i18n.tr(grid.said)} {i18n.tr(grid.how)}"
        st.caption(ui.plain(_("{label}: {sentence}", label=run.label, sentence=said)))
    if not (static and batch):
        st.caption(_("Run the static batch and vLLM on the same prompts at once to see both side by side."))


results()
