"""The guided lab's one session for the room (`Guide`, one per Lab: `Lab.guide`): the presenter's step, the
token budget and the runs each step made, in guide.json beside the history; each step run through the Lab's
own actions."""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.access import presenter_only
from engine.errors import LabError, ServerBusy
from engine.guide.findings import FINDING_OF, Finding, Row, findings, numbers
from engine.guide.steps import (LAB_FLAGS, SCALE_NAMES, SCALES, SEED, STEPS, STEP_IDS, Step, WHICH_ENGINE,
                                repeats_for, step, tokens_for)
from engine.measure.judge.worker_memory import worker_memory
from engine.measure.workloads import scenarios
from engine.messages import Message, say
from engine.results.records import Notes
from engine.serving import models
from engine.serving.states import READY, STARTING, STOPPING

if TYPE_CHECKING:  # the Guide is handed its Lab; engine.lab imports this module, not the other way round
    from engine.lab import Lab
    from engine.results.records import RunResult


# -- the shared session ----------------------------------------------------------------------------
@dataclass
class State:
    """What every viewer sees: the presenter's step, the token scale, and the saved runs and facts each step
    made (run ids, newest last)."""

    current: str = STEP_IDS[0]
    scale: float = 1.0
    runs: dict[str, list[str]] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)  # the free and start steps' readings
    moved_at: float = 0.0  # when the presenter last changed step (followers redraw on a change)
    model: str | None = None  # the path of the model the presenter chose (None: the server's, else embedded)

    def to_dict(self) -> dict[str, Any]:
        return {"current": self.current, "scale": self.scale, "runs": self.runs, "facts": self.facts,
                "moved_at": self.moved_at, "model": self.model}

    @classmethod
    def from_dict(cls, d: Any) -> "State":
        d = d if isinstance(d, dict) else {}
        current = d.get("current") if d.get("current") in STEP_IDS else STEP_IDS[0]
        scale = d.get("scale") if d.get("scale") in SCALES else 1.0
        runs = {k: [str(x) for x in v] for k, v in (d.get("runs") or {}).items()
                if k in STEP_IDS and isinstance(v, list)}
        facts = {k: v for k, v in (d.get("facts") or {}).items() if k in STEP_IDS and isinstance(v, dict)}
        moved = d.get("moved_at") if isinstance(d.get("moved_at"), (int, float)) else 0.0
        model = d.get("model") if isinstance(d.get("model"), str) else None
        return cls(current, scale, runs, facts, float(moved), model)

    def done(self, step_id: str) -> bool:
        """Whether the step's run finished: its saved runs, the free step's reading, a start that became ready
        (asking for a start is not having one)."""
        if step_id == "start":
            f = self.facts.get("start") or {}
            return bool(f.get("already") or f.get("ready_s") is not None)
        return bool(self.runs.get(step_id) or self.facts.get(step_id))


def guide_path(history: Path) -> Path:
    """guide.json beside the run history: the session names runs of that history."""
    return history.with_name("guide.json")


class Guide:
    def __init__(self, lab: "Lab", path: Path | None = None):
        self.lab = lab
        self.notes: Notes | None = None  # what every run of its steps carries (a rehearsal's sheet id)
        self.access = lab.access  # the Lab's: who may act on the guide
        self.path = path or guide_path(lab.store.path)
        self._lock = threading.Lock()
        self._jobs: dict[str, str] = {}  # step id -> the job it started (in memory: a job dies with the app)
        self._state = self._read()

    # -- persistence --------------------------------------------------------------------------
    def _read(self) -> State:
        try:
            return State.from_dict(json.loads(self.path.read_text()))
        except (OSError, ValueError):
            return State()  # none yet, or unreadable: start at step 1 (the runs stay in the history)

    def _write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._state.to_dict(), indent=1))
        os.replace(tmp, self.path)  # a reader never sees half a file

    # -- reading (open to every viewer) ------------------------------------------------------------
    def state(self) -> State:
        """The session now (a copy), with the runs of steps whose jobs have ended since the last look."""
        with self._lock:
            changed = False
            for sid, job_id in list(self._jobs.items()):
                job = self.lab.job(job_id)
                if job is None or job.active:
                    continue
                del self._jobs[sid]
                results = job.result if isinstance(job.result, list) else [job.result] if job.result else []
                ids = [r.id for r in results if getattr(r, "measured", None)]
                if ids:
                    self._state.runs[sid] = ids  # the newest press's runs: its repeats (older stay in the history)
                    changed = True
            if (f := self._state.facts.get("start")) and f.get("ready_s") is None:
                snap = self.lab.server_snapshot()
                # this start, not an older one
                if snap.state == "ready" and snap.started_at and snap.ready_at and snap.started_at >= f["asked_at"] - 1:
                    f["ready_s"] = round(snap.ready_at - snap.started_at, 1)
                    changed = True
            if changed:
                self._write()
            return State.from_dict(json.loads(json.dumps(self._state.to_dict())))

    def running(self, state: State | None = None) -> frozenset[str]:
        """The steps whose run is under way: a job a step started and not ended, or the vLLM start the start step
        asked for while the server is still coming up (a tick or "Again: …" only once it finished)."""
        state = state or self.state()
        with self._lock:
            out = {sid for sid, job_id in self._jobs.items() if (job := self.lab.job(job_id)) and job.active}
        f = state.facts.get("start") or {}
        if f and not state.done("start") and self.lab.server_snapshot().state in (STARTING, STOPPING):
            out.add("start")
        return frozenset(out)

    def seen(self) -> tuple:
        """What a still view of the session changes with, cheap enough to read every second for every viewer: the
        session (a follower's step among it), the steps under way, the server's state and whether a run is going on
        (a step's button is greyed while one is)."""
        state = self.state()
        return state.to_dict(), self.running(state), self.lab.server_snapshot().state, self.lab.measuring() is not None

    def moving(self, step_id: str) -> bool:
        """Whether a view of this step changes every second: its run's progress, or the server's start."""
        job = self.job(step_id)
        return (job is not None and job.active) or (step_id == "start" and step_id in self.running())

    def job(self, step_id: str):
        """The job this step started, while it runs or just ended (None after an app restart)."""
        job_id = self._jobs.get(step_id)
        if job_id is None:  # ended and read back: the newest job of its kind still shows its end
            return None
        return self.lab.job(job_id)

    def runs(self, step_id: str, state: State | None = None) -> list["RunResult"]:
        """The saved runs of the step's newest press (its repeats; both settings' for the tuning comparison),
        oldest first; runs deleted from the history since are left out."""
        ids = (state or self.state()).runs.get(step_id, [])
        out = []
        for run_id in ids:
            try:
                out.append(self.lab.history.run(run_id))
            except LabError:
                continue
        return out

    def latest(self, step_id: str, state: State | None = None) -> "RunResult | None":
        runs = self.runs(step_id, state)
        return runs[-1] if runs else None

    # -- the presenter's actions -------------------------------------------------------------------
    @presenter_only
    def go_to(self, step_id: str) -> None:
        step(step_id)
        with self._lock:
            self._state.current, self._state.moved_at = step_id, time.time()
            self._write()

    @presenter_only
    def set_scale(self, scale: float) -> None:
        if scale not in SCALES:
            raise LabError(say("The token budget is a share of the lab's: one of {choices}.",
                               choices=", ".join(f"{s:g}" for s in SCALES)))
        with self._lock:
            self._state.scale = scale
            self._write()

    @presenter_only
    def set_model(self, path: str) -> None:
        """The model every step uses (the naive baseline and vLLM alike): one of the catalogue's, by path."""
        if path not in {m.path for m in models.catalogue(self.lab.settings.models)}:
            raise LabError(say("The model {name} is not prepared on this machine: pick one the list offers, or "
                               "prepare it on the Server page.", name=path))
        with self._lock:
            self._state.model = path
            self._write()

    @presenter_only
    def reset(self) -> None:
        """Start the guided lab over (the runs stay in the history)."""
        with self._lock:  # the presenter's model stays: starting over does not change the hardware
            self._state, self._jobs = State(moved_at=time.time(), model=self._state.model), {}
            self._write()

    @presenter_only(who=True)
    def run_step(self, step_id: str, *, who) -> Any:
        """Run exactly what the step does on the current server, starting or restarting it where the step
        needs it; the saved runs are recorded as the step's once its job ends (state())."""
        s, lab = step(step_id), self.lab
        token, caller = who
        kw = {"token": token, "caller": caller}
        scale = self._state.scale
        if s.id == "free":
            return self._record_free()
        if s.id == "start":
            return self._start(kw)
        if s.id == "summary" or s.scenario is None:
            return None
        tokens = tokens_for(s, scale)
        if s.id == "naive":
            if lab.device == "cuda" and lab.server_snapshot().state in (READY, STARTING):
                lab.stop_server(**kw)  # the lab's order: naive holds the GPU first, vLLM after
            model = self.model_spec()
            job = lab.run_naive(scenarios.get("naive-5").naive_spec(model.path, model.placeholder_text,
                                                                     max_new_tokens=tokens), notes=self.notes, **kw)
        elif s.id == "tuning":
            job = lab.run_tuning(scenarios.configs_after("tuning", lab.server_snapshot().config),
                                 scenarios.get("tuning").load_spec(max_tokens=tokens, models_dir=lab.settings.models),
                                 repeats=repeats_for(s),
                                 notes=self.notes, **kw)
        else:
            if not lab.ready():
                raise ServerBusy(say("This step needs the vLLM server: run step {n} (start vLLM) first.",
                                     n=step("start").number))
            job = lab.run_load(scenarios.get(s.scenario).load_spec(max_tokens=tokens, warmup=s.warmup or None,
                                                                   models_dir=lab.settings.models),
                               repeats=repeats_for(s), notes=self.notes, **kw)
        with self._lock:
            self._jobs[s.id] = job.id
        return job

    def model_spec(self):
        """The model the lab uses: the presenter's choice, else the one the server last ran, else the embedded
        default (on a GPU the presenter picks the lab's Llama 3 8B or its shape-only stand-in)."""
        cfg = self.lab.server_snapshot().config
        for wanted in (self._state.model, cfg.model if cfg is not None else None):
            for m in models.catalogue(self.lab.settings.models):
                if wanted and m.path == wanted:
                    return m
        return models.pick("embedded", self.lab.settings.models)

    def lab_config(self):
        """The notebook's server settings on this machine: its flags on a GPU; on a CPU the same context
        length with the CPU KV cache (gpu-memory-utilization does not apply there), at the app's port."""
        lab = self.lab
        return lab.default_config(self.model_spec()).with_changes(
            max_model_len=LAB_FLAGS["max_model_len"], gpu_memory_utilization=LAB_FLAGS["gpu_memory_utilization"],
            enforce_eager=lab.settings.guide_eager)  # no compiling: ready sooner (README)

    def _start(self, kw) -> None:
        lab = self.lab
        cfg, snap = self.lab_config(), lab.server_snapshot()
        same = snap.config is not None and all(getattr(snap.config, k) == getattr(cfg, k) for k in (
            "model", "max_model_len", "gpu_memory_utilization", "cpu_kvcache_gib", "dtype"))
        with self._lock:
            if snap.state in (READY, STARTING) and same:
                self._state.facts["start"] = {"asked_at": time.time(), "already": True,
                                              "ready_s": None if snap.state != READY else (
                                                  round(snap.ready_at - snap.started_at, 1)
                                                  if snap.ready_at and snap.started_at else None)}
                self._write()
                return
        asked = time.time()
        if snap.state in (READY, STARTING):
            lab.restart_server(cfg, self.model_spec(), **kw)
        else:
            lab.start_server(cfg, self.model_spec(), **kw)
        with self._lock:
            self._state.facts["start"] = {"asked_at": asked, "already": False, "ready_s": None}
            self._write()

    def _record_free(self) -> dict:
        """What the naive worker gave back, read from its run (before, its peak, after it exited), and
        whether any naive worker still lives."""
        naive = self.latest("naive")
        if naive is None:
            raise ServerBusy(say("Run step {n} (naive inference) first: this step reads what its worker gave back.",
                                 n=step("naive").number))
        fact = {"checked_at": time.time(), "run": naive.id, **worker_memory(naive),
                "worker_alive": any(j.kind == "naive" and j.active for j in [self.lab.latest_job("naive")] if j)}
        with self._lock:
            self._state.facts["free"] = fact
            self._write()
        return fact

    # -- the summary ------------------------------------------------------------------------------
    def findings(self, state: State | None = None) -> list["Finding"]:
        state = state or self.state()
        return findings({sid: self.runs(sid, state) for sid in STEP_IDS if state.runs.get(sid)})

    def finding(self, step_id: str, state: State | None = None) -> "Finding | None":
        """The summary's finding the step's run fills in (None: a step without one)."""
        i = FINDING_OF.get(step_id)
        return None if i is None else self.findings(state)[i]

    @staticmethod
    def heading(f: "Finding") -> Message:
        """A finding's heading in the summary and the report, after the step it comes from: a verdict-only
        heading ("No verdict: something else ran beside the measurement") would not say which comparison it is."""
        sid = next((k for k, i in FINDING_OF.items() if i == f.number - 1), None)
        return f.title if sid is None else say("{step} · {finding}", step=step(sid).title, finding=f.title)

    def report_html(self, lang: str = "en") -> str:
        """History's HTML report of the guided lab's runs, the six findings first."""
        from engine.figures.report import build_report  # plotly (~1 s to import) only when a report is written

        state = self.state()
        runs = [r for sid in STEP_IDS for r in self.runs(sid, state)]
        return build_report(runs, lang, findings=[(self.heading(f), f.text) for f in self.findings(state)])

    # what the page reads, so that it touches only `lab.guide`
    steps, scales, scale_names, which_engine, seed_source = STEPS, SCALES, SCALE_NAMES, WHICH_ENGINE, SEED

    @staticmethod
    def step(step_id: str) -> Step:
        return step(step_id)

    @staticmethod
    def tokens(s: Step, scale: float) -> int | None:
        return tokens_for(s, scale)

    @staticmethod
    def repeats(s: Step) -> int:
        return repeats_for(s)

    def numbers(self, step_id: str, state: State | None = None) -> list["Row"]:
        """The step's notebook numbers beside this lab's, one row each."""
        state = state or self.state()
        return numbers(step_id, {sid: self.runs(sid, state) for sid in ("naive", step_id) if state.runs.get(sid)},
                       state.facts.get(step_id) or {})
