"""History: every run the app measured (or imported), compared on one chart and exported."""
import hashlib

import pandas as pd
import streamlit as st

import i18n
import ui
from engine import figures
from engine.lab import LabError
from i18n import _

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
    return "" if r.extra.cold is None else _("❄ cold") if r.extra.cold else _("warm")


def cost(r, price: float):
    """The run's cost per million output tokens at `price`: cents, or four decimals below 0.1."""
    c = lab.cost_per_million(r, price)
    return None if c is None else round(c, 2 if c >= 0.1 else 4)


def number(v, digits: int):
    return None if v is None else round(v, digits)


@st.cache_resource(max_entries=4, show_spinner=False)
def _draw_pair(run_id: str, lang: str) -> None:
    """A saved pair's chart, built once for every viewer of a language."""
    try:
        pair = lab.pair_of(run_id)
    except LabError as e:
        st.error(ui.plain(e), icon=":material/error:")
        return
    if len(pair) == 2:
        ui.chart(figures.side_by_side(*pair, lang=lang), key="pair")


rows = lab.runs()  # read once per change of the history, shared by every viewer
# a pair's two runs share their start: A above B (the store lists the later saved first); otherwise as listed
rows = sorted(rows, key=lambda r: (-r.started_at, r.extra.pair_side or ""))
price = None
if rows:
    price_cols = st.columns([1, 3], gap="large", vertical_alignment="center")
    with price_cols[0]:
        price = ui.gpu_price("history")
    price_cols[1].caption(_("With a price, the table shows what a million output tokens cost in each run: the rate "
                            "pays for the whole machine over the run's measured wall time."))
if not rows:
    st.info(_("No runs yet: run a load test, or import runs exported from another machine below."),
            icon=":material/info:")
else:
    table = pd.DataFrame([{
        "status": status(r), "started": ui.started(r), "run": i18n.tr(r.label) or r.scenario,
        "pair": f"{r.extra.pair_side} · {r.extra.pair[:4]}" if r.extra.pair else "", "warmth": warmth(r),
        # the viewer just typed a price: its column is in sight, not past the table's right edge
        **({"cost / M output tokens": cost(r, price)} if price is not None else {}),
        "kind": r.kind,
        "model": r.model.split("/")[-1], "server": r.extra.endpoint, "requests": r.n_requests, "failed": r.n_failed,
        "wall time (s)": round(r.duration, 2),
        "output tok/s": number(r.summary.get("output_throughput"), 1),
        "mean TTFT (ms)": number(r.summary.get("mean_ttft_ms"), 0),
        "hardware": str(r.hardware.get("summary") or ""), "source": r.source,
    } for r in rows])
    # The selection holds row positions: a table with other rows (a run saved or deleted meanwhile) is a new
    # widget, so a selection never lands on a run the viewer did not pick.
    drawn = hashlib.sha1("\n".join(r.id for r in rows).encode()).hexdigest()[:12]
    picked = st.dataframe(
        table, width="stretch", hide_index=True, on_select="rerun", selection_mode="multi-row",
        key=f"history_table_{drawn}",
        column_config={
            "status": st.column_config.TextColumn(
                _("status"),
                help=_("failed: every request failed (kept for the record, left out of the chart unless included); "
                       "damaged: the stored row cannot be read back whole (select it to see why, or delete it)")),
            # The table's columns keep their English names (read back by name); only the titles shown change.
            "started": st.column_config.Column(_("started")),
            "run": st.column_config.Column(_("run")),
            "pair": st.column_config.Column(
                _("pair"), help=_("Two servers measured at once on one clock (Load test): the two runs of a pair share "
                                  "its four letters, A the app's server, B the one at a URL. Select both to see them "
                                  "side by side.")),
            "warmth": st.column_config.Column(
                _("cold / warm"),
                help=_("cold: the first batch of its size since its server started, so its numbers include one-off "
                       "start-up work; blank: not known (runs saved before this was recorded, imports)")),
            "cost / M output tokens": st.column_config.Column(
                _("cost / M output tokens"), help=_("At your price per GPU-hour, over the run's measured wall time.")),
            "kind": st.column_config.Column(_("kind")),
            "model": st.column_config.Column(_("model")),
            "server": st.column_config.Column(_("server"), help=_("The address of the server at a URL a run measured; "
                                                                  "empty for a server this app started.")),
            "requests": st.column_config.Column(_("requests")),
            "failed": st.column_config.Column(_("failed")),
            "wall time (s)": st.column_config.Column(_("wall time (s)")),
            "output tok/s": st.column_config.Column(_("output tok/s")),
            "mean TTFT (ms)": st.column_config.Column(_("mean TTFT (ms)")),
            "hardware": st.column_config.Column(_("hardware")),
            "source": st.column_config.Column(_("source")),
        })
    chosen = [rows[i] for i in picked.selection.rows if i < len(rows)]
    if not chosen:
        st.caption(_("Select rows (left edge of the table) to compare, export or delete them. Showing the latest 8."))

    pool = chosen or [r for r in rows if not r.problem]  # a damaged run is charted only when picked
    failed_here = sum(failed(r) for r in pool)
    include_failed = failed_here > 0 and st.toggle(
        _("Include failed runs in the chart"), key="history_include_failed",
        help=_("A run where every request failed has no latency or throughput to compare; it is kept for the record."))
    shown = [r for r in pool if include_failed or not failed(r)][: len(pool) if chosen else 8]
    metrics = list(figures.METRICS)
    metric = st.selectbox(_("Compare by"), metrics, format_func=i18n.shown(metrics, lambda k: i18n.tr(figures.metric_info(k).label)),
                          index=metrics.index("output_throughput") if "output_throughput" in metrics else 0)
    if shown:
        ui.chart(figures.history_compare(shown, metric, lang=i18n.lang()), key="compare")
    else:
        st.info(_("Every selected run failed: there is nothing to compare. Switch on 'Include failed runs in the "
                  "chart' to draw them anyway.") if chosen else
                _("Every run failed: there is nothing to compare. Switch on 'Include failed runs in the chart' to "
                  "draw them anyway."), icon=":material/info:")
    if len(chosen) == 2 and chosen[0].extra.pair and chosen[0].extra.pair == chosen[1].extra.pair:
        _draw_pair(chosen[0].id, i18n.lang())  # a pair: its two servers on one clock, as the Load test drew them
    if shown and failed_here and not include_failed:
        st.caption(_("{n} failed run(s) are left out of the chart (every request failed); they stay in the table "
                     "and in exports.", n=failed_here))

    ids = [r.id for r in chosen] or None
    readable = [r.id for r in chosen if not r.problem]  # a damaged run cannot be read back whole: not in a report
    c1, c2, c3, c4 = st.columns(4)
    # Built when clicked, not on every redraw (a full export of the shipped H200 runs is 13 MB).
    c1.download_button(_("Export JSON ({n} selected)", n=len(chosen)) if chosen else _("Export JSON (all)"),
                       lambda: lab.export_json(ids), "serving-lab-runs.json",
                       "application/json", icon=":material/download:", width="stretch")
    c2.download_button(_("Export CSV ({n} selected)", n=len(chosen)) if chosen else _("Export CSV (all)"),
                       lambda: lab.export_csv(ids), "serving-lab-requests.csv",
                       "text/csv", icon=":material/download:", width="stretch")
    lang = i18n.lang()  # said while the page is drawn: the report is built later, when clicked
    c3.download_button(_("HTML report ({n} selected)", n=len(readable)) if readable else _("HTML report (select runs)"),
                       lambda: lab.report_html(readable, lang), "serving-lab-report.html", "text/html",
                       icon=":material/download:", width="stretch",
                       disabled=not readable, key="history_report",
                       help=_("One file with the selected runs' machine, server flags, numbers and interactive "
                              "charts: it opens in any browser with no network, ready to mail."))
    if c4.button(_("Delete {n} selected", n=len(chosen)), icon=":material/delete:", width="stretch",
                 disabled=not chosen or not ui.can_act(lab)):
        n = ui.act(lab, lab.delete_runs, [r.id for r in chosen])
        if n is not None:
            st.session_state["history_note"] = _("Deleted {n} run(s).", n=n)
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
                run = lab.run(row.id)
            except LabError as e:
                st.warning(damaged or ui.plain(e), icon=":material/warning:")
            else:
                if damaged:
                    st.warning(damaged, icon=":material/warning:")
                if causes := lab.failure_causes(run.records):
                    n_failed, n_total = sum(c[0] for c in causes), len(run.measured)
                    st.markdown(_("**{failed} of {total} requests failed**, so this run is left out of comparisons "
                                  "unless included.", failed=n_failed, total=n_total) if failed(row) else
                                _("**{failed} of {total} requests failed**.", failed=n_failed, total=n_total))
                    ui.failure_causes([run])
                if n := run.extra.chat_requests_beside:
                    st.info(_("{n} chat answer(s) were streamed while this run measured: its numbers include that "
                              "traffic.", n=n), icon=":material/forum:")
                ui.token_check(run)
                ui.warmth(lab, run)
                if ceiling := lab.decode_ceiling(run):  # against its hardware's memory bandwidth, as stored
                    st.markdown(ui.plain(ceiling.sentence))
                if run.extra.endpoint:
                    st.caption(ui.plain(_("Measured on the server at {url}, which this app did not start: its "
                                          "settings and hardware are its own and are not recorded here.",
                                          url=run.extra.endpoint)))
                if run.command:
                    st.code(run.command, language="bash")
                st.json({"summary": run.summary.to_dict(), "load": run.load.to_dict(), "hardware": run.hardware,
                         "versions": run.versions}, expanded=False)
                if run.kind == "vllm" and run.records:
                    ui.chart(figures.request_timeline(run, lang=i18n.lang()), key="detail-tl")

st.divider()
st.subheader(_("Bring runs from another machine"))
c1, c2 = st.columns(2)
with c1:
    # A new key after each import empties the uploader, so the same file is not offered twice.
    up = st.file_uploader(_("Import a JSON export (e.g. from a GPU box's `python -m engine run … --json`)"),
                          type="json", key=f"history_upload_{st.session_state.get('history_uploads', 0)}")
    if up is not None and st.button(_("Import"), icon=":material/upload:", disabled=not ui.can_act(lab)):
        imported = ui.act(lab, lab.import_runs, up.getvalue(), up.name)
        if imported is not None:
            st.session_state["history_uploads"] = st.session_state.get("history_uploads", 0) + 1
            st.session_state["history_note"] = _("Imported {n} run(s); any that were already in the history are "
                                                 "kept as they were.", n=len(imported))
            st.rerun()
with c2:
    st.markdown(_("The repository ships example runs measured on an NVIDIA H200."))
    if st.button(_("Load the example runs"), icon=":material/dataset:", disabled=not ui.can_act(lab)):
        new = ui.act(lab, lab.import_examples)
        if new is not None:
            st.session_state["history_note"] = (_("Loaded {n} example run(s).", n=len(new)) if new else
                                                _("No new example runs (already loaded)."))
            st.rerun()
