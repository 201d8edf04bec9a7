"""The guided lab's rehearsal and the room's pre-flight, for the guide page: each step's time
in rehearsal beside the agenda, and the presenter's tools (rehearse the whole lab, read its sheet, check the
room) in one expander. The work is engine.guide.rehearsal and engine.guide.preflight, reached through the Lab."""
from __future__ import annotations

import time

import streamlit as st

import i18n
import ui
from engine.guide import sheet as sheets
from engine.lab import Lab
from engine.serving import models
from i18n import _

LEVEL_ICON = {"ok": ":green[:material/check_circle:]", "warn": ":orange[:material/warning:]",
              "fail": ":red[:material/cancel:]"}


def beside_agenda(lab: Lab, step_id: str, presenter: bool) -> None:
    """The last rehearsal's time of every step in one line, the shown step's in words, and (for the presenter)
    how today's machine differs from the rehearsal's."""
    sheet = lab.rehearsal()
    if sheet is None:
        return
    times = " · ".join(f"{s.step.number}: {'✗' if not s.ok else i18n.tr(sheets.length(s.seconds or 0))}"
                       for s in sheet.steps if s.id != "summary")
    when = i18n.when(sheet.started_at, "short")
    line = (_("Rehearsal of {when}: {times} · about {total} in all", when=when, times=times,
              total=sheets.length(sheet.expected_s, 90)) if sheet.complete else
            _("Rehearsal of {when}, not run to its end: {times}", when=when, times=times))
    if (s := sheet.of(step_id)) is not None and step_id != "summary":
        line = _("Step {n} {took}.", n=s.step.number, took=sheets.took(s)) + " " + line
    st.caption(ui.plain(line))
    if presenter and (diff := lab.rehearsal_differs(sheet)):
        st.warning(ui.plain(_("This is not the rehearsal's setup, so its times may not hold: {differences}.",
                              differences="; ".join(i18n.tr(d) for d in diff))), icon=":material/warning:")


def presenter_tools(lab: Lab) -> None:
    """Rehearse the whole lab, the last sheet, and the room's pre-flight: the presenter's, in one expander."""
    with st.expander(_("Rehearsal and pre-flight"), icon=":material/checklist:"):
        rehearse, check = st.tabs([_("Rehearse the lab"), _("Pre-flight for the room")])
        with rehearse:
            ui.live_job(lambda: _rehearse(lab), lambda: lab.latest_job("rehearsal"), every=2)
        with check:
            _preflight(lab)


def _rehearse(lab: Lab) -> None:
    st.caption(_("Runs every step on this machine unattended, as you would press them, on a session of its own "
                 "(the room's stays as it is; its runs are marked as rehearsal in History), then writes the sheet "
                 "below. vLLM is stopped first, so step 3 times a real start."))
    guide = lab.guide
    scales = list(guide.scales)
    choices = models.catalogue(lab.settings.models)  # the models prepared here, the room's own offered first
    if not choices:
        st.info(_("Prepare a model on the Server page first: the rehearsal runs every step with it."),
                icon=":material/info:")
    else:
        c1, c2, c3, c4 = st.columns([2, 3, 2, 1])
        scale = c1.selectbox(_("Answer length"), scales, index=scales.index(guide.state().scale),
                             format_func=i18n.shown(scales, lambda v: i18n.tr(guide.scale_names[v])),
                             key="rehearse_scale")
        paths, now = [m.path for m in choices], guide.model_spec().path
        model = c2.selectbox(_("Model"), paths, index=paths.index(now) if now in paths else 0, key="rehearse_model",
                             format_func=i18n.shown(paths, lambda p: i18n.tr(choices[paths.index(p)].label)))
        talk = c3.number_input(_("Your talk per step (minutes)"), 0.0, 30.0, 3.0, 0.5, format="%.1f",
                               key="rehearse_talk", help=_("Added to each step's own time for the session's expected "
                                                           "length."))
        c4.space("small")  # the button level with the inputs
        c4.button(_("Rehearse"), icon=":material/play_arrow:", type="primary", disabled=lab.measuring() is not None,
                  key="rehearse_go", width="stretch", on_click=ui.on_press,
                  args=(lab.rehearse, scale, model, talk * 60))
    if (job := lab.latest_job("rehearsal")) is not None:
        ui.job_panel(lab, job, ui.job_count(job),
                     key="rehearse_cancel")
    _sheet(lab)


def _sheet(lab: Lab) -> None:
    sheet = lab.rehearsal()
    if sheet is None:
        st.info(_("No rehearsal yet on this machine."), icon=":material/info:")
        return
    st.markdown(f"**{ui.plain(sheets.heading(sheet, i18n.when(sheet.started_at, 'short')))}**")
    st.dataframe([{_("Step"): f"{s.step.number}. {i18n.tr(s.step.title)}",
                   _("Time"): "–" if s.seconds is None else i18n.tr(sheets.length(s.seconds)),
                   _("vLLM ready after"): "" if s.ready_s is None else i18n.tr(sheets.length(s.ready_s)),
                   _("Memory at its peak"): sheets.memory(s, i18n.lang()),
                   _("Result"): i18n.tr(sheets.result(s))} for s in sheet.steps],
                 hide_index=True, width="stretch")
    st.caption(ui.plain(sheets.MEMORY_NOTE))
    st.markdown(ui.plain(sheets.expected(sheet)))
    if sheet.cancelled:
        st.warning(_("The rehearsal was stopped before its end: the steps not listed did not run."),
                   icon=":material/warning:")
    for s in sheet.failed:
        st.error(ui.plain(_("Step {n}: {result}", n=s.step.number, result=sheets.result(s))), icon=":material/error:")
    st.download_button(_("Download the sheet"), sheets.text(sheet, i18n.lang()), file_name="rehearsal.md",
                       mime="text/markdown", icon=":material/download:", key="rehearse_download")


def _check(lab: Lab) -> None:
    """Where this app listens, as Streamlit was started (make run HOST= PORT= BASE=), checked from the room's side."""
    st.session_state["preflight"] = (time.time(), lab.preflight(
        st.get_option("server.address"), st.get_option("server.port"), st.get_option("server.baseUrlPath")))


def _preflight(lab: Lab) -> None:
    st.caption(_("Whether the room can reach this app and this machine is ready for the lab: each line says what to "
                 "do."))
    st.button(_("Check the room"), icon=":material/fact_check:", key="preflight_go", on_click=_check, args=(lab,))
    if (found := st.session_state.get("preflight")) is None:
        return
    at, rows = found
    st.caption(_("Checked {when}.", when=i18n.when(at, "short")))
    st.markdown("\n".join(f"- {LEVEL_ICON[c.level]} **{ui.plain(c.what)}**: {ui.plain_code(c.said)}" for c in rows))
