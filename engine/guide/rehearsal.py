"""The guided lab rehearsed the night before the workshop: every step run unattended through the same
`Guide.run_step` the page presses, on a session of its own (the room's guide.json is left as it was), its runs
marked as the rehearsal's in History, and its sheet (engine.guide.sheet) written beside the history as JSON
with a readable Markdown view."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from engine.errors import LabError
from engine.guide import sheet as sheets
from engine.guide.session import Guide, guide_path
from engine.guide.sheet import TALK_S, Sheet, StepSheet, stored
from engine.guide.steps import SCALES, STEPS, Step
from engine.jobs import Job
from engine.measure.judge.failures import failure_causes
from engine.messages import Message, say
from engine.observe import hardware
from engine.results.records import Notes
from engine.serving.states import READY, STARTING

if TYPE_CHECKING:
    from engine.lab import Lab

POLL_S = 0.5


def sheet_path(history: Path) -> Path:
    """The rehearsal sheet beside the run history (its runs are that history's); its Markdown view beside it."""
    return history.with_name("rehearsal.json")


def session_path(history: Path) -> Path:
    """The rehearsal's own guided-lab session: never the room's guide.json."""
    return guide_path(history).with_name("rehearsal-guide.json")


def read_sheet(path: Path) -> Sheet | None:
    """The last rehearsal's sheet; None when there is none (or it cannot be read: a rehearsal writes it again)."""
    try:
        return Sheet.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_sheet(sheet: Sheet, path: Path) -> Path:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(sheet.to_dict(), indent=1, ensure_ascii=False))
    os.replace(tmp, path)  # a reader never sees half a sheet
    path.with_suffix(".md").write_text(sheets.text(sheet, "en"))
    return path


def machine(model: str, scale: float) -> dict[str, Any]:
    """What decides a step's time here: the GPUs (else the CPU and its cores), vLLM's version, the model and
    the token budget (sheet.differences compares them)."""
    c = hardware.cpu()
    return {"gpus": [g["name"] for g in hardware.gpus()], "cpu": c.get("model"),
            "cores": c.get("usable_cores") or c.get("cores_logical"), "vllm": hardware.versions().get("vllm"),
            "model": model, "scale": scale}


class Rehearsal:
    """The whole guided lab, step by step as the presenter presses it, on `lab` (its server, its jobs, its
    history) and on a Guide session of its own, acting with `who`'s token."""

    def __init__(self, lab: "Lab", scale: float, model: str | None, *, who: tuple[str | None, str | None],
                 talk_s: float = TALK_S, cancel: threading.Event | None = None,
                 on_step: Callable[[int, int, Message], None] | None = None):
        if scale not in SCALES:
            raise LabError(say("The token budget is a share of the lab's: one of {choices}.",
                               choices=", ".join(f"{s:g}" for s in SCALES)))
        if talk_s < 0:
            raise LabError(say("The talk time per step cannot be negative: give 0 or more minutes."))
        self.lab, self.scale, self.talk_s = lab, scale, talk_s
        self.kw = {"token": who[0], "caller": who[1]}
        self.guide = Guide(lab, session_path(lab.store.path))
        self.guide.set_model(model or lab.guide.model_spec().path, **self.kw)  # not prepared: its sentence, now
        self.model = self.guide.model_spec().path
        self.cancel = cancel or threading.Event()
        self.on_step = on_step or (lambda done, total, text: None)

    def run(self) -> Sheet:
        lab, kw = self.lab, self.kw
        self.guide.reset(**kw)
        self.guide.set_scale(self.scale, **kw)
        had_server = lab.server_snapshot().state in (READY, STARTING)
        if had_server and lab.remote is None:
            lab.stop_server(**kw)  # as the room begins: no vLLM yet, so step 3 times a real start
        sheet = Sheet(started_at=time.time(), ended_at=None, scale=self.scale, model=self.model,
                      machine=machine(self.model, self.scale), steps=[], memory_before_gb=self._memory(None),
                      talk_s=self.talk_s)
        path = sheet_path(lab.store.path)
        self.guide.notes = Notes(rehearsal=sheet.id)  # its steps' runs, and only they, are the rehearsal's (History)
        try:
            for i, s in enumerate(STEPS):
                if self.cancel.is_set():
                    sheet.cancelled = True
                    break
                self.on_step(i, len(STEPS), say("step {n} of {total}: {title}", n=s.number, total=len(STEPS),
                                                title=s.title))
                sheet.steps.append(self._step(s))
                write_sheet(sheet, path)  # stopped half way, it still leaves what it measured
        finally:
            if not had_server and lab.remote is None and lab.server_snapshot().state in (READY, STARTING):
                lab.stop_server(**kw)  # as it found the machine: no server running
            sheet.cancelled = sheet.cancelled or self.cancel.is_set()
            sheet.ended_at = time.time()
            write_sheet(sheet, path)
        return sheet

    def _step(self, s: Step) -> StepSheet:
        lab, guide = self.lab, self.guide
        out = StepSheet(s.id)
        t0 = time.time()
        try:
            if s.id == "summary":  # what the presenter downloads at the end: the report, built once
                guide.report_html()
            else:
                job = guide.run_step(s.id, **self.kw)
                if s.id == "start":
                    self._until(lambda: lab.server_snapshot().state != STARTING)
                    snap = lab.server_snapshot()
                    if snap.state != READY and not self.cancel.is_set():
                        raise LabError(snap.error or say("vLLM stopped while it was starting: see its log on the "
                                                         "Server page."))
                elif isinstance(job, Job):  # the free step reads what the naive run left: no job
                    self._until(lambda: not job.active, cancel=lambda: lab.cancel_job(job.id, **self.kw))
                    if job.error:
                        raise LabError(job.error)
            out.ok = not self.cancel.is_set()
        except LabError as e:
            out.error = stored(e.args[0] if len(e.args) == 1 and isinstance(e.args[0], Message) else str(e))
        except Exception as e:  # noqa: BLE001 - unforeseen: the step failed, said with its cause; the rest still runs
            out.error = str(say("{kind}: {why}", kind=type(e).__name__, why=str(e)))
        out.seconds = round(time.time() - t0, 1)
        state = guide.state()  # records the runs of the job that just ended
        if s.id == "start":
            out.ready_s = (state.facts.get("start") or {}).get("ready_s")
        runs = guide.runs(s.id, state) if state.runs.get(s.id) and out.ok else []
        out.runs = [r.id for r in runs]
        records = [x for r in runs for x in r.measured]
        out.requests, out.failed_requests = len(records), sum(not x.ok for x in records)
        if out.failed_requests and (causes := failure_causes(records)):
            out.error = stored(causes[0][1])
        out.memory_gb = self._memory(t0)
        return out

    def _until(self, done: Callable[[], bool], cancel: Callable[[], None] | None = None) -> None:
        """Wait for `done` (each wait has its own end: a run's deadlines, the server's start timeout); a rehearsal
        cancelled meanwhile cancels the step's job and stops waiting."""
        while not done():
            if self.cancel.is_set():
                if cancel is not None:
                    cancel()
                return
            time.sleep(POLL_S)

    def _memory(self, since: float | None) -> dict[str, float]:
        """Each memory series' peak since `since` (None: now), GB, from the Lab's own 1 Hz sampler."""
        telemetry = self.lab.telemetry
        samples = (telemetry.samples(since) if since is not None else []) or [telemetry.sample_once()]
        peak: dict[str, float] = {}
        for sample in samples:
            for m in sample.memory:
                name = str(m["series"])
                peak[name] = round(max(peak.get(name, 0.0), m["used_gb"]), 2)
        return {k: v for k, v in peak.items() if v >= 0.01}  # a process not running then holds nothing
