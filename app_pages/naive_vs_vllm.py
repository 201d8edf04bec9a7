"""Naive vs vLLM: the lab's steps 1–2 — the same prompts through transformers' generate(), through one
static batch, and through vLLM, with per-request latency side by side."""
import streamlit as st

import i18n
import ui
from engine import figures
from engine.digits import significant
from engine.measure.judge import warmth, worker_memory
from engine.measure.judge.ceiling import run_ceiling
from engine.measure.judge.slots import occupancy
from engine.measure.snippets.load import run_code
from engine.measure.workloads import scenarios
from engine.serving import models
from engine.serving.models import SHAPE_ONLY_NOTE
from engine.serving.states import READY, STARTING
from i18n import _

lab = ui.get_lab()
snap = lab.server_snapshot()
# vLLM refuses answers longer than its max-model-len: the shared token slider stops there while it runs.
server_len = lab.serving_max_len()
TOKENS_CAP = 512

st.title(_("Naive vs vLLM"))
st.caption(_("The lab's 5 prompts with one token budget, four ways: through transformers `model.generate()` one at a "
             "time (the lab's step 1) and as one padded static batch, then through vLLM one at a time (step 2) and all "
             "at once."))

c1, c2, c3 = st.columns(3, gap="large")
with c1:
    choices = models.catalogue(lab.settings.models)
    labels = [m.label for m in choices]
    default = 0
    if remote := lab.attached():  # the model the server at a URL serves, when this machine has it too
        default = next((i for i, m in enumerate(choices) if remote.model in (m.served_name, m.path)), 0)
    elif snap.config:
        default = next((i for i, m in enumerate(choices) if m.path == snap.config.model), 0)
    pick = st.selectbox(_("Model for the naive baseline"), labels, index=default,
                        format_func=i18n.shown(labels, i18n.tr),
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
              note=SHAPE_ONLY_NOTE), icon=":material/info:")

gpu_busy = lab.device == "cuda" and snap.state in (READY, STARTING)
if gpu_busy:
    st.warning(_("vLLM holds the GPU now. As in the lab, stop the server first (Server page), run the naive "
                 "baseline, then start vLLM again — the app says when the naive worker's memory is returned."),
               icon=":material/memory:")

may = ui.can_act(lab)
# Numbered as the charts number their bars (figures.CONTENDERS): one order from the buttons to the numbers.
names = [figures.contender_name(k, i18n.lang()) for k in range(len(figures.CONTENDERS))]
b1, b2, b3, b4 = st.columns(4)
if b1.button(names[0], type="primary", width="stretch", disabled=not may or gpu_busy or spec_model is None):
    ui.act(lab.run_naive, scenarios.get("naive-5").naive_spec(spec_model.path, spec_model.placeholder_text,
                                                             max_new_tokens=max_tokens, temperature=temperature))
if b2.button(names[1], width="stretch", disabled=not may or gpu_busy or spec_model is None,
             help=_("One padded `generate()` over all 5 prompts: every answer waits for the longest.")):
    ui.act(lab.run_naive, scenarios.get("static-batch-5").naive_spec(spec_model.path, spec_model.placeholder_text,
                                                             max_new_tokens=max_tokens, temperature=temperature))
if b3.button(names[2], type="primary", width="stretch", disabled=not may or not lab.ready()):
    ui.act(lab.run_load, scenarios.get("vllm-5-sequential").load_spec(max_tokens=max_tokens,
                                                                         temperature=temperature))
if b4.button(names[3], width="stretch", disabled=not may or not lab.ready(),
             help=_("The same 5 prompts sent together: vLLM decodes them in one running batch (continuous "
                    "batching).")):
    ui.act(lab.run_load, scenarios.get("vllm-5-batch").load_spec(max_tokens=max_tokens, temperature=temperature))
if not lab.ready():
    st.caption(_("The vLLM buttons need a ready server: start it on the Server page."))
elif remote := lab.attached():  # the vLLM buttons go to the server at a URL; the naive ones run here
    st.caption(ui.plain(_("The vLLM buttons measure the server at {url} ({model}); the naive baseline runs on this "
                          "machine, so the comparison is fair only when both have the same hardware.",
                          url=remote.url, model=models.shown_name(remote.model))), help=ui.model_detail(remote.model))


# this page's jobs only: the Load test's runs are load tests too
KINDS = (("naive", ""), ("load", "vllm-5"))


def _jobs() -> list:
    return [lab.latest_job(kind, scenario) for kind, scenario in KINDS]


ERROR_FOR_S = 120  # a job's error stays this long after it ended


def results() -> None:
    for (kind, _scenario), job in zip(KINDS, _jobs()):
        if job:
            ui.job_panel(lab, job, ui.job_count(job),
                         key=f"cancel-{kind}", error_for_s=ERROR_FOR_S)
    # The stored runs are read once per change of the history, not each second.
    naive, static = lab.history.latest_run("naive"), lab.history.latest_run("static-batch")
    vllm, batch = lab.history.latest_run("vllm", "vllm-5-sequential"), lab.history.latest_run("vllm", "vllm-5-batch")
    contenders = [naive, static, vllm, batch]
    if not any(contenders):
        st.info(_("Press the four buttons in order to see them side by side."), icon=":material/info:")
        return
    lang = i18n.lang()
    # The headline numbers: each contender's whole job, in the buttons' order.
    for k, (col, run) in enumerate(zip(st.columns(4), contenders)):
        if run is None:
            col.metric(names[k], "–", help=_("Not run yet."))
            continue
        mean = run.summary.mean_latency_s
        col.metric(names[k], ui.fmt_s(run.duration),
                   help=_("Wall time: from the first prompt sent to the last answer."))
        col.caption(_("wall time for all {n} · {tput} tok/s · {mean} per request",
                      n=len(run.measured), tput=significant(run.summary.output_throughput),
                      mean=ui.fmt_s(mean)))
    left, right = st.columns(2, gap="large")
    with left:
        ui.chart(figures.contenders_chart(contenders, lang=lang), key="totals")
    with right:
        ui.chart(figures.latency_bars(naive, vllm, [r for r in (static, batch) if r], lang=lang), key="latency")
    ran = [r for r in contenders if r]
    for run in (vllm, batch):  # a cold vLLM run says so where its numbers are shown
        if run is not None and run.extra.warmth.cold and (said := warmth.said(run.extra)):
            st.warning(ui.plain(_("{label}: {sentence}", label=names[figures.contender(run)], sentence=said)),
                       icon=":material/ac_unit:")
    ui.failure_causes(ran, prefix=True)  # a failed request's bar is empty
    for run in ran:  # what else ran beside each, next to its numbers
        ui.disturbance(run, names[figures.contender(run)])
    # The physical limit, said once: the chart's caption gives each run's share of its ceiling.
    if ceilings := [r for r in ran if run_ceiling(r)]:
        with st.expander(_("Decode speed against the memory-bandwidth ceiling"), icon=":material/speed:"):
            ui.chart(figures.ceiling_bars(ceilings, lang=lang), key="ceiling")
    if served := [r for r in (vllm, batch) if r]:  # vLLM's side as its server timed it
        with st.expander(_("Where vLLM's time went inside the server, and its energy"), icon=":material/dns:"):
            ui.server_view(served, key="server-view", lang=lang, names=[names[figures.contender(r)] for r in served])
    slots(static, batch)
    if vllm:
        ui.code_behind(run_code(vllm, lang), _("The Python behind the vLLM run"))
    if naive and (mem := naive.extra.naive.memory):
        with st.expander(_("Naive worker: memory before, during and after (it runs in its own process)")):
            own = worker_memory.worker_memory(naive)
            st.markdown(ui.plain(worker_memory.said(own)))
            # no GPU: the system's RAM before and after moves with every other program, so only the worker's own
            st.json({k: v for k, v in mem.to_dict().items() if own["gpu"] or k not in ("before", "after_exit")})
    compared = " · ".join(  # built first: pybabel does not extract a _() nested in another's arguments
        f"{names[figures.contender(r)]}: " + ", ".join(str(x) for x in (
            models.shown_name(r.model), r.config.get('dtype'),
            _("{n} tokens", n=r.config.get('max_new_tokens') or r.load.max_tokens)) if x) for r in ran)
    st.caption(_("Compared: {runs}", runs=compared))
    warm = [f"{names[figures.contender(r)]}: {i18n.seconds(r.extra.naive.warmup_s)}" for r in (naive, static)
            if r and r.extra.naive.warmup_s]
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
        grid = occupancy(run)  # a sentence when the run cannot be drawn
        said = i18n.tr(grid) if isinstance(grid, str) else f"{i18n.tr(grid.said)} {i18n.tr(grid.how)}"
        st.caption(ui.plain(_("{label}: {sentence}", label=names[figures.contender(run)], sentence=said)))
    if not (static and batch):
        st.caption(_("Run the static batch (2) and vLLM all at once (4) to see both side by side."))


# the stored runs change when this page's jobs end
ui.live(results, lambda: [j and (j.seen, j.error_shown(ERROR_FOR_S)) for j in _jobs()],
        lambda: any(j and j.active for j in _jobs()))
