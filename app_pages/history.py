"""History: every run the app measured (or imported), compared on one chart and exported."""
import hashlib

import pandas as pd
import streamlit as st

import i18n
import ui
from engine import figures
from engine.digits import rounded
from engine.figures.report import report_html
from engine.lab import LabError
from engine.measure.judge import cost as pricing
from engine.measure.judge import failures, repeats
from engine.measure.judge.ceiling import run_ceiling
from engine.measure.workloads.named import named as workload_named
from engine.measure.load.shape import shape_said
from engine.serving import models
from i18n import _, ngettext

lab = ui.get_lab()

st.title(_("History"))
st.caption(_("Every finished run is saved the moment it completes, with the server's exact flags, the model, the "
             "versions and the hardware. Select runs to compare or export them (JSON keys follow `vllm bench serve`)."))
if note := st.session_state.pop("history_note", None):
    st.success(note, icon=":material/check_circle:")


def failed(r) -> bool:
    return r.failed and not r.problem  # a damaged row's counts are unknown: it is shown as damaged


def status(r) -> str:
    if r.problem:
        return _("⚠ damaged")
    if failed(r):
        return _("✗ failed")
    return _("◐ some failed") if r.n_failed else _("✓ ok")


def warmth(r) -> str:
    """Cold: the run's measured batch was the first of its size since its server started; blank: unknown."""
    return "" if r.extra.warmth.cold is None else _("❄ cold") if r.extra.warmth.cold else _("warm")


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_pair(run_id: str, lang: str) -> None:
    """A saved pair's chart, built once for every viewer of a language."""
    try:
        pair = lab.history.pair_of(run_id)
    except LabError as e:
        st.error(ui.plain(e), icon=":material/error:")
        return
    if len(pair) == 2:
        ui.chart(figures.side_by_side(*pair, lang=lang), key="pair")


def compare_table(shown) -> None:
    """The compared runs side by side: one column per run (figures.compare_table, from the per-run CSV's rows)."""
    runs = []
    for r in shown[:8]:
        try:
            runs.append(lab.history.run(r.id))
        except LabError:  # a damaged stored run: the details below say why
            continue
    if not runs:
        return
    columns, table = figures.compare_table(runs, lang=i18n.lang())
    # st.table wraps what is long (flags, hardware) instead of cutting it off as a grid's cell does
    st.table(pd.DataFrame(table, columns=columns).set_index(columns[0]))


rows = lab.history.runs()  # read once per change of the history, shared by every viewer
# a pair's two runs share their start: A above B (the store lists the later saved first); otherwise as listed
rows = sorted(rows, key=lambda r: (-r.started_at, r.extra.side_by_side.side or ""))
# The price input sits beside "Compare by" (the chart in sight at 1920x1080); the table above it reads the
# value the viewer typed, kept in the input's session state.
price = st.session_state.get("gpu_price_history", st.session_state.get("gpu_price")) if rows else None
if not rows:
    # a viewer can neither run a load test nor import: told what will happen instead
    st.info(_("No runs yet: run a load test, or import runs exported from another machine below.") if ui.can_act(lab)
            else _("No runs yet: each run the presenter measures appears here the moment it ends."),
            icon=":material/info:")
else:
    each = any(r.extra.repeat.group for r in rows) and st.toggle(
        _("Show each repeat"), key="history_each_repeat",
        help=_("The repeats of one load test share a line (the median of those that answered every request); "
               "switch this on to list each repeat, or select the line to compare them."))
    lines = lab.history.entries(rows, each)

    def line(group) -> dict:
        """A run, or a load test's repeats together: their medians over the repeats that count (as the report's and
        the Load test's spreads), rounded to their significant figures and still numbers (the columns sort)."""
        r = group[0]
        counted = failures.counted_repeats(group)

        def median(value):
            return rounded(repeats.median(group, value))

        label = (_("🎭 rehearsal · ") if r.extra.rehearsal else "") + (i18n.tr(r.label) or r.scenario)
        if len(group) > 1:
            label = _("{run} · {n} of {planned} repeats, medians of {k}", run=label, n=len(group),
                      planned=r.extra.repeat.total or len(group), k=len(counted))
        elif r.extra.repeat.group:
            label = _("{run} · repeat {i} of {n}", run=label, i=r.extra.repeat.index or 1, n=r.extra.repeat.total or 1)
        return {
            "status": status(r) if len(group) == 1 else
            _("✗ failed") if not counted else _("◐ some failed") if len(counted) < len(group) else _("✓ ok"),
            "started": ui.started(r), "run": label,
            "pair": f"{pair.side} · {pair.pair[:4]}" if (pair := r.extra.side_by_side).pair else "",
            "warmth": warmth(r),
            # the viewer just typed a price: its column is in sight, not past the table's right edge
            **({"cost / M output tokens": median(lambda g: pricing.run_cost_per_million(g, price))}
               if price is not None else {}),
            "kind": r.kind, "workload": i18n.tr(workload_named(r.load.workload)),
            "model": models.shown_name(r.model), "server": r.extra.server.endpoint,
            "requests": sum(g.n_requests for g in group), "failed": sum(g.n_failed for g in group),
            "wall time (s)": median("duration"),  # a median beside medians, not the repeats' sum
            "output tok/s": median("output_throughput"),
            "mean TTFT (ms)": median("mean_ttft_ms"),
            "J / output token": median(figures.j_per_token),
            "hardware": str(r.hardware.get("summary") or ""), "source": r.source,
        }

    table = pd.DataFrame([line(group) for group in lines])
    # The selection holds row positions: a table with other rows (a run saved or deleted meanwhile) is a new
    # widget, so a selection never lands on a run the viewer did not pick.
    drawn = hashlib.sha1("\n".join(",".join(r.id for r in group) for group in lines).encode()).hexdigest()[:12]
    picked = st.dataframe(
        table, width="stretch", height=255, hide_index=True, on_select="rerun", selection_mode="multi-row",
        key=f"history_table_{drawn}",
        # Widths from what each column holds (a label, a date, a number): Streamlit's default squeezed the
        # labels and the hardware to a few letters.
        column_config={
            "status": st.column_config.TextColumn(
                _("status"), width=120,
                help=_("failed: every request failed (kept for the record, left out of the chart unless included); "
                       "damaged: the stored row cannot be read back whole (select it to see why, or delete it)")),
            # The table's columns keep their English names (read back by name); only the titles shown change.
            "started": st.column_config.Column(_("started"), width=170),
            "run": st.column_config.Column(_("run"), width=340),
            "pair": st.column_config.Column(
                _("pair"), help=_("Two servers measured at once on one clock (Load test): the two runs of a pair share "
                                  "its four letters, A the app's server, B the one at a URL. Select both to see them "
                                  "side by side.")),
            "warmth": st.column_config.Column(
                _("cold / warm"), width=110,
                help=_("cold: the first batch of its size since its server started, so its numbers include one-off "
                       "start-up work; blank: not known (runs saved before this was recorded, imports)")),
            "cost / M output tokens": st.column_config.Column(
                _("cost / M output tokens"), help=_("At your price per GPU-hour, over the run's measured wall time.")),
            "kind": st.column_config.Column(_("kind"), width=100),
            "workload": st.column_config.Column(_("workload"), width=220,
                                                help=_("What the run sent besides the lab's prompts: a dataset, "
                                                       "lengths, multi-turn chats or a trace (blank: prompts).")),
            "model": st.column_config.Column(_("model"), width=190),
            "server": st.column_config.Column(_("server"), width=200,
                                              help=_("The address of the server at a URL a run measured; "
                                                                  "empty for a server this app started.")),
            "requests": st.column_config.Column(_("requests")),
            "failed": st.column_config.Column(_("failed")),
            "wall time (s)": st.column_config.Column(_("wall time (s)")),
            "output tok/s": st.column_config.Column(_("output tok/s")),
            "mean TTFT (ms)": st.column_config.Column(_("mean TTFT (ms)")),
            "J / output token": st.column_config.Column(
                _("J / output token"), help=_("The energy the run's measured part used per output token (NVML or "
                                              "RAPL, where this machine could read one); blank: not measured.")),
            "hardware": st.column_config.Column(_("hardware"), width=320),
            "source": st.column_config.Column(_("source"), width=160),
        })
    chosen = [r for i in picked.selection.rows if i < len(lines) for r in lines[i]]  # a repeats line: all of them
    if not chosen:
        st.caption(_("Select rows (left edge of the table) to compare, export or delete them. Showing the latest 8."))

    pool = chosen or [r for r in rows if not r.problem]  # a damaged run is charted only when picked
    failed_here = sum(failed(r) for r in pool)
    include_failed = failed_here > 0 and st.toggle(
        _("Include failed runs in the chart"), key="history_include_failed",
        help=_("A run where every request failed has no latency or throughput to compare; it is kept for the record."))
    shown = [r for r in pool if include_failed or not failed(r)][: len(pool) if chosen else 8]
    metrics = list(figures.METRICS)
    chart_col, table_col = st.columns([1, 1], gap="large")
    with chart_col:
        pick, price_col = st.columns([3, 2])
        metric = pick.selectbox(_("Compare by"), metrics,
                                format_func=i18n.shown(metrics, lambda k: i18n.tr(figures.metric_info(k).label)),
                                index=metrics.index("output_throughput") if "output_throughput" in metrics else 0)
        with price_col:
            ui.gpu_price("history")  # with a price, the table shows a million output tokens' cost per run
    if shown:
        with chart_col:
            fig = figures.history_compare(shown, metric, lang=i18n.lang())
            ui.chart(ui.fit(fig), key="compare")
        with table_col:  # every number, flag and fact of the selected runs, side by side
            if chosen:
                compare_table(shown)
            else:
                st.info(_("Select runs in the table to see their numbers, flags, cold or warm, hardware and where "
                          "they ran side by side here."), icon=":material/table_view:")
    else:
        st.info(_("Every selected run failed: there is nothing to compare. Switch on 'Include failed runs in the "
                  "chart' to draw them anyway.") if chosen else
                _("Every run failed: there is nothing to compare. Switch on 'Include failed runs in the chart' to "
                  "draw them anyway."), icon=":material/info:")
    if len(chosen) == 2 and chosen[0].extra.side_by_side.pair == chosen[1].extra.side_by_side.pair != "":
        _draw_pair(chosen[0].id, i18n.lang())  # a pair: its two servers on one clock, as the Load test drew them
    if shown and failed_here and not include_failed:
        st.caption(ngettext("{n} failed run is left out of the chart (every request failed); it stays in the table "
                              "and in exports.", "{n} failed runs are left out of the chart (every request failed); "
                              "they stay in the table and in exports.", failed_here))

    ids = [r.id for r in chosen] or None
    readable = [r.id for r in chosen if not r.problem]  # a damaged run cannot be read back whole: not in a report
    c1, c2, c2r, c3, c4 = st.columns(5)
    # Built when clicked, not on every redraw (a full export of the shipped H200 runs is 13 MB), and a click does not
    # rerun the page (ui.NO_RERUN): a full run starting while the file is made drops its link on the way to the browser.
    c1.download_button(_("Export JSON ({n} selected)", n=len(chosen)) if chosen else _("Export JSON (all)"),
                       lambda: lab.history.export_json(ids), "serving-lab-runs.json",
                       "application/json", icon=":material/download:", width="stretch", on_click=ui.NO_RERUN)
    c2.download_button(_("Export CSV ({n} selected)", n=len(chosen)) if chosen else _("Export CSV (all)"),
                       lambda: lab.history.export_csv(ids), "serving-lab-requests.csv",
                       "text/csv", icon=":material/download:", width="stretch", on_click=ui.NO_RERUN,
                       help=_("One row per request, with its run's id and label."))
    c2r.download_button(_("Export CSV per run ({n} selected)",
                          n=len(chosen)) if chosen else _("Export CSV per run (all)"),
                        lambda: lab.history.export_csv(ids, per="run"), "serving-lab-runs.csv",
                        "text/csv", icon=":material/download:", width="stretch", key="history_csv_runs",
                        on_click=ui.NO_RERUN,
                        help=_("One row per run: its summary under `vllm bench serve`'s names (throughput, TTFT, TPOT, "
                               "E2E latency), cold or warm, where it ran, the hardware and the server's command."))
    lang = i18n.lang()  # said while the page is drawn: the report is built later, when clicked
    c3.download_button(_("HTML report ({n} selected)", n=len(readable)) if readable else _("HTML report (select runs)"),
                       lambda: report_html(lab.history, readable, lang), "serving-lab-report.html", "text/html",
                       icon=":material/download:", width="stretch",
                       disabled=not readable, key="history_report", on_click=ui.NO_RERUN,
                       help=_("One file with the selected runs' machine, server flags, numbers and interactive "
                              "charts: it opens in any browser with no network, ready to mail."))
    if c4.button(_("Delete {n} selected", n=len(chosen)), icon=":material/delete:", width="stretch",
                 disabled=not chosen or not ui.can_act(lab)):
        n = ui.act(lab.delete_runs, [r.id for r in chosen])
        if n is not None:
            st.session_state["history_note"] = ngettext("Deleted {n} run.", "Deleted {n} runs.", n)
            st.rerun()
    if any(r.problem for r in (chosen or rows)):
        st.caption(_("Damaged runs are left out of the chart unless selected, and out of exports: they cannot be "
                     "read back whole."))

    if len(chosen) == 1:
        row = chosen[0]
        with st.expander(_("Details of the selected run"), expanded=True):
            damaged = _("This run is stored damaged: {problem}. It is kept until you delete it, and left out of "
                        "exports.", problem=row.problem) if row.problem else None
            try:
                run = lab.history.run(row.id)
            except LabError as e:
                st.warning(damaged or ui.plain(e), icon=":material/warning:")
            else:
                if damaged:
                    st.warning(damaged, icon=":material/warning:")
                if causes := failures.run_causes(run):
                    counted = failures.counts(run)  # out of the requests planned: never sent ones too
                    n_failed, n_total = counted.planned - counted.answered - counted.in_flight, counted.planned
                    st.markdown(_("**{failed} of {total} requests failed**, so this run is left out of comparisons "
                                  "unless included.", failed=n_failed, total=n_total) if failed(row) else
                                _("**{failed} of {total} requests failed**.", failed=n_failed, total=n_total))
                    ui.failure_causes([run])
                ui.disturbance(run)  # other programs, another client, chats beside it: one sentence
                ui.token_check(run)
                ui.warmth(run)
                if ceiling := run_ceiling(run):  # against its hardware's memory bandwidth, as stored
                    st.markdown(ui.plain(ceiling.sentence))
                if run.extra.server.endpoint:
                    st.caption(ui.plain(_("Measured on the server at {url}, which this app did not start: its "
                                          "settings and hardware are its own and are not recorded here.",
                                          url=run.extra.server.endpoint)))
                if shape := shape_said(run.load):  # its endpoint, sampling, extra body, headers by name, LoRA
                    st.caption(ui.plain(shape))
                if run.command:
                    st.code(run.command, language="bash")
                st.json({"summary": run.summary.to_dict(), "load": run.load.to_dict(), "hardware": run.hardware,
                         "versions": run.versions}, expanded=False)
                if run.kind == "vllm" and run.records:
                    ui.chart(figures.request_timeline(run, lang=i18n.lang()), key="detail-tl")
                if run.kind == "vllm":  # inside the server against the client's clock, and the run's energy
                    ui.server_view(run, key="detail-server-view")

st.divider()
st.subheader(_("Bring runs from another machine"))
c1, c2 = st.columns(2)
with c1:
    # A new key after each import empties the uploader, so the same file is not offered twice.
    up = ui.file_uploader(_("Import a JSON export (e.g. from a GPU box's `python -m engine run … --json`)"),
                          ["json"], key=f"history_upload_{st.session_state.get('history_uploads', 0)}")
    if up is not None and st.button(_("Import"), icon=":material/upload:", disabled=not ui.can_act(lab)):
        imported = ui.act(lab.import_runs, up.getvalue(), up.name)
        if imported is not None:
            st.session_state["history_uploads"] = st.session_state.get("history_uploads", 0) + 1
            st.session_state["history_note"] = ngettext("Imported {n} run; any that were already in the "
                                                        "history are kept as they were.", "Imported {n} runs; any that "
                                                        "were already in the history are kept as they were.",
                                                        len(imported))
            st.rerun()
with c2:
    st.markdown(_("The repository ships example runs measured on an NVIDIA H200."))
    if st.button(_("Load the example runs"), icon=":material/dataset:", disabled=not ui.can_act(lab)):
        new = ui.act(lab.import_examples)
        if new is not None:
            st.session_state["history_note"] = (
                ngettext("Loaded {n} example run.", "Loaded {n} example runs.", len(new)) if new else
                _("No new example runs (already loaded)."))
            st.rerun()
