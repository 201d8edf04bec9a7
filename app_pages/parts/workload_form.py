"""What a load test sends: the lab's prompts, synthetic ones, a dataset, lengths, shared prefixes, chats or a trace,
chosen on the page and previewed (its settings, a sample, the length histogram) before anything runs."""
import json
from dataclasses import dataclass

import streamlit as st

import i18n
import ui
from engine.figures import workloads as wl_figures
from engine.lab import LabError
from engine.measure.judge import prefix
from engine.measure.workloads import traces
from engine.measure.workloads.named import named as workload_named
from engine.measure.workloads.defaults import EXAMPLES as WORKLOAD_EXAMPLES
from engine.measure.workloads.defaults import SEEDED
from engine.measure.workloads.defaults import UPLOAD_BYTES
from engine.measure.workloads.defaults import workload_plan as load_workload
from i18n import N_, _

UPLOAD_MB = max(1, UPLOAD_BYTES // (1024 * 1024))  # the uploader refuses what the engine would
# The lab's prompts stay the default. Labels are the values (English, as tests set them).
WHAT = {N_("The lab's 10 prompts"): "lab", N_("Synthetic prompts (seeded)"): "synthetic", N_("A dataset"): "dataset",
        N_("A Hugging Face dataset"): "hub",
        N_("Length distribution"): "lengths", N_("Shared prefixes"): "prefix-repetition",
        N_("Fixed text"): "fixed-text",
        N_("Multi-turn chats"): "multi-turn", N_("Trace replay"): "trace"}
DISTRIBUTIONS = {N_("Fixed"): "fixed", N_("Uniform range"): "uniform", N_("Normal"): "normal",
                 N_("Chat-like (shipped shape)"): "chat-like"}
UPLOAD = N_("Upload a file")


def _plan(desc_json: str, data: bytes | None, report=None):
    """The workload's plan, made once per description and file for every viewer (the preview and the run send the
    same); `report` hears how far a large file is read while it is made."""
    return load_workload(json.loads(desc_json), data, report, models_dir=ui.get_lab().settings.models)


def _reading(slot):
    """A progress bar in `slot` while a file is read and its prompts counted (a million rows take a minute), and
    the report that moves it."""
    bar = slot.empty()

    def report(done: int, total: int, what) -> None:
        bar.progress(done / total, text=_("{done} of {total} {what}", done=i18n.number(done), total=i18n.number(total),
                                          what=i18n.tr(what)))

    return bar, report


def _lengths(side: str, key: str, mean: int, top: int) -> dict:
    """One side's distribution (prompt or answer lengths) and its few parameters."""
    dist = DISTRIBUTIONS[st.selectbox(_("Prompt lengths") if side == "input" else _("Answer lengths"),
                                      list(DISTRIBUTIONS), key=f"{key}_kind", format_func=i18n.shown(DISTRIBUTIONS))]
    a, b, c = st.columns(3)
    if dist == "fixed":
        return {"kind": "fixed", "mean": a.number_input(_("Tokens"), value=mean, step=16, key=f"{key}_mean")}
    if dist == "uniform":
        return {"kind": "uniform", "low": a.number_input(_("Min"), value=mean // 4, step=8, key=f"{key}_low"),
                "high": b.number_input(_("Max"), value=mean * 2, step=8, key=f"{key}_high")}
    if dist == "normal":
        return {"kind": "normal", "mean": a.number_input(_("Mean"), value=mean, step=16, key=f"{key}_nmean"),
                "stdev": b.number_input(_("Stdev"), value=mean // 4, step=8, key=f"{key}_stdev"),
                "low": 1, "high": c.number_input(_("Max"), value=mean * 4, step=16, key=f"{key}_nhigh")}
    st.caption(_("A long tail, as chat traffic has: its median and spread are shipped data, with their source."))
    return {"kind": "chat-like", "high": top}


def _file(kind: str) -> tuple[str | None, bytes | None]:
    """A shipped example's name (bytes None) or an uploaded file's name and bytes; (None, None) before a file."""
    text = kind == "fixed-text"
    names = [*(("fixed-text.txt",) if text else WORKLOAD_EXAMPLES[kind]), UPLOAD]
    pick = st.selectbox(_("Text") if text else _("File"), names, key=f"wl_{kind}_file",
                        format_func=lambda n: _(n) if n == UPLOAD else n,
                        help=_("The files shipped in examples/workloads/ (their sources in its README), or your own."))
    if pick != UPLOAD:
        return pick, None
    up = st.file_uploader(_("A text file") if text else _("JSONL, JSON or CSV"),
                          type=["txt", "md"] if text else ["jsonl", "json", "csv"], key=f"wl_{kind}_upload",
                          max_upload_size=UPLOAD_MB,
                          help=_("Lines of prose in UTF-8: each prompt opens with the text's first tokens and goes on "
                                 "with its lines drawn at random; the run records its name, lines and hash, not the "
                                 "text.") if text else
                          _("A prompt column (prompt, text, input or question), ShareGPT conversations or OpenAI "
                            "messages; the run records its name, rows and hash, not the file.")
                          if kind != "trace" else _("Rows of timestamp, input_length, output_length (the Mooncake or "
                                                     "Azure shape)."))
    return (up.name, up.getvalue()) if up is not None else (None, None)


def plan_said(plan) -> str:
    """What the plan sends in one line, from its summary (the histogram's numbers)."""
    s = plan.summary
    lengths = s.get("input_tokens") or {}
    values = dict(what=i18n.tr(workload_named(s)), n=s.get("sent") or len(plan.prompts),
                  median=f"{lengths.get('median', 0):.0f}", longest=f"{lengths.get('max', 0):.0f}")
    if plan.conversations is not None:  # only the first turns' lengths are known before the replies
        return _("{what}: {convs} conversations × {turns} turns ({n} requests), first turns of median {median} tokens "
                 "(longest {longest}).", convs=s.get("conversations"), turns=s.get("turns"), **values)
    return _("{what}: {n} requests, prompts of median {median} tokens (longest {longest}).", **values)


def _workload(what: str, tokens_hi: int) -> dict | None:
    """The workload description the controls make (kinds.plan_of's keys); None for the lab's own prompts."""
    if what in ("lab", "synthetic"):
        return None
    if what == "dataset":
        name, data = _file("dataset")
        n = st.number_input(_("Prompts to send"), value=40, step=8, key="wl_ds_n")
        how = st.radio(_("Which rows"), ["random", "first"], horizontal=True, key="wl_ds_how",
                       format_func=lambda h: _("At random (seeded)") if h == "random" else _("The first ones"))
        return {"kind": "dataset", "file": name, "n": int(n), "how": how, "seed": 0, "_data": data}
    if what == "hub":
        name = st.text_input(_("Dataset name"), key="wl_hub_name", placeholder="owner/name",
                             help=_("As datasets.load_dataset takes it, or a folder written by save_to_disk. Read from "
                                    "this machine's Hugging Face cache when the Hub cannot be reached."))
        a, b, c = st.columns(3)
        split = a.text_input(_("Split"), value="train", key="wl_hub_split")
        subset = b.text_input(_("Subset"), key="wl_hub_subset", placeholder=_("none"))
        column = c.text_input(_("Prompt column"), key="wl_hub_column", placeholder=_("found by name"),
                              help=_("Where it is not prompt, text, input or question (nor ShareGPT conversations or "
                                     "OpenAI messages)."))
        n = st.number_input(_("Prompts to send"), value=40, step=8, key="wl_hub_n")
        how = st.radio(_("Which rows"), ["random", "first"], horizontal=True, key="wl_hub_how",
                       format_func=lambda h: _("At random (seeded)") if h == "random" else _("The first ones"))
        return {"kind": "hub", "dataset": name.strip(), "split": split.strip() or "train",
                "subset": subset.strip() or None, "column": column.strip() or None, "n": int(n), "how": how,
                "seed": 0}
    if what == "lengths":
        n = st.number_input(_("Number of requests"), value=32, step=8, key="wl_len_n")
        desc = {"kind": "lengths", "n": int(n), "input": _lengths("input", "wl_in", 256, 4096),
                "output": _lengths("output", "wl_out", 64, tokens_hi), "seed": 0}
        head = st.number_input(_("Shared prefix (tokens)"), value=0, step=64, key="wl_len_prefix",
                               help=_("One prefix of this many random tokens before every prompt, on top of its drawn "
                                      "length (vllm bench serve --random-prefix-len); 0: none."))
        return {**desc, "prefix_len": int(head)} if head else desc
    if what == "prefix-repetition":
        a, b = st.columns(2)
        n = a.number_input(_("Number of requests"), value=24, step=8, key="wl_pr_n")
        k = b.number_input(_("Prefixes"), value=4, step=1, key="wl_pr_k",
                           help=_("How many distinct prefixes the requests share: from 1 to as many as there are "
                                  "requests."))
        p = a.number_input(_("Prefix (tokens)"), value=256, step=64, key="wl_pr_prefix")
        sfx = b.number_input(_("Suffix (tokens)"), value=32, step=16, key="wl_pr_suffix",
                             help=_("Each request's own text after its prefix."))
        out = a.number_input(_("Answer (tokens)"), value=min(32, tokens_hi), step=16, key="wl_pr_out")
        return {"kind": "prefix-repetition", "n": int(n), "num_prefixes": int(k), "prefix_len": int(p),
                "suffix_len": int(sfx), "output_len": int(out), "seed": 0}
    if what == "fixed-text":
        name, data = _file("fixed-text")
        a, b = st.columns(2)
        n = a.number_input(_("Number of requests"), value=24, step=8, key="wl_ft_n")
        length = b.number_input(_("Prompt (tokens)"), value=256, step=64, key="wl_ft_len")
        head = a.number_input(_("Shared opening (tokens)"), value=128, step=64, key="wl_ft_prefix",
                              help=_("Every prompt opens with the text's first this many tokens; the rest is lines of "
                                     "the text drawn at random. 0: none shared."))
        out = b.number_input(_("Answer (tokens)"), value=min(32, tokens_hi), step=16, key="wl_ft_out")
        if data is None:
            st.caption(_("The text: examples/workloads/fixed-text.txt, plain prose written for this project."))
        return {"kind": "fixed-text", "file": name, "n": int(n), "input_len": int(length), "prefix_len": int(head),
                "output_len": int(out), "seed": 0, "_data": data}
    if what == "multi-turn":
        name, data = _file("multi-turn")
        a, b = st.columns(2)
        convs = a.number_input(_("Conversations"), value=8, step=1, key="wl_mt_convs")
        turns = b.number_input(_("Turns each"), value=3, step=1, key="wl_mt_turns",
                               help=_("Each turn sends the whole history so far: the shared prefix grows."))
        think = st.number_input(_("Think time between turns (s)"), value=0.0, step=0.5, key="wl_mt_think")
        return {"kind": "multi-turn", "file": name, "conversations": int(convs), "turns": int(turns),
                "think_time_s": float(think), "_data": data}
    name, data = _file("trace")
    a, b = st.columns(2)
    scale = a.number_input(_("Time scale"), value=1.0, step=0.25, key="wl_tr_scale",
                           help=_("Multiplies the trace's gaps: 0.5 sends twice as fast, 2 half as fast."))
    unit = b.radio(_("Timestamps in"), ["ms", "s"], horizontal=True, key="wl_tr_unit",
                   format_func=lambda u: _("milliseconds") if u == "ms" else _("seconds"),
                   help=_("What the file's numeric timestamps count (Mooncake's: milliseconds); date-times are read "
                          "as such."))
    st.caption(_("A trace brings its own clock and answer lengths: the arrival above does not apply."))
    return {"kind": "trace", "file": name, "time_scale": float(scale), "time_unit": unit, "_data": data}




@dataclass
class Chosen:
    """What the viewer chose to send: `what` (WHAT's values), the workload's description (None for the lab's or
    synthetic prompts), its plan once made (None before a file, or when refused: `error` says why)."""
    what: str
    workload: dict | None = None
    plan: object | None = None
    error: LabError | None = None

    @property
    def own_lengths(self) -> bool:
        """Answers held to lengths the workload draws (a distribution, a trace): no slider would say the truth."""
        return self.plan is not None and bool(self.plan.max_tokens_each)

    @property
    def blocked(self) -> bool:
        """A workload without a plan (no file yet, or refused): nothing may run."""
        return self.workload is not None and self.plan is None

    def said(self) -> str:
        """What every run of this choice sends, in one line."""
        if self.plan is not None:
            return plan_said(self.plan)
        return _("Seeded synthetic prompts.") if self.what == "synthetic" else _("The lab's 10 prompts.")


def choose(top_what, top_said, tokens_hi: int) -> Chosen:
    """The 'what to send' box in `top_what`, its one-line summary in `top_said`, and the folded settings and preview."""
    what = WHAT[top_what.selectbox(_("What to send"), list(WHAT), key="load_what", format_func=i18n.shown(WHAT),
                                   help=_("The lab's ten prompts, seeded synthetic ones, your own dataset or a Hugging "
                                          "Face dataset by name, prompts of "
                                          "chosen lengths, prompts that share a few prefixes (what prefix caching "
                                          "saves), prompts cut from a fixed text, multi-turn chats that resend their "
                                          "history, or a replayed trace."))]
    chosen = Chosen(what)
    if what in ("lab", "synthetic"):
        return chosen
    # Folded, like the SLO box: the run's picture and numbers stay on a projector's first screen
    with st.expander(_("The workload: its settings and a sample of what it sends"), icon=":material/dataset:"):
        settings, sample, chart = st.columns([2, 3, 3], gap="large")
        with settings:
            chosen.workload = _workload(what, tokens_hi)
        data = chosen.workload.pop("_data", None)
        if what == "hub" and not chosen.workload["dataset"]:
            sample.info(_("Type the name of a Hugging Face dataset."), icon=":material/dataset:")
        elif chosen.workload.get("file") is None and (what not in (*SEEDED, "hub") or what == "fixed-text"):
            sample.info(_("Upload a file, or pick a shipped one."), icon=":material/upload_file:")
        else:
            bar, report = _reading(sample)
            try:
                chosen.plan = plan = _plan(json.dumps(chosen.workload, sort_keys=True), data, report)
            except LabError as e:  # a bad file or setting: the engine's one sentence, and nothing runs
                chosen.error = e
            bar.empty()
            if chosen.plan is not None:
                top_said.caption(ui.plain(plan_said(plan)))
                _preview(plan, sample, chart)
    if chosen.error is not None:
        st.error(ui.plain(chosen.error), icon=":material/error:")
    return chosen


def _preview(plan, sample, chart) -> None:
    """A sample of what the plan sends, and its lengths' histogram; a trace's replay time and what looks wrong in
    its timestamps, before anything is sent."""
    if plan.kind == "trace":
        sample.markdown(ui.plain(traces.duration_said(plan.summary)))
        for warning in traces.checks(plan.summary):
            sample.warning(ui.plain(warning), icon=":material/schedule:")
    if (cacheable := prefix.cacheable_said(plan.summary)) is not None:  # what caching can save, said before
        sample.markdown(ui.plain(cacheable))
    sample.markdown(_("**A sample of the prompts**"))
    if plan.conversations is not None:  # a chat: its turns side by side, one row a conversation
        turns = max(len(c) for c in plan.conversations)
        sample.dataframe({_("Turn {n}", n=t + 1): [c[t][:120] if t < len(c) else "" for c in plan.conversations[:8]]
                          for t in range(turns)}, hide_index=True)
    else:
        sample.dataframe({_("Prompt"): [p[:160] for p in plan.prompts[:8]], _("Tokens"): plan.input_tokens[:8]},
                         hide_index=True)
    with chart:  # no taller than needed: the form and Run stay in reach with the box open
        ui.chart(wl_figures.length_histogram(plan, lang=i18n.lang()).update_layout(height=380), key="wl_hist")
